package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrivium/forensic/flight"
	"github.com/retrivium/forensic/report"
)

// recordJob records scripts concurrently, each by its own `forensic record`
// with its own environment, into dir/NAME.
func (w *world) recordJob(dir string, runs map[string][]string, scripts map[string]string) {
	w.t.Helper()
	var wg sync.WaitGroup
	for name, script := range scripts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(binPath, "record", "-o", filepath.Join(dir, name), "--libcuda", simCUDA,
				"--libnvidia-ml", simNVML, "--", simwork, script)
			cmd.Env = w.environ(runs[name]...)
			if out, err := cmd.CombinedOutput(); err != nil && cmd.ProcessState == nil {
				w.t.Errorf("%s: %v %s", name, err, out)
			}
		}()
	}
	wg.Wait()
}

// runForensic runs forensic with args and returns its stdout, stderr and
// exit status.
func runForensic(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return runForensicEnv(t, nil, args...)
}

// runForensicEnv runs forensic with extra environment and returns its
// stdout, stderr and exit status.
func runForensicEnv(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	case err != nil:
		t.Fatalf("forensic %v: %v", args, err)
	}
	return out.String(), errb.String(), 0
}

// Review findings 6 and 12. A directory holds four ranks of one job (job
// id jobR, world size 5: rank 4 was not gathered), recorded at once on one
// host, a run of another job recorded at the same time, and a run with no
// job id recorded later. Each job is analyzed on its own: the other job's
// earlier failure is not called first, nothing is a consequence across
// jobs, ranks are missing only within jobR. Within jobR, on the clock the
// runs share, the order is certain with no note asking for a clock bound;
// each later failure says what ties it to the first (the same GPU, the
// job alone, or nothing: its own GPU ran out), and the next steps first
// ask for rank 4's file. --json refuses runs of several jobs in one line
// that lists them.
func TestReviewFixmJobs(t *testing.T) {
	w := newWorld(t, "SIMGPU_DEVICES=4", "SIMGPU_FB_TOTAL=16G")
	dir := filepath.Join(w.dir, "runs")
	os.MkdirAll(dir, 0o755)
	job := func(rank string, extra ...string) []string {
		return append([]string{"TORCHELASTIC_RUN_ID=jobR", "RANK=" + rank, "WORLD_SIZE=5", "LOCAL_RANK=" + rank}, extra...)
	}
	env := map[string][]string{
		"rank3.db": job("3"), "rank1.db": job("1"), "rank2.db": job("2"),
		// Its next allocation fails as a collective broken by a peer's
		// death would (injected: the simulator does not know NCCL).
		"rank0.db": job("0", "SIMGPU_FAIL=cuMemAlloc_v2:2:999"),
		"other.db": {"TORCHELASTIC_RUN_ID=jobO", "RANK=0", "WORLD_SIZE=2"},
	}
	w.recordJob(dir, env, map[string]string{
		// Rank 3 runs out of GPU 3 first and holds what it has.
		"rank3.db": "init; use 3; alloc 8G; sleep 400; alloc 8G; sleep 2600; exit 1",
		// Rank 1 shares GPU 3: it runs out after rank 3, on the same GPU.
		"rank1.db": "init; use 3; sleep 1100; alloc 8G; exit 1",
		// Rank 2 runs out of its own GPU 2.
		"rank2.db": "init; use 2; alloc 8G; sleep 1800; alloc 8G; exit 1",
		"rank0.db": "init; use 0; alloc 1G; sleep 2500; alloc 1G; exit 1",
		// Another job, failing before any of jobR's.
		"other.db": "init; use 1; alloc 20G; exit 1",
	})
	w.recordJob(dir, map[string][]string{}, map[string]string{"later.db": "init; use 1; alloc 20G; exit 1"})

	// Several jobs: --json refuses them in one line that lists them.
	_, stderr, code := runForensic(t, "analyze", "--json", dir)
	line := strings.TrimSpace(stderr)
	if code != 1 || strings.Contains(line, "\n") || !strings.Contains(line, "6 runs are 3 separate jobs") ||
		!strings.Contains(line, "job jobR: ") || !strings.Contains(line, "job jobO: ") ||
		!strings.Contains(line, "later.db (no job id; no other run recorded at the same time)") {
		t.Errorf("analyze --json of three jobs: exit %d, %q; want one line listing them", code, stderr)
	}
	if _, stderr, code := runForensic(t, "report", dir, "-o", filepath.Join(w.dir, "r.html")); code != 1 || !strings.Contains(stderr, "separate jobs") || !strings.Contains(stderr, "forensic analyze (text)") {
		t.Errorf("report of three jobs: exit %d, %q", code, stderr)
	}
	// The text analyzes each job on its own.
	text, _, _ := runForensic(t, "analyze", dir)
	jobs := strings.Split(text, "JOB ")
	if !strings.Contains(jobs[0], "6 runs of 3 separate jobs") || len(jobs) != 4 {
		t.Fatalf("text of three jobs:\n%s", text)
	}
	checkJobRText(t, jobs)

	var paths []string
	for _, r := range []string{"rank0.db", "rank1.db", "rank2.db", "rank3.db"} {
		paths = append(paths, filepath.Join(dir, r))
	}
	out, _, code := runForensic(t, append([]string{"analyze", "--json"}, paths...)...)
	if code != 0 {
		t.Fatalf("analyze --json of jobR: exit %d", code)
	}
	if err := report.ValidateReportJSON([]byte(out)); err != nil {
		t.Errorf("jobR's report does not match the schema: %v", err)
	}
	checkJobR(t, decodeReport(t, []byte(out)))
}

// checkJobRText: jobR's section of the text names what ties each later
// failure to the first, asks for rank 4 first, and has no clock-bound
// note; no section names another job's run.
func checkJobRText(t *testing.T, jobs []string) {
	t.Helper()
	var sec string
	for _, j := range jobs[1:] {
		if strings.Contains(j, "job jobR:") {
			sec = j
		}
		if strings.Contains(j, "likely consequence") && !strings.Contains(j, "job jobR:") {
			t.Errorf("a consequence in a job of one run:\n%s", j)
		}
	}
	i := strings.Index(sec, "NEXT STEPS")
	if i < 0 {
		t.Fatalf("jobR's report has no next steps:\n%s", sec)
	}
	next := sec[i:]
	for _, want := range []string{"order of their first failures: certain", "likely a consequence: on the same GPU",
		"also failed, on another GPU", "possibly a consequence", "missing: rank 4 of the job's 5 has no run"} {
		if !strings.Contains(sec, want) {
			t.Errorf("jobR's report lacks %q:\n%s", want, sec)
		}
	}
	if !strings.HasPrefix(strings.TrimSpace(strings.TrimPrefix(next, "NEXT STEPS")), "- gather the run.db of rank 4") {
		t.Errorf("the next steps do not start with rank 4's file:\n%s", next[:min(len(next), 400)])
	}
	if strings.Contains(sec, "clock bound") || strings.Contains(sec, "other.db") || strings.Contains(sec, "later.db") {
		t.Errorf("jobR's report names a clock bound or another job's run:\n%s", sec)
	}
}

// checkJobR: rank 3 first, certainly; rank 1 on the same GPU, rank 2 on
// its own exhausted GPU, rank 0 tied only by the job; rank 4 missing.
func checkJobR(t *testing.T, rep *report.Report) {
	t.Helper()
	if rep.MultiRun == nil || rep.Order != "certain" || rep.GroupedBy != "job-id" || rep.JobID != "jobR" ||
		rep.FirstFailure == nil || rep.FirstFailure.Rank == nil || *rep.FirstFailure.Rank != 3 {
		t.Fatalf("jobR: %+v, first %+v; want rank 3 first, certainly, grouped by the job id", rep.MultiRun, rep.FirstFailure)
	}
	want := map[int]string{1: report.RelationSameGPU, 2: report.RelationIndependent, 0: report.RelationSameJob}
	got := map[int]string{}
	for _, c := range rep.Consequences {
		if c.Rank != nil {
			got[*c.Rank] = c.Relation
		}
	}
	for r, rel := range want {
		if got[r] != rel {
			t.Errorf("rank %d: relation %q, want %q (consequences %+v)", r, got[r], rel, rep.Consequences)
		}
	}
	if !slices.Equal(rep.MissingRanks, []int{4}) || rep.Attribution != report.AttrMissingEvidence {
		t.Errorf("missing ranks %v, attribution %s; want [4], missing-evidence", rep.MissingRanks, rep.Attribution)
	}
	if len(rep.NextSteps) == 0 || !strings.Contains(rep.NextSteps[0], "rank 4") {
		t.Errorf("next steps %q: the first should ask for rank 4's run.db", rep.NextSteps)
	}
	for _, m := range rep.Missing {
		if strings.Contains(m.What, "clock bound") {
			t.Errorf("runs of one boot share a clock, yet: %s", m.What)
		}
	}
}

// Review findings 14 and 6. A flight recording in small segments whose
// workload fails twice is copied as an operator would, and a segment is
// removed from the copy. Without its last segment the recording is not
// said to have stopped uncleanly: segment N is missing and its records are
// lost, named once, with advice to restore it, and stderr says so.
// Without the segment of the first failure, the second cannot be
// established as the first. Given with a run.db of another job, the
// flight recording is analyzed apart.
func TestReviewFixmLostSegment(t *testing.T) {
	w := newWorld(t)
	fr := w.startFlight(`"$S" 'init; use 0; alloc 1G; sleep 1500; alloc 100G; sleep 2500; alloc 200G; sleep 2500'`,
		"--segment-age", "1s", "--libcuda", simCUDA)
	select {
	case err := <-fr.done:
		if err != nil {
			t.Fatalf("record: %v\n%s", err, fr.log.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the flight recording did not end:\n%s", fr.log.String())
	}
	x, err := flight.ReadIndex(fr.dir)
	if err != nil || len(x.Segments) < 4 {
		t.Fatalf("index %+v %v: want several segments", x, err)
	}
	var failed []int
	for i, s := range x.Segments {
		if s.Failures > 0 {
			failed = append(failed, i)
		}
	}
	if len(failed) != 2 || failed[1] == len(x.Segments)-1 {
		t.Fatalf("segments %+v: want the two failures in two segments before the last", x.Segments)
	}
	last := x.Segments[len(x.Segments)-1]
	cp := copyDir(t, fr.dir, filepath.Join(w.dir, "copy-last"), last.File)
	out, stderr, code := runForensic(t, "analyze", cp)
	if code != 0 || !strings.Contains(stderr, "segment "+itoa(int(last.Seq))+" is missing") {
		t.Errorf("analyze without the last segment: exit %d, stderr %q", code, stderr)
	}
	for _, bad := range []string{"did not stop cleanly", "ended abruptly", "take a snapshot of the live segment"} {
		if strings.Contains(out, bad) {
			t.Errorf("without its last segment the report says %q:\n%s", bad, out)
		}
	}
	if !strings.Contains(out, "segment "+itoa(int(last.Seq))+" is missing: its records are lost") ||
		strings.Count(out, filepath.Base(last.File)) != 1 {
		t.Errorf("the missing segment is not named once as lost records:\n%s", out)
	}
	js, _, _ := runForensic(t, "analyze", "--json", cp)
	rep := decodeReport(t, []byte(js))
	if rep.Run.Ended != "clean" || rep.Run.Flight == nil || !slices.Equal(rep.Run.Flight.SegmentsLost, []uint64{last.Seq}) {
		t.Errorf("ended %q, flight %+v; want clean with segment %d lost", rep.Run.Ended, rep.Run.Flight, last.Seq)
	}

	first := x.Segments[failed[0]]
	cp = copyDir(t, fr.dir, filepath.Join(w.dir, "copy-first"), first.File)
	js, _, _ = runForensic(t, "analyze", "--json", cp)
	rep = decodeReport(t, []byte(js))
	if rep.Attribution != report.AttrMissingEvidence || !hasMissing(rep.Missing, "segment "+itoa(int(first.Seq))+" is missing") {
		t.Errorf("without the first failure's segment: attribution %s, missing %+v", rep.Attribution, rep.Missing)
	}

	other := filepath.Join(w.dir, "other.db")
	w.recordJob(w.dir, map[string][]string{"other.db": {"SLURM_JOB_ID=77"}}, map[string]string{"other.db": "init; use 0; alloc 100G"})
	if _, stderr, code := runForensic(t, "analyze", "--json", fr.dir, other); code != 1 || !strings.Contains(stderr, "2 runs are 2 separate jobs") {
		t.Errorf("a flight recording with another job's run.db: exit %d, %q", code, stderr)
	}
}

// copyDir copies a flight recording's directory without one file.
func copyDir(t *testing.T, from, to, without string) string {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o700)
		}
		if rel == without || !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), data, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return to
}

// Review finding 11. A flight recording under load is analyzed three times
// while it records: each time the recorder's count, stored with the data
// the copy of the live segment holds, equals the events read plus those
// in deleted stretches, never fewer than were read.
func TestReviewFixmLiveCounts(t *testing.T) {
	w := newWorld(t)
	fr := w.startFlight(`"$S" 'init; use 0; paced 20000 14' > paced.txt`, "--segment-age", "2s", "--libcuda", simCUDA)
	start := time.Now()
	fr.pollUntil(20*time.Second, "the first calls", func() bool {
		x, err := flight.ReadIndex(fr.dir)
		return err == nil && len(x.Segments) > 0 && x.Segments[0].Calls > 0
	})
	for i := 0; i < 3; i++ {
		at := start.Add(time.Duration(3+3*i) * time.Second)
		fr.pollUntil(30*time.Second, "the next read", func() bool { return time.Now().After(at) })
		out, _, code := runForensic(t, "analyze", "--json", fr.dir)
		if code != 0 {
			t.Fatalf("live analyze %d: exit %d", i, code)
		}
		var rep report.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		f := rep.Run.Flight
		if f == nil || f.Live != "copy" || f.EventsRead == 0 || f.EventsRecorded != f.EventsRead+f.DroppedCalls+f.LostCalls {
			t.Errorf("live read %d: %+v; want the recorder's count equal to the events read (and deleted)", i, f)
		}
		if hasMissing(rep.Missing, "are in no file read") {
			t.Errorf("live read %d: events unaccounted for: %+v", i, rep.Missing)
		}
	}
	if err := <-fr.done; err != nil {
		t.Fatalf("record: %v\n%s", err, fr.log.String())
	}
}

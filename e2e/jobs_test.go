package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/retrivium/forensic/report"
)

// Jobs of several runs (ranks) analyzed together: which failure is first
// across the runs, what ties a later failure to it, and runs of other
// jobs kept apart.

// Rank 0 of job j2 runs out of framebuffer, frees its
// cache and retries: recovered. Rank 1 dies afterwards of a BAR1 mapping
// larger than its whole aperture. The job's verdict leads with rank 1's
// unrecovered failure, judged by its run; rank 0's recovered failure stays
// the subject but is nobody's consequence, and "no later failure went
// unrecovered" is not said of the job.
func TestJobRecoveredRankIsNoConsequence(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=8G")
	dir := filepath.Join(w.dir, "job2")
	os.MkdirAll(dir, 0o755)
	job := func(rank string, extra ...string) []string {
		return append([]string{"TORCHELASTIC_RUN_ID=j2", "RANK=" + rank, "WORLD_SIZE=2"}, extra...)
	}
	w.recordJob(dir, map[string][]string{
		"rank0.db": job("0"),
		"rank1.db": job("1", "SIMGPU_STATE="+filepath.Join(w.dir, "rank1.state"), "SIMGPU_DEVICES=2", "SIMGPU_BAR1_TOTAL=64M"),
	}, map[string]string{
		"rank0.db": "init; use 0; alloc 3G; alloc 3G; alloc 2G; free; free; alloc 2G; sleep 600; exit 1",
		"rank1.db": "init; use 0; sleep 300; vmm 128M 0 1; exit 1",
	})
	out, _, code := runBin(t, bin{}, "analyze", "--json", dir).outputs()
	if code != 0 {
		t.Fatalf("analyze --json: exit %d", code)
	}
	if err := report.ValidateReportJSON([]byte(out)); err != nil {
		t.Errorf("the job's report does not match the schema: %v", err)
	}
	rep := decodeReport(t, []byte(out))
	f, u := rep.FirstFailure, rep.FirstUnrecovered
	if f == nil || !f.Recovered || !strings.HasSuffix(f.RunPath, "rank0.db") {
		t.Fatalf("first failure %+v, want rank 0's recovered allocation", f)
	}
	if u == nil || !strings.HasSuffix(u.RunPath, "rank1.db") || u.Symbol != "cuMemSetAccess" || u.Attribution != report.AttrMapping {
		t.Fatalf("first unrecovered %+v, want rank 1's mapping failure judged by its run", u)
	}
	if rep.UnrecoveredOrder != "certain" || len(rep.Consequences) != 0 {
		t.Errorf("unrecovered order %q, consequences %+v: want certain, none of a recovered failure", rep.UnrecoveredOrder, rep.Consequences)
	}
	lead, _, _ := strings.Cut(rep.Verdict, "In that run")
	if !strings.Contains(lead, "the first failure no process recovered from is rank 1") ||
		strings.Contains(rep.Verdict, "No later failure went unrecovered") || strings.Contains(rep.Verdict, "likely a consequence") {
		t.Errorf("the verdict does not lead with rank 1's unrecovered failure: %s", rep.Verdict)
	}
	text, _, _ := runBin(t, bin{env: []string{"COLUMNS=80"}}, "analyze", dir).outputs()
	sec := text[strings.Index(text, "FIRST UNRECOVERED FAILURE"):]
	if !strings.Contains(sec, "run       rank 1, host ") || !strings.Contains(text, "order of the failures no process recovered") ||
		strings.Contains(text, "after the first failure, in other runs") {
		t.Errorf("the text does not place rank 1's failure as the one that matters:\n%s", text)
	}
	for _, l := range strings.Split(text, "\n") {
		if len([]rune(l)) > 80 {
			t.Errorf("wider than 80 columns: %q", l)
		}
	}
}

// recordJob records scripts concurrently, each by its own `forensic record`
// with its own environment, into dir/NAME.
func (w *world) recordJob(dir string, runs map[string][]string, scripts map[string]string) {
	w.t.Helper()
	var wg sync.WaitGroup
	for name, script := range scripts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := binCommand(bin{}, "record", "-o", filepath.Join(dir, name), "--libcuda", simCUDA,
				"--libnvidia-ml", simNVML, "--", simwork, script)
			cmd.Env = w.environ(runs[name]...)
			if out, err := cmd.CombinedOutput(); err != nil && cmd.ProcessState == nil {
				w.t.Errorf("%s: %v %s", name, err, out)
			}
		}()
	}
	wg.Wait()
}

// A directory holds four ranks of one job (job
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
func TestJobsAnalyzedApart(t *testing.T) {
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
	_, stderr, code := runBin(t, bin{}, "analyze", "--json", dir).outputs()
	line := strings.TrimSpace(stderr)
	if code != 1 || strings.Contains(line, "\n") || !strings.Contains(line, "6 runs are 3 separate jobs") ||
		!strings.Contains(line, "job jobR: ") || !strings.Contains(line, "job jobO: ") ||
		!strings.Contains(line, "later.db (no job id; no other run recorded at the same time)") {
		t.Errorf("analyze --json of three jobs: exit %d, %q; want one line listing them", code, stderr)
	}
	if _, stderr, code := runBin(t, bin{}, "report", dir, "-o", filepath.Join(w.dir, "r.html")).outputs(); code != 1 || !strings.Contains(stderr, "separate jobs") || !strings.Contains(stderr, "forensic analyze (text)") {
		t.Errorf("report of three jobs: exit %d, %q", code, stderr)
	}
	// The text analyzes each job on its own.
	text, _, _ := runBin(t, bin{}, "analyze", dir).outputs()
	jobs := strings.Split(text, "JOB ")
	if !strings.Contains(jobs[0], "6 runs of 3 separate jobs") || len(jobs) != 4 {
		t.Fatalf("text of three jobs:\n%s", text)
	}
	checkJobRText(t, jobs)

	var paths []string
	for _, r := range []string{"rank0.db", "rank1.db", "rank2.db", "rank3.db"} {
		paths = append(paths, filepath.Join(dir, r))
	}
	out, _, code := runBin(t, bin{}, append([]string{"analyze", "--json"}, paths...)...).outputs()
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

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrivium/forensic/report"
)

// serveJob writes the launcher of a serving job, as such jobs run: the
// server loads its weights and warms up, the launcher marks the serving
// phase once the server says it is warm (forensic mark, while the run is
// recorded), then the server grows its KV cache request by request and
// takes a batch's activations. extra is a step the failing run takes in
// the serving phase.
func (w *world) serveJob(name, db, extra string) string {
	w.t.Helper()
	dir := filepath.Join(w.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		w.t.Fatal(err)
	}
	server := fmt.Sprintf("init; use 0; alloc 6G; alloc 1G; free; touch %s/warm; wait-file %s/marked; "+
		"repeat 6 { alloc 512M; sleep 20 }; %s alloc 5G; sleep 100; free-all", dir, dir, extra)
	launcher := fmt.Sprintf(`#!/bin/sh
%s '%s' &
server=$!
while [ ! -e %s/warm ]; do sleep 0.02; done
%s mark --run %s serving
touch %s/marked
wait $server
`, simwork, server, dir, binPath, db, dir)
	path := filepath.Join(dir, "serve.sh")
	if err := os.WriteFile(path, []byte(launcher), 0o755); err != nil {
		w.t.Fatal(err)
	}
	return path
}

// recordServe records one run of the serving job into its own file.
func (w *world) recordServe(name, extra string) string {
	w.t.Helper()
	db := filepath.Join(w.dir, name+".db")
	job := w.serveJob(name, db, extra)
	cmd := binCommand(bin{w: w}, "record", "-o", db, "--libcuda", simCUDA, "--libnvidia-ml", simNVML, "--stacks", "--", job)
	if out, err := cmd.CombinedOutput(); err != nil && cmd.ProcessState.ExitCode() < 0 {
		w.t.Fatalf("record %s: %v: %s", name, err, out)
	}
	return db
}

// diffJSON runs `forensic diff --json` and decodes it.
func diffJSON(t *testing.T, runs ...string) *report.Diff {
	t.Helper()
	out, err := binCommand(bin{}, append([]string{"diff", "--json"}, runs...)...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errorsAs(err, &ee) {
			t.Fatalf("forensic diff --json: %v: %s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	if err := report.ValidateDiffJSON(out); err != nil {
		t.Errorf("diff --json does not follow docs/diff.schema.json: %v", err)
	}
	var d report.Diff
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatalf("diff --json is not a diff: %v\n%s", err, out)
	}
	return &d
}

func errorsAs(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}

// checkExtraAllocation asserts that the first difference is the failing
// run's extra 2 GiB cuMemAlloc_v2 in the serving phase, with its stack.
func checkExtraAllocation(t *testing.T, d *report.Diff, goods int) {
	t.Helper()
	if len(d.Differences) == 0 {
		t.Fatalf("no differences: %+v", d)
	}
	first := d.Differences[0]
	c := first.Call
	if first.Kind != report.DiffCallSequence || first.Departure != report.DepartExtraCall || c == nil {
		t.Fatalf("first difference %+v, want the extra call", first)
	}
	if c.Symbol != "cuMemAlloc_v2" || c.Size == nil || *c.Size != 2<<30 || c.Phase != "serving" {
		t.Errorf("extra call %s size %v phase %q, want cuMemAlloc_v2 of 2 GiB in serving", c.Symbol, c.Size, c.Phase)
	}
	if c.Stack == nil || len(c.Stack.Frames) == 0 || !strings.Contains(fmt.Sprint(c.Stack.Frames), "step_alloc") {
		t.Errorf("the extra call's stack does not name simwork's allocation step: %+v", c.Stack)
	}
	if !first.Unique || first.GoodRuns != goods || first.Bytes != 2<<30 {
		t.Errorf("extra call unique=%v in %d good runs, %d bytes; want unique in %d, 2 GiB", first.Unique, first.GoodRuns, first.Bytes, goods)
	}
	if !strings.HasPrefix(d.Headline, "The failing run differs from the ") || !strings.Contains(d.Headline, "cuMemAlloc_v2 of 2.00 GiB") {
		t.Errorf("headline does not open with the extra allocation: %s", d.Headline)
	}
}

// One serving run takes an extra 2 GiB in its serving phase and its
// batch then fails: diff names that call, its size, phase and stack.
func TestDiffNamesExtraAllocation(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=16G")
	good := w.recordServe("good", "")
	bad := w.recordServe("bad", "alloc 2G;")
	d := diffJSON(t, good, bad)
	if d.Bad.Attribution != report.AttrAllocation || d.Good[0].Attribution != report.AttrNone {
		t.Fatalf("failing run %s, good run %s: the job did not fail as set up", d.Bad.Attribution, d.Good[0].Attribution)
	}
	checkExtraAllocation(t, d, 1)
	// Both runs were marked: their phases align.
	for _, n := range d.Notes {
		if strings.Contains(n, "markers") {
			t.Errorf("phases of marked runs not compared: %s", n)
		}
	}
	txt, err := binCommand(bin{}, "diff", good, bad).Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(txt), "The failing run differs from the good one in:") {
		t.Errorf("text does not open with the sentence:\n%s", txt)
	}
	t.Logf("forensic diff %s %s:\n%s", good, bad, txt)
}

// One failing run against three good ones: what none of the good runs
// has comes first, counted in all three.
func TestDiffOneBadAgainstThreeGood(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=16G")
	var runs []string
	for i := 1; i <= 3; i++ {
		runs = append(runs, w.recordServe(fmt.Sprintf("good%d", i), ""))
	}
	runs = append(runs, w.recordServe("bad", "alloc 2G;"))
	d := diffJSON(t, runs...)
	if len(d.Good) != 3 {
		t.Fatalf("%d good runs compared, want 3", len(d.Good))
	}
	checkExtraAllocation(t, d, 3)
	if !strings.Contains(d.Headline, "the 3 good ones") {
		t.Errorf("headline does not speak of the 3 good runs: %s", d.Headline)
	}
	// The good runs are the failing run's only other runs: the failing one
	// is chosen though it is not last.
	reordered := diffJSON(t, runs[3], runs[0], runs[1], runs[2])
	if reordered.Chosen != "only-failing" || reordered.Bad.Path != runs[3] {
		t.Errorf("with the failing run first, chosen %q %s; want it picked as the only failing run", reordered.Chosen, reordered.Bad.Path)
	}
}

// recordNode records every process on the simulated node (--all) while a
// job runs; with a neighbour, one started before the recording holds
// memory throughout.
func (w *world) recordNode(name string, neighbour bool) (string, int) {
	w.t.Helper()
	npid := 0
	if neighbour {
		ready := filepath.Join(w.dir, name+"-neighbour-ready")
		n := w.startWorkload("init; use 0; alloc 6G; touch " + ready + "; wait-signal; free-all")
		if !waitFor(10*time.Second, func() bool { return exists(ready) }) {
			w.t.Fatal("the neighbour did not allocate")
		}
		npid = n.Process.Pid
		defer n.Process.Signal(syscall.SIGUSR1)
	}
	rec, db, stderr := w.startRecorder("--all", "--libcuda", simCUDA)
	job := exec.Command(simwork, "init; use 0; alloc 6G; repeat 6 { alloc 512M; sleep 20 }; alloc 2G; sleep 200; free-all")
	job.Env = w.environ()
	if err := job.Run(); err != nil && job.ProcessState.ExitCode() < 0 {
		w.t.Fatal(err)
	}
	rec.Process.Signal(syscall.SIGINT)
	waitExit(w.t, rec, 20*time.Second)
	out := filepath.Join(w.dir, name+".db")
	if err := os.Rename(db, out); err != nil {
		w.t.Fatalf("%v: %s", err, stderr)
	}
	return out, npid
}

// A neighbour started before the recording holds 6 GiB in the failing
// run only: diff names its command line and its memory first.
func TestDiffNamesNeighbour(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=16G")
	good, _ := w.recordNode("good", false)
	bad, npid := w.recordNode("bad", true)
	d := diffJSON(t, good, bad)
	// The neighbour, attached late, may leave the verdict missing
	// evidence; the job's failure is the same.
	if f := d.Bad.FirstFailure; f == nil || f.Symbol != "cuMemAlloc_v2" || f.Result != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Fatalf("failing run's first failure %+v: the job did not fail as set up", f)
	}
	first := d.Differences[0]
	p := first.Process
	if first.Kind != report.DiffExtraProcess || p == nil || p.PID != uint32(npid) {
		t.Fatalf("first difference %+v, want the neighbour %d", first, npid)
	}
	if !p.Recorded || !strings.Contains(p.Command, "alloc 6G; touch") {
		t.Errorf("neighbour's command line %q, want simwork's script", p.Command)
	}
	if p.NVMLPeak == nil || *p.NVMLPeak != 6<<30 || first.Bytes != 6<<30 || !first.Unique {
		t.Errorf("neighbour memory %v, bytes %d, unique %v; want 6 GiB from NVML, unique", p.NVMLPeak, first.Bytes, first.Unique)
	}
	if !strings.Contains(d.Headline, "an extra process") || !strings.Contains(d.Headline, "6.00 GiB") {
		t.Errorf("headline does not name the neighbour and its memory: %s", d.Headline)
	}
}

// A neighbour the recording did not follow (the job alone was recorded)
// shows only in NVML's per-process samples: diff names it by pid, with
// its memory, and says its command line is not in the recording.
func TestDiffNamesUnrecordedNeighbour(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=16G")
	job := []string{simwork, "init; use 0; alloc 6G; repeat 6 { alloc 512M; sleep 20 }; alloc 2G; sleep 200; free-all"}
	record := func(name string) string {
		r := w.record(nil, job...)
		db := filepath.Join(w.dir, name+".db")
		if err := os.Rename(r.db, db); err != nil {
			t.Fatal(err)
		}
		return db
	}
	good := record("good")
	ready := filepath.Join(w.dir, "neighbour-ready")
	n := w.startWorkload("init; use 0; alloc 6G; touch " + ready + "; wait-signal; free-all")
	if !waitFor(10*time.Second, func() bool { return exists(ready) }) {
		t.Fatal("the neighbour did not allocate")
	}
	bad := record("bad")
	n.Process.Signal(syscall.SIGUSR1)
	d := diffJSON(t, good, bad)
	first := d.Differences[0]
	p := first.Process
	if first.Kind != report.DiffExtraProcess || p == nil || p.PID != uint32(n.Process.Pid) || p.Recorded {
		t.Fatalf("first difference %+v (process %+v), want the unrecorded neighbour %d", first, p, n.Process.Pid)
	}
	if p.NVMLPeak == nil || *p.NVMLPeak != 6<<30 || !strings.Contains(first.Summary, "command line is not in the recording") {
		t.Errorf("neighbour memory %v, summary %q: want 6 GiB and the missing command line said", p.NVMLPeak, first.Summary)
	}
}

// What diff cannot compare is refused with one line and exit status 1
// or 2; an HTML page is written where -o says.
func TestDiffRefusesWhatItCannotCompare(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=16G")
	good1, good2 := w.recordServe("good1", ""), w.recordServe("good2", "")
	cases := []struct {
		name string
		args []string
		code int
		says string
	}{
		{"one run", []string{good1}, 2, "at least two runs"},
		{"no failing run", []string{good1, good2}, 1, "none of the runs has a failure"},
		{"a file that is not there", []string{good1, filepath.Join(w.dir, "nope.db")}, 1, "nope.db"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runBin(t, bin{}, append([]string{"diff"}, c.args...)...)
			// A usage error (status 2) is followed by where to read the usage.
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			if r.code != c.code || (c.code == 1 && len(lines) != 1) || !strings.Contains(lines[0], c.says) || r.stdout != "" {
				t.Errorf("exit %d, stderr %q, stdout %q; want exit %d and one line saying %q", r.code, r.stderr, r.stdout, c.code, c.says)
			}
		})
	}
	bad := w.recordServe("bad", "alloc 2G;")
	page := filepath.Join(w.dir, "diff.html")
	if r := runBin(t, bin{}, "diff", good1, bad, "-o", page); r.code != 0 {
		t.Fatalf("diff -o: exit %d: %s", r.code, r.stderr)
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"The failing run differs from the good one in:", "call-sequence", "cuMemAlloc_v2", "step_alloc"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("the HTML page does not show %q", want)
		}
	}
}

// The same allocations, one of them made from another place in the
// program: diff names the call from the other call site, with both
// stacks, before the extra call that follows.
func TestDiffNamesOtherCallSite(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=16G")
	record := func(name, script string) string {
		r := w.record([]string{"--stacks"}, simwork, script)
		db := filepath.Join(w.dir, name+".db")
		if err := os.Rename(r.db, db); err != nil {
			t.Fatal(err)
		}
		return db
	}
	good := record("good", "init; use 0; alloc 1G; alloc 1G; free-all")
	bad := record("bad", "init; use 0; alloc 1G; repeat 1 { alloc 1G }; alloc 20G; free-all")
	d := diffJSON(t, good, bad)
	var site, extra *report.Difference
	for i := range d.Differences {
		switch df := &d.Differences[i]; df.Departure {
		case report.DepartOtherSite:
			site = df
		case report.DepartExtraCall:
			extra = df
		}
	}
	if site == nil || site.Call == nil || site.Call.Index != 1 || site.GoodCall == nil {
		t.Fatalf("no other-call-site departure at the second call: %+v", d.Differences)
	}
	if site.Call.Stack == nil || site.GoodCall.Stack == nil || len(site.Call.Stack.Frames) == len(site.GoodCall.Stack.Frames) {
		t.Errorf("the two calls' stacks are not both shown, or do not differ: %+v / %+v", site.Call.Stack, site.GoodCall.Stack)
	}
	if extra == nil || extra.Call.Index != 2 || *extra.Call.Size != 20<<30 {
		t.Errorf("the extra 20 GiB call is not named after it: %+v", extra)
	}
}

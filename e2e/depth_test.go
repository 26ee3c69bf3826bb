package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// Markers added to a live recording split the run into phases; the
// memory-view table gains each field's value per phase.
func TestMarkersMakePhases(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=8G", "SIMGPU_FB_RESERVED=0")
	step := func(n string) string { return filepath.Join(w.dir, n) }
	done := make(chan result, 1)
	go func() {
		done <- w.record(nil, simwork, "init; use 0; touch "+step("a")+"; wait-file "+step("b")+
			"; alloc 4G; sleep 150; touch "+step("c")+"; wait-file "+step("d")+"; until-fail { alloc 1G }; sleep 150; free-all")
	}()
	db := filepath.Join(w.dir, "run.db")
	mark := func(args ...string) {
		t.Helper()
		out, err := binCommand(bin{}, append([]string{"mark"}, args...)...).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "marked") {
			t.Fatalf("forensic mark %v: %v %s", args, err, out)
		}
	}
	if !waitFor(20*time.Second, func() bool { return exists(step("a")) }) {
		t.Fatal("workload did not start")
	}
	mark("--run", db, "loading weights")
	os.WriteFile(step("b"), nil, 0o600)
	if !waitFor(20*time.Second, func() bool { return exists(step("c")) }) {
		t.Fatal("workload did not load")
	}
	time.Sleep(150 * time.Millisecond)
	mark("--run", db, "serving")
	os.WriteFile(step("d"), nil, 0o600)
	res := <-done
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	rep, _ := analyzeJSON(t, res.db)
	if len(rep.Markers) != 2 || rep.Markers[0].Label != "loading weights" || rep.Markers[1].Label != "serving" {
		t.Fatalf("markers %+v", rep.Markers)
	}
	if rep.PhasesFrom != "markers" || len(rep.Phases) != 3 {
		t.Fatalf("phases %q %+v", rep.PhasesFrom, rep.Phases)
	}
	if rep.FirstFailure == nil || rep.FirstFailure.Phase != "serving" {
		t.Errorf("first failure in phase %v, want serving", rep.FirstFailure)
	}
	var used *report.ViewRow
	for i, v := range rep.MemoryViews {
		if v.Field == "traced device allocations" {
			used = &rep.MemoryViews[i]
		}
	}
	if used == nil || len(used.Phases) != 3 {
		t.Fatalf("no per-phase values: %+v", used)
	}
	// Before loading nothing; loading ends at 4 GiB; serving peaks at 8 GiB.
	if p := used.Phases[1]; p.Last == nil || *p.Last != 4<<30 {
		t.Errorf("loading phase ends at %v, want 4 GiB", p.Last)
	}
	if p := used.Phases[2]; p.Peak == nil || *p.Peak != 8<<30 {
		t.Errorf("serving phase peaks at %v, want 8 GiB", p.Peak)
	}
	if !strings.Contains(textOf(t, res.db), "serving") {
		t.Error("text output lacks the markers")
	}
}

// Without markers the run's own landmarks make the phases, and the report
// says so.
func TestLandmarkPhases(t *testing.T) {
	w := newWorld(t)
	res := w.record(nil, simwork, "init; use 0; sleep 100; alloc 1G; until-fail { alloc 4G }; free-all")
	rep, _ := analyzeJSON(t, res.db)
	if !strings.HasPrefix(rep.PhasesFrom, "landmarks") || len(rep.Phases) != 3 ||
		rep.Phases[0].Label != "before first allocation" || rep.FirstFailure.Phase != "up to first failure" {
		t.Fatalf("phases %q %+v, first failure in %q", rep.PhasesFrom, rep.Phases, rep.FirstFailure.Phase)
	}
}

// atFailureUsed returns the framebuffer used of the sample the first
// failure triggered, whether the process was frozen for it, and how long.
func atFailureUsed(t *testing.T, db string) (used uint64, frozen bool, freeze int64, start int64) {
	t.Helper()
	r, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	found := false
	r.Samples(func(s *store.Sample) error {
		if found || s.Kind != store.KindFramebuffer || len(s.Triggers) == 0 || s.Used == nil {
			return nil
		}
		found = true
		used, frozen, freeze, start = *s.Used, s.Triggers[0].Frozen, s.Triggers[0].Freeze, s.Start
		return nil
	})
	if !found {
		t.Fatal("no failure-triggered framebuffer sample")
	}
	return
}

// With --freeze-on-failure, the sample taken for the failure shows the
// process's memory before its cleanup handler freed it; without, the same
// scenario's sample shows it after.
func TestFreezeOnFailure(t *testing.T) {
	oom := filepath.Join(simDir, "scenarios", "weights_oom")

	w := newWorld(t)
	// A limit far above a round's few milliseconds: on a loaded machine
	// the default 50 ms can pass before the round ends, and the recorder
	// then rightly says the sample was not taken frozen.
	res := w.record([]string{"--freeze-on-failure", "--freeze-limit", "1s"}, oom)
	if res.code != 1 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	used, frozen, freeze, _ := atFailureUsed(t, res.db)
	if !frozen || used != 15<<30 {
		t.Errorf("frozen %v, used %d at the failure: want the 15 GiB still held", frozen, used)
	}
	if freeze <= 0 || freeze > int64(time.Second+100*time.Millisecond) {
		t.Errorf("freeze of %v recorded", time.Duration(freeze))
	}
	w.checkComplete(res.db)
	rep, _ := analyzeJSON(t, res.db)
	if deref(rep.Capacity) != string(report.CapFBExhausted) || rep.NearestSamples == nil || len(rep.NearestSamples.At) == 0 ||
		!rep.NearestSamples.At[0].Frozen {
		t.Errorf("capacity %s, at-failure samples %+v", deref(rep.Capacity), rep.NearestSamples)
	}
	if !rep.FirstFailure.Frozen {
		t.Error("first failure not marked frozen")
	}

	// Freeze off: the sample comes after the cleanup. A sample that raced
	// ahead of the cleanup proves nothing either way; try again then.
	for try := 0; try < 5; try++ {
		w := newWorld(t)
		res := w.record(nil, oom)
		used, frozen, _, start := atFailureUsed(t, res.db)
		_, evs, _ := stored(t, res.db)
		var lastFree int64
		for _, e := range evs {
			if e.Name == "cuMemFree_v2" {
				lastFree = max(lastFree, e.End)
			}
		}
		if start < lastFree {
			retryRecording(t)
			continue
		}
		if frozen || used != 0 {
			t.Errorf("without freeze: frozen %v, used %d after the cleanup, want 0", frozen, used)
		}
		return
	}
	t.Error("five recordings without freeze never sampled after the cleanup")
}

// --stacks captures the stack of every device allocation, not only of
// failures.
func TestStacksOfAllAllocations(t *testing.T) {
	w := newWorld(t)
	res := w.record([]string{"--stacks"}, simwork, "init; use 0; repeat 5 { alloc 1M }; free-all")
	_, evs, _ := stored(t, res.db)
	with := 0
	for _, e := range evs {
		if e.Name == "cuMemAlloc_v2" && e.Stack >= 0 {
			with++
		}
	}
	if with != 5 {
		t.Errorf("%d of 5 allocations have a stack", with)
	}
	res = w.record(nil, simwork, "init; use 0; repeat 5 { alloc 1M }; free-all")
	_, evs, _ = stored(t, res.db)
	for _, e := range evs {
		if e.Stack >= 0 {
			t.Errorf("%s has a stack without --stacks", e.Name)
		}
	}
}

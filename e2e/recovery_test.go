package e2e

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// Recovered failures on real recordings of the simulated GPU: a failure
// is recovered only by the same process, on the same GPU, for the same
// handle, and a recovered failure is nobody's cause.

// A run whose only failure was recovered: exiting 1, what ended it is not
// in the record (missing evidence); exiting 0, the advice is not to make
// the request fit. The verdict names the first failed operation once.
func TestRecoveredFailureThenExitIsMissingEvidence(t *testing.T) {
	for _, code := range []string{"1", "0"} {
		t.Run("exit "+code, func(t *testing.T) {
			w := newWorld(t, "SIMGPU_FB_TOTAL=8G")
			res := w.record(nil, simwork, "init; use 0; alloc 3G; alloc 3G; alloc 2G; free; free; alloc 2G; alloc 1G; exit "+code)
			rep, _ := analyzeJSON(t, res.db)
			if rep.FirstFailure == nil || !rep.FirstFailure.Recovered || rep.FirstUnrecovered != nil {
				t.Fatalf("want one recovered failure: %+v", rep.Failures)
			}
			if n := strings.Count(rep.Verdict, "The first failed operation"); n != 1 {
				t.Errorf("the verdict names the first failed operation %d times: %s", n, rep.Verdict)
			}
			steps := strings.Join(rep.NextSteps, " / ")
			if code == "1" {
				if rep.Attribution != report.AttrMissingEvidence || !strings.Contains(rep.Verdict, "exited with status 1") {
					t.Errorf("attribution %s: %s", rep.Attribution, rep.Verdict)
				}
			} else if rep.Attribution != report.AttrAllocation || strings.Contains(steps, "make the request fit") {
				t.Errorf("attribution %s, next steps %q", rep.Attribution, steps)
			}
		})
	}
}

// A failed cuMemFree_v2 of one pointer is not recovered by freeing
// another.
func TestFailedFreeNotRecoveredByFreeingAnother(t *testing.T) {
	w := newWorld(t, "SIMGPU_FAIL=cuMemFree_v2:1:1")
	res := w.record(nil, simwork, "init; use 0; alloc 1M; alloc 1M; free; free")
	_, evs, _ := stored(t, res.db)
	var targets []uint64
	for _, e := range evs {
		if e.Name == "cuMemFree_v2" {
			targets = append(targets, e.Target)
		}
	}
	if len(targets) != 2 || targets[0] == targets[1] {
		t.Fatalf("want two frees of different pointers, got %x", targets)
	}
	rep, _ := analyzeJSON(t, res.db)
	if len(rep.Failures) != 1 || rep.Failures[0].Recovered {
		t.Errorf("the failed free is recovered by freeing another pointer: %+v", rep.Failures)
	}
}

// An out-of-memory on GPU 1 followed by a success on GPU 0 is not
// recovered: memory found on another GPU does not satisfy the request. The
// verdict is the exhausted framebuffer and the advice is to make it fit,
// for one thread and for threads on two GPUs.
func TestRecoveryNeedsTheSameGPU(t *testing.T) {
	scripts := map[string]string{
		"one thread": "init; use 1; alloc 3G; alloc 1G; use 0; alloc 1G; sleep 100; exit 1",
		"threads":    "init; use 1; alloc 3G; threads 4 { use %d; alloc 200M; sleep 20; alloc 200M; sleep 100 }; exit 1",
	}
	for name, script := range scripts {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, "SIMGPU_DEVICES=2", "SIMGPU_FB_TOTAL=4G")
			res := w.record(nil, simwork, script)
			rep, _ := analyzeJSON(t, res.db)
			if rep.FirstFailure == nil || rep.Capacity == nil {
				t.Fatalf("no failure judged: %s", rep.Verdict)
			}
			for _, f := range rep.Failures {
				if f.Recovered {
					t.Errorf("failure on GPU %v at %d called recovered", f.GPUIndex, f.TimeNS)
				}
			}
			if rep.Attribution != report.AttrAllocation || *rep.Capacity != report.CapFBExhausted {
				t.Errorf("attribution %s, capacity %s, want allocation, framebuffer-exhausted: %s",
					rep.Attribution, *rep.Capacity, rep.Verdict)
			}
			if steps := strings.Join(rep.NextSteps, " / "); !strings.Contains(steps, "make the request fit") {
				t.Errorf("next steps %q do not ask to make the request fit", steps)
			}
		})
	}
}

package e2e

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// The third review's findings on recovery, the first failure, host memory
// and wording, on real recordings of the simulated GPU.

// An out-of-memory on GPU 1 followed by a success on GPU 0 is not
// recovered: memory found on another GPU does not satisfy the request. The
// verdict is the exhausted framebuffer and the advice is to make it fit,
// for one thread and for threads on two GPUs.
func TestReview3RecoveryNeedsTheSameGPU(t *testing.T) {
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

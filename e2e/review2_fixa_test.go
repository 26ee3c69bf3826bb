package e2e

import (
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrivium/forensic/report"
)

// The second review's findings on verdicts, on real recordings of the
// simulated GPU.

// --pid on a process that holds 2 GiB from before recording, asks for 2
// GiB more of a 4 GiB GPU and exits at once: the sample the failure
// triggered comes after its exit freed the untraced 2 GiB, and must not
// make the exhausted framebuffer look as if it had room.
func TestReview2PIDExitAfterFailure(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=4G")
	target := w.startWorkload("init; use 0; alloc 2G; wait-signal; alloc 2G; exit 1")
	if !waitFor(5*time.Second, func() bool { return mapsFile(target.Process.Pid, simCUDA) }) {
		t.Fatal("the target did not map the simulated libcuda")
	}
	rec, db, stderr := w.startRecorder("--pid", strconv.Itoa(target.Process.Pid))
	time.Sleep(400 * time.Millisecond) // samples before the failure
	target.Process.Signal(syscall.SIGUSR1)
	waitExit(t, target, 20*time.Second)
	waitExit(t, rec, 20*time.Second)
	rep, _ := analyzeJSON(t, db)
	if rep.FirstFailure == nil || rep.Capacity == nil {
		t.Fatalf("no failure judged; recorder said:\n%s", stderr)
	}
	if c := *rep.Capacity; c != report.CapFBExhausted && c != report.CapUnknown {
		t.Errorf("capacity %s, want framebuffer-exhausted or unknown: %s", c, rep.Verdict)
	}
	text := textAt80(t, db)
	if strings.Contains(text, "had room") || strings.Contains(text, "3.50 GiB free at the failure") {
		t.Errorf("the text judges from the sample after the exit:\n%s", text)
	}
}

// A run whose only failure was recovered: exiting 1, what ended it is not
// in the record (missing evidence); exiting 0, the advice is not to make
// the request fit. The verdict names the first failed operation once.
func TestReview2RecoveredFailureThenExit(t *testing.T) {
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
func TestReview2FailedFreeNotRecoveredByAnother(t *testing.T) {
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

// A sticky code (CUDA_ERROR_ILLEGAL_ADDRESS) on an allocation gets no
// capacity verdict; a call with no current context is on no GPU.
func TestReview2StickyAndNoContext(t *testing.T) {
	w := newWorld(t, "SIMGPU_FAIL=cuMemAlloc_v2:2:700")
	res := w.record(nil, simwork, "init; use 0; alloc 1G; alloc 1G; alloc 1G; exit 1")
	rep, _ := analyzeJSON(t, res.db)
	if rep.Capacity == nil || *rep.Capacity != report.CapNotApplicable || rep.Attribution != report.AttrMissingEvidence {
		t.Errorf("sticky: attribution %s, capacity %v: %s", rep.Attribution, rep.Capacity, rep.Verdict)
	}
	w = newWorld(t)
	res = w.record(nil, simwork, "init; alloc 1G; exit 1")
	rep, _ = analyzeJSON(t, res.db)
	if rep.FirstFailure == nil || rep.FirstFailure.GPUIndex != nil || strings.Contains(rep.Verdict, "GPU 0") {
		t.Errorf("no context: the call is put on a GPU: %s", rep.Verdict)
	}
	if text := textAt80(t, filepath.Clean(res.db)); !strings.Contains(text, "no current context") {
		t.Errorf("the text does not say the thread had no context:\n%s", text)
	}
}

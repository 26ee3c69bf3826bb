package e2e

import (
	"fmt"
	"path/filepath"
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

// A child forked after cuInit calls cuDeviceGet and cuMemAlloc_v2 without
// initializing: both fail. The first failure is the allocation everywhere
// (JSON, the FAILURES table's FIRST, the verdict), the verdict does not call
// it the first failed operation, and the earlier query it names as the
// cause is marked so in the table.
func TestReview3ForkAfterInitOneFirstFailure(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=8G")
	res := w.record(nil, simwork, "init; use 0; alloc 1G; fork { use 0; alloc 1G; exit 0 }; "+
		"fork { init; use 0; alloc 3G; sleep 100 }; fork { init; use 0; alloc 3G; sleep 100 }; wait; exit 1")
	rep, _ := analyzeJSON(t, res.db)
	ff := rep.FirstFailure
	if ff == nil || ff.Symbol != "cuMemAlloc_v2" || rep.Attribution != report.AttrNotMemory {
		t.Fatalf("first %+v, attribution %s: %s", ff, rep.Attribution, rep.Verdict)
	}
	if !strings.HasPrefix(rep.Verdict, "The first failed allocation is cuMemAlloc_v2") {
		t.Errorf("verdict %q", rep.Verdict)
	}
	if rep.Cause == nil || rep.Cause.Symbol != "cuDeviceGet" || rep.Cause.PID != ff.PID {
		t.Fatalf("cause %+v", rep.Cause)
	}
	text := textAt80(t, res.db)
	var firstRow, causeRow int
	for i, l := range strings.Split(text[strings.Index(text, "\nFAILURES"):], "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) > 3 && f[3] == "cuMemAlloc_v2" && strings.HasSuffix(l, "FIRST"):
			firstRow = i
		case len(f) > 3 && f[3] == "cuDeviceGet" && strings.HasSuffix(l, "cause"):
			causeRow = i
		}
	}
	if firstRow == 0 || causeRow == 0 || causeRow > firstRow {
		t.Errorf("FAILURES: FIRST on row %d, cause on row %d:\n%s", firstRow, causeRow, text)
	}
}

// Pinning host memory past the simulated driver's limit, by registering
// or by allocating it: an allocation problem of page-locked host memory,
// never judged on the framebuffer or BAR1, with next steps for pinned
// memory.
func TestReview3HostPinnedMemoryAdvice(t *testing.T) {
	for _, step := range []string{"host-register 100M", "host-alloc 100M"} {
		t.Run(step, func(t *testing.T) {
			w := newWorld(t, "SIMGPU_PIN_LIMIT=64M", "SIMGPU_FB_TOTAL=1G")
			res := w.record(nil, simwork, "init; use 0; alloc 500M; "+step+"; sleep 200; exit 1")
			rep, _ := analyzeJSON(t, res.db)
			if rep.FirstFailure == nil || rep.Capacity == nil {
				t.Fatalf("no failure judged: %s", rep.Verdict)
			}
			if rep.Attribution != report.AttrAllocation || *rep.Capacity != report.CapNotApplicable {
				t.Errorf("attribution %s, capacity %s: %s", rep.Attribution, *rep.Capacity, rep.Verdict)
			}
			text := textAt80(t, res.db)
			i, j := strings.Index(text, "\nNEXT STEPS"), strings.Index(text, "\nFIRST FAILURE")
			if i < 0 || j < i {
				t.Fatalf("no NEXT STEPS before FIRST FAILURE:\n%s", text)
			}
			if steps := text[i:j]; !strings.Contains(steps, "ulimit -l") || !strings.Contains(steps, "pin_memory") {
				t.Errorf("NEXT STEPS lack pinned-memory advice:\n%s", text)
			}
			if strings.Contains(text, "mapping problem") {
				t.Errorf("called a mapping problem:\n%s", text)
			}
		})
	}
}

// An IPC mapping live at the first failure is listed as a mapping of
// imported memory, not as an allocation.
func TestReview3LiveIPCMappingNamed(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=4G")
	h := filepath.Join(w.dir, "handle")
	script := fmt.Sprintf(`%[1]s 'init; use 0; alloc 64M; ipc-export %[2]s; sleep 1000' &
sleep 0.3
%[1]s 'init; use 0; ipc-open %[2]s; alloc 8G; exit 1'
wait`, simwork, h)
	res := w.record(nil, "/bin/bash", "-c", script)
	rep, _ := analyzeJSON(t, res.db)
	if rep.FirstFailure == nil {
		t.Fatalf("no failure: %s", rep.Verdict)
	}
	var kinds []report.KindCount
	for _, l := range rep.LiveAtFailure {
		if l.PID == rep.FirstFailure.PID && l.View == "bar1" {
			kinds = l.Kinds
		}
	}
	if len(kinds) != 1 || kinds[0] != (report.KindCount{Kind: "ipc-mapping", Count: 1}) {
		t.Errorf("live BAR1 kinds of the importer %+v: %+v", kinds, rep.LiveAtFailure)
	}
	text := textAt80(t, res.db)
	if !strings.Contains(text, "bar1: 64.0 MiB in 1 mapping of imported memory (IPC)") {
		t.Errorf("LIVE AT THE FIRST FAILURE does not name the IPC mapping:\n%s", text)
	}
}

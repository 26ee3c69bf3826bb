package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// TestBudgetOfBAR1AtItsLeastFree: one process maps 240 MiB of another's
// memory over IPC, taking the simulated GPU's BAR1 (256 MiB, 4 MiB the
// driver's) to within 12 MiB of full, then unmaps it; nothing fails. The
// budget of BAR1 at its least free names the importer's IPC mappings,
// the driver's share as what the traced mappings do not cover, and the
// least free, adding up to the aperture's total.
func TestBudgetOfBAR1AtItsLeastFree(t *testing.T) {
	w := newWorld(t, "SIMGPU_BAR1_TOTAL=256M", "SIMGPU_BAR1_USED=4M")
	h1, h2, done := filepath.Join(w.dir, "h1"), filepath.Join(w.dir, "h2"), filepath.Join(w.dir, "done")
	script := fmt.Sprintf("%[1]s 'init; use 0; alloc 96M; ipc-export %[2]s; alloc 144M; ipc-export %[3]s; wait-file %[4]s; free-all' & "+
		"%[1]s 'init; use 0; sleep 300; ipc-open %[2]s; ipc-open %[3]s; sleep 400; free-all; sleep 300; touch %[4]s'; wait",
		simwork, h1, h2, done)
	res := w.record([]string{"--interval", "100ms"}, "/bin/sh", "-c", script)
	if res.code != 0 {
		t.Fatalf("record exited %d: %s", res.code, res.stderr)
	}
	rep, _ := analyzeJSON(t, res.db)
	if rep.FirstFailure != nil {
		t.Fatalf("first failure %+v, want none", rep.FirstFailure)
	}
	importer := processRunning(t, rep, "ipc-open")
	h := bar1Headroom(t, rep)
	if h.LeastFree != 12<<20 {
		t.Errorf("BAR1 least free %d, want the 12 MiB the mappings left", h.LeastFree)
	}
	bs := budgetsOfView(budgetsAt(rep, "least-headroom"), "bar1")
	if len(bs) != 1 {
		t.Fatalf("budgets %+v: want BAR1's at its least free", rep.Budget)
	}
	b := bs[0]
	if b.GPU != 0 || b.Total != 256<<20 || b.Note != "" {
		t.Errorf("budget of GPU %d, %d bytes (note %q): want GPU 0's 256 MiB", b.GPU, b.Total, b.Note)
	}
	want := map[string]uint64{
		fmt.Sprintf("mapping ipc-mapping %d", importer): 240 << 20,
		"unattributed": 4 << 20,
		"free":         h.LeastFree,
	}
	var sum uint64
	for _, p := range b.Parts {
		sum += p.Bytes
		k := p.Kind
		if p.PID != nil {
			k = fmt.Sprintf("%s %s %d", p.Kind, p.Mapping, *p.PID)
			if !strings.Contains(p.Command, "ipc-open") {
				t.Errorf("part %s names %q, want the importer's command line", k, p.Command)
			}
		}
		if v, ok := want[k]; !ok || v != p.Bytes || p.Bound != "exact" {
			t.Errorf("part %s: %d bytes, %s; want %d, exact", k, p.Bytes, p.Bound, v)
		}
		delete(want, k)
	}
	if len(want) != 0 {
		t.Errorf("parts missing: %v (parts %+v)", want, b.Parts)
	}
	if sum != b.Total {
		t.Errorf("parts add up to %d, total %d", sum, b.Total)
	}
	text := textAt80(t, res.db)
	if !strings.Contains(text, "Where GPU 0's BAR1 (256.0 MiB) went when it had least free") ||
		!strings.Contains(text, fmt.Sprintf("ipc-mapping (pid %d)", importer)) {
		t.Errorf("the text report has no BAR1 budget at the least free by kind of mapping:\n%s", text)
	}
}

// budgetsOfView are the budgets of one view ("framebuffer", "bar1").
func budgetsOfView(bs []report.Budget, view string) []report.Budget {
	var out []report.Budget
	for _, b := range bs {
		if b.View == view {
			out = append(out, b)
		}
	}
	return out
}

// bar1Headroom is GPU 0's BAR1 headroom.
func bar1Headroom(t *testing.T, rep *report.Report) report.Headroom {
	t.Helper()
	for _, h := range rep.Headroom {
		if h.GPU == 0 && h.View == "bar1" {
			return h
		}
	}
	t.Fatalf("no BAR1 headroom for GPU 0: %+v", rep.Headroom)
	return report.Headroom{}
}

// processRunning is the pid of the recorded process whose arguments hold
// word.
func processRunning(t *testing.T, rep *report.Report, word string) uint32 {
	t.Helper()
	for _, p := range rep.Processes {
		if strings.Contains(strings.Join(p.Args, " "), word) && !strings.HasPrefix(p.Exe, "/bin/") && !strings.HasSuffix(p.Exe, "sh") {
			return p.PID
		}
	}
	t.Fatalf("no recorded process runs %q: %+v", word, rep.Processes)
	return 0
}

package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// TestBudgetOfBAR1ByKindOfMapping: a process maps 96 MiB of another's
// memory over IPC, then fails to map 192 MiB more, the simulated GPU's
// BAR1 (256 MiB, 4 MiB the driver's) too full for it. The failure's
// budget is BAR1's: the importer's traced IPC mappings as a part of
// their own, the rest of what NVML counts used (the driver's 4 MiB), and
// free, adding up to the aperture's total.
func TestBudgetOfBAR1ByKindOfMapping(t *testing.T) {
	w := newWorld(t, "SIMGPU_BAR1_TOTAL=256M", "SIMGPU_BAR1_USED=4M")
	h1, h2 := filepath.Join(w.dir, "h1"), filepath.Join(w.dir, "h2")
	script := fmt.Sprintf("%[1]s 'init; use 0; alloc 96M; ipc-export %[2]s; alloc 192M; ipc-export %[3]s; sleep 1000' & "+
		"%[1]s 'init; use 0; ipc-open %[2]s; ipc-open %[3]s; sleep 300; exit 1'; wait", simwork, h1, h2)
	res := w.record(nil, "/bin/sh", "-c", script)
	rep, _ := analyzeJSON(t, res.db)
	ff := rep.FirstFailure
	if ff == nil || !strings.HasPrefix(ff.Symbol, "cuIpcOpenMemHandle") || deref(rep.Capacity) != string(report.CapBAR1Exhausted) {
		t.Fatalf("first failure %+v, capacity %s: want an IPC open refused for BAR1: %s", ff, deref(rep.Capacity), res.stderr)
	}
	if len(failureBudgets(rep)) != 1 || failureBudgets(rep)[0].View != "bar1" {
		t.Fatalf("budgets %+v: want BAR1's", failureBudgets(rep))
	}
	b := failureBudgets(rep)[0]
	got := map[string]uint64{}
	var sum uint64
	for _, p := range b.Parts {
		k := p.Kind
		if p.PID != nil {
			k = fmt.Sprintf("%s %s %d", p.Kind, p.Mapping, *p.PID)
		}
		got[k] = p.Bytes
		sum += p.Bytes
		if p.Bound != "exact" {
			t.Errorf("part %+v: want exact", p)
		}
	}
	want := map[string]uint64{
		fmt.Sprintf("mapping ipc-mapping %d", ff.PID): 96 << 20,
		"unattributed": 4 << 20,
		"free":         156 << 20,
	}
	if len(got) != len(want) {
		t.Errorf("parts %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d, want %d (parts %v)", k, got[k], v, got)
		}
	}
	if sum != b.Total || b.Total != 256<<20 {
		t.Errorf("parts add up to %d of %d, want BAR1's 256 MiB", sum, b.Total)
	}
	if text := textAt80(t, res.db); !strings.Contains(text, "Where GPU 0's BAR1 (256.0 MiB) went") ||
		!strings.Contains(text, "ipc-mapping (pid") {
		t.Errorf("the text budget does not show BAR1 by kind of mapping:\n%s", text)
	}
}

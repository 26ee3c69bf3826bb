package e2e

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestBudgetAtTheLeastFreeOfANearMiss: a job that takes the framebuffer to
// within 512 MiB of full for a moment no sample catches, beside a
// neighbour, and fails nothing, gets a budget at that moment: its traced
// allocations then, its context, the neighbour, the driver's share and
// the simulated GPU's own free, adding up to the total.
func TestBudgetAtTheLeastFreeOfANearMiss(t *testing.T) {
	w := newWorld(t, "SIMGPU_CTX_MEM=256M")
	ready := filepath.Join(w.dir, "neighbour-ready")
	neighbour := w.startWorkload("init; use 0; alloc 2G; touch " + ready + "; wait-signal; free-all")
	if !waitFor(20e9, func() bool { return exists(ready) }) {
		t.Fatal("the neighbour did not allocate")
	}
	res := w.record([]string{"--interval", "100ms"}, simwork,
		"init; use 0; sleep 400; alloc 12G; alloc 512M; meminfo; free; free; sleep 400")
	if res.code != 0 {
		t.Fatalf("record exited %d: %s", res.code, res.stderr)
	}
	simFree, simTotal := meminfoFree(t, res.stdout)
	rep, _ := analyzeJSON(t, res.db)
	if rep.FirstFailure != nil || !rep.NearMiss {
		t.Fatalf("near_miss %v (first failure %v), want a near miss", rep.NearMiss, rep.FirstFailure)
	}
	h := framebufferHeadroom(t, rep)
	bs := budgetsOfView(budgetsAt(rep, "least-headroom"), "framebuffer")
	if len(bs) != 1 || bs[0].GPU != 0 {
		t.Fatalf("budgets %+v, want GPU 0's framebuffer at its least free", rep.Budget)
	}
	b := bs[0]
	if b.Total != simTotal || b.TimeNS != h.AtNS || b.Note != "" {
		t.Errorf("total %d at %d (note %q), want %d at the least free's %d", b.Total, b.TimeNS, b.Note, simTotal, h.AtNS)
	}
	job := uint32(0)
	for _, p := range rep.Processes {
		if p.Root {
			job = p.PID
		}
	}
	want := map[string]uint64{
		"reserved":                 512 << 20,
		"traced " + pidText(job):   12<<30 + 512<<20,
		"untraced " + pidText(job): 256 << 20,
		"process-not-recorded " + pidText(uint32(neighbour.Process.Pid)): 2<<30 + 256<<20,
		"unattributed": 0,
		"free":         simFree,
	}
	var sum uint64
	for _, p := range b.Parts {
		sum += p.Bytes
		k := p.Kind
		if p.PID != nil {
			k += " " + pidText(*p.PID)
		}
		w, ok := want[k]
		if !ok || w != p.Bytes || p.Bound != "exact" {
			t.Errorf("part %s: %d bytes, %s; want %d, exact", k, p.Bytes, p.Bound, w)
		}
		delete(want, k)
	}
	if len(want) != 0 {
		t.Errorf("parts missing: %v (parts %+v)", want, b.Parts)
	}
	if sum != b.Total {
		t.Errorf("parts add up to %d, total %d", sum, b.Total)
	}
	if text := textAt80(t, res.db); !strings.Contains(text, "BUDGET AT THE LEAST FREE") {
		t.Errorf("the text report has no budget at the least free:\n%s", text)
	}
}

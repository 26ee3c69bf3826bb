package e2e

import (
	"reflect"
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// TestBudgetSplitsTheTracedPartByPhaseAndCallSite: a job loads 6 GiB
// (its weights), frees a scratch buffer, grows by 5 GiB and fails asking
// for 9 GiB, recorded with --stacks. Its traced part at the failure says
// what came before its first free and what grew since, and where in the
// program the allocations were made.
func TestBudgetSplitsTheTracedPartByPhaseAndCallSite(t *testing.T) {
	w := newWorld(t)
	res := w.record([]string{"--stacks", "--interval", "100ms"}, simwork,
		"init; use 0; alloc 6G; alloc 1G; free; sleep 200; alloc 2G; alloc 3G; alloc 9G; sleep 300; exit 1")
	rep, _ := analyzeJSON(t, res.db)
	if rep.Capacity == nil || *rep.Capacity != report.CapFBExhausted {
		t.Fatalf("capacity %v, want framebuffer-exhausted: %s\n%s", rep.Capacity, rep.Verdict, res.stderr)
	}
	bs := failureBudgets(rep)
	if len(bs) != 1 {
		t.Fatalf("budgets at the failure %+v, want one", rep.Budget)
	}
	var traced *report.BudgetPart
	for i, p := range bs[0].Parts {
		if p.Kind == "traced" && p.PID != nil && *p.PID == rep.FirstFailure.PID {
			traced = &bs[0].Parts[i]
		}
	}
	if traced == nil || traced.Bytes != 11<<30 {
		t.Fatalf("the job's traced part %+v, want 11 GiB; parts %+v", traced, bs[0].Parts)
	}
	wantPhase := []report.BudgetShare{{Name: "before its first free", Bytes: 6 << 30}, {Name: "since its first free", Bytes: 5 << 30}}
	if !reflect.DeepEqual(traced.ByPhase, wantPhase) {
		t.Errorf("by phase %+v, want %+v", traced.ByPhase, wantPhase)
	}
	var sum uint64
	for _, s := range traced.BySite {
		sum += s.Bytes
	}
	if len(traced.BySite) == 0 || sum != traced.Bytes || !strings.Contains(traced.BySite[0].Name, "step_alloc") {
		t.Errorf("by call site %+v, want the allocations' site (step_alloc), adding up to %d", traced.BySite, traced.Bytes)
	}
	text := textAt80(t, res.db)
	if !strings.Contains(text, "phase: before its first free      6.00 GiB") || !strings.Contains(text, "site: step_alloc, in simwork") {
		t.Errorf("the text report does not show the split under the part:\n%s", text)
	}
}

package e2e

import (
	"strconv"
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// failureBudgets are the report's budgets at the first failure (a report
// also has one per GPU framebuffer at its least free).
func failureBudgets(rep *report.Report) []report.Budget {
	return budgetsAt(rep, "first-failure")
}

// budgetsAt are the report's budgets at one moment ("first-failure",
// "least-headroom").
func budgetsAt(rep *report.Report, at string) []report.Budget {
	var out []report.Budget
	for _, b := range rep.Budget {
		if b.At == at {
			out = append(out, b)
		}
	}
	return out
}

// pidText is "pid N".
func pidText(pid uint32) string { return "pid " + strconv.FormatUint(uint64(pid), 10) }

// TestBudgetOfAnOutOfMemoryFollowedByTheExit: a workload holds 5 GiB
// traced and a 256 MiB context on an 8 GiB GPU (512 MiB reserved), asks
// for 3 GiB and exits at once, so the sample the failure triggers
// usually comes after the exit freed everything. The budget is then the
// sample's before the failure, and the process's context, which no call
// sizes, is a part of its own: at least what that sample read, since
// nothing released it before the failure. When the recorder read the
// failure's own sample before the exit, the part is exact. Either way the
// parts add up to the total and the verdict does not say "had room".
func TestBudgetOfAnOutOfMemoryFollowedByTheExit(t *testing.T) {
	const ctx = 256 << 20
	w := newWorld(t, "SIMGPU_FB_TOTAL=8G", "SIMGPU_CTX_MEM=256M", "SIMWORK_CALLS=")
	res := w.record([]string{"--interval", "100ms"}, simwork, "init; use 0; alloc 5G; sleep 400; alloc 3G; exit 1")
	rep, _ := analyzeJSON(t, res.db)
	if rep.FirstFailure == nil || rep.Capacity == nil {
		t.Fatalf("no failure judged; recorder said:\n%s", res.stderr)
	}
	if *rep.Capacity != report.CapFBExhausted {
		t.Fatalf("capacity %s, want framebuffer-exhausted (2.25 GiB free, 3 GiB asked): %s", *rep.Capacity, rep.Verdict)
	}
	bs := failureBudgets(rep)
	if len(bs) != 1 {
		t.Fatalf("budgets at the failure %+v, want one", rep.Budget)
	}
	b, pid := bs[0], rep.FirstFailure.PID
	var sum uint64
	var untraced, traced *report.BudgetPart
	for i, p := range b.Parts {
		sum += p.Bytes
		if p.PID != nil && *p.PID == pid {
			switch p.Kind {
			case "untraced":
				untraced = &b.Parts[i]
			case "traced":
				traced = &b.Parts[i]
			}
		}
	}
	if sum != b.Total || b.Total != 8<<30 {
		t.Errorf("parts add up to %d, total %d, want 8 GiB", sum, b.Total)
	}
	if traced == nil || traced.Bytes != 5<<30 || traced.Bound != "exact" {
		t.Fatalf("the process's traced part %+v, want 5 GiB, exact; parts %+v", traced, b.Parts)
	}
	if untraced == nil || untraced.Bytes != ctx {
		t.Fatalf("the process's context part %+v, want 256 MiB; parts %+v", untraced, b.Parts)
	}
	exited := strings.Contains(contextText(rep), "exited, freeing its CUDA context")
	switch {
	case exited && (untraced.Bound != "at-least" || !strings.Contains(untraced.Source, "sample before the failure")):
		t.Errorf("read before the failure, the context part is %s (%s), want at least, saying when it was read",
			untraced.Bound, untraced.Source)
	case !exited && untraced.Bound != "exact":
		t.Errorf("read in the failure's own sample, before the exit, the context part is %s, want exact", untraced.Bound)
	}
	t.Logf("exit before the failure's sample: %v; context part %s", exited, untraced.Bound)
}

package text

import (
	"fmt"

	"github.com/retrivium/forensic/report"
)

// budgetLabels name a budget part's kind for people.
var budgetLabels = map[string]string{
	"reserved":             "driver reserved",
	"traced":               "traced allocations",
	"pool":                 "memory pool in use",
	"untraced":             "not sized by a call",
	"process":              "process",
	"process-not-recorded": "not recorded",
	"unattributed":         "no listed process",
	"free":                 "free",
}

// budget says where each budget's view went, part by part, adding up to
// its total. A budget at the least free that is the failure's own (same
// view, same moment) is not said twice, nor one that splits nothing
// (HEADROOM already says its free, and so its used).
func (t *writer) budget(rep *report.Report) {
	for _, b := range rep.Budget {
		view := "framebuffer"
		if b.View == "bar1" {
			view = "BAR1"
		}
		if b.At == "least-headroom" {
			if sameAsFailure(rep, b) || !splits(b) {
				continue
			}
			t.heading("BUDGET AT THE LEAST FREE")
			t.wrap("  ", fmt.Sprintf("Where GPU %d's %s (%s) went when it had least free, at %s: parts that add up to the total.",
				b.GPU, view, report.HumanBytes(b.Total), t.rel(b.TimeNS)))
		} else {
			t.heading("BUDGET AT THE FAILURE")
			t.wrap("  ", fmt.Sprintf("Where GPU %d's %s (%s) went, in the sample of the failure at %s: parts that add up to the total.",
				b.GPU, view, report.HumanBytes(b.Total), t.rel(b.TimeNS)))
		}
		named := map[uint32]bool{}
		for _, p := range b.Parts {
			label := budgetLabels[p.Kind]
			switch {
			case p.Mapping != "":
				label = p.Mapping // the kinds name mappings: ipc-mapping, peer-access, ...
			case b.View == "bar1" && p.Kind == "unattributed":
				label = "not traced (driver, others)" // NVML lists no process's BAR1
			}
			if label == "" {
				label = p.Kind
			}
			if p.PID != nil {
				label += fmt.Sprintf(" (pid %d)", *p.PID)
			}
			// A table line: its cells are short, so it fits 60 columns.
			t.line("  %-34s %11s  %s", label, report.HumanBytes(p.Bytes), p.Bound)
			t.shares("phase", p.ByPhase)
			t.shares("site", p.BySite)
			if p.Pool != "" {
				limit := "no maxSize recorded"
				if p.PoolMax != nil {
					limit = "maxSize " + report.HumanBytes(*p.PoolMax)
				}
				t.wrap("      ", fmt.Sprintf("pool %s, %s; what it holds beyond this is not sized by a call", p.Pool, limit))
			}
			if why := report.BudgetUnnamed(p); why != "" && p.Command == "" && report.BudgetWho(p) == "" {
				t.wrap("      ", "not named: "+why)
			}
			if p.PID != nil && !named[*p.PID] && (p.Command != "" || report.BudgetWho(p) != "") {
				named[*p.PID] = true
				// One line each: the command line clipped in its middle
				// (the program and its last arguments say most), then
				// whose it is, for a process the recording did not follow.
				if p.Command != "" {
					t.line("      $ %s", report.ClipMiddle(p.Command, t.o.Width-8))
				}
				if who := report.BudgetWho(p); who != "" {
					t.wrap("      ", who)
				}
			}
		}
		if b.Note != "" {
			t.wrap("  note: ", b.Note)
		}
	}
}

// sameAsFailure reports whether budget b is of the same GPU view as a
// budget at the failure and says the same: the same moment, or the same
// parts (the least free came just before the failure, and nothing
// changed by its sample).
func sameAsFailure(rep *report.Report, b report.Budget) bool {
	for _, f := range rep.Budget {
		if f.At != b.At && f.GPU == b.GPU && f.View == b.View && (f.TimeNS == b.TimeNS || sameParts(f.Parts, b.Parts)) {
			return true
		}
	}
	return false
}

// splits reports whether a budget says more than its used and free: a
// BAR1 budget with no traced mapping does not.
func splits(b report.Budget) bool {
	for _, p := range b.Parts {
		if p.Kind != "unattributed" && p.Kind != "free" {
			return true
		}
	}
	return false
}

// sameParts reports whether two budgets' parts name the same kinds,
// processes and bytes, in order.
func sameParts(a, b []report.BudgetPart) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		pa, pb := a[i], b[i]
		if pa.Kind != pb.Kind || pa.Bytes != pb.Bytes || (pa.PID == nil) != (pb.PID == nil) || (pa.PID != nil && *pa.PID != *pb.PID) {
			return false
		}
	}
	return true
}

// shares lists a traced part's shares under it, one a line, in the
// part's byte column: "phase: load  6.00 GiB", "site: grow_cache, kv.py:40".
func (t *writer) shares(label string, sh []report.BudgetShare) {
	for _, x := range sh {
		t.line("      %-30s %11s", report.ClipMiddle(label+": "+x.Name, 30), report.HumanBytes(x.Bytes))
	}
}

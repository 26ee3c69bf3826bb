package html

import (
	"fmt"
	"strings"

	"github.com/retrivium/forensic/report"
)

// headroomView is how close each GPU view came to running out.
type headroomView struct {
	NearMiss string // the near-miss sentence, "" when it was none
	Rows     []headroomRow
}

// headroomRow is one view's least free memory.
type headroomRow struct {
	GPU, View, ViewLabel   string
	Free, Total, Percent   string
	FreeBytes, TotalBytes  uint64
	Time, Wall, How, Note  string
	Call, CallSize, CallBy string
	Low                    bool // under the near-miss threshold
}

// newHeadroom prepares the headroom section; nil when the run has none.
func newHeadroom(rep *report.Report, c clock) *headroomView {
	if len(rep.Headroom) == 0 {
		return nil
	}
	v := &headroomView{}
	if rep.NearMiss {
		v.NearMiss = fmt.Sprintf("Near miss: no call failed, but less than %g%% of a framebuffer was free at one moment.", rep.NearMissPercent)
	}
	for _, h := range rep.Headroom {
		r := headroomRow{GPU: fmt.Sprintf("GPU %d", h.GPU), View: h.View, ViewLabel: "framebuffer",
			Free: report.HumanBytes(h.LeastFree), Total: report.HumanBytes(h.Total), FreeBytes: h.LeastFree, TotalBytes: h.Total,
			Percent: fmt.Sprintf("%.1f%%", h.Percent), Time: c.rel(h.AtNS), Wall: c.at(h.AtNS, wallShort), How: "exact", Note: h.Note,
			Low: h.View == "framebuffer" && h.Percent < rep.NearMissPercent}
		if h.MIG != nil {
			r.GPU += fmt.Sprintf(" MIG %d", *h.MIG)
		}
		if h.View == "bar1" {
			r.ViewLabel = "BAR1"
		}
		switch {
		case !h.Exact:
			r.How = "a bound"
		case h.Source == "sample":
			r.How = "as a sample read it"
		}
		if cl := h.Call; cl != nil {
			r.Call, r.CallBy = cl.Symbol, fmt.Sprintf("pid %d", cl.PID)
			if cl.Size != nil {
				r.CallSize = report.HumanBytes(*cl.Size)
			}
		}
		v.Rows = append(v.Rows, r)
	}
	return v
}

// budgetView is where a GPU view went at the failure or at its least
// free: one row per part,
// each with its share of the total for the stacked bar.
type budgetView struct {
	Title string
	Rows  []budgetRow
	Note  string
}

// budgetRow is one part of a budget.
type budgetRow struct {
	Kind, Who, Bytes, Bound, Source string
	BytesRaw                        uint64
	Percent                         string // of the total, for the bar's width
	// Split is a traced part's shares by phase and call site, in words.
	Split string
}

// splitText says a part's shares under a label: "by phase: load 6.00
// GiB; serve 2.00 GiB. "; "" when there are none.
func splitText(label string, sh []report.BudgetShare) string {
	if len(sh) == 0 {
		return ""
	}
	out := make([]string, len(sh))
	for i, x := range sh {
		out[i] = x.Name + " " + report.HumanBytes(x.Bytes)
	}
	return label + ": " + strings.Join(out, "; ") + ". "
}

// newBudgets prepares the budgets of the report.
func newBudgets(rep *report.Report, c clock) []budgetView {
	var out []budgetView
	for _, b := range rep.Budget {
		moment := "the failure"
		if b.At == "least-headroom" {
			moment = "its least free"
		}
		view := b.View
		if view == "bar1" {
			view = "BAR1" // as the text report and the headroom say it
		}
		v := budgetView{Title: fmt.Sprintf("GPU %d %s, %s in all, at %s (%s)", b.GPU, view, report.HumanBytes(b.Total), moment, c.rel(b.TimeNS)),
			Note: b.Note}
		for _, p := range b.Parts {
			r := budgetRow{Kind: p.Kind, Who: p.Command, Bytes: report.HumanBytes(p.Bytes), BytesRaw: p.Bytes, Bound: p.Bound,
				Source: p.Source, Percent: fmt.Sprintf("%.2f", 100*float64(p.Bytes)/float64(max(b.Total, 1)))}
			if p.PID != nil {
				r.Who = fmt.Sprintf("pid %d %s", *p.PID, report.ClipMiddle(p.Command, 160))
			}
			if who := report.BudgetWho(p); who != "" {
				r.Who += " (" + who + ")"
			}
			if p.Mapping != "" {
				r.Who += " (mappings of kind " + p.Mapping + ")"
			}
			if p.Pool != "" {
				r.Who += " (memory pool " + p.Pool + ")"
			}
			r.Split = splitText("by phase", p.ByPhase) + splitText("by call site", p.BySite)
			v.Rows = append(v.Rows, r)
		}
		out = append(out, v)
	}
	return out
}

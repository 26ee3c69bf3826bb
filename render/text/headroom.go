package text

import (
	"fmt"

	"github.com/retrivium/forensic/report"
)

// headroom says how close each GPU view came to running out: its least
// free memory, when, after which call, and whether the figure is exact.
func (t *writer) headroom(rep *report.Report) {
	if len(rep.Headroom) == 0 {
		return
	}
	head := "HEADROOM"
	if rep.NearMiss {
		head += fmt.Sprintf("  near miss: under %g%% of a framebuffer was free", rep.NearMissPercent)
	}
	t.heading(head)
	t.wrap("  ", "The least free memory of each view at any moment: NVML samples, corrected by the traced calls between them.")
	for _, h := range rep.Headroom {
		t.wrap("  ", headroomLine(h, t.rel(h.AtNS)))
		if c := h.Call; c != nil {
			t.wrap("      ", callText(c))
		}
		if !h.Exact && h.Note != "" {
			t.wrap("      not exact: ", h.Note)
		}
	}
}

// headroomLine is one view's least free, in one sentence.
func headroomLine(h report.Headroom, at string) string {
	where := fmt.Sprintf("GPU %d", h.GPU)
	if h.MIG != nil {
		where += fmt.Sprintf(" MIG %d", *h.MIG)
	}
	view := "framebuffer"
	if h.View == "bar1" {
		view = "BAR1"
	}
	how := "exact"
	switch {
	case !h.Exact:
		how = "a bound"
	case h.Source == "sample":
		how = "as a sample read it"
	}
	return fmt.Sprintf("%s %s: %s free of %s (%.1f%%) at %s, %s.", where, view,
		report.HumanBytes(h.LeastFree), report.HumanBytes(h.Total), h.Percent, at, how)
}

// callText names a call: what, how much, who.
func callText(c *report.Failure) string {
	s := "after " + c.Symbol
	if c.Size != nil {
		s += " of " + report.HumanBytes(*c.Size)
	}
	s += fmt.Sprintf(" by pid %d", c.PID)
	if c.Stack == nil {
		return s
	}
	for _, fr := range c.Stack.Frames { // the innermost frame that has a name
		if fr.Function != "" {
			return s + ", in " + fr.Function
		}
	}
	return s
}

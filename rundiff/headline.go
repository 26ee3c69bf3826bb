package rundiff

import (
	"fmt"
	"strings"

	"github.com/retrivium/forensic/report"
)

// headlineItems is how many differences the opening sentence names.
const headlineItems = 3

// headline is the sentence a diff opens with: the differences that
// explain most, in a few words each.
func headline(ds []report.Difference, goods int) string {
	who := "the good one"
	if goods > 1 {
		who = fmt.Sprintf("the %d good ones", goods)
	}
	var items []string
	for i := range ds {
		if len(items) == headlineItems {
			break
		}
		items = append(items, shortText(&ds[i]))
	}
	if len(items) == 0 {
		return fmt.Sprintf("The failing run differs from %s in: nothing this comparison can see (processes, calls, memory views, phases and platform agree).", who)
	}
	s := strings.Join(items, "; ")
	if more := len(ds) - len(items); more > 0 {
		s += fmt.Sprintf("; and %d more", more)
	}
	return fmt.Sprintf("The failing run differs from %s in: %s.", who, s)
}

// shortText is a difference in a few words.
func shortText(d *report.Difference) string {
	switch d.Kind {
	case report.DiffExtraProcess:
		s := fmt.Sprintf("an extra process %d", d.Process.PID)
		if d.Process.Recorded {
			s = fmt.Sprintf("an extra process (%s)", shortCommand(d.Process.Command, 40))
		}
		if d.Process.NVMLPeak != nil {
			s += " holding " + report.HumanBytes(*d.Process.NVMLPeak)
		}
		return s
	case report.DiffCallSequence:
		return departureShort(d)
	case report.DiffMissingProcess:
		if !d.Process.Recorded {
			return fmt.Sprintf("a missing process (pid %d in the good run, not recorded)", d.Process.PID)
		}
		return "a missing process (" + shortCommand(d.Process.Command, 40) + ")"
	case report.DiffInventory:
		return fmt.Sprintf("%s (%s, not %s)", d.Field, d.FailingText, d.GoodText)
	case report.DiffPhaseDuration:
		return fmt.Sprintf("the duration of phase %q", d.Phase)
	case report.DiffPhaseGrowth:
		return fmt.Sprintf("%s more growth in phase %q", report.HumanBytes(d.Bytes), d.Phase)
	case report.DiffLeastFree:
		return fmt.Sprintf("%s less %s free at the least", report.HumanBytes(d.Bytes), viewName(d.View))
	case report.DiffTracedPeak:
		return fmt.Sprintf("a %s higher traced %s peak", report.HumanBytes(d.Bytes), viewName(d.View))
	}
	return d.Kind
}

func viewName(v string) string {
	if v == "bar1" {
		return "BAR1"
	}
	return v
}

// sizeText is a call's size in words.
func sizeText(c *report.DiffCall) string {
	if c == nil || c.Size == nil {
		return "of unknown size"
	}
	return "of " + report.HumanBytes(*c.Size)
}

// departureShort is a call-sequence difference in a few words.
func departureShort(d *report.Difference) string {
	b, g := d.Call, d.GoodCall
	switch d.Departure {
	case report.DepartExtraCall:
		if b.Result != "" && b.Result != "CUDA_SUCCESS" {
			return fmt.Sprintf("an extra %s %s in phase %q, which failed", b.Symbol, sizeText(b), b.Phase)
		}
		return fmt.Sprintf("an extra %s %s in phase %q", b.Symbol, sizeText(b), b.Phase)
	case report.DepartLarger, report.DepartSmaller:
		return fmt.Sprintf("a %s %s in phase %q (%s in the good run)", b.Symbol, sizeText(b), b.Phase, strings.TrimPrefix(sizeText(g), "of "))
	case report.DepartMissingCall:
		return fmt.Sprintf("a missing %s %s in phase %q", g.Symbol, sizeText(g), g.Phase)
	case report.DepartFailed:
		return fmt.Sprintf("a failed %s %s in phase %q", b.Symbol, sizeText(b), b.Phase)
	case report.DepartOtherSite:
		return fmt.Sprintf("a %s %s in phase %q from another call site", b.Symbol, sizeText(b), b.Phase)
	}
	return fmt.Sprintf("a %s %s in phase %q where the good run called %s", b.Symbol, sizeText(b), b.Phase, g.Symbol)
}

// departureText is a call-sequence difference in a sentence.
func departureText(d *report.Difference) string {
	c := d.Call
	if c == nil {
		c = d.GoodCall
	}
	return fmt.Sprintf("process %d (%s): %s, its call #%d", d.Process.PID, shortCommand(d.Process.Command, 40),
		departureShort(d), c.Index+1)
}

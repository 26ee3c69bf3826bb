package text

import (
	"fmt"
	"strings"

	"github.com/retrivium/forensic/report"
)

// runs prints what an analysis of several runs adds: the runs, the order
// of their first failures, the candidates that could not be ordered, the
// failures that followed, and the ranks with no run.
func (t *writer) runs(rep *report.Report) {
	m := rep.MultiRun
	if m == nil {
		return
	}
	t.heading(fmt.Sprintf("RUNS (%s; order of their first failures: %s)", report.Plural(len(m.Runs), "run"), m.Order))
	for _, r := range m.Runs {
		bound := "no clock error bound"
		if r.ClockErrorNS != nil {
			bound = "clock error ±" + report.Duration(*r.ClockErrorNS)
		}
		t.wrap("  ", fmt.Sprintf("%s, host %s: %s (%s) %s", rankLabel(r.Rank, r.Ranks), r.Host, r.Attribution, bound, r.Path))
	}
	if len(m.MissingRanks) > 0 && m.WorldSize != nil {
		t.wrap("  ", fmt.Sprintf("missing: %s of the job's %d have no run", ranksLabel(m.MissingRanks), *m.WorldSize))
	}
	for _, c := range m.Candidates {
		t.wrap("  candidate: ", fmt.Sprintf("%s, host %s, %s", rankLabel(c.Rank, nil), c.Host, c.RunPath))
		if c.Judged != nil {
			t.wrap("      ", c.Judged.Verdict)
		}
		for _, u := range c.Unordered {
			why := u.Reason
			if u.OverlapNS != nil {
				why += " by " + report.Duration(*u.OverlapNS)
			}
			t.wrap("      cannot be ordered against ", u.RunPath+" ("+why+")")
		}
	}
	if len(m.Consequences) > 0 {
		t.wrap("  ", "after the first failure, in other runs (likely consequences):")
	}
	for _, c := range m.Consequences {
		delay := report.Duration(c.DelayMinNS)
		if !c.Exact {
			delay = report.Duration(c.DelayMinNS) + " to " + report.Duration(c.DelayMaxNS)
		}
		t.wrap("    ", fmt.Sprintf("%s, host %s: %s %s, %s later", rankLabel(c.Rank, nil), c.Host, c.Symbol,
			strings.TrimPrefix(c.ResultName, "CUDA_ERROR_"), delay))
	}
}

func rankLabel(r *int, ranks []int) string {
	switch {
	case r != nil:
		return fmt.Sprintf("rank %d", *r)
	case len(ranks) > 0:
		return ranksLabel(ranks)
	}
	return "no rank"
}

func ranksLabel(ranks []int) string {
	parts := make([]string, len(ranks))
	for i, r := range ranks {
		parts[i] = fmt.Sprint(r)
	}
	if len(ranks) == 1 {
		return "rank " + parts[0]
	}
	return "ranks " + strings.Join(parts, ", ")
}

package text

import (
	"fmt"
	"io"
	"strings"

	"github.com/retrivium/forensic/report"
)

// WriteDiff writes the comparison of a failing run with good runs: the
// sentence that says what differs, the differences most able to explain
// the failure first (the departing call's stack under it), the runs, how
// the processes were aligned, and what the comparison could not see.
func WriteDiff(w io.Writer, d *report.Diff, o Options) error {
	if o.Width == 0 {
		o.Width = 100
	}
	o.Width = max(o.Width, 60)
	t := &writer{w: w, o: o}
	t.wrap("", d.Headline)
	t.heading(fmt.Sprintf("DIFFERENCES (%d, most able to explain the failure first)", len(d.Differences)))
	if len(d.Differences) == 0 {
		t.wrap("  ", "none found")
	}
	for i, df := range d.Differences {
		mark := " "
		if df.Unique {
			mark = "*"
		}
		t.wrap(fmt.Sprintf("%s%2d. ", mark, i+1), df.Summary)
		if df.Call != nil && df.Kind == report.DiffCallSequence {
			t.stack(df.Call.Stack)
		}
	}
	if len(d.Good) > 1 {
		t.wrap("", "* no good run has it")
	}
	t.diffRuns(d)
	t.alignment(d.Processes)
	if len(d.Notes) > 0 {
		t.heading("NOT COMPARED")
		for _, n := range d.Notes {
			t.wrap("  - ", n)
		}
	}
	return t.err
}

// diffRuns lists the compared runs and their verdicts.
func (t *writer) diffRuns(d *report.Diff) {
	t.heading("RUNS")
	how := "the last run given"
	if d.Chosen == "only-failing" {
		how = "the only run with a failure; the last run given had none"
	}
	t.wrap("  failing: ", fmt.Sprintf("%s (%s): %s", d.Bad.Path, how, d.Bad.Attribution))
	t.wrap("    ", d.Bad.Verdict)
	for _, g := range d.Good {
		t.wrap("  good:    ", fmt.Sprintf("%s: %s", g.Path, g.Attribution))
	}
}

// alignment shows which process of the failing run was compared with
// which of the (first) good run.
func (t *writer) alignment(pairs []report.ProcessPair) {
	if len(pairs) == 0 {
		return
	}
	t.heading("PROCESSES (failing run = good run, matched by executable, arguments and rank)")
	for _, p := range pairs {
		switch {
		case p.Failing == nil:
			t.wrap("  - ", procLabel(p.Good)+" (good run only)")
		case p.Good == nil:
			t.wrap("  + ", procLabel(p.Failing)+" (failing run only)")
		default:
			by := ""
			if p.By == "executable" {
				by = ", arguments differ"
			}
			t.wrap("    ", fmt.Sprintf("%d = %d%s: %s", p.Failing.PID, p.Good.PID, by, procLabel(p.Failing)))
		}
	}
}

// procLabel names a process in the alignment.
func procLabel(p *report.DiffProcess) string {
	s := fmt.Sprintf("pid %d, not recorded", p.PID)
	if p.Recorded {
		s = clip(strings.TrimSpace(p.Command), maxCommand)
	}
	if p.NVMLPeak != nil {
		s += ", NVML peak " + report.HumanBytes(*p.NVMLPeak)
	}
	return s
}

// maxCommand bounds a command line in the alignment (two lines at 80
// columns); --json has it whole.
const maxCommand = 140

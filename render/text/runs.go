package text

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
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
	t.heading(fmt.Sprintf("RUNS (%s%s; order of their first failures: %s)", report.Plural(len(m.Runs), "run"), groupedBy(m), m.Order))
	if m.UnrecoveredOrder != "" {
		t.wrap("  ", fmt.Sprintf("the first failure was recovered; order of the failures no process recovered from: %s", m.UnrecoveredOrder))
	}
	if !t.o.Explain {
		t.runGroups(rep)
	} else {
		t.runList(m)
	}
	if len(m.MissingRanks) > 0 && m.WorldSize != nil {
		t.wrap("  ", fmt.Sprintf("missing: %s of the job's %d %s no run", report.RankRanges(m.MissingRanks), *m.WorldSize, hasHave(len(m.MissingRanks))))
	}
	t.candidates("  candidate: ", m.Candidates)
	t.candidates("  unrecovered candidate: ", m.UnrecoveredCandidates)
	if t.o.Explain {
		t.consequences(m, m.Consequences)
		return
	}
	var orphans []report.Consequence // failures of runs the list lacks
	for _, c := range m.Consequences {
		if m.RunOf(c.RunPath) == nil {
			orphans = append(orphans, c)
		}
	}
	t.consequences(m, orphans)
}

// runList prints every run on its own line, in rank order (--explain).
func (t *writer) runList(m *report.MultiRun) {
	for _, r := range byRank(m.Runs) {
		bound := "no clock error bound"
		if r.ClockErrorNS != nil {
			bound = "clock error ±" + report.Duration(*r.ClockErrorNS)
		}
		t.wrap("  ", fmt.Sprintf("%s, host %s: %s (%s) %s", rankLabel(r.Rank, r.Ranks), r.Host, r.Attribution, bound, r.Path))
	}
}

// consequences prints each failure after the one that matters, with what
// ties it to that one (--explain; the default groups them by run).
func (t *writer) consequences(m *report.MultiRun, cs []report.Consequence) {
	if len(cs) > 0 {
		what := "the first failure"
		if m.UnrecoveredOrder != "" {
			what = "the first unrecovered failure"
		}
		t.wrap("  ", "after "+what+", in other runs, and what ties each to it:")
	}
	for _, c := range cs {
		delay := report.Duration(c.DelayMinNS)
		if !c.Exact {
			delay = report.Duration(c.DelayMinNS) + " to " + report.Duration(c.DelayMaxNS)
		}
		t.wrap("    ", fmt.Sprintf("%s, host %s: %s %s, %s later", rankLabel(c.Rank, nil), c.Host, c.Symbol,
			strings.TrimPrefix(c.ResultName, "CUDA_ERROR_"), delay))
		if c.Basis != "" {
			t.wrap("      ", c.Basis)
		}
	}
}

// byRank orders runs by their first rank, runs without one last, in the
// order given.
func byRank(runs []report.RunRef) []report.RunRef {
	out := slices.Clone(runs)
	first := func(r report.RunRef) int {
		switch {
		case r.Rank != nil:
			return *r.Rank
		case len(r.Ranks) > 0:
			return slices.Min(r.Ranks)
		}
		return math.MaxInt
	}
	slices.SortStableFunc(out, func(a, b report.RunRef) int { return cmp.Compare(first(a), first(b)) })
	return out
}

// candidates prints failures that could each have been first, with their
// runs' verdicts and what each cannot be ordered against.
func (t *writer) candidates(label string, cs []report.Candidate) {
	for _, c := range cs {
		t.wrap(label, fmt.Sprintf("%s, host %s, %s", rankLabel(c.Rank, nil), c.Host, c.RunPath))
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
}

// unrecovered prints the first unrecovered failure and its evidence; one
// from another run of the job is named, with times from that run's start.
func (t *writer) unrecovered(rep *report.Report, u *report.Judged) {
	start, run := t.start, ""
	if m := rep.MultiRun; m != nil && u.RunPath != rep.Run.Path {
		if r := m.RunOf(u.RunPath); r != nil {
			run = fmt.Sprintf("%s, host %s, %s (another run of the job: times count from its start)", rankLabel(r.Rank, r.Ranks), r.Host, r.Path)
			t.start = r.StartNS
		}
	}
	t.failure("FIRST UNRECOVERED FAILURE", &u.Failure, nil, run)
	t.evidence("EVIDENCE FOR THE UNRECOVERED FAILURE", u.Evidence)
	t.start = start
}

// groupedBy says why the runs were taken for one job.
func groupedBy(m *report.MultiRun) string {
	switch m.GroupedBy {
	case "job-id":
		return " of job " + m.JobID
	case "overlap":
		return ", no job id, recorded at overlapping times"
	}
	return ""
}

func rankLabel(r *int, ranks []int) string {
	switch {
	case r != nil:
		return fmt.Sprintf("rank %d", *r)
	case len(ranks) > 0:
		return report.Ranks(ranks)
	}
	return "no rank"
}

// WriteJobs writes the reports of runs that are several separate jobs:
// first the list of jobs (jobs[i] names the runs of reps[i] and why they
// are one job), then each job's report under a heading of its own. No
// failure of one job is ordered against another's.
func WriteJobs(w io.Writer, jobs []string, reps []*report.Report, o Options) error {
	if o.Width == 0 {
		o.Width = 100
	}
	o.Width = max(o.Width, 60)
	jobs, reps = failingFirst(jobs, reps)
	t := &writer{w: w, o: o}
	runs := 0
	for _, rep := range reps {
		if rep.MultiRun != nil {
			runs += len(rep.MultiRun.Runs)
		} else {
			runs++
		}
	}
	t.wrap("", fmt.Sprintf("forensic analyze: %d runs of %d separate jobs, each analyzed on its own (no failure is ordered against another job's, no rank is missing from another job):",
		runs, len(jobs)))
	for i, j := range jobs {
		t.wrap(fmt.Sprintf("  %d. ", i+1), j)
	}
	t.wrap("  ", "to analyze one job: give only its files")
	for i, rep := range reps {
		if t.err != nil {
			break
		}
		rule := strings.Repeat("=", min(o.Width, 80))
		t.printf("\n%s\n", rule)
		t.wrap("", fmt.Sprintf("JOB %d OF %d: %s", i+1, len(reps), jobs[i]))
		t.printf("%s\n\n", rule)
		t.err = Write(w, rep, o)
	}
	return t.err
}

// failingFirst orders jobs so that those with a failure (an attribution
// other than none) lead, each group in the order given: the first screen
// shows the job that failed, not a good one.
func failingFirst(jobs []string, reps []*report.Report) ([]string, []*report.Report) {
	idx := make([]int, len(reps))
	for i := range idx {
		idx[i] = i
	}
	good := func(i int) bool { return reps[i].Attribution == report.AttrNone }
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case good(a) == good(b):
			return 0
		case good(b):
			return -1
		}
		return 1
	})
	js, rs := make([]string, len(idx)), make([]*report.Report, len(idx))
	for k, i := range idx {
		js[k], rs[k] = jobs[i], reps[i]
	}
	return js, rs
}

func hasHave(n int) string {
	if n == 1 {
		return "has"
	}
	return "have"
}

package analyze

import (
	"fmt"
	"strings"

	"github.com/retrivium/forensic/fleet"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// AnalyzeMany analyzes several runs of one job (one run.db per rank or
// node) as one: each run is analyzed alone, their first failures are
// ordered by the rule of docs/multi-run.md (package fleet), and the report
// is the single-run report of the run whose failure came first, with the
// runs, the order, the candidates that could not be ordered (each with its
// own verdict), the failures that followed, and the ranks with no run.
// Options apply to every run (an Observer sees none of them).
func AnalyzeMany(paths []string, opts Options) (*report.Report, error) {
	opts.Observer = nil
	reps := make([]*report.Report, len(paths))
	for i, p := range paths {
		rep, err := analyzeFile(p, opts)
		if err != nil {
			return nil, err
		}
		reps[i] = rep
	}
	runs := make([]fleet.Run, len(reps))
	for i, rep := range reps {
		runs[i] = fleetRun(rep)
	}
	order := fleet.Order(runs)
	out := pick(reps, order)
	out.MultiRun = multiRun(reps, order)
	explainOrder(out, order)
	return out, nil
}

// analyzeFile analyzes one run; errors name the file (store.Open's do).
func analyzeFile(path string, opts Options) (*report.Report, error) {
	open := opts.Open
	if open == nil {
		open = func(path string) (Source, func() error, error) {
			r, err := store.Open(path)
			if err != nil {
				return nil, nil, err
			}
			return r, r.Close, nil
		}
	}
	r, closeRun, err := open(path)
	if err != nil {
		return nil, err
	}
	defer closeRun()
	rep, err := Analyze(r, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rep, nil
}

// fleetRun is what the ordering needs of one analyzed run.
func fleetRun(rep *report.Report) fleet.Run {
	ri := &rep.Run
	fr := fleet.Run{Path: ri.Path, ID: ri.ID, Host: ri.Host, BootID: ri.BootID, Rank: ri.Rank, WorldSize: ri.WorldSize}
	for _, p := range rep.Processes {
		if j := fleet.ParseJobEnv(p.Env); j.Rank != nil && !containsInt(fr.Ranks, *j.Rank) {
			fr.Ranks = append(fr.Ranks, *j.Rank)
			if fr.WorldSize == nil {
				fr.WorldSize = j.WorldSize
			}
		}
	}
	if fr.Rank == nil && len(fr.Ranks) == 1 {
		fr.Rank, fr.Ranks = &fr.Ranks[0], nil
	}
	fr.Clock = &fleet.Clock{MonotonicNS: ri.StartNS, RealtimeNS: ri.WallStartNS, ErrorNS: ri.ClockErrorNS}
	if f := rep.FirstFailure; f != nil {
		fr.Failure = &fleet.Failure{TimeNS: f.TimeNS, Symbol: f.Symbol, ResultName: f.ResultName, PID: f.PID, TID: f.TID, Rank: f.Rank}
	}
	return fr
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// pick returns the report of the run whose failure came first (the first
// run's when none failed).
func pick(reps []*report.Report, order fleet.Result) *report.Report {
	if order.FirstFailure != nil {
		for _, rep := range reps {
			if rep.Run.Path == order.FirstFailure.RunPath {
				return rep
			}
		}
	}
	return reps[0]
}

// multiRun describes the runs and the order of their failures.
func multiRun(reps []*report.Report, order fleet.Result) *report.MultiRun {
	byPath := map[string]*report.Report{}
	m := &report.MultiRun{Order: order.Order, Candidates: []report.Candidate{}, Consequences: []report.Consequence{},
		WorldSize: order.WorldSize, MissingRanks: order.MissingRanks}
	for i, r := range order.Runs {
		rep := reps[i]
		byPath[r.Path] = rep
		m.Runs = append(m.Runs, report.RunRef{Path: r.Path, RunID: r.ID, Host: r.Host, BootID: r.BootID, Rank: r.Rank,
			Ranks: r.Ranks, Attribution: rep.Attribution, ClockErrorNS: rep.Run.ClockErrorNS,
			WallStartNS: rep.Run.WallStartNS, WallEndNS: rep.Run.WallStartNS + rep.Run.DurationNS})
	}
	if order.Order == fleet.OrderUncertain {
		for _, c := range order.Candidates {
			if c.PossiblyFirst {
				m.Candidates = append(m.Candidates, orderCandidate(c, byPath[c.RunPath]))
			}
		}
	}
	for _, c := range order.Consequences {
		m.Consequences = append(m.Consequences, report.Consequence{RunPath: c.RunPath, Rank: c.Rank, Host: c.Host,
			Symbol: c.Failure.Symbol, ResultName: c.Failure.ResultName, TimeNS: c.Failure.TimeNS,
			DelayMinNS: c.DelayMinNS, DelayMaxNS: c.DelayMaxNS, Exact: c.Exact})
	}
	return m
}

// orderCandidate is a failure that could have been first, with its run's own
// verdict on it.
func orderCandidate(c fleet.Candidate, rep *report.Report) report.Candidate {
	out := report.Candidate{RunPath: c.RunPath, Rank: c.Rank, Host: c.Host, WallNS: c.WallNS, EarliestNS: c.EarliestNS,
		LatestNS: c.LatestNS, Unordered: []report.Unordered{}}
	for _, u := range c.Unordered {
		out.Unordered = append(out.Unordered, report.Unordered{RunPath: u.RunPath, Reason: u.Reason, OverlapNS: u.OverlapNS})
	}
	if rep != nil && rep.FirstFailure != nil {
		out.Judged = &report.Judged{Failure: *rep.FirstFailure, Attribution: rep.Attribution, Capacity: rep.Capacity,
			Verdict: rep.Verdict, Evidence: rep.Evidence, Missing: rep.Missing}
	}
	return out
}

// explainOrder says what the order adds to the chosen run's verdict: which
// run and rank failed first, what followed, and what could hide an
// earlier failure (runs whose failures cannot be ordered, ranks with no
// run), which makes the first failure unestablished.
func explainOrder(rep *report.Report, order fleet.Result) {
	var lead []string
	lead = append(lead, fmt.Sprintf("Across %s:", report.Plural(len(order.Runs), "run")))
	if f := order.FirstFailure; f != nil {
		where := fmt.Sprintf("%s (host %s)", rankName(f.Rank), f.Host)
		switch order.Order {
		case fleet.OrderCertain:
			lead = append(lead, fmt.Sprintf("the first failure is %s's, in %s.", where, f.RunPath))
		default:
			lead = append(lead, fmt.Sprintf("the earliest estimate is %s's, in %s, but it cannot be ordered against %s.",
				where, f.RunPath, report.Plural(len(f.Unordered), "other run")))
		}
		if n := len(order.Consequences); n > 0 {
			lead = append(lead, fmt.Sprintf("%s in other runs came after it (likely consequences).", report.Plural(n, "failure")))
		}
	} else {
		lead = append(lead, "no run recorded a failed call.")
	}
	var hidden []report.Missing
	if order.Order == fleet.OrderUncertain {
		hidden = append(hidden, report.Missing{Decisive: true,
			What: "the runs' failures cannot be ordered: " + unorderedText(order.FirstFailure),
			Fix:  "run a time daemon (chrony or linuxptp) on every host so each run records a bound on its clock's error"})
	}
	if len(order.MissingRanks) > 0 {
		hidden = append(hidden, report.Missing{Decisive: true,
			What: fmt.Sprintf("no run was given for %s of the job's %d: the rank that failed first is often the one whose file is missing (its node crashed or rebooted, it was not recorded, or its run.db was not gathered)",
				ranksText(order.MissingRanks), *order.WorldSize),
			Fix: "record every rank (forensic record --all on each node) and gather every run.db, including those of nodes that crashed"})
	}
	// fleet's other notes (duplicate ranks, disagreeing world sizes, runs
	// without a clock bound) are evidence gaps that decide nothing alone;
	// its notes on missing ranks and an uncertain order are the two above.
	for _, n := range order.Notes {
		if !strings.Contains(n, "ranks have no run") && !strings.HasPrefix(n, "the first failure is uncertain") {
			rep.Missing = append(rep.Missing, report.Missing{What: n, Fix: "see docs/multi-run.md"})
		}
	}
	rep.Missing = append(rep.Missing, hidden...)
	if len(hidden) > 0 {
		rep.Attribution = report.AttrMissingEvidence
	}
	verdict := strings.Join(lead, " ") + " " + rep.Verdict
	if len(hidden) > 0 {
		verdict += " The record cannot establish it as the first failure of the job: " + whats(hidden) + "."
	}
	rep.Verdict = verdict
}

func rankName(r *int) string {
	if r == nil {
		return "a run with no rank"
	}
	return fmt.Sprintf("rank %d", *r)
}

func ranksText(ranks []int) string {
	parts := make([]string, len(ranks))
	for i, r := range ranks {
		parts[i] = fmt.Sprint(r)
	}
	if len(ranks) == 1 {
		return "rank " + parts[0]
	}
	return "ranks " + strings.Join(parts, ", ")
}

// unorderedText says which runs a failure cannot be ordered against.
func unorderedText(f *fleet.Candidate) string {
	if f == nil {
		return "no failure"
	}
	var parts []string
	for _, u := range f.Unordered {
		switch u.Reason {
		case fleet.ReasonOverlap:
			parts = append(parts, fmt.Sprintf("%s (clock intervals overlap by %s)", u.RunPath, report.Duration(*u.OverlapNS)))
		case fleet.ReasonNoBound:
			parts = append(parts, u.RunPath+" (a clock with no error bound)")
		default:
			parts = append(parts, u.RunPath+" (the same instant)")
		}
	}
	return fmt.Sprintf("%s's failure against %s", f.RunPath, strings.Join(parts, ", "))
}

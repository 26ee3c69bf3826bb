package html

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/retrivium/forensic/report"
)

// runsView is the Runs section: the order of the runs' first failures,
// which run the rest of the page is, the picture, and the tables of the
// runs, of the failures that could have been first and of those that
// followed the first.
type runsView struct {
	Heading                      string
	Order, OrderClass, OrderText string
	Chosen                       string
	Picture                      *runsPicture
	Notes                        []string
	Runs                         []runRow
	Missing                      string
	Candidates                   []candidateRow
	Consequences                 []consequenceRow
}

// runRow is one run in the table.
type runRow struct {
	Rank, Host, Boot, BootFull string
	Path, RunID                string
	Recorded, RecordedFull     string
	Duration                   string
	Bound, BoundClass          string
	Attribution, AttrClass     string
	Failure                    string
	Chosen                     bool
}

// candidateRow is a failure that could have been first, with its run's
// own verdict on it.
type candidateRow struct {
	Rank, Host, Path  string
	Symbol, Result    string
	Wall, WallFull    string
	Interval, Between string
	Unordered         []string
	Judgement         *judgement
	Chosen            bool
}

// consequenceRow is a failure certainly after the first.
type consequenceRow struct {
	Rank, Host, Path string
	Call, Delay, How string
	// Basis says what ties it to the first failure (or that nothing does).
	Basis string
}

// newRuns prepares the Runs section; nil for a report on one run.
func newRuns(rep *report.Report) *runsView {
	m := rep.MultiRun
	if m == nil {
		return nil
	}
	places := placeFailures(rep)
	v := &runsView{Heading: report.Plural(len(m.Runs), "run") + " of one job", Order: m.Order, Chosen: chosenText(rep)}
	v.OrderClass, v.OrderText = orderText(m.Order)
	v.Runs = runRows(rep, places)
	if len(m.MissingRanks) > 0 && m.WorldSize != nil {
		verb := "have"
		if len(m.MissingRanks) == 1 {
			verb = "has"
		}
		v.Missing = fmt.Sprintf("%s of the job's %d %s no run: the rank that failed first is often the one whose file is missing (its node crashed or rebooted, it was not recorded, or its run.db was not gathered).",
			rankRanges(m.MissingRanks), *m.WorldSize, verb)
	}
	withFirst := unorderedWith(rep)
	for _, c := range m.Candidates {
		r := newCandidateRow(c, rep.Run.Path)
		// The analysis lists what the first cannot be ordered against;
		// the same holds the other way.
		if why := withFirst[c.RunPath]; why != "" && len(r.Unordered) == 0 {
			r.Unordered = []string{rep.Run.Path + " (the earliest estimate): " + why}
		}
		v.Candidates = append(v.Candidates, r)
	}
	for _, c := range m.Consequences {
		v.Consequences = append(v.Consequences, consequenceRow{Rank: rankText(c.Rank, nil), Host: orDash(c.Host), Path: c.RunPath,
			Call: c.Symbol + " → " + c.ResultName, Delay: delayText(c.DelayMinNS, c.DelayMaxNS, c.Exact) + " later",
			How: howText(c.Exact), Basis: c.Basis})
	}
	v.Picture, v.Notes = newRunsPicture(rep, places)
	return v
}

// orderText says what the order of the runs' first failures means.
func orderText(order string) (class, text string) {
	switch order {
	case "certain":
		return "b-none", "One failure came first, whatever the error of the runs' clocks."
	case "uncertain":
		return "b-missing", "More than one failure could have come first: the runs' clocks cannot order them. " +
			"Each is listed below with its own verdict."
	case "none":
		return "b-none", "No run recorded a failed call."
	}
	return "b-missing", "The order of the runs' failures is " + order + "."
}

// chosenText says which run the rest of the page is, and why.
func chosenText(rep *report.Report) string {
	who := "the run"
	for _, r := range rep.MultiRun.Runs {
		if r.Path == rep.Run.Path {
			who = fmt.Sprintf("%s's run (host %s)", rankText(r.Rank, r.Ranks), orDash(r.Host))
		}
	}
	why := "whose failure came first"
	switch {
	case rep.MultiRun.Order == "uncertain":
		why = "whose failure has the earliest estimate of those that could have come first"
	case rep.FirstFailure == nil:
		why = "the first given: no run failed"
	}
	return fmt.Sprintf("The sections below are %s, %s, %s.", who, rep.Run.Path, why)
}

// runRows are the runs table's rows: the run whose failure the page shows
// first, as the text report's list leads with it, then the others in
// numeric rank order (runs with no rank last).
func runRows(rep *report.Report, places map[string]failurePlace) []runRow {
	unordered := unorderedWith(rep)
	var out []runRow
	for _, r := range leadingRuns(rep) {
		row := runRow{Rank: rankText(r.Rank, r.Ranks), Host: orDash(r.Host), Boot: clip(r.BootID, 9), BootFull: r.BootID,
			Path: r.Path, RunID: r.RunID, Recorded: "—", Duration: "—", Bound: "no bound", BoundClass: "warn",
			Attribution: string(r.Attribution), AttrClass: "b-" + attrClass(r.Attribution), Chosen: r.Path == rep.Run.Path}
		if r.BootID == "" {
			row.Boot = "—"
		}
		if r.WallStartNS != 0 {
			row.Recorded, row.RecordedFull = wallText(r.WallStartNS, wallShort), wallText(r.WallStartNS, wallLong)
			row.Duration = report.Duration(r.WallEndNS - r.WallStartNS)
		}
		if e := r.ClockErrorNS; e != nil && *e >= 0 {
			row.Bound, row.BoundClass = "±"+report.Duration(*e), "ok"
		}
		row.Failure = roleText(rep, r.Path, places, unordered)
		out = append(out, row)
	}
	return out
}

// leadingRuns orders the runs for the table: the page's run first when
// it failed, then by rank.
func leadingRuns(rep *report.Report) []report.RunRef {
	runs := slices.Clone(rep.MultiRun.Runs)
	leads := func(r *report.RunRef) bool { return rep.FirstFailure != nil && r.Path == rep.Run.Path }
	slices.SortStableFunc(runs, func(a, b report.RunRef) int {
		if la, lb := leads(&a), leads(&b); la != lb {
			if la {
				return -1
			}
			return 1
		}
		return cmp.Compare(sortKey(&a), sortKey(&b))
	})
	return runs
}

// roleText says what part a run's first failure plays among the job's.
func roleText(rep *report.Report, path string, places map[string]failurePlace, unordered map[string]string) string {
	p, placed := places[path]
	switch {
	case path == rep.Run.Path && rep.FirstFailure != nil:
		call := shortCall(rep.FirstFailure.Symbol, rep.FirstFailure.ResultName)
		if rep.MultiRun.Order == "uncertain" {
			return "earliest estimate of those that could have come first: " + call
		}
		return "first: " + call
	case placed && p.Role == roleCandidate:
		return "could have come first: " + shortCall(p.Symbol, p.Result)
	case placed && p.Role == roleUnrecovered:
		return "first unrecovered (the first was recovered): " + shortCall(p.Symbol, p.Result)
	case placed && p.Role == roleUnrecoveredCandidate:
		return "could have been the first unrecovered: " + shortCall(p.Symbol, p.Result)
	case placed && p.Role == roleConsequence:
		return shortCall(p.Symbol, p.Result) + ", " + delayText(p.DelayMin, p.DelayMax, p.Exact) + " after " + p.After
	case unordered[path] != "":
		return "failed, but cannot be ordered against the first: " + unordered[path]
	}
	if r := rep.MultiRun.RunOf(path); r != nil && r.Failed {
		return "failed, but not placed after the failure that matters (recovered, or not ordered against it): see its own analysis"
	}
	return "no failed call"
}

// shortCall is a call and its result without the CUDA_ERROR_ prefix.
func shortCall(symbol, result string) string {
	if symbol == "" {
		return strings.TrimPrefix(result, "CUDA_ERROR_")
	}
	return symbol + " " + strings.TrimPrefix(result, "CUDA_ERROR_")
}

// delayText is a consequence's delay after the first failure: exact, or
// the range the clocks' errors leave.
func delayText(lo, hi int64, exact bool) string {
	if exact || lo == hi {
		return report.Duration(lo)
	}
	return report.Duration(lo) + " to " + report.Duration(hi)
}

// howText says how a delay was measured.
func howText(exact bool) string {
	if exact {
		return "exact: one boot, one clock"
	}
	return "a range: the wall clocks' error bounds"
}

func newCandidateRow(c report.Candidate, chosen string) candidateRow {
	r := candidateRow{Rank: rankText(c.Rank, nil), Host: orDash(c.Host), Path: c.RunPath, Symbol: "—", Wall: "—",
		Interval: "no clock error bound", Chosen: c.RunPath == chosen}
	if c.WallNS != nil {
		r.Wall, r.WallFull = wallText(*c.WallNS, wallShort), wallText(*c.WallNS, wallLong)
	}
	if c.EarliestNS != nil && c.LatestNS != nil {
		r.Interval = "±" + report.Duration((*c.LatestNS-*c.EarliestNS)/2)
		r.Between = wallText(*c.EarliestNS, wallShort) + " to " + wallText(*c.LatestNS, wallShort)
	}
	for _, u := range c.Unordered {
		r.Unordered = append(r.Unordered, u.RunPath+": "+reasonText(u))
	}
	if j := c.Judged; j != nil {
		r.Symbol, r.Result = j.Symbol, j.ResultName
		jv := newJudgement("Its own verdict", j.Attribution, j.Capacity, j.Verdict)
		r.Judgement = &jv
	}
	return r
}

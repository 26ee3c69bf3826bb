package html

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/retrivium/forensic/report"
)

// The Runs section: what an analysis of several runs of one job adds to
// the chosen run's report. The runs are drawn on one wall-clock axis (see
// runsvg.go), then listed with the failures that could have been first
// (each with its own verdict) and the failures that followed the first.

// Roles of a run's first failure among the job's.
const (
	roleFirst       = "first"
	roleCandidate   = "candidate"
	roleConsequence = "consequence"
	// roleUnrecovered: the first failure no process recovered from, in
	// another run than the first failure's (which was recovered);
	// roleUnrecoveredCandidate: one that could have been it.
	roleUnrecovered          = "unrecovered"
	roleUnrecoveredCandidate = "unrecovered-candidate"
)

// failurePlace is where a run's first failure lies on the wall clock
// (Unix ns), and what part it plays among the job's failures.
type failurePlace struct {
	Role           string
	Symbol, Result string
	WallNS         int64
	// Lo and Hi bound the failure's true time when Bounded (the run's
	// clock error bound is known).
	Lo, Hi  int64
	Bounded bool
	// Exact: ordered against the first failure on one clock (one boot),
	// with DelayMin == DelayMax; a consequence's delay otherwise lies in
	// DelayMin..DelayMax.
	Exact              bool
	DelayMin, DelayMax int64
	// After names the failure a consequence is placed after: "the first"
	// or, when the first was recovered, "the first unrecovered".
	After string
}

// placeFailures places the first failure of every run the report can
// place, by run path: the first failure from its run's clock mapping, a
// candidate from its own estimate, and a consequence from its delay after
// the first. A run missing from the map failed nowhere the report can
// place (or did not fail).
func placeFailures(rep *report.Report) map[string]failurePlace {
	out := map[string]failurePlace{}
	m, f := rep.MultiRun, rep.FirstFailure
	if m == nil || f == nil || m.Order == "none" {
		return out
	}
	first, ok := placeFirst(rep)
	if ok {
		out[rep.Run.Path] = first
	}
	placeCandidates(out, m.Candidates, roleCandidate, rep.Run.Path)
	placeCandidates(out, m.UnrecoveredCandidates, roleUnrecoveredCandidate, rep.Run.Path)
	anchor, ok := placeAnchor(rep, first, ok)
	if !ok {
		return out // consequences are placed after the failure that matters
	}
	if anchor.Role == roleUnrecovered && rep.FirstUnrecovered.RunPath != rep.Run.Path {
		out[rep.FirstUnrecovered.RunPath] = anchor
	}
	for _, c := range m.Consequences {
		p := placeConsequence(anchor, c, runBound(m, c.RunPath))
		p.After = "the first"
		if anchor.Role == roleUnrecovered {
			p.After = "the first unrecovered"
		}
		out[c.RunPath] = p
	}
	return out
}

// placeAnchor places the failure later failures are placed after: the
// first, or, when the first was recovered, the first unrecovered one
// (from its run's clock mapping, in whichever run).
func placeAnchor(rep *report.Report, first failurePlace, firstOK bool) (failurePlace, bool) {
	u, m := rep.FirstUnrecovered, rep.MultiRun
	if m.UnrecoveredOrder == "" || u == nil {
		return first, firstOK
	}
	r := m.RunOf(u.RunPath)
	if r == nil || r.WallStartNS == 0 {
		return failurePlace{}, false
	}
	p := failurePlace{Role: roleUnrecovered, Symbol: u.Symbol, Result: u.ResultName, WallNS: r.WallStartNS + (u.TimeNS - r.StartNS)}
	if e := r.ClockErrorNS; e != nil && *e >= 0 {
		p.Lo, p.Hi, p.Bounded = p.WallNS-*e, p.WallNS+*e, true
	}
	return p, true
}

// placeFirst places the first failure: from its candidate entry when the
// order is uncertain, else from its run's clock mapping.
func placeFirst(rep *report.Report) (failurePlace, bool) {
	f := rep.FirstFailure
	p := failurePlace{Role: roleFirst, Symbol: f.Symbol, Result: f.ResultName}
	for _, c := range rep.Candidates {
		if c.RunPath != rep.Run.Path || c.WallNS == nil {
			continue
		}
		p.WallNS = *c.WallNS
		if c.EarliestNS != nil && c.LatestNS != nil {
			p.Lo, p.Hi, p.Bounded = *c.EarliestNS, *c.LatestNS, true
		}
		return p, true
	}
	if rep.Run.WallStartNS == 0 {
		return p, false // the run recorded no wall time
	}
	p.WallNS = rep.Run.WallStartNS + (f.TimeNS - rep.Run.StartNS)
	if e := rep.Run.ClockErrorNS; e != nil && *e >= 0 {
		p.Lo, p.Hi, p.Bounded = p.WallNS-*e, p.WallNS+*e, true
	}
	return p, true
}

// placeConsequence places a failure that followed the first: exactly
// DelayMin after it on one clock, else in the middle of the interval its
// delay range implies (earliest − latest_first .. latest − earliest_first),
// whose half-width is its own clock error.
func placeConsequence(first failurePlace, c report.Consequence, bound *int64) failurePlace {
	p := failurePlace{Role: roleConsequence, Symbol: c.Symbol, Result: c.ResultName, Exact: c.Exact,
		DelayMin: c.DelayMinNS, DelayMax: c.DelayMaxNS}
	if c.Exact || !first.Bounded {
		p.WallNS = first.WallNS + c.DelayMinNS
		if bound != nil && *bound >= 0 {
			p.Lo, p.Hi, p.Bounded = p.WallNS-*bound, p.WallNS+*bound, true
		}
		return p
	}
	firstErr := (first.Hi - first.Lo) / 2
	p.WallNS = first.WallNS + (c.DelayMinNS+c.DelayMaxNS)/2
	e := max((c.DelayMaxNS-c.DelayMinNS)/2-firstErr, 0)
	p.Lo, p.Hi, p.Bounded = p.WallNS-e, p.WallNS+e, true
	return p
}

// runBound is the clock error bound of the run at path, nil when unknown.
func runBound(m *report.MultiRun, path string) *int64 {
	for _, r := range m.Runs {
		if r.Path == path {
			return r.ClockErrorNS
		}
	}
	return nil
}

// unorderedWith says, by run path, why each failure the first cannot be
// ordered against could not be.
func unorderedWith(rep *report.Report) map[string]string {
	out := map[string]string{}
	for _, c := range rep.Candidates {
		if c.RunPath != rep.Run.Path {
			continue
		}
		for _, u := range c.Unordered {
			out[u.RunPath] = reasonText(u)
		}
	}
	return out
}

// reasonText says why two failures cannot be ordered.
func reasonText(u report.Unordered) string {
	switch u.Reason {
	case "overlap":
		if u.OverlapNS != nil {
			return "their clock intervals overlap by " + report.Duration(*u.OverlapNS)
		}
		return "their clock intervals overlap"
	case "no-clock-bound":
		return "a clock with no error bound"
	case "same-time":
		return "the same instant on one clock"
	}
	return u.Reason
}

// rankText names a run's rank or ranks.
func rankText(r *int, ranks []int) string {
	switch {
	case r != nil:
		return fmt.Sprintf("rank %d", *r)
	case len(ranks) == 1:
		return fmt.Sprintf("rank %d", ranks[0])
	case len(ranks) > 1:
		parts := make([]string, len(ranks))
		for i, k := range ranks {
			parts[i] = fmt.Sprint(k)
		}
		return "ranks " + strings.Join(parts, ", ")
	}
	return "no rank"
}

// rankRanges writes ranks as ranges of consecutive ones ("rank 3",
// "ranks 4–7, 9").
func rankRanges(ranks []int) string {
	rs := groupRanks(ranks)
	parts := make([]string, len(rs))
	n := 0
	for i, g := range rs {
		parts[i] = fmt.Sprint(g[0])
		if g[1] > g[0] {
			parts[i] += fmt.Sprintf("–%d", g[1])
		}
		n += g[1] - g[0] + 1
	}
	if n == 1 {
		return "rank " + parts[0]
	}
	return "ranks " + strings.Join(parts, ", ")
}

// groupRanks sorts ranks into ranges of consecutive ones, [first, last].
func groupRanks(ranks []int) [][2]int {
	s := append([]int(nil), ranks...)
	sort.Ints(s)
	var out [][2]int
	for _, r := range s {
		if n := len(out); n > 0 && r <= out[n-1][1]+1 {
			out[n-1][1] = max(out[n-1][1], r)
			continue
		}
		out = append(out, [2]int{r, r})
	}
	return out
}

// sortKey orders runs by rank (their lowest, for several), runs with no
// rank last.
func sortKey(r *report.RunRef) int {
	switch {
	case r.Rank != nil:
		return *r.Rank
	case len(r.Ranks) > 0:
		return minInt(r.Ranks)
	}
	return int(^uint(0) >> 1)
}

func minInt(s []int) int {
	m := s[0]
	for _, v := range s[1:] {
		m = min(m, v)
	}
	return m
}

// clipLeft shortens s to n runes keeping its end (a path's file name).
func clipLeft(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return "…" + string(r[len(r)-n+1:])
}

// shortPath is a run's path as a row label: its last two elements.
func shortPath(p string) string {
	dir, file := filepath.Split(p)
	if d := filepath.Base(filepath.Clean(dir)); dir != "" && d != "." && d != "/" {
		return d + "/" + file
	}
	return file
}

// placeCandidates places the candidates' failures in their role, on their
// wall-clock time with its bounds, but for the run the report is about
// (self), which placeFirst placed.
func placeCandidates(out map[string]failurePlace, cands []report.Candidate, role, self string) {
	for _, c := range cands {
		if c.RunPath == self || c.WallNS == nil {
			continue
		}
		p := failurePlace{Role: role, WallNS: *c.WallNS}
		if c.Judged != nil {
			p.Symbol, p.Result = c.Judged.Symbol, c.Judged.ResultName
		}
		if c.EarliestNS != nil && c.LatestNS != nil {
			p.Lo, p.Hi, p.Bounded = *c.EarliestNS, *c.LatestNS, true
		}
		out[c.RunPath] = p
	}
}

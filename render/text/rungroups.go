package text

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/retrivium/forensic/report"
)

// runGroup is runs of one job that agree: the same attribution, and the
// same tie of their failure to the first (or none).
type runGroup struct {
	key      string
	first    bool // the run whose failure came first
	ranks    []int
	unranked int
	hosts    map[string]bool
	path     string // the first run's file
	basis    string // what ties its failure to the first, in words (one run's)
	runs     int
	delayMin int64
	delayMax int64
	later    bool // the group's failures came after the first
}

// runGroups prints the runs of a job as one line per group of runs that
// agree: "ranks 0–76, 78–127: allocation, cuMemAlloc_v2 OUT_OF_MEMORY,
// 900 ms–1 s after the first failure, for reasons of their own". The run that failed first
// leads, with its file; --explain lists every run.
func (t *writer) runGroups(rep *report.Report) {
	m := rep.MultiRun
	after := map[string]*report.Consequence{}
	for i := range m.Consequences {
		after[m.Consequences[i].RunPath] = &m.Consequences[i]
	}
	groups := map[string]*runGroup{}
	var order []*runGroup
	for _, r := range m.Runs {
		g := groupKey(rep, r, after[r.Path])
		if groups[g.key] == nil {
			groups[g.key], order = g, append(order, g)
		}
		groups[g.key].add(r, after[r.Path])
	}
	slices.SortStableFunc(order, func(a, b *runGroup) int {
		if a.first != b.first {
			if a.first {
				return -1
			}
			return 1
		}
		return cmp.Compare(len(b.ranks)+b.unranked, len(a.ranks)+a.unranked)
	})
	anchor := "the first failure"
	if m.UnrecoveredOrder != "" {
		anchor = "the first unrecovered failure"
	}
	for _, g := range order {
		t.wrap("  ", g.text(anchor))
		switch {
		case g.first:
			t.wrap("    ", g.path)
		case g.runs == 1 && g.basis != "":
			t.wrap("    ", g.basis) // one run: its own words, as --explain would
		}
	}
	if len(order) < len(m.Runs) {
		t.wrap("  ", "(--explain lists every run, and what ties each failure to the first)")
	}
}

// groupKey is the group a run belongs to.
func groupKey(rep *report.Report, r report.RunRef, c *report.Consequence) *runGroup {
	g := &runGroup{hosts: map[string]bool{}}
	switch {
	case r.Path == rep.Run.Path && rep.FirstFailure != nil:
		g.first = true
		g.key = string(r.Attribution) + ", failed first"
	case c != nil:
		g.later = true
		g.key = fmt.Sprintf("%s, %s %s", r.Attribution, c.Symbol, strings.TrimPrefix(c.ResultName, "CUDA_ERROR_")) + "\x00" + c.Relation
	case r.Failed:
		g.key = string(r.Attribution) + ", failed (not ordered after the first)"
	default:
		g.key = string(r.Attribution) + ", no failure"
	}
	return g
}

// add counts one run into the group.
func (g *runGroup) add(r report.RunRef, c *report.Consequence) {
	switch {
	case r.Rank != nil:
		g.ranks = append(g.ranks, *r.Rank)
	case len(r.Ranks) > 0:
		g.ranks = append(g.ranks, r.Ranks...)
	default:
		g.unranked++
	}
	g.hosts[r.Host] = true
	g.runs++
	if g.path == "" {
		g.path = r.Path
	}
	if c != nil {
		g.basis = c.Basis
		if g.delayMax == 0 || c.DelayMinNS < g.delayMin {
			g.delayMin = c.DelayMinNS
		}
		g.delayMax = max(g.delayMax, c.DelayMaxNS)
	}
}

// relationWords say what ties a group's failures to the first.
var relationWords = map[string]string{
	report.RelationSameGPU:     "on the first failure's GPU: likely consequences",
	report.RelationSameJob:     "on other GPUs: possibly consequences, through the job",
	report.RelationIndependent: "for reasons of their own",
}

// text is the group's line.
func (g *runGroup) text(anchor string) string {
	var who []string
	if len(g.ranks) > 0 {
		who = append(who, report.RankRangesAtMost(g.ranks, 10))
	}
	if g.unranked > 0 {
		who = append(who, report.Plural(g.unranked, "run")+" without a rank")
	}
	what, relation, _ := strings.Cut(g.key, "\x00")
	s := strings.Join(who, ", ") + ": " + what
	if g.later {
		delay := report.Duration(g.delayMin)
		if g.delayMax != g.delayMin {
			delay += "–" + report.Duration(g.delayMax)
		}
		s += fmt.Sprintf(", %s after %s, %s", delay, anchor, relationWords[relation])
	}
	if n := len(g.hosts); n > 1 {
		s += fmt.Sprintf(" (%d hosts)", n)
	} else {
		for h := range g.hosts {
			s += " (host " + h + ")"
		}
	}
	return s
}

package rundiff

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/retrivium/forensic/analyze"
	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
)

// minBytes is the smallest memory difference reported: below it, two runs
// of one job differ by noise (a sample's timing, an allocator's rounding).
const minBytes = 1 << 20

// cand is one difference found against one good run, with the key that
// finds the same difference against the other good runs.
type cand struct {
	key string
	d   report.Difference
}

// Compare compares the failing run bad with the good runs and ranks the
// differences: what no good run has first, then those in the memory view
// the failure is judged against, then causes before measures, then by
// bytes, then by kind. It reads again the windows of calls where aligned
// processes' summaries differ, and the stacks of the departing calls
// through bad.Stacks when set.
func Compare(good []*Run, bad *Run) (*report.Diff, error) {
	d := &report.Diff{Schema: report.DiffSchema, Bad: diffRun(bad.Report), Chosen: "last",
		Explains: explainedView(bad.Report), Differences: []report.Difference{}, Processes: []report.ProcessPair{},
		Notes: []string{}}
	pairs := make([][]pair, len(good))
	for i, g := range good {
		pairs[i] = align(processes(bad.Report), processes(g.Report))
	}
	rd, err := readCalls(good, bad, pairs)
	if err != nil {
		return nil, err
	}
	merged := map[string]*report.Difference{}
	var order []string
	for i, g := range good {
		d.Good = append(d.Good, diffRun(g.Report))
		if i == 0 {
			d.Processes = processPairs(pairs[i])
		}
		for _, c := range against(bad, g, pairs[i], d, rd.of(i)) {
			m, ok := merged[c.key]
			switch {
			case !ok:
				c.d.GoodRuns = 1
				merged[c.key] = &c.d
				order = append(order, c.key)
			case c.d.Bytes < m.Bytes:
				// The good run closest to the failing one says how much
				// the difference is at least.
				c.d.GoodRuns = m.GoodRuns + 1
				*m = c.d
			default:
				m.GoodRuns++
			}
		}
	}
	for _, k := range order {
		m := merged[k]
		m.Unique = m.GoodRuns == len(good)
		if !m.Unique {
			m.Summary += fmt.Sprintf(" (%d of %d good runs had the same)", len(good)-m.GoodRuns, len(good))
		}
		d.Differences = append(d.Differences, *m)
	}
	rank(d.Differences, d.Explains)
	addStacks(d.Differences, bad)
	d.Notes = dedupe(d.Notes)
	d.Headline = headline(d.Differences, len(good))
	return d, nil
}

// against lists the differences of the failing run from one good run.
func against(bad, good *Run, pairs []pair, d *report.Diff, rd pairCalls) []cand {
	var out []cand
	out = append(out, processDiffs(bad, good, pairs, d, rd)...)
	out = append(out, viewDiffs(bad.Report, good.Report)...)
	out = append(out, phaseDiffs(bad.Report, good.Report, d)...)
	out = append(out, platformDiffs(bad.Platform, good.Platform)...)
	return out
}

// explainedView is the view the failing run's first failure is judged
// against.
func explainedView(rep *report.Report) string {
	if rep.Capacity == nil {
		return ""
	}
	switch *rep.Capacity {
	case report.CapFBExhausted, report.CapFBHadRoom:
		return "framebuffer"
	case report.CapBAR1Exhausted, report.CapBAR1HadRoom:
		return "bar1"
	}
	return ""
}

// diffRun summarizes a compared run.
func diffRun(rep *report.Report) report.DiffRun {
	r := report.DiffRun{Path: rep.Run.Path, ID: rep.Run.ID, Attribution: rep.Attribution, Capacity: rep.Capacity,
		Verdict: rep.Verdict, DurationNS: rep.Run.DurationNS}
	if f := rep.FirstFailure; f != nil {
		r.FirstFailure = &report.DiffCall{Symbol: f.Symbol, Size: f.Size, Result: f.ResultName, PID: f.PID,
			TimeNS: f.TimeNS, Index: -1, Phase: f.Phase}
	}
	return r
}

// processPairs is the alignment as the diff lists it.
func processPairs(pairs []pair) []report.ProcessPair {
	out := make([]report.ProcessPair, 0, len(pairs))
	for _, p := range pairs {
		pp := report.ProcessPair{By: p.by}
		if p.bad != nil {
			b := p.bad.info
			pp.Failing = &b
		}
		if p.good != nil {
			g := p.good.info
			pp.Good = &g
		}
		out = append(out, pp)
	}
	return out
}

// processDiffs are the processes one side has alone, and the first
// departure of each aligned pair's calls.
func processDiffs(bad, good *Run, pairs []pair, d *report.Diff, rd pairCalls) []cand {
	var out []cand
	for _, p := range pairs {
		switch {
		case p.good == nil:
			out = append(out, extraProcess(p.bad))
		case p.bad == nil:
			info := p.good.info
			out = append(out, cand{key: "missing-process\x00" + p.good.role(), d: report.Difference{Kind: report.DiffMissingProcess,
				Summary: fmt.Sprintf("the good run had %s, which the failing run lacks", procText(&info)), Process: &info, Exact: true}})
		case p.bad.recorded:
			out = append(out, sequenceDiffs(bad, good, p, d, rd)...)
		}
	}
	return out
}

// extraProcess is a process the failing run has and the good run lacks.
func extraProcess(p *proc) cand {
	info := p.info
	dd := report.Difference{Kind: report.DiffExtraProcess, Process: &info, Exact: false}
	mem := "no memory NVML attributed to it"
	if info.NVMLPeak != nil {
		dd.Bytes, dd.View = *info.NVMLPeak, "framebuffer"
		mem = report.HumanBytes(*info.NVMLPeak) + " of framebuffer at most (NVML)"
	}
	dd.Summary = fmt.Sprintf("%s, not in the good run, held %s", procText(&info), mem)
	return cand{key: fmt.Sprintf("extra-process\x00%d", info.PID), d: dd}
}

// procText names a process: its command line, or that the recording did
// not follow it.
func procText(p *report.DiffProcess) string {
	if !p.Recorded {
		return fmt.Sprintf("process %d (not recorded: NVML listed it; its command line is not in the recording)", p.PID)
	}
	return fmt.Sprintf("process %d (%s)", p.PID, shortCommand(p.Command, 50))
}

// shortCommand is a command line for a sentence: the program's base name
// and its first arguments, within n characters.
func shortCommand(cmd string, n int) string {
	prog, rest, _ := strings.Cut(cmd, " ")
	if i := strings.LastIndexByte(prog, '/'); i >= 0 {
		prog = prog[i+1:]
	}
	return clip(strings.TrimSpace(prog+" "+rest), n)
}

// clip shortens s to n characters.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-3]) + "..."
}

// sequenceDiffs are the first departure of an aligned pair's calls, and
// the first call made from another call site when that came before it.
func sequenceDiffs(bad, good *Run, p pair, d *report.Diff, rd pairCalls) []cand {
	pb, pg := p.bad.info.PID, p.good.info.PID
	cb, cg, pl := rd.bad[pb], rd.good[pg], rd.plans[pidPair{pb, pg}]
	var out []cand
	end := max(cb.Len(), cg.Len())
	if !pl.same {
		if dep, ok := depart(cb, cg, pl.from, bad.Symbols, good.Symbols); ok {
			out = append(out, departureCand(bad, good, p, dep, cb, cg))
			end = max(dep.bad, dep.good)
		}
	}
	if k, ok := otherSite(cb, cg, sites{bad.Sites, good.Sites}, end); ok {
		c := departureCand(bad, good, p, departure{report.DepartOtherSite, k, k}, cb, cg)
		c.d.Summary += "; the calls that follow are compared as the same steps"
		out = append(out, c)
	} else if pl.sitesCut {
		d.Notes = append(d.Notes, fmt.Sprintf("process %d: call sites were compared in the first %d blocks of %d calls where they differ from the good run's, not in the later ones",
			pb, maxSiteBlocks, blockLen))
	}
	return out
}

// departureCand describes one departure of an aligned pair's calls.
func departureCand(bad, good *Run, p pair, dep departure, cb, cg *Sequence) cand {
	info := p.bad.info
	dd := report.Difference{Kind: report.DiffCallSequence, Departure: dep.kind, Process: &info, Exact: true}
	if dep.bad >= 0 {
		dd.Call = callOf(bad, p.bad.info.PID, dep.bad, cb.At(dep.bad))
		dd.Phase, dd.View = dd.Call.Phase, callView(dd.Call.Symbol)
	}
	if dep.good >= 0 {
		dd.GoodCall = callOf(good, p.good.info.PID, dep.good, cg.At(dep.good))
		if dd.Phase == "" {
			dd.Phase, dd.View = dd.GoodCall.Phase, callView(dd.GoodCall.Symbol)
		}
		if dep.kind == report.DepartOtherSite && good.Stacks != nil {
			dd.GoodCall.Stack = good.Stacks([]analyze.CallRef{{PID: dd.GoodCall.PID, EndNS: dd.GoodCall.TimeNS}})[0]
		}
	}
	dd.Bytes = departedBytes(dep.kind, dd.Call, dd.GoodCall)
	dd.Summary = departureText(&dd)
	key := fmt.Sprintf("call-sequence\x00%d\x00%s\x00%d\x00%d", info.PID, dep.kind, dep.bad, dep.good)
	return cand{key: key, d: dd}
}

// callOf describes the i-th kept call of process pid in run r.
func callOf(r *Run, pid uint32, i int, c Call) *report.DiffCall {
	dc := &report.DiffCall{Symbol: r.Symbols[c.Symbol], Result: "CUDA_SUCCESS", PID: pid, TimeNS: c.EndNS,
		Index: i, Phase: phaseAt(r.Report.Phases, c.EndNS, firstEnd(r.Report))}
	if c.HasSize {
		s := c.Size
		dc.Size = &s
	}
	if c.Failed {
		dc.Result = "failed"
	}
	return dc
}

// callView is the memory view a call's symbol takes from: device
// allocations the framebuffer; mappings may use BAR1 or not ("").
func callView(symbol string) string {
	sym, _, ok := cuda.Lookup(symbol)
	if !ok {
		return ""
	}
	switch sym.Op {
	case cuda.OpAllocation:
		return "framebuffer"
	case cuda.OpHostAllocation:
		return "host"
	}
	return ""
}

// departedBytes is what a departure stands for in memory.
func departedBytes(kind string, bad, good *report.DiffCall) uint64 {
	size := func(c *report.DiffCall) uint64 {
		if c == nil || c.Size == nil {
			return 0
		}
		return *c.Size
	}
	switch kind {
	case report.DepartExtraCall, report.DepartOtherCall:
		return size(bad)
	case report.DepartLarger:
		return size(bad) - size(good)
	}
	return 0
}

// phaseAt is the label of the phase t falls in: the latest that starts
// at or before it, except that the phase ending at the first failure
// (failEnd) keeps the failure itself, as the analysis's phases do.
func phaseAt(phases []report.Phase, t, failEnd int64) string {
	for i := len(phases) - 1; i >= 0; i-- {
		kept := i > 0 && t == phases[i].StartNS && t == failEnd && phases[i-1].EndNS == t
		if t >= phases[i].StartNS && !kept {
			return phases[i].Label
		}
	}
	if len(phases) > 0 {
		return phases[0].Label
	}
	return ""
}

// firstEnd is when a run's first failure returned, or math.MinInt64.
func firstEnd(rep *report.Report) int64 {
	if rep.FirstFailure == nil {
		return math.MinInt64
	}
	return rep.FirstFailure.TimeNS
}

// dedupe keeps the first of each note.
func dedupe(notes []string) []string {
	seen := map[string]bool{}
	out := notes[:0]
	for _, n := range notes {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// rank orders differences: what no good run has first, then those in the
// view the failure is judged against (or in no one view), then causes
// before measures (tier), then by bytes, then by kind, then by wording
// (the same order every time).
func rank(ds []report.Difference, explains string) {
	inView := func(d *report.Difference) bool {
		return explains == "" || d.View == "" || d.View == explains
	}
	sort.SliceStable(ds, func(i, j int) bool {
		a, b := &ds[i], &ds[j]
		if a.Unique != b.Unique {
			return a.Unique
		}
		if ia, ib := inView(a), inView(b); ia != ib {
			return ia
		}
		if ta, tb := tier(a.Kind), tier(b.Kind); ta != tb {
			return ta < tb
		}
		if a.Bytes != b.Bytes {
			return a.Bytes > b.Bytes
		}
		if ka, kb := kindOrder(a.Kind), kindOrder(b.Kind); ka != kb {
			return ka < kb
		}
		return a.Summary < b.Summary
	})
}

// tier puts what names a cause (a process, a call, a phase, the
// platform) before the measures it shows in (the traced peak, the least
// free), and those before what rarely explains an out-of-memory (a
// process the failing run lacks, a phase's duration).
func tier(kind string) int {
	switch kind {
	case report.DiffExtraProcess, report.DiffCallSequence, report.DiffPhaseGrowth, report.DiffInventory:
		return 0
	case report.DiffTracedPeak, report.DiffLeastFree:
		return 1
	}
	return 2
}

// kindOrder breaks ties of bytes: what is more specific to the failure
// first.
func kindOrder(kind string) int {
	switch kind {
	case report.DiffExtraProcess:
		return 0
	case report.DiffCallSequence:
		return 1
	case report.DiffPhaseGrowth:
		return 2
	case report.DiffTracedPeak:
		return 3
	case report.DiffLeastFree:
		return 4
	case report.DiffInventory:
		return 5
	case report.DiffMissingProcess:
		return 6
	}
	return 7
}

// addStacks reads the stacks of the failing run's departing calls, in one
// pass over its events.
func addStacks(ds []report.Difference, bad *Run) {
	if bad.Stacks == nil {
		return
	}
	var refs []analyze.CallRef
	var calls []*report.DiffCall
	for i := range ds {
		if c := ds[i].Call; c != nil && ds[i].Kind == report.DiffCallSequence {
			refs = append(refs, analyze.CallRef{PID: c.PID, EndNS: c.TimeNS})
			calls = append(calls, c)
		}
	}
	if len(refs) == 0 {
		return
	}
	for i, st := range bad.Stacks(refs) {
		calls[i].Stack = st
	}
}

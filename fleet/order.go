package fleet

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/retrivium/forensic/report"
)

// Order values.
const (
	// OrderCertain: one failure ends before every other candidate's
	// interval begins (or, in the same boot, before it on the one clock
	// they share).
	OrderCertain = "certain"
	// OrderUncertain: at least two failures could each have been first.
	OrderUncertain = "uncertain"
	// OrderNone: no run has a failure.
	OrderNone = "none"
)

// Reasons two candidates cannot be ordered.
const (
	// ReasonOverlap: their wall-clock intervals overlap.
	ReasonOverlap = "overlap"
	// ReasonNoBound: one of them has no clock error bound (unsynchronized
	// clock, or a file from before bounds were recorded) and they are not
	// of the same boot.
	ReasonNoBound = "no-clock-bound"
	// ReasonSameTime: same boot, same run-clock time.
	ReasonSameTime = "same-time"
)

// maxWorldSize bounds the ranks listed as missing, so that a garbage
// WORLD_SIZE cannot make a list of a billion.
const maxWorldSize = 1 << 16

// Run is one recording, as the caller read it.
type Run struct {
	Path   string `json:"path"`
	ID     string `json:"run_id"`
	Host   string `json:"host"`
	BootID string `json:"boot_id,omitempty"`
	// Rank is the run's rank; nil when none is named, or when the run
	// holds several ranks (Ranks, e.g. one --all recorder per node).
	Rank      *int  `json:"rank"`
	Ranks     []int `json:"ranks,omitempty"`
	WorldSize *int  `json:"world_size"`
	// JobID is the job id the run names (TORCHELASTIC_RUN_ID,
	// SLURM_JOB_ID); empty when none (Groups then goes by time).
	JobID string `json:"job_id,omitempty"`
	// StartNS and EndNS bound the recording on the run clock.
	StartNS int64 `json:"start_ns"`
	EndNS   int64 `json:"end_ns"`
	// Clock maps the run clock to wall time; nil when the run has none.
	Clock *Clock `json:"clock"`
	// Failure is the run's first failure; nil when no call failed.
	Failure *Failure `json:"failure"`
	// Unrecovered is the run's first failure that no process recovered
	// from (Failure itself when it was not recovered); nil when none.
	Unrecovered *Failure `json:"unrecovered,omitempty"`
}

// Clock maps a run's clock (CLOCK_MONOTONIC) to wall time.
type Clock struct {
	MonotonicNS int64 `json:"monotonic_ns"`
	RealtimeNS  int64 `json:"realtime_ns"`
	// ErrorNS bounds |wall time of an event - true time|; nil when the
	// clock was unsynchronized or the bound is unknown (ErrorWhy says
	// why).
	ErrorNS  *int64 `json:"clock_error_ns"`
	ErrorWhy string `json:"clock_error_why,omitempty"`
}

// Wall converts a run-clock time to Unix nanoseconds.
func (c *Clock) Wall(t int64) int64 { return c.RealtimeNS + (t - c.MonotonicNS) }

// Failure identifies a run's first failed call.
type Failure struct {
	// TimeNS is when the call returned, on the run clock.
	TimeNS     int64  `json:"time_ns"`
	Symbol     string `json:"symbol,omitempty"`
	ResultName string `json:"result_name,omitempty"`
	PID        uint32 `json:"pid,omitempty"`
	TID        uint32 `json:"tid,omitempty"`
	// Rank is the failing process's rank, when its environment named one
	// (else the caller may give the run's).
	Rank *int `json:"rank"`
	// GPU is the UUID of the GPU the call ran against; empty when unknown.
	GPU string `json:"gpu,omitempty"`
	// OwnCause, when set, says what the run's own record shows caused
	// the failure without any other run (its own GPU's framebuffer ran
	// out): a failure after the first with its own cause, on another GPU,
	// is not a consequence of the first.
	OwnCause string `json:"own_cause,omitempty"`
	// Recovered: the same process later succeeded at the same operation
	// (the run's own verdict): it has no consequences.
	Recovered bool `json:"recovered,omitempty"`
}

// Result is the order of the runs' failures.
type Result struct {
	Order string `json:"order"`
	Runs  []Run  `json:"runs"`
	// FirstFailure is the failure that was first when Order is certain;
	// when uncertain, the one with the earliest wall-time estimate among
	// those that could have been first (its Unordered lists the others).
	FirstFailure *Candidate `json:"first_failure"`
	// Candidates holds every run's failure, earliest estimate first.
	Candidates []Candidate `json:"candidates"`
	// FirstUnrecovered is, when FirstFailure was recovered, the first of
	// the runs' unrecovered failures (Run.Unrecovered), placed by the same
	// rule (UnrecoveredOrder: certain or uncertain; UnrecoveredCandidates
	// holds them all, earliest estimate first); nil when FirstFailure was
	// not recovered or no failure went unrecovered.
	FirstUnrecovered      *Candidate  `json:"first_unrecovered"`
	UnrecoveredOrder      string      `json:"unrecovered_order,omitempty"`
	UnrecoveredCandidates []Candidate `json:"unrecovered_candidates,omitempty"`
	// Consequences are the failures certainly after the failure that
	// matters: the first, or the first unrecovered when the first was
	// recovered (a recovered failure has none).
	Consequences []Consequence `json:"consequences"`
	WorldSize    *int          `json:"world_size"`
	// MissingRanks are ranks below WorldSize that no run names.
	MissingRanks []int  `json:"missing_ranks"`
	Notes        []Note `json:"notes"`
}

// Candidate is one run's failure placed in wall time.
type Candidate struct {
	RunPath string  `json:"run_path"`
	RunID   string  `json:"run_id"`
	Host    string  `json:"host"`
	Rank    *int    `json:"rank"`
	Failure Failure `json:"failure"`
	// WallNS is the estimated Unix time; nil without a clock mapping.
	WallNS *int64 `json:"wall_ns"`
	// EarliestNS and LatestNS bound the true time (WallNS -/+ the clock
	// error bound); nil without a bound.
	EarliestNS   *int64 `json:"earliest_ns"`
	LatestNS     *int64 `json:"latest_ns"`
	ClockErrorNS *int64 `json:"clock_error_ns"`
	// PossiblyFirst: no other candidate is certainly before this one.
	PossiblyFirst bool `json:"possibly_first"`
	// Unordered lists the candidates this one cannot be ordered against.
	Unordered []report.Unordered `json:"unordered"`

	// domain is the boot id: runs of one kernel boot share CLOCK_MONOTONIC,
	// whatever their host names (containers on one node).
	domain string
}

// Consequence is a failure certainly after the first, and how long after.
type Consequence struct {
	RunPath string  `json:"run_path"`
	RunID   string  `json:"run_id"`
	Host    string  `json:"host"`
	Rank    *int    `json:"rank"`
	Failure Failure `json:"failure"`
	// DelayMinNS and DelayMaxNS bound the time from the first failure to
	// this one; equal (Exact) within one boot.
	DelayMinNS int64 `json:"delay_min_ns"`
	DelayMaxNS int64 `json:"delay_max_ns"`
	Exact      bool  `json:"exact"`
	// Relation is what ties it to the first failure (report.RelationSameGPU,
	// report.RelationSameJob) or that nothing does
	// (report.RelationIndependent); Basis
	// says it in words.
	Relation string `json:"relation"`
	Basis    string `json:"basis"`
}

// Order decides which run's failure came first, how certain that is,
// which failure no process recovered from came first when the first was
// recovered, what followed the failure that matters, and which ranks have
// no run.
func Order(runs []Run) Result {
	res := Result{Order: OrderNone, Runs: runs, Candidates: candidates(runs, false), Consequences: []Consequence{},
		MissingRanks: []int{}, Notes: []Note{}}
	res.WorldSize, res.MissingRanks, res.Notes = missingRanks(runs)
	res.Notes = append(res.Notes, boundNotes(runs)...)
	if len(res.Candidates) == 0 {
		return res
	}
	var first int
	res.Order, first = decide(res.Candidates)
	res.FirstFailure = &res.Candidates[first]
	if res.Order == OrderUncertain {
		res.Notes = append(res.Notes, uncertainNote(res.FirstFailure))
	}
	pool, matters := res.Candidates, first
	if res.FirstFailure.Failure.Recovered {
		// A recovered failure has no consequences: the one that matters
		// is the first no process recovered from, in whichever run.
		pool, matters = candidates(runs, true), -1
		if len(pool) > 0 {
			res.UnrecoveredOrder, matters = decide(pool)
			res.UnrecoveredCandidates, res.FirstUnrecovered = pool, &pool[matters]
		}
	}
	if matters >= 0 {
		res.Consequences = consequencesOf(runs, pool, matters)
	}
	return res
}

// candidates places each run's first failure (unrecovered: its first
// unrecovered one) in wall time, earliest estimate first.
func candidates(runs []Run, unrecovered bool) []Candidate {
	cs := []Candidate{}
	for _, r := range runs {
		f := r.Failure
		if unrecovered {
			f = r.Unrecovered
		}
		if f != nil {
			r.Failure = f
			cs = append(cs, candidateOf(r))
		}
	}
	sortCandidates(cs)
	return cs
}

// consequencesOf lists the candidates certainly after cs[first], each with
// what ties it to it.
func consequencesOf(runs []Run, cs []Candidate, first int) []Consequence {
	out := []Consequence{}
	runOf := map[string]*Run{}
	for i := range runs {
		runOf[runs[i].Path] = &runs[i]
	}
	f := &cs[first]
	for i := range cs {
		if i == first {
			continue
		}
		if c, ok := consequence(f, &cs[i]); ok {
			c.Relation, c.Basis = relation(runOf[f.RunPath], runOf[c.RunPath], f, &c)
			out = append(out, c)
		}
	}
	return out
}

func candidateOf(r Run) Candidate {
	c := Candidate{RunPath: r.Path, RunID: r.ID, Host: r.Host, Rank: r.Failure.Rank, Failure: *r.Failure, Unordered: []report.Unordered{}}
	if c.Rank == nil {
		c.Rank = r.Rank
	}
	if r.BootID != "" {
		c.domain = r.BootID
	}
	if r.Clock != nil {
		w := r.Clock.Wall(r.Failure.TimeNS)
		c.WallNS = &w
		if e := r.Clock.ErrorNS; e != nil && *e >= 0 {
			lo, hi, bound := w-*e, w+*e, *e
			c.EarliestNS, c.LatestNS, c.ClockErrorNS = &lo, &hi, &bound
		}
	}
	return c
}

// sortCandidates orders by wall-time estimate (none last), then path.
func sortCandidates(cs []Candidate) {
	slices.SortStableFunc(cs, func(a, b Candidate) int {
		switch {
		case a.WallNS == nil && b.WallNS != nil:
			return 1
		case a.WallNS != nil && b.WallNS == nil:
			return -1
		case a.WallNS != nil && *a.WallNS != *b.WallNS:
			return cmp.Compare(*a.WallNS, *b.WallNS)
		}
		return cmp.Compare(a.RunPath, b.RunPath)
	})
}

// decide marks which candidates could have been first and returns how
// certain the order is and the index of the one reported first: the
// earliest estimate among them.
func decide(cs []Candidate) (string, int) {
	first := -1
	for i := range cs {
		cs[i].PossiblyFirst = true
		for j := range cs {
			if i != j && before(&cs[j], &cs[i]) {
				cs[i].PossiblyFirst = false
				break
			}
		}
		if cs[i].PossiblyFirst && first < 0 {
			first = i
		}
	}
	if first < 0 { // cannot happen (before is a strict order), kept safe
		first = 0
	}
	f := &cs[first]
	for j := range cs {
		if j != first && !before(f, &cs[j]) {
			f.Unordered = append(f.Unordered, unordered(f, &cs[j]))
		}
	}
	if f.PossiblyFirst && len(f.Unordered) == 0 {
		return OrderCertain, first
	}
	return OrderUncertain, first
}

// before reports whether a's failure was certainly before b's.
func before(a, b *Candidate) bool {
	if a.domain != "" && a.domain == b.domain {
		return a.Failure.TimeNS < b.Failure.TimeNS
	}
	return a.LatestNS != nil && b.EarliestNS != nil && *a.LatestNS < *b.EarliestNS
}

func unordered(a, b *Candidate) report.Unordered {
	u := report.Unordered{RunPath: b.RunPath}
	switch {
	case a.domain != "" && a.domain == b.domain:
		u.Reason = ReasonSameTime
	case a.LatestNS == nil || b.LatestNS == nil:
		u.Reason = ReasonNoBound
	default:
		u.Reason = ReasonOverlap
		o := min(*a.LatestNS, *b.LatestNS) - max(*a.EarliestNS, *b.EarliestNS)
		u.OverlapNS = &o
	}
	return u
}

// consequence places d after the first failure f, when it certainly was.
func consequence(f, d *Candidate) (Consequence, bool) {
	if !before(f, d) {
		return Consequence{}, false
	}
	c := Consequence{RunPath: d.RunPath, RunID: d.RunID, Host: d.Host, Rank: d.Rank, Failure: d.Failure}
	if f.domain != "" && f.domain == d.domain {
		c.DelayMinNS = d.Failure.TimeNS - f.Failure.TimeNS
		c.DelayMaxNS, c.Exact = c.DelayMinNS, true
		return c, true
	}
	c.DelayMinNS = *d.EarliestNS - *f.LatestNS
	c.DelayMaxNS = *d.LatestNS - *f.EarliestNS
	return c, true
}

// relation says what ties a failure certainly after the first (c, in run
// later) to the first (f, in run first): the same GPU, the job alone, or
// nothing (its own cause; a run begun after the first failure's run
// ended).
func relation(first, later *Run, f *Candidate, c *Consequence) (string, string) {
	fg, cg := f.Failure.GPU, c.Failure.GPU
	switch {
	case first != nil && later != nil && runBefore(first, later):
		basis := "also failed: its run began after the first failure's run had ended"
		if fg != "" && fg == cg {
			basis += " (on the same GPU, which a fault may have left unusable)"
		}
		return report.RelationIndependent, basis
	case fg != "" && fg == cg:
		return report.RelationSameGPU, "likely a consequence: on the same GPU as the first failure (" + fg + ")"
	case fg != "" && cg != "" && c.Failure.OwnCause != "":
		return report.RelationIndependent, "also failed, on another GPU: " + c.Failure.OwnCause
	case cg == "" || fg == "":
		return report.RelationSameJob, "possibly a consequence: the same job, after it (the GPUs are not both known)"
	}
	return report.RelationSameJob, "possibly a consequence: the same job, after it, on another GPU (a rank waiting on a failed peer fails too)"
}

// runBefore reports whether run a certainly ended before run b began.
func runBefore(a, b *Run) bool {
	if a.BootID != "" && a.BootID == b.BootID {
		return a.EndNS > 0 && a.EndNS < b.StartNS
	}
	if a.Clock == nil || b.Clock == nil || a.Clock.ErrorNS == nil || b.Clock.ErrorNS == nil {
		return false
	}
	_, aHi := a.wallSpan()
	bLo, _ := b.wallSpan()
	return a.EndNS > 0 && aHi < bLo
}

// missingRanks compares the ranks the runs name with the world size they
// report.
func missingRanks(runs []Run) (*int, []int, []Note) {
	var notes []Note
	sizes := map[int]bool{}
	has := map[int][]string{}
	unnamed := 0
	for _, r := range runs {
		if r.WorldSize != nil {
			sizes[*r.WorldSize] = true
		}
		ranks := r.Ranks
		if r.Rank != nil && !slices.Contains(ranks, *r.Rank) {
			ranks = append(slices.Clone(ranks), *r.Rank)
		}
		if len(ranks) == 0 {
			unnamed++
		}
		for _, k := range ranks {
			has[k] = append(has[k], r.Path)
		}
	}
	notes = append(notes, duplicateNotes(has)...)
	if len(sizes) == 0 {
		return nil, []int{}, notes
	}
	ws := 0
	for s := range sizes {
		ws = max(ws, s)
	}
	if len(sizes) > 1 {
		notes = append(notes, worldSizeNote(sizes, ws))
	}
	if ws > maxWorldSize {
		return &ws, []int{}, append(notes, tooLargeNote(ws))
	}
	missing := []int{}
	for k := 0; k < ws; k++ {
		if len(has[k]) == 0 {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		notes = append(notes, missingNote(missing, ws, unnamed))
	}
	return &ws, missing, notes
}

// otherBootFailed reports whether a run other than runs[i] failed on
// another boot than runs[i]'s, or either names no boot.
func otherBootFailed(runs []Run, i int) bool {
	for j, o := range runs {
		if j != i && o.Failure != nil && (o.BootID == "" || o.BootID != runs[i].BootID) {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[int]V) []int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func joinInts(ks []int) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = strconv.Itoa(k)
	}
	return strings.Join(s, ", ")
}

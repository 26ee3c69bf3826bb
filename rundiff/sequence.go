package rundiff

import (
	"sort"

	"github.com/retrivium/forensic/report"
)

// lookahead is how many calls after a departure must agree for it to be
// called an extra or a missing call rather than another call in place.
const lookahead = 4

// Sequence is the part of one process's calls a comparison read: windows
// of its sequence, by index.
type Sequence struct {
	n     int
	spans []span // by from, not overlapping
}

// span is calls [from, from+len(calls)) of a sequence.
type span struct {
	from  int
	calls []Call
}

// Len is the number of calls in the whole sequence (read or not).
func (s *Sequence) Len() int {
	if s == nil {
		return 0
	}
	return s.n
}

// find returns the span holding call i, nil when it was not read.
func (s *Sequence) find(i int) *span {
	if s == nil {
		return nil
	}
	k := sort.Search(len(s.spans), func(k int) bool { return s.spans[k].from+len(s.spans[k].calls) > i })
	if k < len(s.spans) && s.spans[k].from <= i {
		return &s.spans[k]
	}
	return nil
}

// has says call i was read.
func (s *Sequence) has(i int) bool { return s.find(i) != nil }

// At returns the i-th call; a zero Call when it was not read.
func (s *Sequence) At(i int) Call {
	if sp := s.find(i); sp != nil {
		return sp.calls[i-sp.from]
	}
	return Call{}
}

// at returns a pointer to the i-th call, which must have been read.
func (s *Sequence) at(i int) *Call {
	sp := s.find(i)
	return &sp.calls[i-sp.from]
}

// whole is a sequence of every one of calls (tests, small runs).
func whole(calls []Call) *Sequence {
	return &Sequence{n: len(calls), spans: []span{{0, calls}}}
}

// departure is where two sequences of one role first differ.
type departure struct {
	kind string
	// bad and good index the departing calls (-1: none on that side).
	bad, good int
}

// sameCall says two calls are the same step of the job: the same symbol,
// size and outcome.
func sameCall(a, b Call, an, bn []string) bool {
	return sameStep(a, b, an, bn) && a.Failed == b.Failed
}

// sameStep says two calls are the same step whatever its outcome: the
// call that failed in the failing run is the step the good run made.
func sameStep(a, b Call, an, bn []string) bool {
	return an[a.Symbol] == bn[b.Symbol] && a.HasSize == b.HasSize && a.Size == b.Size
}

// depart finds the first call, from index from on (the calls before it
// are known to be the same), where the failing run's sequence departs
// from the good run's; ok is false when they agree as far as both go and
// the failing one is not longer, or as far as was read.
func depart(bad, good *Sequence, from int, bn, gn []string) (departure, bool) {
	n := min(bad.Len(), good.Len())
	k := from
	for k < n && bad.has(k) && good.has(k) && sameCall(bad.At(k), good.At(k), bn, gn) {
		k++
	}
	switch {
	case k < n && (!bad.has(k) || !good.has(k)):
		// The summaries differed where the calls read agree: a hash
		// collision, as good as never.
		return departure{}, false
	case k == n && bad.Len() > good.Len():
		return departure{departExtra, k, -1}, true
	case k == n && bad.Len() < good.Len():
		return departure{report.DepartMissingCall, -1, k}, true
	case k == n:
		return departure{}, false
	}
	b, g := bad.At(k), good.At(k)
	switch {
	case sameStep(b, g, bn, gn) && b.Failed && !g.Failed:
		// The same step in the same place, failed: not an extra call,
		// however the calls after it line up.
		return departure{report.DepartFailed, k, k}, true
	case agree(bad, k+1, good, k, bn, gn):
		return departure{departExtra, k, -1}, true
	case agree(bad, k, good, k+1, bn, gn):
		return departure{report.DepartMissingCall, -1, k}, true
	case bn[b.Symbol] == gn[g.Symbol] && b.HasSize && g.HasSize && b.Size > g.Size:
		return departure{report.DepartLarger, k, k}, true
	case bn[b.Symbol] == gn[g.Symbol] && b.HasSize && g.HasSize && b.Size < g.Size:
		return departure{report.DepartSmaller, k, k}, true
	}
	return departure{report.DepartOtherCall, k, k}, true
}

// departExtra is report.DepartExtraCall, short.
const departExtra = report.DepartExtraCall

// agree says the calls of two sequences from i and j on are the same
// steps (as many as lookahead, or as both have; a sequence that ends
// agrees only with one that ends too).
func agree(a *Sequence, i int, b *Sequence, j int, an, bn []string) bool {
	la, lb := a.Len()-i, b.Len()-j
	n := min(la, lb, lookahead)
	if n == 0 {
		return la == lb
	}
	for k := 0; k < n; k++ {
		if !sameStep(a.At(i+k), b.At(j+k), an, bn) {
			return false
		}
	}
	return true
}

// sites are two runs' call sites, for telling whether two calls came from
// the same place.
type sites struct{ bad, good []string }

// otherSite finds the first call, before the calls depart (at most
// before index end), made from another call site than the good run's
// same step; both sites must be known. Only calls read on both sides are
// looked at (the summaries say the others' sites are the same). ok is
// false when none is.
func otherSite(bad, good *Sequence, st sites, end int) (int, bool) {
	if st.bad == nil || st.good == nil || bad == nil {
		return 0, false
	}
	for _, sp := range bad.spans {
		for i, b := range sp.calls {
			k := sp.from + i
			if k >= end || k >= good.Len() {
				break
			}
			if !good.has(k) {
				continue
			}
			g := good.At(k).Site
			if b.Site != 0 && g != 0 && st.bad[b.Site] != st.good[g] {
				return k, true
			}
		}
	}
	return 0, false
}

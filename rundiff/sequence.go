package rundiff

import "github.com/retrivium/forensic/report"

// lookahead is how many calls after a departure must agree for it to be
// called an extra or a missing call rather than another call in place.
const lookahead = 4

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

// depart finds the first call where the failing run's sequence departs
// from the good run's; ok is false when they agree as far as both go and
// the failing one is not longer.
func depart(bad, good *Sequence, bn, gn []string) (departure, bool) {
	n := min(bad.Len(), good.Len())
	k := 0
	for k < n && sameCall(bad.At(k), good.At(k), bn, gn) {
		k++
	}
	switch {
	case k == n && bad.Len() > good.Len():
		return departure{departExtra, k, -1}, true
	case k == n && bad.Len() < good.Len():
		return departure{report.DepartMissingCall, -1, k}, true
	case k == n:
		return departure{}, false
	}
	b, g := bad.At(k), good.At(k)
	switch {
	case agree(bad, k+1, good, k, bn, gn):
		return departure{departExtra, k, -1}, true
	case agree(bad, k, good, k+1, bn, gn):
		return departure{report.DepartMissingCall, -1, k}, true
	case bn[b.Symbol] == gn[g.Symbol] && b.HasSize && g.HasSize && b.Size > g.Size:
		return departure{report.DepartLarger, k, k}, true
	case bn[b.Symbol] == gn[g.Symbol] && b.HasSize && g.HasSize && b.Size < g.Size:
		return departure{report.DepartSmaller, k, k}, true
	case bn[b.Symbol] == gn[g.Symbol] && b.Failed && !g.Failed:
		return departure{report.DepartFailed, k, k}, true
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
// same step; both sites must be known. ok is false when none is.
func otherSite(bad, good *Sequence, st sites, end int) (int, bool) {
	if st.bad == nil || st.good == nil {
		return 0, false
	}
	for k := 0; k < end && k < bad.Len() && k < good.Len(); k++ {
		b, g := bad.At(k).Site, good.At(k).Site
		if b != 0 && g != 0 && st.bad[b] != st.good[g] {
			return k, true
		}
	}
	return 0, false
}

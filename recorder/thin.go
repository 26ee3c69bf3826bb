package recorder

// thinner decides which periodic sample rounds a long run keeps, so that
// the sample sequence stays bounded. It always keeps the first round, the
// round just before each failure (held back until the next round is
// known), the rounds a failure triggers, the round after each failure, and
// the last round. Periodic rounds are kept one in every `every`, and
// `every` doubles each time `budget` periodic rounds have been kept at the
// current rate.
type thinner struct {
	budget    int
	every     uint64
	kept      int
	n         uint64 // periodic rounds seen
	afterFail bool
}

// keep is called for each periodic round (first reports the run's first)
// and says whether to store it, and why.
func (t *thinner) keep(first bool) (bool, string) {
	t.n++
	switch {
	case first:
		return true, "first"
	case t.afterFail:
		t.afterFail = false
		return true, "after-failure"
	}
	if t.budget <= 0 {
		return true, ""
	}
	if t.every == 0 {
		t.every = 1
	}
	if t.n%t.every != 0 {
		return false, ""
	}
	t.kept++
	if t.kept >= t.budget {
		t.kept = 0
		t.every *= 2
	}
	return true, ""
}

// failure notes a failure: the next periodic round is kept too.
func (t *thinner) failure() { t.afterFail = true }

package rundiff

import (
	"errors"
	"fmt"

	"github.com/retrivium/forensic/report"
)

// ErrNoFailure is Failing's refusal of runs none of which failed.
var ErrNoFailure = errors.New("none of the runs has a failure or missing evidence: there is no failing run to explain")

// Failing picks the failing run among analyzed runs. A run with a failed
// call counts first: the last run given when it has one ("last"),
// otherwise the one run that has one ("only-failing"). When no run has a
// failed call, runs whose verdict is missing evidence (a crash with no
// failed call, a non-zero exit) are picked the same way. Several failing
// runs none of which is last, or none failing, are refused: which one to
// explain is the user's choice.
func Failing(reps []*report.Report) (int, string, error) {
	if len(reps) < 2 {
		return 0, "", errors.New("diff compares at least two runs: give a good run and the failing one")
	}
	for _, failed := range []func(*report.Report) bool{
		func(r *report.Report) bool { return r.FirstFailure != nil },
		func(r *report.Report) bool { return r.Attribution != report.AttrNone },
	} {
		i, chosen, err := pick(reps, failed)
		if err != nil || chosen != "" {
			return i, chosen, err
		}
	}
	return 0, "", ErrNoFailure
}

// pick picks the run that failed: the last, else the only one; chosen is
// "" when none did.
func pick(reps []*report.Report, failed func(*report.Report) bool) (int, string, error) {
	last := len(reps) - 1
	if failed(reps[last]) {
		return last, "last", nil
	}
	var failing []int
	for i, r := range reps {
		if failed(r) {
			failing = append(failing, i)
		}
	}
	switch len(failing) {
	case 0:
		return 0, "", nil
	case 1:
		return failing[0], "only-failing", nil
	}
	return 0, "", fmt.Errorf("the last run (%s) did not fail and %d others did: give the failing run last", reps[last].Run.Path, len(failing))
}

// Diff compares analyzed runs: it picks the failing one (Failing) and
// compares it with the others.
func Diff(runs []*Run) (*report.Diff, error) {
	reps := make([]*report.Report, len(runs))
	for i, r := range runs {
		reps[i] = r.Report
	}
	bad, chosen, err := Failing(reps)
	if err != nil {
		return nil, err
	}
	var good []*Run
	for i, r := range runs {
		if i != bad {
			good = append(good, r)
		}
	}
	d, err := Compare(good, runs[bad])
	if err != nil {
		return nil, err
	}
	d.Chosen = chosen
	for _, g := range d.Good {
		if g.Attribution != report.AttrNone {
			d.Notes = append(d.Notes, fmt.Sprintf("the good run %s is not clean either (attribution %s): what it shares with the failing run is not shown as a difference", g.Path, g.Attribution))
		}
	}
	return d, nil
}

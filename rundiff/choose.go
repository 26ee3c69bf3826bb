package rundiff

import (
	"errors"
	"fmt"

	"github.com/retrivium/forensic/report"
)

// ErrNoFailure is Failing's refusal of runs none of which failed.
var ErrNoFailure = errors.New("none of the runs has a failure or missing evidence: there is no failing run to explain")

// Failing picks the failing run among analyzed runs: the last one, as
// given, when it has a failure (an attribution other than "none");
// otherwise the one run that has, if exactly one has ("only-failing").
// Several failing runs none of which is last, or none failing, are
// refused: which one to explain is the user's choice.
func Failing(reps []*report.Report) (int, string, error) {
	if len(reps) < 2 {
		return 0, "", errors.New("diff compares at least two runs: give a good run and the failing one")
	}
	last := len(reps) - 1
	if reps[last].Attribution != report.AttrNone {
		return last, "last", nil
	}
	var failing []int
	for i, r := range reps {
		if r.Attribution != report.AttrNone {
			failing = append(failing, i)
		}
	}
	switch len(failing) {
	case 0:
		return 0, "", ErrNoFailure
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
	d := Compare(good, runs[bad])
	d.Chosen = chosen
	for _, g := range d.Good {
		if g.Attribution != report.AttrNone {
			d.Notes = append(d.Notes, fmt.Sprintf("the good run %s is not clean either (attribution %s): what it shares with the failing run is not shown as a difference", g.Path, g.Attribution))
		}
	}
	return d, nil
}

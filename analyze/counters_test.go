package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// Loss counters that do not reach the failure (a recorder killed, or a
// flight recording read while written, whose last reading came before
// it) cannot rule out a lost earlier failure: the counters say where they
// come from and when, and the verdict names the gap as decisive. The
// stop record counts every call and leaves the verdict alone.
func TestCountersShortOfTheFailure(t *testing.T) {
	oom := call(0, tClock+500*ms, 2, cuda.Fields{Has: cuda.FieldSize, Size: 32 * gib})
	tests := []struct {
		name     string
		abrupt   bool
		drops    []store.Drops
		from     string
		at       int64
		decisive string // a word of the decisive missing item; "" for none
	}{
		{"stop record", false, nil, report.CountersStop, 0, ""},
		{"reading after the failure", true, []store.Drops{{Time: tClock + 600*ms, Stats: store.Stats{Calls: 1, Events: 1}}},
			report.CountersReading, tClock + 600*ms, ""},
		{"reading before the failure", true, []store.Drops{{Time: tClock + 100*ms}},
			report.CountersReading, tClock + 100*ms, "last read at +0.100 s, before the failure"},
		{"never read", true, nil, report.CountersNone, 0, "never read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := runSpec{symbols: []string{"cuMemAlloc_v2"}, events: []store.Event{oom}, abrupt: tt.abrupt,
				drops: tt.drops}.analyze(t, nil)
			l := rep.Loss
			if l.CountersFrom != tt.from || l.CountersAtNS != tt.at {
				t.Errorf("counters from %q at %d, want %q at %d", l.CountersFrom, l.CountersAtNS, tt.from, tt.at)
			}
			var got []string
			for _, m := range rep.Missing {
				if m.Decisive && strings.Contains(m.What, "loss counters") {
					got = append(got, m.What)
				}
			}
			switch {
			case tt.decisive == "" && len(got) > 0:
				t.Errorf("decisive counter gap where the counters reach the failure: %q", got)
			case tt.decisive != "" && (len(got) != 1 || !strings.Contains(got[0], tt.decisive)):
				t.Errorf("decisive counter gaps %q, want one saying %q", got, tt.decisive)
			case tt.decisive != "" && rep.Attribution != report.AttrMissingEvidence:
				t.Errorf("attribution %s with the counters short of the failure, want missing-evidence", rep.Attribution)
			}
		})
	}
}

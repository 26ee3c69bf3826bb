package analyze

import (
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// A landmark or a marker belongs to the phase it starts; the first
// failure belongs to "up to first failure", the phase it ends; the run's
// end to the last phase.
func TestPhaseBoundaries(t *testing.T) {
	landmarks := []report.Phase{
		{Label: "before first allocation", StartNS: 0, EndNS: 100},
		{Label: "up to first failure", StartNS: 100, EndNS: 300},
		{Label: "after first failure", StartNS: 300, EndNS: 900},
	}
	markers := []report.Phase{
		{Label: "before load", StartNS: 0, EndNS: 100},
		{Label: "load", StartNS: 100, EndNS: 500},
		{Label: "serve", StartNS: 500, EndNS: 900},
	}
	tests := []struct {
		name   string
		phases []report.Phase
		endIn  int
		t      int64
		want   string
	}{
		{"before the first allocation", landmarks, 1, 99, "before first allocation"},
		{"the first allocation", landmarks, 1, 100, "up to first failure"},
		{"between", landmarks, 1, 200, "up to first failure"},
		{"the first failure", landmarks, 1, 300, "up to first failure"},
		{"just after the first failure", landmarks, 1, 301, "after first failure"},
		{"the run's end", landmarks, 1, 900, "after first failure"},
		{"after the run's end", landmarks, 1, 950, "after first failure"},
		{"before the run", landmarks, 1, -5, "before first allocation"},
		{"just before a marker", markers, -1, 99, "before load"},
		{"a marker", markers, -1, 100, "load"},
		{"the next marker", markers, -1, 500, "serve"},
	}
	for _, tt := range tests {
		ps := newPhaseSet(tt.phases, tt.endIn)
		for _, from := range []int{0, 1, 2} { // the search starts anywhere
			if got := ps.phases[ps.index(tt.t, from)].Label; got != tt.want {
				t.Errorf("%s (t=%d, searching from phase %d): %q, want %q", tt.name, tt.t, from, got, tt.want)
			}
		}
	}
	if i := newPhaseSet(nil, -1).index(5, 0); i != -1 {
		t.Errorf("no phases: index %d, want -1", i)
	}
}

// The first allocation is not counted "before first allocation": a traced
// total held 0 in that phase, and its first value is in the phase the
// allocation starts.
func TestFirstAllocationStartsItsPhase(t *testing.T) {
	rep := runSpec{
		symbols: []string{"cuMemAlloc_v2"},
		events: []store.Event{
			alloc(0, tClock+100*ms, 2*gib, 0x1000),
			alloc(0, tClock+200*ms, gib, 0x2000),
			call(0, tClock+300*ms, 2, cuda.Fields{Has: cuda.FieldSize, Size: 40 * gib}),
		},
	}.analyze(t, nil)
	if len(rep.Phases) != 3 || rep.Phases[0].EndNS != tClock+100*ms {
		t.Fatalf("phases %+v, want three, the first ending at the first allocation", rep.Phases)
	}
	if rep.FirstFailure == nil || rep.FirstFailure.Phase != "up to first failure" {
		t.Fatalf("first failure %+v, want it in the phase it ends", rep.FirstFailure)
	}
	v := viewRow(rep, "traced device allocations", 0)
	if v == nil || len(v.Phases) != 3 {
		t.Fatalf("traced row %+v, want three phases", v)
	}
	for i, want := range []uint64{0, 3 * gib} {
		p := v.Phases[i]
		if p.Last == nil || *p.Last != want || p.Peak == nil || *p.Peak != want {
			t.Errorf("phase %q: last %v MiB, peak %v MiB, want %v MiB", p.Phase, mibOf(p.Last), mibOf(p.Peak), want>>20)
		}
	}
}

package analyze

import (
	"reflect"
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

func TestBudgetSplitsATracedPartByPhase(t *testing.T) {
	const allocSym, freeSym = 0, 1
	base := tClock + 100*ms
	failAt := base + 500*ms
	failing := call(allocSym, failAt, 2, cuda.Fields{Has: cuda.FieldSize, Size: 4 * gib})
	// The failure's round: pid 7 alone, its use its traced allocations.
	round := func(used7 uint64) []store.Sample {
		reserved := 512 * mibB
		fb := fbSample(failAt+1000, reserved+used7)
		fb.Round, fb.Reserved = 9, &reserved
		fb.Triggers = []store.Trigger{{PID: 7, TID: 7, End: failAt}}
		ps := procSample(failAt+2000, "NVML_SUCCESS", map[uint32]uint64{7: used7})
		ps.Round, ps.Triggers = 9, fb.Triggers
		return []store.Sample{fb, ps}
	}
	// Weights, a scratch buffer freed, then a growing cache.
	events := []store.Event{alloc(allocSym, base, 6*gib, 0xa0), alloc(allocSym, base+10*ms, gib, 0xb0), free(freeSym, base+20*ms, 0xb0),
		alloc(allocSym, base+300*ms, 2*gib, 0xc0), alloc(allocSym, base+400*ms, 3*gib, 0xd0), failing}
	cases := []struct {
		name    string
		events  []store.Event
		markers []store.Marker
		want    []report.BudgetShare
	}{
		{"without markers: before and since the process's first free", events, nil,
			[]report.BudgetShare{{Name: "before its first free", Bytes: 6 * gib}, {Name: "since its first free", Bytes: 5 * gib}}},
		{"with markers: by the marker phases", events,
			[]store.Marker{{Time: base - ms, Label: "load"}, {Time: base + 250*ms, Label: "serve"}},
			[]report.BudgetShare{{Name: "load", Bytes: 6 * gib}, {Name: "serve", Bytes: 5 * gib}}},
		{"all in one phase: no split",
			[]store.Event{alloc(allocSym, base, 6*gib, 0xa0), alloc(allocSym, base+300*ms, 5*gib, 0xc0), failing}, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := runSpec{symbols: []string{"cuMemAlloc_v2", "cuMemFree_v2"}, events: tc.events, samples: round(11 * gib),
				markers: tc.markers}.analyze(t, nil)
			bs := budgetsAt(rep, "first-failure")
			if len(bs) != 1 {
				t.Fatalf("budgets %+v, want one at the failure", rep.Budget)
			}
			var traced *report.BudgetPart
			for i, p := range bs[0].Parts {
				if p.Kind == "traced" {
					traced = &bs[0].Parts[i]
				}
			}
			if traced == nil || traced.Bytes != 11*gib {
				t.Fatalf("traced part %+v, want 11 GiB", traced)
			}
			if !reflect.DeepEqual(traced.ByPhase, tc.want) {
				t.Errorf("by phase %+v, want %+v", traced.ByPhase, tc.want)
			}
			if traced.BySite != nil {
				t.Errorf("by site %+v with no stack recorded", traced.BySite)
			}
			checkSchema(t, rep)
		})
	}
}

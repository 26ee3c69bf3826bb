package fleet

import (
	"testing"
)

// recovered marks a run's first failure recovered; unrecovered, when not
// nil, is the run's first unrecovered failure at wall t0+at.
func recovered(r Run, unrecoveredAt *int64) Run {
	f := *r.Failure
	f.Recovered = true
	r.Failure = &f
	if unrecoveredAt != nil {
		u := Failure{TimeNS: r.Clock.MonotonicNS + *unrecoveredAt, Symbol: "cuMemSetAccess", ResultName: "CUDA_ERROR_MAP_FAILED"}
		r.Unrecovered = &u
	}
	return r
}

// unrecovered gives a run's own failure as its first unrecovered one.
func unrecovered(r Run) Run { r.Unrecovered = r.Failure; return r }

// A recovered first failure is the subject but has no consequences: the
// failure that matters is the first one no run recovered from, ordered by
// the same interval rule, and what came after is placed against it.
func TestOrderRecoveredFirst(t *testing.T) {
	tests := []struct {
		name        string
		runs        []Run
		first       string
		unrecovered string // "" for none
		uOrder      string
		after       []string // consequences' paths
	}{
		{
			name: "recovered first, a later rank dies",
			runs: []Run{
				recovered(synthetic("r0.db", "node-a", "boot", ip(0), 0, bound(1*ms)), nil),
				unrecovered(synthetic("r1.db", "node-a", "boot", ip(1), 300*ms, bound(1*ms))),
			},
			first: "r0.db", unrecovered: "r1.db", uOrder: OrderCertain, after: []string{},
		},
		{
			name: "after the fatal failure, another rank fails",
			runs: []Run{
				recovered(synthetic("r0.db", "node-a", "boot-a", ip(0), 0, bound(1*ms)), nil),
				unrecovered(synthetic("r1.db", "node-b", "boot-b", ip(1), 300*ms, bound(1*ms))),
				unrecovered(synthetic("r2.db", "node-c", "boot-c", ip(2), 500*ms, bound(1*ms))),
			},
			first: "r0.db", unrecovered: "r1.db", uOrder: OrderCertain, after: []string{"r2.db"},
		},
		{
			name: "the first failure's own run dies later, another run earlier",
			runs: []Run{
				recovered(synthetic("r0.db", "node-a", "boot-a", ip(0), 0, bound(1*ms)), i64(900*ms)),
				unrecovered(synthetic("r1.db", "node-b", "boot-b", ip(1), 300*ms, bound(1*ms))),
			},
			first: "r0.db", unrecovered: "r1.db", uOrder: OrderCertain, after: []string{"r0.db"},
		},
		{
			name: "the unrecovered failures cannot be ordered",
			runs: []Run{
				recovered(synthetic("r0.db", "node-a", "boot-a", ip(0), 0, bound(1*ms)), nil),
				unrecovered(synthetic("r1.db", "node-b", "boot-b", ip(1), 300*ms, bound(50*ms))),
				unrecovered(synthetic("r2.db", "node-c", "boot-c", ip(2), 310*ms, bound(50*ms))),
			},
			first: "r0.db", unrecovered: "r1.db", uOrder: OrderUncertain, after: []string{},
		},
		{
			name: "every failure recovered",
			runs: []Run{
				recovered(synthetic("r0.db", "node-a", "boot-a", ip(0), 0, bound(1*ms)), nil),
				recovered(synthetic("r1.db", "node-b", "boot-b", ip(1), 300*ms, bound(1*ms)), nil),
			},
			first: "r0.db", after: []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Order(tt.runs)
			if res.FirstFailure == nil || res.FirstFailure.RunPath != tt.first {
				t.Fatalf("first failure %+v, want %s's", res.FirstFailure, tt.first)
			}
			switch u := res.FirstUnrecovered; {
			case tt.unrecovered == "" && u != nil:
				t.Errorf("first unrecovered %s, want none", u.RunPath)
			case tt.unrecovered != "" && (u == nil || u.RunPath != tt.unrecovered):
				t.Errorf("first unrecovered %+v, want %s's", u, tt.unrecovered)
			}
			if res.UnrecoveredOrder != tt.uOrder {
				t.Errorf("unrecovered order %q, want %q", res.UnrecoveredOrder, tt.uOrder)
			}
			var after []string
			for _, c := range res.Consequences {
				after = append(after, c.RunPath)
				if c.RunPath == tt.first && c.Failure.Recovered {
					t.Errorf("a recovered failure listed after the one that matters: %+v", c)
				}
			}
			if len(after) != len(tt.after) || (len(after) > 0 && after[0] != tt.after[0]) {
				t.Errorf("after it: %v, want %v", after, tt.after)
			}
		})
	}
}

func i64(v int64) *int64 { return &v }

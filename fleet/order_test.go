package fleet

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

const (
	ms = int64(1_000_000)
	// t0 is a wall time all synthetic runs fail around.
	t0 = int64(1_764_000_000_000_000_000)
)

func bound(v int64) *int64 { return &v }

// synthetic builds a run on host/boot whose clock pairs monotonic 1e12 with
// wall t0 shifted by skew (so each host's run clock differs), failing at
// wall time t0+at, with the given error bound (nil: none).
func synthetic(path, host, boot string, rank *int, at int64, errNS *int64) Run {
	mono := int64(1e12) + int64(len(host))*7_777_777
	c := &Clock{MonotonicNS: mono, RealtimeNS: t0, ErrorNS: errNS}
	if errNS == nil {
		c.ErrorWhy = "the kernel marks the wall clock unsynchronized (STA_UNSYNC)"
	}
	return Run{Path: path, ID: path, Host: host, BootID: boot, Rank: rank, WorldSize: ip(4), Clock: c,
		Failure: &Failure{TimeNS: mono + at, Symbol: "cuMemAlloc_v2", ResultName: "CUDA_ERROR_OUT_OF_MEMORY"}}
}

func noFailure(r Run) Run { r.Failure = nil; return r }

type consequenceWant struct {
	path     string
	min, max int64
	exact    bool
}

func TestOrder(t *testing.T) {
	tests := []struct {
		name         string
		runs         []Run
		order        string
		first        string
		unordered    []report.Unordered
		consequences []consequenceWant
		missing      []int
		noteHas      []string
	}{
		{
			name: "clearly ordered across hosts",
			runs: []Run{
				synthetic("c.db", "node-c", "boot-c", ip(2), 50*ms, bound(1*ms)),
				synthetic("a.db", "node-a", "boot-a", ip(0), 0, bound(1*ms)),
				synthetic("b.db", "node-b", "boot-b", ip(1), 10*ms, bound(2*ms)),
				noFailure(synthetic("d.db", "node-d", "boot-d", ip(3), 0, bound(1*ms))),
			},
			order: OrderCertain, first: "a.db", unordered: []report.Unordered{},
			consequences: []consequenceWant{{"b.db", 7 * ms, 13 * ms, false}, {"c.db", 48 * ms, 52 * ms, false}},
			missing:      []int{},
		},
		{
			name: "overlapping intervals",
			runs: []Run{
				synthetic("a.db", "node-a", "boot-a", ip(0), 0, bound(5*ms)),
				synthetic("b.db", "node-b", "boot-b", ip(1), 3*ms, bound(5*ms)),
				synthetic("c.db", "node-c", "boot-c", ip(2), 100*ms, bound(5*ms)),
				noFailure(synthetic("d.db", "node-d", "boot-d", ip(3), 0, nil)),
			},
			order: OrderUncertain, first: "a.db",
			unordered:    []report.Unordered{{RunPath: "b.db", Reason: ReasonOverlap, OverlapNS: bound(7 * ms)}},
			consequences: []consequenceWant{{"c.db", 90 * ms, 110 * ms, false}},
			missing:      []int{},
			noteHas:      []string{"uncertain", "b.db (intervals overlap by 7000000 ns)"},
		},
		{
			name: "a run without a clock bound cannot be ordered against other hosts",
			runs: []Run{
				synthetic("a.db", "node-a", "boot-a", ip(0), 0, bound(1*ms)),
				synthetic("b.db", "node-b", "boot-b", ip(1), 500*ms, nil),
				synthetic("c.db", "node-c", "boot-c", ip(2), 20*ms, bound(1*ms)),
				noFailure(synthetic("d.db", "node-d", "boot-d", ip(3), 0, bound(1*ms))),
			},
			order: OrderUncertain, first: "a.db",
			unordered:    []report.Unordered{{RunPath: "b.db", Reason: ReasonNoBound}},
			consequences: []consequenceWant{{"c.db", 18 * ms, 22 * ms, false}},
			missing:      []int{},
			noteHas:      []string{"b.db (host node-b) has no clock bound (the kernel marks the wall clock unsynchronized (STA_UNSYNC))"},
		},
		{
			name: "same host and boot order exactly on their shared clock, without a bound",
			runs: []Run{
				sameBoot(synthetic("late.db", "node-a", "boot-1", ip(1), 0, nil), 1_000_250_000),
				sameBoot(synthetic("early.db", "node-a", "boot-1", ip(0), 0, nil), 1_000_000_000),
				noFailure(synthetic("x.db", "node-b", "boot-b", ip(2), 0, nil)),
				noFailure(synthetic("y.db", "node-b", "boot-b", ip(3), 0, nil)),
			},
			order: OrderCertain, first: "early.db", unordered: []report.Unordered{},
			consequences: []consequenceWant{{"late.db", 250_000, 250_000, true}},
			missing:      []int{},
		},
		{
			name: "same host, another boot: no shared clock",
			runs: []Run{
				sameBoot(synthetic("early.db", "node-a", "boot-1", ip(0), 0, nil), 1_000_000_000),
				sameBoot(synthetic("late.db", "node-a", "boot-2", ip(1), 0, nil), 1_000_250_000),
			},
			order: OrderUncertain, first: "early.db",
			unordered:    []report.Unordered{{RunPath: "late.db", Reason: ReasonNoBound}},
			consequences: nil,
			missing:      []int{2, 3},
		},
		{
			name: "containers on one node: other host names, one boot, one clock",
			runs: []Run{
				sameBoot(synthetic("pod-b.db", "pod-b", "boot-1", ip(1), 0, nil), 1_000_000_900),
				sameBoot(synthetic("pod-a.db", "pod-a", "boot-1", ip(0), 0, nil), 1_000_000_000),
			},
			order: OrderCertain, first: "pod-a.db", unordered: []report.Unordered{},
			consequences: []consequenceWant{{"pod-b.db", 900, 900, true}},
			missing:      []int{2, 3},
		},
		{
			name: "same time on one clock",
			runs: []Run{
				sameBoot(synthetic("a.db", "node-a", "boot-1", ip(0), 0, nil), 1_000_000_000),
				sameBoot(synthetic("b.db", "node-a", "boot-1", ip(1), 0, nil), 1_000_000_000),
			},
			order: OrderUncertain, first: "a.db",
			unordered: []report.Unordered{{RunPath: "b.db", Reason: ReasonSameTime}},
			missing:   []int{2, 3},
		},
		{
			name: "missing ranks: the failing rank is often the one without a file",
			runs: []Run{
				synthetic("r0.db", "node-a", "boot-a", ip(0), 30*ms, bound(1*ms)),
				noFailure(synthetic("r1.db", "node-b", "boot-b", ip(1), 0, bound(1*ms))),
				noFailure(synthetic("r3.db", "node-d", "boot-d", ip(3), 0, bound(1*ms))),
			},
			order: OrderCertain, first: "r0.db", unordered: []report.Unordered{},
			missing: []int{2},
			noteHas: []string{"1 of 4 ranks have no run (2)", "often the one whose file is missing"},
		},
		{
			name:    "no failure anywhere",
			runs:    []Run{noFailure(synthetic("a.db", "node-a", "boot-a", ip(0), 0, bound(1*ms)))},
			order:   OrderNone,
			missing: []int{1, 2, 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Order(tt.runs)
			if res.Order != tt.order {
				t.Fatalf("order %s, want %s (notes %q)", res.Order, tt.order, res.Notes)
			}
			if tt.first == "" {
				if res.FirstFailure != nil {
					t.Errorf("first failure %s, want none", res.FirstFailure.RunPath)
				}
			} else if res.FirstFailure == nil || res.FirstFailure.RunPath != tt.first {
				t.Fatalf("first failure %+v, want %s", res.FirstFailure, tt.first)
			} else if !reflect.DeepEqual(res.FirstFailure.Unordered, tt.unordered) {
				t.Errorf("unordered %+v, want %+v", res.FirstFailure.Unordered, tt.unordered)
			}
			var got []consequenceWant
			for _, c := range res.Consequences {
				got = append(got, consequenceWant{c.RunPath, c.DelayMinNS, c.DelayMaxNS, c.Exact})
			}
			if !reflect.DeepEqual(got, tt.consequences) {
				t.Errorf("consequences %+v, want %+v", got, tt.consequences)
			}
			if !reflect.DeepEqual(res.MissingRanks, tt.missing) {
				t.Errorf("missing ranks %v, want %v", res.MissingRanks, tt.missing)
			}
			notes := noteText(res.Notes)
			for _, want := range tt.noteHas {
				if !strings.Contains(notes, want) {
					t.Errorf("notes lack %q:\n%s", want, notes)
				}
			}
		})
	}
}

// sameBoot sets a run's failure at run-clock time mono.
func sameBoot(r Run, mono int64) Run {
	r.Failure.TimeNS = mono
	return r
}

// Candidates are listed earliest first, each with its interval; those with
// no mapping come last.
func TestCandidatesIntervals(t *testing.T) {
	a := synthetic("a.db", "node-a", "boot-a", ip(0), 40*ms, bound(3*ms))
	b := synthetic("b.db", "node-b", "boot-b", ip(1), 10*ms, nil)
	c := synthetic("c.db", "node-c", "boot-c", nil, 0, nil)
	c.Clock = nil
	c.Failure.Rank = ip(2) // the failing process named its rank
	res := Order([]Run{a, b, c})
	var paths []string
	for _, cd := range res.Candidates {
		paths = append(paths, cd.RunPath)
	}
	if !reflect.DeepEqual(paths, []string{"b.db", "a.db", "c.db"}) {
		t.Fatalf("candidates %v, want by estimate, unmapped last", paths)
	}
	ca := res.Candidates[1]
	if *ca.WallNS != t0+40*ms || *ca.EarliestNS != t0+37*ms || *ca.LatestNS != t0+43*ms || *ca.ClockErrorNS != 3*ms {
		t.Errorf("a's interval %d [%d, %d]", *ca.WallNS-t0, *ca.EarliestNS-t0, *ca.LatestNS-t0)
	}
	if cb := res.Candidates[0]; cb.EarliestNS != nil || cb.WallNS == nil {
		t.Errorf("b has no bound: want an estimate and no interval, got %+v", cb)
	}
	if cc := res.Candidates[2]; cc.WallNS != nil || cc.Rank == nil || *cc.Rank != 2 {
		t.Errorf("c has no clock: want no estimate and the failing process's rank, got %+v", cc)
	}
	for _, cd := range res.Candidates {
		if !cd.PossiblyFirst {
			t.Errorf("%s: none can be ordered, so each could be first", cd.RunPath)
		}
	}
	if !strings.Contains(noteText(res.Notes), "c.db (host node-c) has no wall-clock mapping") {
		t.Errorf("notes %q", res.Notes)
	}
}

// Ranks come from a run's rank or, for one recorder per node, its list;
// disagreeing world sizes and duplicate ranks are noted.
func TestMissingRanks(t *testing.T) {
	node := func(path string, ranks []int, ws int) Run {
		return Run{Path: path, Ranks: ranks, WorldSize: ip(ws)}
	}
	tests := []struct {
		name    string
		runs    []Run
		world   *int
		missing []int
		noteHas string
		kind    NoteKind
	}{
		{"two nodes of four ranks each", []Run{node("n0.db", []int{0, 1, 2, 3}, 8), node("n1.db", []int{4, 5, 6, 7}, 8)}, ip(8), []int{}, "", ""},
		{"a node missing", []Run{node("n0.db", []int{0, 1, 2, 3}, 12), node("n2.db", []int{8, 9, 10, 11}, 12)}, ip(12),
			[]int{4, 5, 6, 7}, "4 of 12 ranks have no run (4, 5, 6, 7)", NoteMissingRanks},
		{"world sizes disagree", []Run{node("a.db", []int{0}, 2), node("b.db", []int{1}, 3)}, ip(3), []int{2}, "disagree on the world size (2, 3)", NoteWorldSizeDisagrees},
		{"duplicate rank", []Run{node("a.db", []int{0}, 2), node("b.db", []int{0}, 2), node("c.db", []int{1}, 2)}, ip(2), []int{},
			"rank 0 has 2 runs (a.db, b.db)", NoteDuplicateRank},
		{"a run names no rank", []Run{node("a.db", []int{0}, 3), {Path: "b.db", WorldSize: ip(3)}}, ip(3), []int{1, 2},
			"1 run(s) name no rank and may be among them", NoteMissingRanks},
		{"no world size", []Run{{Path: "a.db", Rank: ip(0)}}, nil, []int{}, "", ""},
		{"absurd world size", []Run{node("a.db", []int{0}, 1<<30)}, ip(1 << 30), []int{}, "too large", NoteWorldSizeTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Order(tt.runs)
			if !reflect.DeepEqual(res.WorldSize, tt.world) || !reflect.DeepEqual(res.MissingRanks, tt.missing) {
				t.Errorf("world %v missing %v, want %v %v", res.WorldSize, res.MissingRanks, tt.world, tt.missing)
			}
			notes := noteText(res.Notes)
			if tt.noteHas != "" && !strings.Contains(notes, tt.noteHas) {
				t.Errorf("notes lack %q:\n%s", tt.noteHas, notes)
			}
			if tt.noteHas == "" && notes != "" {
				t.Errorf("unexpected notes:\n%s", notes)
			}
			if tt.kind != "" && !slices.Contains(kindsOf(res.Notes), tt.kind) {
				t.Errorf("note kinds %v lack %s", kindsOf(res.Notes), tt.kind)
			}
		})
	}
}

// noteText is the notes' texts, one a line.
func noteText(ns []Note) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = n.Text
	}
	return strings.Join(s, "\n")
}

// kindsOf is the notes' kinds, in order.
func kindsOf(ns []Note) []NoteKind {
	var ks []NoteKind
	for _, n := range ns {
		ks = append(ks, n.Kind)
	}
	return ks
}

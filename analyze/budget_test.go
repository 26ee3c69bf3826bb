package analyze

import (
	"bytes"
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// budgetPart is a part as the tests compare it.
type budgetPart struct {
	kind  string
	pid   uint32 // 0: none
	bytes uint64
	bound string
}

func TestBudgetAtTheFailureAddsUpToTheTotal(t *testing.T) {
	const allocSym, freeSym = 0, 1
	base := tClock + 100*ms
	failAt := base + 50*ms
	failing := call(allocSym, failAt, 2, cuda.Fields{Has: cuda.FieldSize, Size: 4 * gib})
	// The round the failure triggered: the framebuffer (512 MiB reserved)
	// and the processes: pid 7 (recorded) and pid 99 (not).
	round := func(round uint64, used7 uint64, withProcs bool) []store.Sample {
		total, reserved := 16*gib, 512*mibB
		used := used7 + 2*gib
		free := total - reserved - used
		trig := []store.Trigger{{PID: 7, TID: 7, End: failAt}}
		fb := store.Sample{Round: round, GPU: store.GPURef{Index: 0}, Kind: store.KindFramebuffer, Scope: store.ScopeDevice,
			API: "nvmlDeviceGetMemoryInfo_v2", Struct: "nvmlMemory_v2_t", Status: store.Status{Name: "NVML_SUCCESS"},
			Start: failAt + 1000, End: failAt + 2000, Total: &total, Reserved: &reserved, Used: &used, Free: &free, Triggers: trig}
		out := []store.Sample{fb}
		if withProcs {
			ps := procSample(failAt+2000, "NVML_SUCCESS", map[uint32]uint64{7: used7, 99: 2 * gib})
			ps.Round, ps.Triggers = round, trig
			out = append(out, ps)
		}
		return out
	}
	cases := []struct {
		name    string
		events  []store.Event
		samples []store.Sample
		want    []budgetPart
	}{
		{"a recorded process splits into its traced allocations and its contexts",
			[]store.Event{alloc(allocSym, base, 12*gib, 0xa0), failing},
			round(9, 12*gib+256*mibB, true),
			[]budgetPart{{"reserved", 0, 512 * mibB, "exact"}, {"traced", 7, 12 * gib, "exact"}, {"untraced", 7, 256 * mibB, "exact"},
				{"process-not-recorded", 99, 2 * gib, "exact"}, {"unattributed", 0, 0, "exact"}, {"free", 0, 16*gib - 512*mibB - 14*gib - 256*mibB, "exact"}}},
		{"a free between the failure and its sample leaves the process whole",
			[]store.Event{alloc(allocSym, base, 12*gib, 0xa0), alloc(allocSym, base+10*ms, gib, 0xb0), failing, free(freeSym, failAt+500, 0xb0)},
			round(9, 12*gib+256*mibB, true),
			[]budgetPart{{"reserved", 0, 512 * mibB, "exact"}, {"process", 7, 12*gib + 256*mibB, "exact"},
				{"process-not-recorded", 99, 2 * gib, "exact"}, {"unattributed", 0, 0, "exact"}, {"free", 0, 16*gib - 512*mibB - 14*gib - 256*mibB, "exact"}}},
		{"without a per-process reading of that round, used is one part",
			[]store.Event{alloc(allocSym, base, 12*gib, 0xa0), failing},
			round(9, 12*gib, false),
			[]budgetPart{{"reserved", 0, 512 * mibB, "exact"}, {"unattributed", 0, 14 * gib, "exact"}, {"free", 0, 16*gib - 512*mibB - 14*gib, "exact"}}},
		{"no failure, no budget", []store.Event{alloc(allocSym, base, 12*gib, 0xa0)}, round(9, 12*gib, true), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := runSpec{symbols: []string{"cuMemAlloc_v2", "cuMemFree_v2"}, events: tc.events, samples: tc.samples}.analyze(t, nil)
			if tc.want == nil {
				if len(rep.Budget) != 0 {
					t.Fatalf("budget %+v, want none", rep.Budget)
				}
				return
			}
			if len(rep.Budget) != 1 {
				t.Fatalf("budgets %+v, want one", rep.Budget)
			}
			b := rep.Budget[0]
			var got []budgetPart
			var sum uint64
			for _, p := range b.Parts {
				bp := budgetPart{kind: p.Kind, bytes: p.Bytes, bound: p.Bound}
				if p.PID != nil {
					bp.pid = *p.PID
				}
				got = append(got, bp)
				sum += p.Bytes
			}
			if !equalParts(got, tc.want) {
				t.Errorf("parts\n%+v\nwant\n%+v", got, tc.want)
			}
			if sum != b.Total || b.Total != 16*gib || b.Note != "" {
				t.Errorf("parts add up to %d of %d (note %q)", sum, b.Total, b.Note)
			}
			checkSchema(t, rep)
		})
	}
}

// equalParts compares parts in order.
func equalParts(a, b []budgetPart) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkSchema validates a report against the published JSON Schema.
func checkSchema(t *testing.T, rep *report.Report) {
	t.Helper()
	var b bytes.Buffer
	if err := report.WriteJSON(&b, rep); err != nil {
		t.Fatal(err)
	}
	if err := report.ValidateReportJSON(b.Bytes()); err != nil {
		t.Errorf("the report does not follow the schema: %v", err)
	}
}

package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

func TestBudgetAtTheLeastHeadroomOfARunWithNoFailure(t *testing.T) {
	const allocSym, freeSym = 0, 1
	base := tClock + 100*ms
	// A round: the framebuffer (16 GiB, 512 MiB reserved) and the
	// processes NVML lists: pid 7 (recorded, using used7) and pid 99
	// (not recorded, 2 GiB).
	round := func(n uint64, at int64, used7 uint64) []store.Sample {
		reserved := 512 * mibB
		fb := fbSample(at, reserved+used7+2*gib)
		fb.Round, fb.Reserved = n, &reserved
		used := used7 + 2*gib
		fb.Used = &used
		ps := procSample(at+1000, "NVML_SUCCESS", map[uint32]uint64{7: used7, 99: 2 * gib})
		ps.Round = n
		return []store.Sample{fb, ps}
	}
	rounds := func(rs ...[]store.Sample) []store.Sample {
		var out []store.Sample
		for _, r := range rs {
			out = append(out, r...)
		}
		return out
	}
	ctx := 256 * mibB // pid 7's context: NVML counts it, no call sizes it
	cases := []struct {
		name    string
		events  []store.Event
		samples []store.Sample
		want    []budgetPart
		wantAt  int64
		note    string // a word the budget's note holds; "" for none
	}{
		{"at a sample: its round's parts, the recorded process split into traced and context",
			[]store.Event{alloc(allocSym, base+10*ms, 12*gib, 0xa0), free(freeSym, base+150*ms, 0xa0)},
			rounds(round(1, base, ctx), round(2, base+100*ms, 12*gib+ctx), round(3, base+200*ms, ctx)),
			[]budgetPart{{"reserved", 0, 512 * mibB, "exact"}, {"traced", 7, 12 * gib, "exact"}, {"untraced", 7, ctx, "exact"},
				{"process-not-recorded", 99, 2 * gib, "exact"}, {"unattributed", 0, 0, "exact"},
				{"free", 0, 16*gib - 512*mibB - 12*gib - ctx - 2*gib, "exact"}},
			base + 10*ms, ""},
		{"between agreeing samples: the traced part and free at the moment of the least free",
			[]store.Event{alloc(allocSym, base+10*ms, 2*gib, 0xa0), alloc(allocSym, base+50*ms, 10*gib, 0xb0), free(freeSym, base+60*ms, 0xb0)},
			rounds(round(1, base+20*ms, 2*gib+ctx), round(2, base+100*ms, 2*gib+ctx)),
			[]budgetPart{{"reserved", 0, 512 * mibB, "exact"}, {"traced", 7, 12 * gib, "exact"}, {"untraced", 7, ctx, "exact"},
				{"process-not-recorded", 99, 2 * gib, "exact"}, {"unattributed", 0, 0, "exact"},
				{"free", 0, 16*gib - 512*mibB - 12*gib - ctx - 2*gib, "exact"}},
			base + 50*ms, ""},
		{"between samples that disagree: none, since the nearest sample's parts would show more free than the headroom",
			[]store.Event{alloc(allocSym, base+10*ms, 2*gib, 0xa0), alloc(allocSym, base+50*ms, 10*gib, 0xb0), free(freeSym, base+60*ms, 0xb0)},
			// A second context appeared between the samples.
			rounds(round(1, base+20*ms, 2*gib+ctx), round(2, base+100*ms, 2*gib+2*ctx)),
			nil, 0, ""},
		{"an allocation of unknown size: traced is at least, the rest at most",
			[]store.Event{call(allocSym, base+5*ms, 0, cuda.Fields{Has: cuda.FieldPtr, Ptr: 0xc0}), alloc(allocSym, base+10*ms, 12*gib, 0xa0),
				free(freeSym, base+150*ms, 0xa0)},
			rounds(round(1, base, ctx), round(2, base+100*ms, 12*gib+ctx), round(3, base+200*ms, ctx)),
			[]budgetPart{{"reserved", 0, 512 * mibB, "exact"}, {"traced", 7, 12 * gib, "at-least"}, {"untraced", 7, ctx, "at-most"},
				{"process-not-recorded", 99, 2 * gib, "exact"}, {"unattributed", 0, 0, "exact"},
				{"free", 0, 16*gib - 512*mibB - 12*gib - ctx - 2*gib, "exact"}},
			base + 100*ms, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := runSpec{symbols: []string{"cuMemAlloc_v2", "cuMemFree_v2"}, events: tc.events, samples: tc.samples}.analyze(t, nil)
			if b := budgetsAt(rep, "first-failure"); len(b) != 0 {
				t.Fatalf("a budget at a failure in a run with none: %+v", b)
			}
			bs := budgetsAt(rep, "least-headroom")
			if tc.want == nil {
				if len(bs) != 0 {
					t.Errorf("budgets %+v, want none at a least free that is a bound", bs)
				}
				return
			}
			if len(bs) != 1 {
				t.Fatalf("budgets %+v, want one at the least headroom", rep.Budget)
			}
			b := bs[0]
			var got []budgetPart
			var sum uint64
			for _, p := range b.Parts {
				var pid uint32
				if p.PID != nil {
					pid = *p.PID
				}
				got = append(got, budgetPart{p.Kind, pid, p.Bytes, p.Bound})
				sum += p.Bytes
			}
			if !equalParts(got, tc.want) {
				t.Errorf("parts\n got %+v\nwant %+v", got, tc.want)
			}
			if sum != b.Total {
				t.Errorf("parts add up to %d, total %d", sum, b.Total)
			}
			if b.TimeNS != tc.wantAt {
				t.Errorf("at %d, want %d", b.TimeNS, tc.wantAt)
			}
			if (tc.note == "") != (b.Note == "") || !strings.Contains(b.Note, tc.note) {
				t.Errorf("note %q, want one with %q", b.Note, tc.note)
			}
			checkSchema(t, rep)
		})
	}
}

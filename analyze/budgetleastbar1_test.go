package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

func TestBudgetOfBAR1AtTheLeastHeadroomSplitsTracedMappingsByProcessAndKind(t *testing.T) {
	const allocSym, exportSym, openSym, closeSym, grantSym = 0, 1, 2, 3, 4
	key1 := []byte("0123456789abcdef0123456789abcdef")
	key2 := []byte("fedcba9876543210fedcba9876543210")
	ev := func(sym uint16, pid uint32, end int64, f cuda.Fields) store.Event {
		return store.Event{Symbol: sym, PID: pid, TID: pid, Start: end - 1000, End: end, Ctx: 1, Dev: 0, Stack: -1, Fields: f}
	}
	at := func(d int64) int64 { return tClock + d*ms }
	// pid 7 allocates and exports 64 MiB and 96 MiB; pid 8 maps them.
	exports := []store.Event{
		ev(allocSym, 7, at(10), cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: 64 * mibB, Ptr: 0x1000}),
		ev(exportSym, 7, at(11), cuda.Fields{Has: cuda.FieldTarget | cuda.FieldKey, Target: 0x1000, Key: key1}),
		ev(allocSym, 7, at(12), cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: 96 * mibB, Ptr: 0x2000}),
		ev(exportSym, 7, at(13), cuda.Fields{Has: cuda.FieldTarget | cuda.FieldKey, Target: 0x2000, Key: key2}),
	}
	open := func(end int64, key []byte, ptr uint64) store.Event {
		return ev(openSym, 8, end, cuda.Fields{Has: cuda.FieldKey | cuda.FieldFlags | cuda.FieldPtr, Key: key, Flags: 1, Ptr: ptr})
	}
	closeAt := func(end int64, ptr uint64) store.Event {
		return ev(closeSym, 8, end, cuda.Fields{Has: cuda.FieldTarget, Target: ptr})
	}
	// A grant by pid 7 of 32 MiB to three peers: one mapping, or one per peer.
	grant := accessGrant(at(60), 0, 32*mibB, 0, 1, 2, 3)
	grant.Symbol = grantSym
	// bar1 is a BAR1 sample of round n (256 MiB aperture, 4 MiB the driver's).
	bar1 := func(n uint64, t int64, free uint64) store.Sample {
		s := bar1Of(0, t, free)
		s.Round = n
		return s
	}
	open9 := func(end int64, key []byte, ptr uint64) store.Event {
		e := open(end, key, ptr)
		e.PID, e.TID = 9, 9
		return e
	}
	close9 := func(end int64, ptr uint64) store.Event {
		e := closeAt(end, ptr)
		e.PID, e.TID = 9, 9
		return e
	}
	with := func(evs ...store.Event) []store.Event { return append(append([]store.Event{}, exports...), evs...) }
	cases := []struct {
		name    string
		events  []store.Event
		samples []store.Sample
		want    []budgetPart // nil: no budget at the least headroom
		wantAt  int64
		note    string // a word the budget's note holds; "" for none
		exit8   int64  // when the importer exited (0: it did not)
	}{
		{"at a sample: the importer's IPC mappings the sample saw, the rest of used, free",
			with(open(at(100), key1, 0x9000), closeAt(at(200), 0x9000)),
			// No sample before the mapping: the one after it is the least.
			[]store.Sample{bar1(2, at(150), 188*mibB), bar1(3, at(250), 252*mibB)},
			[]budgetPart{{"mapping", 8, 64 * mibB, "exact"}, {"unattributed", 0, 4 * mibB, "exact"}, {"free", 0, 188 * mibB, "exact"}},
			at(150), "", 0},
		{"between agreeing samples: the mappings live at the moment of the least free",
			with(open(at(100), key1, 0x9000), open(at(120), key2, 0xa000), closeAt(at(140), 0xa000)),
			[]store.Sample{bar1(1, at(50), 252*mibB), bar1(2, at(200), 188*mibB)},
			[]budgetPart{{"mapping", 8, 160 * mibB, "exact"}, {"unattributed", 0, 4 * mibB, "exact"}, {"free", 0, 92 * mibB, "exact"}},
			at(120), "", 0},
		{"between samples that disagree: none, the least free is a bound",
			with(open(at(100), key1, 0x9000), open(at(120), key2, 0xa000), closeAt(at(140), 0xa000)),
			// 8 MiB more were mapped by no traced call between the samples.
			[]store.Sample{bar1(1, at(50), 252*mibB), bar1(2, at(200), 180*mibB)},
			nil, 0, "", 0},
		{"two processes, two kinds: a grant to several peers makes its process's part at least",
			with(grant, open(at(100), key1, 0x9000), closeAt(at(200), 0x9000)),
			[]store.Sample{bar1(1, at(150), 156*mibB), bar1(2, at(250), 220*mibB)},
			[]budgetPart{{"mapping", 7, 32 * mibB, "at-least"}, {"mapping", 8, 64 * mibB, "exact"},
				{"unattributed", 0, 4 * mibB, "at-most"}, {"free", 0, 156 * mibB, "exact"}},
			at(150), "", 0},
		{"traced mappings above NVML's used: a note, no negative part",
			with(open(at(100), key1, 0x9000)),
			[]store.Sample{bar1(1, at(150), 250*mibB)},
			[]budgetPart{{"mapping", 8, 64 * mibB, "exact"}, {"unattributed", 0, 0, "exact"}, {"free", 0, 250 * mibB, "exact"}},
			at(150), "more than NVML's BAR1 used", 0},
		{"an importer that exited holding its mappings has no part at a later least free",
			// pid 8 maps 64 MiB and exits; pid 9 then maps 96 MiB.
			with(open(at(100), key1, 0x9000), open9(at(250), key2, 0xa000), close9(at(350), 0xa000)),
			[]store.Sample{bar1(1, at(50), 252*mibB), bar1(2, at(200), 252*mibB), bar1(3, at(300), 156*mibB), bar1(4, at(400), 252*mibB)},
			[]budgetPart{{"mapping", 9, 96 * mibB, "exact"}, {"unattributed", 0, 4 * mibB, "exact"}, {"free", 0, 156 * mibB, "exact"}},
			at(250), "", at(150)},
		{"at a sample after the importer's last call and before its exit: its mappings at most, the rest at least",
			with(open(at(100), key1, 0x9000)),
			[]store.Sample{bar1(1, at(150), 188*mibB), bar1(2, at(400), 252*mibB)},
			[]budgetPart{{"mapping", 8, 64 * mibB, "at-most"}, {"unattributed", 0, 4 * mibB, "at-least"}, {"free", 0, 188 * mibB, "exact"}},
			at(150), "", at(300)},
	}
	one := []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			procs := []store.Process{{PID: 7, Start: tClock, Exe: "/bin/exporter", Root: true, Devices: one},
				{PID: 8, Start: tClock, Exe: "/bin/importer", Args: []string{"importer", "--rank", "1"}, Devices: one},
				{PID: 9, Start: tClock, Exe: "/bin/importer", Args: []string{"importer", "--rank", "2"}, Devices: one}}
			if tc.exit8 != 0 {
				procs[1].Exit = &store.Exit{Time: tc.exit8}
			}
			rep := runSpec{symbols: []string{"cuMemAlloc_v2", "cuIpcGetMemHandle", "cuIpcOpenMemHandle_v2", "cuIpcCloseMemHandle", "cuMemSetAccess"},
				events: tc.events, samples: tc.samples, procs: procs}.analyze(t, nil)
			bs := budgetsAt(rep, "least-headroom")
			if tc.want == nil {
				if len(bs) != 0 {
					t.Errorf("budgets %+v, want none at a least free that is a bound", bs)
				}
				return
			}
			if len(bs) != 1 || bs[0].View != "bar1" {
				t.Fatalf("budgets %+v, want BAR1's at the least headroom", rep.Budget)
			}
			b := bs[0]
			var got []budgetPart
			var sum uint64
			for _, p := range b.Parts {
				bp := budgetPart{kind: p.Kind, bytes: p.Bytes, bound: p.Bound}
				if p.PID != nil {
					bp.pid = *p.PID
					checkMappingPart(t, p)
				}
				got = append(got, bp)
				sum += p.Bytes
			}
			if !equalParts(got, tc.want) {
				t.Errorf("parts\n got %+v\nwant %+v", got, tc.want)
			}
			if sum != b.Total && tc.note == "" {
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

// checkMappingPart checks that a process's part of a BAR1 budget names
// the process and its kind of mapping.
func checkMappingPart(t *testing.T, p report.BudgetPart) {
	t.Helper()
	want := map[uint32][2]string{7: {"peer-access-range", "/bin/exporter"}, 8: {"ipc-mapping", "importer --rank 1"},
		9: {"ipc-mapping", "importer --rank 2"}}[*p.PID]
	if p.Kind != "mapping" || p.Mapping != want[0] || p.Command != want[1] || !strings.Contains(p.Source, "traced mappings of kind "+want[0]) {
		t.Errorf("part %+v: want pid %d's %s mappings", p, *p.PID, want[0])
	}
}

package flight

import (
	"reflect"
	"slices"
	"testing"

	"github.com/retrivium/forensic/store"
)

// seg is a closed segment i covering [10i, 10i+10] with bytes; fail adds
// failures at those times.
func seg(i uint64, bytes int64, fail ...int64) Segment {
	s := Segment{File: SegmentName(i), Seq: i, Start: int64(10 * i), End: int64(10*i + 10), Bytes: bytes, Calls: 100 * i}
	if len(fail) > 0 {
		s.Failures, s.FirstFailure, s.LastFailure = uint64(len(fail)), slices.Min(fail), slices.Max(fail)
	}
	return s
}

// live is the live segment i, written up to 10i+5.
func live(i uint64, bytes int64, fail ...int64) Segment {
	s := seg(i, bytes, fail...)
	s.End, s.Live = s.Start+5, true
	return s
}

func index(maxBytes int64, keepBefore, keepAfter int64, segs ...Segment) *Index {
	x := NewIndex("rec", Policy{MaxBytes: maxBytes, SegmentBytes: 10})
	x.KeepBeforeNS, x.KeepAfterNS = keepBefore, keepAfter
	x.Segments = segs
	return x
}

func drops(reason string, seqs ...uint64) []Drop {
	var out []Drop
	for _, s := range seqs {
		out = append(out, Drop{Seq: s, Reason: reason})
	}
	return out
}

func TestPlan(t *testing.T) {
	const ret, cut = store.GapRetention, store.GapWindowCut
	tests := []struct {
		name    string
		x       *Index
		reserve int64
		want    []Drop
		fits    bool
		// protected are the segments protected after Apply.
		protected []uint64
	}{
		{"nothing to drop", index(100, 0, 0, seg(1, 30), seg(2, 30), live(3, 30)), 0, nil, true, nil},
		{"routine history, oldest first", index(100, 0, 0, seg(1, 30), seg(2, 30), seg(3, 30), seg(4, 30), live(5, 40)), 0,
			drops(ret, 1, 2), true, nil},
		{"the live segment counted at the reserve", index(100, 0, 0, seg(1, 30), seg(2, 30), seg(3, 30), live(4, 1)), 50,
			drops(ret, 1, 2), true, nil},
		{"a new segment's reserve, no live one", index(100, 0, 0, seg(1, 40), seg(2, 40)), 40, drops(ret, 1), true, nil},
		// A failure at 45 with 12 before and after protects [33, 57]:
		// segments 3, 4 and 5. Older history goes first, then the newer
		// routine segment 6, and the window stays whole.
		{"a window kept whole while routine history goes",
			index(120, 12, 12, seg(1, 30), seg(2, 30), seg(3, 30), seg(4, 30, 45), seg(5, 30), seg(6, 30), live(7, 0)), 30,
			drops(ret, 1, 2, 6), true, []uint64{3, 4, 5}},
		{"the bound held when windows alone exceed it",
			index(70, 12, 12, seg(3, 30), seg(4, 30, 45), seg(5, 30), live(6, 0)), 30,
			drops(cut, 3, 4), true, []uint64{5}},
		// A failure at 52 in the live segment, 15 before: [37, 52] covers
		// segments 3 and 4, so 1 and 2 go before them.
		{"a failure in the live segment protects its predecessors",
			index(100, 15, 0, seg(1, 30), seg(2, 30), seg(3, 30), seg(4, 30), live(5, 40, 52)), 0,
			drops(ret, 1, 2), true, []uint64{3, 4, 5}},
		// A failure at 25 with 30 after protects up to 55: the live segment
		// 5, written up to 55, as it is written.
		{"keep-after extends to the segments written after",
			index(1000, 0, 30, seg(1, 30), seg(2, 30, 25), seg(3, 30), seg(4, 30), live(5, 10)), 0,
			nil, true, []uint64{2, 3, 4, 5}},
		// A quiet failure at 15 keeps segment 1 ([13, 17], 2 before and
		// after); a failure at 61 keeps 5 and 6 ([59, 63]), 5 busy. Cutting
		// the oldest window, 1, is not enough: 5 must go too, and then 1
		// fits again and is kept.
		{"an older window's cut taken back once a newer cut made room",
			index(120, 2, 2, seg(1, 5, 15), seg(2, 30), seg(5, 60), seg(6, 40, 61), live(7, 0)), 60,
			append(drops(ret, 2), drops(cut, 5)...), true, []uint64{1, 6}},
		// Failures at 15, 25, 35 keep 1, 2 and 3 each; all three cut, 85
		// left of 100: one 10-byte segment fits again, the newest, 2.
		{"the newest cut that fits again taken back, not an older one",
			index(100, 2, 2, seg(1, 10, 15), seg(2, 10, 25), seg(3, 60, 35), live(4, 0)), 85,
			drops(cut, 1, 3), true, []uint64{2}},
		// Segment 1 would fit again once 2 has gone, but routine history
		// goes oldest first: no hole is left in it.
		{"routine history not taken back",
			index(100, 0, 0, seg(1, 5), seg(2, 50), seg(3, 50), live(4, 0)), 10,
			drops(ret, 1, 2), true, nil},
		{"a live segment larger than the bound", index(50, 0, 0, seg(1, 10), live(2, 60)), 0, drops(ret, 1), false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.x.Bytes()
			pl := tt.x.Plan(tt.reserve)
			if !reflect.DeepEqual(pl.Drop, tt.want) || pl.Fits != tt.fits {
				t.Fatalf("plan drops %v fits %v, want %v fits %v", pl.Drop, pl.Fits, tt.want, tt.fits)
			}
			gone := tt.x.Apply(pl)
			var freed int64
			for _, s := range gone {
				freed += s.Bytes
			}
			if len(gone) != len(tt.want) || tt.x.Bytes() != before-freed {
				t.Errorf("Apply removed %d segments (%d bytes), want %d", len(gone), freed, len(tt.want))
			}
			if tt.fits && pl.Bytes > tt.x.MaxBytes {
				t.Errorf("plan leaves %d bytes, over the bound %d", pl.Bytes, tt.x.MaxBytes)
			}
			var prot []uint64
			for _, s := range tt.x.Segments {
				if s.Protected {
					prot = append(prot, s.Seq)
				}
			}
			if !slices.Equal(prot, tt.protected) {
				t.Errorf("protected %v, want %v", prot, tt.protected)
			}
		})
	}
}

// Dropped ranges: adjacent segments dropped for the same reason are one
// range with their figures summed; a window-cut stays apart; the window
// of a failure whose segment was cut still protects its neighbours.
func TestApplyRecordsDroppedRanges(t *testing.T) {
	x := index(1000, 0, 12, seg(1, 10), seg(2, 10), seg(3, 10, 31, 33), seg(4, 10), seg(5, 10))
	x.Apply(Plan{Drop: drops(store.GapRetention, 2)})
	x.Apply(Plan{Drop: drops(store.GapRetention, 1)})
	x.Apply(Plan{Drop: drops(store.GapWindowCut, 3)})
	want := []Dropped{
		{Gap: store.Gap{From: 10, To: 30, Calls: 300, Bytes: 20, Reason: store.GapRetention}, FirstSeq: 1, LastSeq: 2},
		{Gap: store.Gap{From: 30, To: 40, Calls: 300, Failures: 2, Bytes: 10, Reason: store.GapWindowCut}, FirstSeq: 3, LastSeq: 3,
			FirstFailure: 31, LastFailure: 33},
	}
	if !reflect.DeepEqual(x.Dropped, want) {
		t.Fatalf("dropped\n %+v\nwant\n %+v", x.Dropped, want)
	}
	// The failures at 31 and 33, 12 after: up to 45, segment 4 [40, 50].
	if !x.Segments[0].Protected || x.Segments[1].Protected {
		t.Errorf("segments %+v: want 4 still protected by the cut failure's window, 5 not", x.Segments)
	}
	gaps := x.Gaps()
	if len(gaps) != 2 || gaps[0] != want[0].Gap || gaps[1] != want[1].Gap {
		t.Errorf("Gaps = %+v", gaps)
	}
	// A later range dropped for retention next to the first merges with it
	// only when adjacent: segment 5 is not.
	x.Apply(Plan{Drop: drops(store.GapRetention, 5)})
	if len(x.Dropped) != 3 || x.Dropped[2].FirstSeq != 5 {
		t.Errorf("dropped %+v, want a third range for segment 5", x.Dropped)
	}
}

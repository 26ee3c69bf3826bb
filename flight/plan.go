package flight

import (
	"cmp"
	"slices"

	"github.com/retrivium/forensic/store"
)

// Drop is one closed segment a plan deletes, and why (store.GapRetention
// or store.GapWindowCut).
type Drop struct {
	Seq    uint64
	Reason string
}

// Plan is what retention decides at one moment.
type Plan struct {
	// Drop lists the segments to delete: first the oldest that no failure
	// window overlaps, then, if that was not enough, the oldest protected.
	Drop []Drop
	// Bytes is what the segments take after the drops, the live one
	// counted at least at the reserve.
	Bytes int64
	// Fits is false when even with every closed segment deleted the live
	// one does not fit the bound.
	Fits bool
}

// window is the span [from, to] a failure (or the failures of one segment)
// protects, on the run clock.
type window struct{ from, to int64 }

// windows are the failure windows of the recording: of the segments on
// disk and of those already deleted (the segments around a deleted failure
// keep its window).
func (x *Index) windows(p Policy) []window {
	var ws []window
	add := func(n uint64, first, last int64) {
		if n > 0 {
			ws = append(ws, window{first - int64(p.KeepBefore), last + int64(p.KeepAfter)})
		}
	}
	for _, s := range x.Segments {
		add(s.Failures, s.FirstFailure, s.LastFailure)
	}
	for _, d := range x.Dropped {
		add(d.Failures, d.FirstFailure, d.LastFailure)
	}
	return ws
}

// protected reports whether a window overlaps [start, end].
func protected(ws []window, start, end int64) bool {
	for _, w := range ws {
		if w.from <= end && start <= w.to {
			return true
		}
	}
	return false
}

// Plan decides which closed segments to delete so that all segments, the
// live one counted at no less than reserve bytes (the size it may reach:
// SegmentBytes before it is started), fit the bound. It changes nothing;
// Apply carries the plan out on the index.
func (x *Index) Plan(reserve int64) Plan { return x.plan(reserve, true) }

// PlanRoutine is Plan without cutting into failure windows: only
// segments no window overlaps are dropped (Fits says whether that was
// enough). Under disk pressure, the earlier recordings kept in the
// directory go before a window is cut.
func (x *Index) PlanRoutine(reserve int64) Plan { return x.plan(reserve, false) }

func (x *Index) plan(reserve int64, cut bool) Plan {
	p := x.Policy()
	bound := x.Bound()
	ws := x.windows(p)
	used, live := int64(0), false
	for _, s := range x.Segments {
		if s.Live {
			live = true
			used += max(s.Bytes, reserve)
		} else {
			used += s.Bytes
		}
	}
	if !live {
		used += reserve
	}
	var pl Plan
	dropped := map[uint64]bool{}
	for _, pass := range []struct {
		protected bool
		reason    string
	}{{false, store.GapRetention}, {true, store.GapWindowCut}} {
		if pass.protected && !cut {
			break
		}
		for _, s := range x.Segments {
			if used <= bound {
				break
			}
			if s.Live || dropped[s.Seq] || protected(ws, s.Start, s.End) != pass.protected {
				continue
			}
			pl.Drop = append(pl.Drop, Drop{Seq: s.Seq, Reason: pass.reason})
			dropped[s.Seq] = true
			used -= s.Bytes
		}
	}
	pl.Drop, used = x.spareCuts(pl.Drop, used, bound)
	pl.Bytes, pl.Fits = used, used <= bound
	return pl
}

// spareCuts takes back the window-cuts of drops that the bound, with used
// bytes left after all of them, does not need: cutting the oldest window
// first may not be enough, and once a newer window's segment has gone
// too, the older one (a quiet failure's small segment) may fit again.
// It tries the latest cut first, so that what is kept is the newest
// that fits, and it never takes back a retention drop: routine history
// goes oldest first, without holes.
func (x *Index) spareCuts(drops []Drop, used, bound int64) ([]Drop, int64) {
	for i := len(drops) - 1; i >= 0; i-- {
		if drops[i].Reason != store.GapWindowCut {
			continue
		}
		j := slices.IndexFunc(x.Segments, func(s Segment) bool { return s.Seq == drops[i].Seq })
		if b := x.Segments[j].Bytes; used+b <= bound {
			used += b
			drops = slices.Delete(drops, i, i+1)
		}
	}
	return drops, used
}

// Apply carries out a plan on the index: the segments it drops leave
// Segments and join Dropped (merged with adjacent ranges of the same
// reason), and every segment's Protected flag is brought up to date. It
// returns the dropped segments, whose files are to be deleted after the
// index is written.
func (x *Index) Apply(pl Plan) []Segment {
	var gone []Segment
	for _, d := range pl.Drop {
		i := slices.IndexFunc(x.Segments, func(s Segment) bool { return s.Seq == d.Seq })
		if i < 0 || x.Segments[i].Live {
			continue
		}
		s := x.Segments[i]
		x.Segments = slices.Delete(x.Segments, i, i+1)
		gone = append(gone, s)
		x.addDropped(Dropped{Gap: store.Gap{From: s.Start, To: s.End, Calls: s.Calls, Failures: s.Failures,
			Bytes: s.Bytes, Reason: d.Reason}, FirstSeq: s.Seq, LastSeq: s.Seq,
			FirstFailure: s.FirstFailure, LastFailure: s.LastFailure})
	}
	x.Protect()
	return gone
}

// Protect brings every segment's Protected flag up to date.
func (x *Index) Protect() {
	ws := x.windows(x.Policy())
	for i := range x.Segments {
		s := &x.Segments[i]
		s.Protected = protected(ws, s.Start, s.End)
	}
}

// addDropped inserts a dropped range in sequence order and merges it with
// its neighbours when they are adjacent and were dropped for the same
// reason.
func (x *Index) addDropped(d Dropped) {
	i, _ := slices.BinarySearchFunc(x.Dropped, d.FirstSeq, func(e Dropped, seq uint64) int {
		return cmp.Compare(e.FirstSeq, seq)
	})
	x.Dropped = slices.Insert(x.Dropped, i, d)
	if i+1 < len(x.Dropped) && mergeable(x.Dropped[i], x.Dropped[i+1]) {
		x.Dropped[i] = merged(x.Dropped[i], x.Dropped[i+1])
		x.Dropped = slices.Delete(x.Dropped, i+1, i+2)
	}
	if i > 0 && mergeable(x.Dropped[i-1], x.Dropped[i]) {
		x.Dropped[i-1] = merged(x.Dropped[i-1], x.Dropped[i])
		x.Dropped = slices.Delete(x.Dropped, i, i+1)
	}
}

func mergeable(a, b Dropped) bool { return a.LastSeq+1 == b.FirstSeq && a.Reason == b.Reason }

// merged is a followed by b as one range.
func merged(a, b Dropped) Dropped {
	m := a
	m.From, m.To = min(a.From, b.From), max(a.To, b.To)
	m.Calls += b.Calls
	m.Failures += b.Failures
	m.Bytes += b.Bytes
	m.LastSeq = b.LastSeq
	switch {
	case a.Failures == 0:
		m.FirstFailure, m.LastFailure = b.FirstFailure, b.LastFailure
	case b.Failures > 0:
		m.FirstFailure, m.LastFailure = min(a.FirstFailure, b.FirstFailure), max(a.LastFailure, b.LastFailure)
	}
	return m
}

// MinPressureSegmentBytes is the smallest segment size disk pressure
// lowers segments to (Index.Lower).
const MinPressureSegmentBytes = 1 << 20

// Lower lowers the bound when the filesystem refused to write need more
// bytes into the live segment (its Bytes current), with free bytes left
// on it of which keep are to stay free: the segments may take what they
// take now plus the free space above keep, and never more than they take
// now (the write did not fit), at least a byte. The segment size is lowered with the
// bound, to half of it (at least MinPressureSegmentBytes), so that a
// closed segment and the live one still fit. The bound is never raised.
// It reports whether it lowered the bound.
func (x *Index) Lower(free, keep int64) bool {
	used := x.Bytes()
	b := max(min(used+free-keep, used), 1) // 0 would read as not lowered
	if b >= x.Bound() {
		return false
	}
	x.DiskBound = b
	x.SegmentBytes = min(x.SegmentBytes, max(b/2, MinPressureSegmentBytes))
	return true
}

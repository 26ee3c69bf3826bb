package analyze

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// Headroom: the least free memory of each sampled GPU view over the run.
//
// NVML reads free memory now and then; the traced calls say how the
// recorded processes' usage moved in between. Free at a moment between two
// samples is a sample's free corrected by the traced change since (or
// until) it. The least free of an interval between two samples lies where
// the traced usage peaked in it, after the call that took it there.
//
// The figure is exact when both samples around that moment agree with the
// traced calls between them to the byte (so nothing else changed usage in
// net: no neighbour, no context), nothing of unknown size may have been
// taken or released between the earlier sample and that moment, and no
// traced call overlapped either sample's query. Otherwise it is the lower
// of the two corrections and not exact.

// DefaultNearMissPercent is the least free framebuffer, in percent of its
// total, under which a run with no failure is a near miss.
const DefaultNearMissPercent = 5.0

// headSample is one usable NVML reading of a view's free memory.
type headSample struct {
	round       uint64
	start, end  int64
	free, total uint64
}

// headSeen is a sample once the replay has passed it: what the traced
// total was as the sample saw it, and whether a traced call overlapped its
// query (then it saw some of that call, or none).
type headSeen struct {
	headSample
	seen    int64
	overlap bool
	// pids is each recorded process's traced total as the sample saw it
	// (not known per process when a traced call overlapped its query).
	pids []pidTraced
}

// headCall is a copy of a traced call (without its byte arrays, which the
// reader reuses).
type headCall struct {
	e  store.Event
	ok bool
}

func copyCall(e *store.Event) headCall {
	if e == nil {
		return headCall{}
	}
	c := headCall{e: *e, ok: true}
	c.e.Key, c.e.Grants = nil, nil
	return c
}

// headInterval is the stretch since the last sample the replay passed:
// the traced total's highest value in it and the call that took it there,
// and what makes a correction inexact.
type headInterval struct {
	max    int64
	at     int64
	call   headCall
	raised bool // a traced call took the total above its value at the sample
	// unsized names what took or released memory of unknown size in it,
	// unsizedFrom the earliest it may have done so.
	unsized     string
	unsizedFrom int64
	// ranged: a change in it was a range (an access grant to several peers).
	ranged bool
	// pids is each process's traced total at max (the budget's traced
	// parts at the least free).
	pids []pidTraced
}

// headCand is a candidate for a view's least free.
type headCand struct {
	ok     bool
	free   int64
	total  uint64
	at     int64
	call   headCall
	exact  bool
	source string
	note   string
	// base is the sample the figure is read or corrected from, pids each
	// process's traced total at the moment (budgetleast.go).
	base *headSeen
	pids []pidTraced
}

// pidTraced is one recorded process's traced total on a track, of one
// kind of mapping on a BAR1 track (res; ResNone on the others, and for
// what is said of the process as a whole); unsized says it took or
// released memory of unknown size there at some time, ranged that a
// change of it was a range (a grant that may cost one mapping per peer).
type pidTraced struct {
	pid     uint32
	res     cuda.Resource
	unsized bool
	ranged  bool
	bytes   int64
}

// headTrack follows one sampled view (a GPU's framebuffer or MIG
// instance, or its BAR1) through the replay.
type headTrack struct {
	key     viewKey
	samples []headSample // in time order
	next    int          // the first sample the replay has not passed
	traced  int64        // the traced total of the view
	prev    *headSeen    // the last sample passed
	// nextOverlap: a traced call overlapped the next sample's query;
	// overlapUp is what such calls took (the sample may have missed it),
	// overlapCall the last of them.
	nextOverlap bool
	overlapUp   int64
	overlapCall headCall
	iv          headInterval
	best        headCand
	// pids is each recorded process's share of traced, in pid order, and
	// by kind of mapping on a BAR1 track (a handful: a slice is cheaper
	// than a map per call).
	pids []pidTraced
}

// pidShare returns the share of pid and res in t.pids, adding it at zero.
// It runs for every traced change: one binary search on an integer key
// (the compiler inlines sort.Search and its closure).
func (t *headTrack) pidShare(pid uint32, res cuda.Resource) *pidTraced {
	k := shareKey(pid, res)
	i := sort.Search(len(t.pids), func(i int) bool { return shareKey(t.pids[i].pid, t.pids[i].res) >= k })
	if i == len(t.pids) || t.pids[i].pid != pid || t.pids[i].res != res {
		t.pids = slices.Insert(t.pids, i, pidTraced{pid: pid, res: res})
	}
	return &t.pids[i]
}

// shareKey orders shares by process, then kind.
func shareKey(pid uint32, res cuda.Resource) uint64 {
	return uint64(pid)<<8 | uint64(res)
}

// headroom holds the tracks, one per sampled view.
type headroom struct {
	tracks []*headTrack
}

// headroomTracks reads the usable framebuffer and BAR1 readings of the run
// (times and values only) before the replay, so that the replay can place
// every traced change between two of them.
func (s *state) headroomTracks() (*headroom, error) {
	byKey := map[viewKey]*headTrack{}
	h := &headroom{}
	err := s.r.Readings(func(smp *store.Reading) error {
		if !smp.Status.OK() || smp.Free == nil || smp.Total == nil || *smp.Total == 0 {
			return nil
		}
		var vk viewKey
		switch smp.Kind {
		case store.KindFramebuffer:
			vk = viewKey{gpu: smp.GPU.Index, mig: -1, view: cuda.ViewFramebuffer}
			if smp.Scope == store.ScopeMIG && smp.GPU.MIGIndex != nil {
				vk.mig = *smp.GPU.MIGIndex
			}
		case store.KindBAR1:
			vk = viewKey{gpu: smp.GPU.Index, mig: -1, view: cuda.ViewBAR1}
		default:
			return nil
		}
		t := byKey[vk]
		if t == nil {
			t = &headTrack{key: vk}
			byKey[vk] = t
			h.tracks = append(h.tracks, t)
		}
		t.samples = append(t.samples, headSample{round: smp.Round, start: smp.Start, end: smp.End, free: *smp.Free, total: *smp.Total})
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(h.tracks, func(i, j int) bool { return viewKeyLess(h.tracks[i].key, h.tracks[j].key) })
	for _, t := range h.tracks {
		sort.SliceStable(t.samples, func(i, j int) bool { return t.samples[i].end < t.samples[j].end })
	}
	return h, nil
}

// tracksOf returns the tracks a traced total feeds: its own view on its
// GPU; a MIG instance's device memory also feeds the whole GPU's.
func (h *headroom) tracksOf(vk viewKey) []*headTrack {
	var out []*headTrack
	for _, t := range h.tracks {
		if t.key.gpu == vk.gpu && t.key.view == vk.view && (t.key.mig == vk.mig || t.key.mig < 0) {
			out = append(out, t)
		}
	}
	return out
}

// change takes a traced change of d bytes (up to most) of a resource of
// kind res made by a call between start and end; e is the call (nil for
// a process's exit). Only a BAR1 track keeps the shares by kind (its
// budget splits mappings by kind; the framebuffer's does not).
func (t *headTrack) change(e *store.Event, res cuda.Resource, start, end, d, most int64) {
	overlaps := t.advance(start, end)
	t.traced += d
	var sh *pidTraced
	if e != nil {
		if t.key.view != cuda.ViewBAR1 {
			res = cuda.ResNone
		}
		sh = t.pidShare(e.PID, res)
		sh.bytes += d
	}
	if d != most {
		t.iv.ranged = true
		if sh != nil {
			sh.ranged = true
		}
	}
	if d <= 0 {
		return
	}
	if overlaps {
		t.overlapUp += d
		t.overlapCall = copyCall(e)
	}
	if t.traced > t.iv.max {
		t.iv.max, t.iv.at, t.iv.call, t.iv.raised = t.traced, end, copyCall(e), true
		t.iv.pids = append(t.iv.pids[:0], t.pids...)
	}
}

// unsized notes memory of unknown size taken or released at some moment
// between from and at, in the interval from falls in. If it fell in a
// later one instead, that interval's samples disagree with its traced
// calls by its size, which makes the later figure a bound anyway.
func (t *headTrack) unsized(from, at int64, pid uint32, why string) {
	t.advance(from, from)
	if pid != 0 {
		t.pidShare(pid, cuda.ResNone).unsized = true
	}
	if t.iv.unsized == "" || from < t.iv.unsizedFrom {
		t.iv.unsized, t.iv.unsizedFrom = why, from
	}
}

// advance passes every sample whose query ended before a change that
// started at start; a change that overlaps the next sample's query makes
// that sample's view of it uncertain (it reports whether it does).
func (t *headTrack) advance(start, end int64) bool {
	for t.next < len(t.samples) && t.samples[t.next].end < start {
		t.pass()
	}
	if t.next < len(t.samples) && t.samples[t.next].start <= end {
		t.nextOverlap = true
		return true
	}
	return false
}

// pass moves the replay past the next sample: the interval before it
// ends, the sample's own reading is a candidate, and a new interval
// begins.
//
// A sample whose query a traced call overlapped may have missed what the
// call took: it is taken as seeing the least (the side that leaves least
// free), so the interval after it starts raised by those calls.
func (t *headTrack) pass() {
	n := &headSeen{headSample: t.samples[t.next], seen: t.traced - t.overlapUp, overlap: t.nextOverlap}
	if n.overlap && t.overlapUp > 0 && t.readIncluded(n) {
		n.seen, n.overlap, t.overlapUp = t.traced, false, 0
	}
	if !n.overlap {
		n.pids = append([]pidTraced{}, t.pids...) // not nil: known, maybe empty
	}
	t.next++
	t.endInterval(n)
	// The reading's level is the call's that took usage to the interval's
	// highest, when usage was still there; else several calls up and
	// down made it, and none is named.
	var c headCall
	if t.iv.raised && t.iv.max == t.traced {
		c = t.iv.call
	}
	t.consider(headCand{ok: true, free: int64(n.free), total: n.total, at: n.start, call: c,
		exact: true, source: "sample", base: n, pids: n.pids})
	t.prev = n
	t.iv = headInterval{max: t.traced}
	if t.overlapUp > 0 {
		t.iv.raised, t.iv.at, t.iv.call = true, t.overlapCall.e.End, t.overlapCall
		t.iv.pids = append([]pidTraced{}, t.pids...)
	}
	t.nextOverlap, t.overlapUp, t.overlapCall = false, 0, headCall{}
}

// readIncluded reports whether sample n, whose query the traced calls
// that took overlapUp overlapped, read what they took: with it, the
// reading agrees with the sample before to the byte, and without it, it
// does not. On a busy machine a sample often straddles a large
// allocation; assuming it missed one it saw would put the allocation in
// twice and take free below zero.
func (t *headTrack) readIncluded(n *headSeen) bool {
	if t.prev == nil {
		return false
	}
	before := int64(t.prev.free) + t.prev.seen
	return int64(n.free)+t.traced == before && int64(n.free)+t.traced-t.overlapUp != before
}

// endInterval puts the interval that ends at sample n (nil: the end of
// the run) up as a candidate, when a traced call raised usage in it.
func (t *headTrack) endInterval(n *headSeen) {
	iv := &t.iv
	if !iv.raised || (t.prev == nil && n == nil) {
		return
	}
	c := headCand{ok: true, at: iv.at, call: iv.call, exact: true, source: "sample and traced calls", pids: iv.pids}
	var notes []string
	switch {
	case t.prev != nil && n != nil:
		fwd := int64(t.prev.free) + t.prev.seen - iv.max
		back := int64(n.free) + n.seen - iv.max
		c.free, c.total, c.base = min(fwd, back), n.total, t.prev
		if back < fwd {
			c.base = n
		}
		if grew := fwd - back; grew != 0 {
			c.exact = false
			notes = append(notes, untracedText(grew))
		}
	case t.prev != nil:
		c.free, c.total, c.exact, c.base = int64(t.prev.free)+t.prev.seen-iv.max, t.prev.total, false, t.prev
		notes = append(notes, "no sample was taken after it, so memory no traced call sized may have changed unseen")
	default:
		c.free, c.total, c.exact, c.base = int64(n.free)+n.seen-iv.max, n.total, false, n
		notes = append(notes, "no sample was taken before it, so memory no traced call sized may have changed unseen")
	}
	// Memory of unknown size taken or released after the peak cannot have
	// changed free at it; the samples' agreement says it did not change
	// usage in net (by a size that is not zero) either.
	if iv.unsized != "" && (iv.unsizedFrom <= iv.at || !c.exact) {
		c.exact = false
		notes = append(notes, "memory of unknown size was taken or released between the samples around it: "+iv.unsized)
	}
	if iv.ranged {
		c.exact = false
		notes = append(notes, "an access grant to several peers costs between one and one per peer mapping of its range")
	}
	if (t.prev != nil && t.prev.overlap) || (n != nil && n.overlap) {
		c.exact = false
		notes = append(notes, "a traced call overlapped a sample's query, so the sample may or may not include it")
	}
	if c.free < 0 {
		c.free, c.exact = 0, false
		notes = append(notes, "the traced calls account for more than was free")
	}
	c.note = sentences(notes)
	t.consider(c)
}

// sentences joins notes as sentences, each short enough to read: the
// first follows a label ("not exact: "), the others begin with a capital.
func sentences(notes []string) string {
	out := slices.Clone(notes)
	for i := 1; i < len(out); i++ {
		if out[i] != "" {
			out[i] = strings.ToUpper(out[i][:1]) + out[i][1:]
		}
	}
	return strings.Join(out, ". ")
}

// untracedText says that the samples around an interval disagree with the
// traced calls between them: memory no traced call made grew by d
// (shrank, when negative).
func untracedText(d int64) string {
	dir := "grew"
	if d < 0 {
		dir, d = "shrank", -d
	}
	return fmt.Sprintf("memory no traced call made (another process, a context) %s by %s between the samples around it. The figure assumes the side that leaves least free",
		dir, report.HumanBytes(uint64(d)))
}

// consider keeps the lowest candidate: of equals, an exact one over a
// bound (a reading that shows the same figure makes it exact), else the
// earliest.
func (t *headTrack) consider(c headCand) {
	b := &t.best
	if !b.ok || c.free < b.free || (c.free == b.free && c.exact && !b.exact) {
		t.best = c
	}
}

// finish passes the samples after the last traced change and closes the
// last interval.
func (t *headTrack) finish() {
	for t.next < len(t.samples) {
		t.pass()
	}
	t.endInterval(nil)
}

// change hands a traced change of a total to the tracks it feeds (the
// slot's). A change on a GPU the record does not name (peer access whose
// peer it lacks) leaves every track of its view unsure; one on a GPU's
// device memory whose MIG instance it does not name, that GPU's
// instances' tracks.
func (h *headroom) change(sl *viewSlot, e *store.Event, res cuda.Resource, start, end, d, most int64) {
	for _, t := range sl.unsure {
		t.unsized(start, end, 0, "memory whose GPU or MIG instance the record does not name")
	}
	for _, t := range sl.tracks {
		t.change(e, res, start, end, d, most)
	}
}

// unsureOf returns the tracks a traced total may feed without saying so:
// every track of its view for a total on an unknown GPU; a GPU's MIG
// instances' tracks for its device memory on an unknown instance.
func (h *headroom) unsureOf(vk viewKey) []*headTrack {
	var out []*headTrack
	for _, t := range h.tracks {
		if t.key.view == vk.view && (vk.gpu < 0 || (t.key.gpu == vk.gpu && vk.mig < 0 && t.key.mig >= 0)) {
			out = append(out, t)
		}
	}
	return out
}

// opaque hands a release (or acquisition) of unknown size to the tracks
// of its GPU (every GPU when unknown) and view (both for viewMixed).
func (h *headroom) opaque(o opaqueRel) {
	if o.from == 0 || o.from > o.at {
		o.from = o.at // it happened at one known moment
	}
	// A process's traced total is uncertain only for resources of
	// unknown size: its contexts and its exit are not traced allocations.
	pid := o.pid
	if o.ctx || o.exit {
		pid = 0
	}
	for _, t := range h.tracks {
		if (o.gpu < 0 || o.gpu == t.key.gpu) && (o.view == viewMixed || o.view == t.key.view) {
			t.unsized(o.from, o.at, pid, o.why)
		}
	}
}

// finish closes every track.
func (h *headroom) finish() {
	for _, t := range h.tracks {
		t.finish()
	}
}

// headroomCalls are the calls the headroom names, for their stacks.
func (s *state) headroomCalls() []*failed {
	if s.replay == nil || s.replay.head == nil {
		return nil
	}
	var out []*failed
	for _, t := range s.replay.head.tracks {
		if c := t.best.call; t.best.ok && c.ok {
			out = append(out, &failed{sym: s.syms.row(c.e.Symbol), name: s.syms.name(c.e.Symbol), e: c.e})
		}
	}
	return out
}

// headroomReport puts the least free of each view into the report, and
// decides whether a run with no failure was a near miss.
func (s *state) headroomReport() {
	pct := s.opts.NearMissPercent
	if pct == 0 {
		pct = DefaultNearMissPercent
	}
	s.rep.NearMissPercent = pct
	s.rep.Headroom = []report.Headroom{}
	if s.replay == nil || s.replay.head == nil {
		return
	}
	for _, t := range s.replay.head.tracks {
		if !t.best.ok {
			continue
		}
		hr := s.headroomEntry(t)
		s.rep.Headroom = append(s.rep.Headroom, hr)
		if s.first == nil && hr.View == cuda.ViewFramebuffer.String() && hr.Percent < pct {
			s.rep.NearMiss = true
		}
	}
}

// headroomEntry is one view's least free as reported.
func (s *state) headroomEntry(t *headTrack) report.Headroom {
	b := t.best
	hr := report.Headroom{GPU: t.key.gpu, GPUUUID: s.gpuUUID[t.key.gpu], MIG: optInt(t.key.mig), View: t.key.view.String(),
		LeastFree: uint64(b.free), Total: b.total, AtNS: b.at, Wall: s.wall(b.at), Source: b.source,
		Exact: b.exact, Note: b.note}
	hr.Percent = 100 * float64(hr.LeastFree) / float64(hr.Total)
	if b.call.ok {
		f := &failed{sym: s.syms.row(b.call.e.Symbol), name: s.syms.name(b.call.e.Symbol), e: b.call.e}
		c := s.failure(f)
		c.PossibleConsequence = false // a success is no failure's consequence
		c.Stack = s.stack(f)
		hr.Call = &c
	}
	return hr
}

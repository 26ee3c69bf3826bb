package recorder

import (
	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/store"
)

// maxKnownFiles bounds the files the queue remembers for storing again in
// later segments: a recorder that runs for days sees containers come and
// go, each with files of its own.
const maxKnownFiles = 8192

// segmentState is what the queue keeps so that every segment of a flight
// recording stands alone: the records it must begin with (the inventory,
// the libraries attached) and which stacks and files it holds already. A
// stack stored in an earlier segment is stored again in the first segment
// that references it, with the files its frames resolve to. An ordinary
// recording has one segment. Guarded by the queue's mu.
type segmentState struct {
	// epoch counts the segments begun after the first.
	epoch     uint64
	inventory *store.Inventory
	libraries []store.Library
	// stacks: stack ids whose frames are in this segment; stored: in any.
	stacks, stored map[int32]bool
	// known are the files stored stacks resolved to, by build id; inSeg
	// the build ids whose file is in this segment.
	known map[string]store.File
	inSeg map[string]bool
}

func newSegmentState() segmentState {
	return segmentState{stacks: map[int32]bool{}, stored: map[int32]bool{},
		known: map[string]store.File{}, inSeg: map[string]bool{}}
}

// needsStack reports whether a stack stored in an earlier segment is not
// in this one.
func (g *segmentState) needsStack(id int32) bool { return g.stored[id] && !g.stacks[id] }

// storedStack notes that a stack's frames are in this segment.
func (g *segmentState) storedStack(id int32) {
	g.stacks[id] = true
	g.stored[id] = true
}

// files returns the files to store with a call: those given (newly
// resolved), and those of the frames' build ids resolved for an earlier
// segment but not stored in this one.
func (g *segmentState) files(given []store.File, frames []store.Frame) []store.File {
	for _, f := range given {
		if len(g.known) >= maxKnownFiles {
			clear(g.known)
		}
		g.known[f.BuildID] = f
		g.inSeg[f.BuildID] = true
	}
	out := given
	for _, fr := range frames {
		if fr.BuildID == "" || g.inSeg[fr.BuildID] {
			continue
		}
		if f, ok := g.known[fr.BuildID]; ok {
			out = append(out, f)
			g.inSeg[fr.BuildID] = true
		}
	}
	return out
}

// begin starts the next segment: nothing stored so far is in it, and b
// (the empty batch it starts with) holds the inventory and the libraries.
func (g *segmentState) begin(b *store.Batch) {
	g.epoch++
	clear(g.stacks)
	clear(g.inSeg)
	b.Inventory = g.inventory
	b.Libraries = append(b.Libraries, g.libraries...)
}

// dropLibrary forgets a library detached: later segments do not begin
// with it.
func (q *queue) dropLibrary(dev, ino uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	kept := q.seg.libraries[:0]
	for _, l := range q.seg.libraries {
		if l.Device != dev || l.Inode != ino {
			kept = append(kept, l)
		}
	}
	clear(q.seg.libraries[len(kept):])
	q.seg.libraries = kept
}

// segment returns the number of segments begun after the first: the
// event reader republishes every live process when it changes, so that
// each segment holds their records.
func (q *queue) segment() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.seg.epoch
}

// takeLast hands the writer the last batch of a segment and begins the
// next: everything queued from now on belongs to it. It returns the stats
// as of that batch, for the segment's stop record: cumulative over the
// recording, they count exactly the events of this segment and those
// before it.
func (q *queue) takeLast(counters *bpf.Stats, t int64) (store.Batch, store.Stats) {
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.takeLocked(counters, t)
	st := q.stats
	b.Counts = &st
	q.seg.begin(&q.pending)
	return b, q.stats
}

// takeCounted hands the writer the pending batch with the stats as of it
// (Batch.Counts), which the commit stores with the batch's records. A
// reader of a flight segment, or of a copy of the live one taken at any
// moment, then compares the events it holds with the count of that same
// commit: the counters read about once a second (Drops) run behind the
// commits in between.
func (q *queue) takeCounted(counters *bpf.Stats, t int64) store.Batch {
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.takeLocked(counters, t)
	st := q.stats
	b.Counts = &st
	return b
}

// statsNow returns the counters as they are.
func (q *queue) statsNow() store.Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stats
}

// pendingLen says how much the next batch holds so far: call events and
// other records.
func (q *queue) pendingLen() (events, others int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending.Events), q.pending.Len() - len(q.pending.Events)
}

// segmentBegun marks every process to be published again when the queue
// began a segment since the last publish, so that the segment holds the
// records of the processes alive in it. Records queued after the epoch
// is read belong to that segment or a later one, which asks again.
func (h *handler) segmentBegun() {
	if ep := h.q.segment(); ep != h.epoch {
		h.epoch = ep
		for _, p := range h.procs {
			p.dirty = true
		}
	}
}

// forget drops what the event reader knows of a process that exited and
// whose exit is published: a recorder that runs for days sees thousands
// of processes.
func (h *handler) forget(pid uint32) {
	if p := h.procs[pid]; p != nil {
		p.closeRoot() // closed at its exit already, unless that was missed
		p.stopWatch()
	}
	delete(h.procs, pid)
	delete(h.late, pid)
	h.freeze.forget(pid)
	if h.exited != nil {
		h.exited.Store(true)
	}
}

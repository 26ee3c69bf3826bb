package recorder

import (
	"sort"
	"sync"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/store"
)

// maxPending bounds the events waiting for the writer. When the writer
// falls behind, the reader stops reading, the ring fills, and the probes
// count what they could not deliver: memory stays flat and losses are
// counted, never silent.
const maxPending = 1 << 20

// queue is where the recorder's goroutines meet: each adds its records to
// the pending batch, and the writer takes the batch at every flush. It
// also holds the counters several goroutines add to. Everything in it is
// guarded by mu; nothing else is shared between goroutines.
type queue struct {
	mu      sync.Mutex
	room    *sync.Cond // signalled when the writer takes the batch or gives up
	pending store.Batch
	spare   store.Batch
	stats   store.Stats
	delays  delaySample // failure-to-sample delays
	holds   delaySample // how long each process was held at a libcuda mapping
	closed  bool        // the writer gave up: nobody waits for room any more
	// seg is what a segment of a flight recording must hold again (see
	// segment.go); in an ordinary recording there is one segment.
	seg segmentState
	// untracked counts processes the recorder itself could not put in the
	// probes' table (a failed Track); the probes count their own.
	untracked uint64
	// failed: a failed call was queued since the last take, so the
	// writer reads the loss counters with this commit (a live analysis
	// then has counters from after the failure, not a second before it).
	failed bool
	// unheld counts libcuda mappings reported by the map hook whose
	// process it could not stop (the signal was refused), so that the
	// process may have run calls before the probes were in; the probes
	// count the holds they could not report.
	unheld uint64
}

func newQueue() *queue {
	q := &queue{seg: newSegmentState()}
	q.room = sync.NewCond(&q.mu)
	q.pending.Stacks = map[int32][]store.Frame{}
	return q
}

// addCall queues a call event with the frames of its stack (when first
// seen) and the files those frames resolve to. It waits while maxPending
// events are queued, unless the writer gave up. It refuses (false) an
// event without frames whose stack was stored in an earlier segment of a
// flight recording but not in the one being written: the caller reads the
// stack again and calls once more with force (nil frames then: the stack
// could not be read again).
func (q *queue) addCall(e *store.Event, frames []store.Frame, files []store.File, force bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if frames == nil && !force && e.Stack >= 0 && q.seg.needsStack(e.Stack) {
		return false
	}
	for len(q.pending.Events) >= maxPending && !q.closed {
		q.room.Wait()
	}
	q.pending.Events = append(q.pending.Events, *e)
	q.stats.Events++
	q.failed = q.failed || e.Result != 0
	q.pending.Files = append(q.pending.Files, q.seg.files(files, frames)...)
	if frames != nil {
		q.pending.Stacks[e.Stack] = frames
		q.seg.storedStack(e.Stack)
	}
	return true
}

// addCapture queues a stack capture; addPyStack, addPyCode and
// addStackRef the records that come with captures.
func (q *queue) addCapture(c store.Capture) {
	q.mu.Lock()
	q.pending.Captures = append(q.pending.Captures, c)
	q.mu.Unlock()
}

// addNamed queues a stack the namer unwound and named.
func (q *queue) addNamed(n store.NamedStack) {
	q.mu.Lock()
	q.pending.Named = append(q.pending.Named, n)
	q.mu.Unlock()
}

func (q *queue) addPyStack(p store.PyStack) {
	q.mu.Lock()
	q.pending.PyStacks = append(q.pending.PyStacks, p)
	q.mu.Unlock()
}

func (q *queue) addPyCode(c store.PyCode) {
	q.mu.Lock()
	q.pending.PyCodes = append(q.pending.PyCodes, c)
	q.mu.Unlock()
}

func (q *queue) addStackRef(r store.StackRef) {
	q.mu.Lock()
	q.pending.StackRefs = append(q.pending.StackRefs, r)
	q.mu.Unlock()
}

// decodeError counts a ring record that could not be decoded.
func (q *queue) decodeError() {
	q.mu.Lock()
	q.stats.DecodeErrors++
	q.mu.Unlock()
}

// addSamples queues a sample round.
func (q *queue) addSamples(s []store.Sample) {
	q.mu.Lock()
	q.pending.Samples = append(q.pending.Samples, s...)
	q.stats.Samples += uint64(len(s))
	q.mu.Unlock()
}

// thinned counts samples left out by thinning (negative: put back).
func (q *queue) thinned(n int) {
	q.mu.Lock()
	q.stats.SamplesThinned = uint64(int64(q.stats.SamplesThinned) + int64(n))
	q.mu.Unlock()
}

// addDelays records failure-to-sample delays.
func (q *queue) addDelays(d ...int64) {
	q.mu.Lock()
	for _, v := range d {
		q.delays.add(v)
	}
	q.mu.Unlock()
}

// addKmsg queues a kernel log line.
func (q *queue) addKmsg(l store.KernelLog) {
	q.mu.Lock()
	q.pending.Kmsg = append(q.pending.Kmsg, l)
	q.stats.KernelLines++
	q.mu.Unlock()
}

// addMarker queues a marker.
func (q *queue) addMarker(m store.Marker) {
	q.mu.Lock()
	q.pending.Markers = append(q.pending.Markers, m)
	q.mu.Unlock()
}

// addLibrary queues a library record; every segment begins with the
// records of the libraries attached.
func (q *queue) addLibrary(l store.Library) {
	q.mu.Lock()
	q.pending.Libraries = append(q.pending.Libraries, l)
	q.seg.libraries = append(q.seg.libraries, l)
	q.mu.Unlock()
}

// addHold records how long a process was held at a libcuda mapping.
func (q *queue) addHold(d int64) {
	q.mu.Lock()
	q.holds.add(d)
	q.mu.Unlock()
}

// addProcesses queues process records.
func (q *queue) addProcesses(ps []store.Process) {
	q.mu.Lock()
	q.pending.Processes = append(q.pending.Processes, ps...)
	for i := range ps {
		q.seg.recorded[ps[i].PID] = true
	}
	q.mu.Unlock()
}

// unnamed returns the pids a round's per-process readings list that no
// process record of this segment has and that were not named in it yet,
// and notes them as named: each neighbour is read from /proc once.
func (q *queue) unnamed(round []store.Sample) []uint32 {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []uint32
	for i := range round {
		for _, u := range round[i].Processes {
			if !q.seg.recorded[u.PID] && !q.seg.looked[u.PID] {
				q.seg.looked[u.PID] = true
				out = append(out, u.PID)
			}
		}
	}
	return out
}

// addNeighbours queues the records of neighbours named from /proc.
func (q *queue) addNeighbours(ns []store.Neighbour) {
	q.mu.Lock()
	q.pending.Neighbours = append(q.pending.Neighbours, ns...)
	q.mu.Unlock()
}

// setInventory queues the platform inventory; every segment begins with
// it.
func (q *queue) setInventory(inv *store.Inventory) {
	q.mu.Lock()
	q.pending.Inventory = inv
	q.seg.inventory = inv
	q.mu.Unlock()
}

// take hands the pending batch to the writer. With counters, the probes'
// loss counters (read just before) are folded into the stats and a
// reading is queued in the same batch: the reading's event count is what
// this commit brings the file to.
func (q *queue) take(counters *bpf.Stats, t int64) store.Batch {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.takeLocked(counters, t)
}

// takeLocked is take with mu held.
func (q *queue) takeLocked(counters *bpf.Stats, t int64) store.Batch {
	if counters != nil {
		q.foldCounters(counters)
		q.pending.Drops = append(q.pending.Drops, store.Drops{Time: t, Stats: q.stats})
	}
	b := q.pending
	q.failed = false
	q.pending = q.spare
	q.spare = store.Batch{}
	if q.pending.Stacks == nil {
		q.pending.Stacks = map[int32][]store.Frame{}
	}
	q.room.Broadcast()
	return b
}

// failedQueued reports whether a failed call was queued since the last
// take.
func (q *queue) failedQueued() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.failed
}

// giveBack returns a committed batch's storage for reuse.
func (q *queue) giveBack(b store.Batch) {
	b.Reset()
	q.mu.Lock()
	q.spare = b
	q.mu.Unlock()
}

// close says the writer gave up: producers never wait for room again.
func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.room.Broadcast()
	q.mu.Unlock()
}

// foldCounters takes the probes' loss counters into the stats. Called
// with mu held.
func (q *queue) foldCounters(st *bpf.Stats) {
	storeCounters(&q.stats, st)
	q.stats.Untracked += q.untracked
	q.stats.LostHolds += q.unheld
}

// trackFailed counts a process the recorder could not track.
func (q *queue) trackFailed() {
	q.mu.Lock()
	q.untracked++
	q.stats.Untracked++
	q.mu.Unlock()
}

// notHeld counts a libcuda mapping whose process was not held.
func (q *queue) notHeld() {
	q.mu.Lock()
	q.unheld++
	q.stats.LostHolds++
	q.mu.Unlock()
}

// final folds the last counter reading (nil: none could be read) and
// returns the stats and the delay summaries for the stop record.
func (q *queue) final(counters *bpf.Stats, t int64) (store.Stats, store.DelayStats, store.DelayStats) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if counters != nil {
		q.foldCounters(counters)
		q.pending.Drops = append(q.pending.Drops, store.Drops{Time: t, Stats: q.stats})
	}
	return q.stats, q.delays.stats(), q.holds.stats()
}

// maxDelaySample bounds the delays kept for the median: a recorder that
// runs for days sees failures and holds without end.
const maxDelaySample = 4096

// delaySample summarizes delays in bounded memory: the count and the
// maximum exactly, the median from a uniform sample of at most
// maxDelaySample of them (exact below that).
type delaySample struct {
	n    int
	max  int64
	keep []int64
	rng  uint64 // xorshift state, for choosing which delays stay
}

func (d *delaySample) add(v int64) {
	d.n++
	d.max = max(d.max, v)
	if len(d.keep) < maxDelaySample {
		d.keep = append(d.keep, v)
		return
	}
	// Reservoir sampling: the n-th delay replaces a kept one with
	// probability maxDelaySample/n.
	if d.rng == 0 {
		d.rng = 0x9e3779b97f4a7c15
	}
	d.rng ^= d.rng << 13
	d.rng ^= d.rng >> 7
	d.rng ^= d.rng << 17
	if i := d.rng % uint64(d.n); i < maxDelaySample {
		d.keep[i] = v
	}
}

func (d *delaySample) stats() store.DelayStats {
	if d.n == 0 {
		return store.DelayStats{}
	}
	s := append([]int64(nil), d.keep...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return store.DelayStats{Count: d.n, Median: s[len(s)/2], Max: d.max}
}

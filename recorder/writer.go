package recorder

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/store"
)

// countersEvery is how often the loss counters are read during a run.
const countersEvery = time.Second

// counterSource reads the probes' loss counters.
type counterSource interface {
	Stats() (bpf.Stats, error)
}

// writer owns the run.db writer while recording: it commits the queue's
// batch every flush interval and the loss counters about once a second,
// and with every batch that holds a failed call.
// In flight mode (seg set) the file is the live segment, which it closes
// and replaces when it is due (segments.go). At the first write error it
// stops writing, says so in one line (at that moment, whatever else is
// happening), and closes failed; err says why.
type writer struct {
	// mu guards w against rotation while a snapshot reads it (Snapshot).
	mu       sync.RWMutex
	w        *store.Writer
	q        *queue
	counters counterSource
	every    time.Duration
	log      *slog.Logger
	path     string
	// seg is the flight recording (nil: one run.db); rotated composes a
	// closed segment's stop record; stats, when set, is told the counters
	// at each reading.
	seg     *segments
	rotated func(t int64, st store.Stats) store.StopInfo
	stats   func(store.Stats)
	// stopped, when set, is told of the write error that stopped it.
	stopped func(error)

	failed     chan struct{} // closed at the first write error
	err        error         // set before failed is closed
	countersAt int64
	// quietCommits: while no call is queued, commit at most once a
	// countersEvery (flight mode: a recorder left running while nothing
	// calls CUDA would otherwise commit every NVML round).
	quietCommits bool
	committedAt  int64
}

// run commits until stop is closed, then once more.
func (w *writer) run(stop <-chan struct{}) {
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			w.flush(false)
		case <-stop:
			w.flush(true)
			return
		}
	}
}

// flush commits what is queued; final is the last flush, which commits
// whatever is queued.
func (w *writer) flush(final bool) {
	t := now()
	if w.quietCommits && !final && t-w.committedAt < int64(countersEvery) {
		if events, _ := w.q.pendingLen(); events == 0 {
			return // samples and process records wait for the next second
		}
	}
	w.committedAt = t
	last := !final && w.err == nil && w.seg != nil && w.seg.due(t, w.q)
	var counters *bpf.Stats
	if last || t-w.countersAt >= int64(countersEvery) || w.q.failedQueued() {
		w.countersAt = t
		if st, err := w.counters.Stats(); err == nil {
			counters = &st
		}
	}
	var b store.Batch
	var st store.Stats
	switch {
	case last:
		b, st = w.q.takeLast(counters, t)
	case w.seg != nil:
		b = w.q.takeCounted(counters, t)
	default:
		b = w.q.take(counters, t)
	}
	if counters != nil && w.stats != nil {
		w.stats(w.q.statsNow())
	}
	if w.err != nil {
		return // after a write error, records are dropped (the stop record says why)
	}
	if err := w.commit(&b, t); err != nil {
		w.fail(err)
		return
	}
	w.q.giveBack(b)
	if last {
		if err := w.rotate(t, st); err != nil {
			w.fail(err)
		}
	}
}

// commit writes a batch; in flight mode, room is made for it first and
// the live segment's progress recorded after.
func (w *writer) commit(b *store.Batch, t int64) error {
	if w.seg == nil {
		return w.w.Commit(b)
	}
	if err := w.seg.reserve(b); err != nil {
		return err
	}
	need := estimate(len(b.Events), b.Len()-len(b.Events))
	if err := w.withRoom(need, func() error { return w.w.Commit(b) }); err != nil {
		return err
	}
	return w.seg.committed(b, t)
}

// withRoom runs a write into the live segment; while the filesystem
// refuses it for lack of space, the flight recording makes room (deleting
// what matters least first, see flight.Dir.Pressure) and it is tried
// again. It fails only when nothing is left to delete but the live
// segment.
func (w *writer) withRoom(need int64, write func() error) error {
	for {
		err := write()
		if !errors.Is(err, store.ErrDiskFull) {
			return err
		}
		if perr := w.seg.pressure(need); perr != nil {
			return fmt.Errorf("%w: %w", err, perr)
		}
		w.w.Resume()
	}
}

// fail stops writing at the first error.
func (w *writer) fail(err error) {
	w.err = err
	w.q.close()
	w.log.Error(fmt.Sprintf("%s: %v: recording stopped, what was committed is kept; the workload continues", w.path, err),
		"reason", writeErrorReason(err))
	if w.stopped != nil {
		w.stopped(err)
	}
	close(w.failed)
}

// rotate closes the live segment with a stop record saying it was
// rotated, and starts the next one.
func (w *writer) rotate(t int64, st store.Stats) error {
	stop := w.rotated(t, st)
	if err := w.withRoom(estCommitBytes, func() error { return w.w.Stop(stop) }); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.w.Close(); err != nil {
		return err
	}
	next, err := w.seg.next(t)
	if err != nil {
		w.w = nil
		return err
	}
	w.w = next
	return nil
}

// stop writes the stop record (and, in flight mode, closes the live
// segment in the index); the writer goroutine has ended.
func (w *writer) stop(info store.StopInfo) error {
	if w.w == nil {
		return fmt.Errorf("no segment is open")
	}
	err := w.w.Stop(info)
	if err == nil && w.seg != nil {
		err = w.seg.close(w.w)
	}
	return err
}

// close closes the file and, in flight mode, releases the directory.
func (w *writer) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.w != nil {
		w.w.Close()
		w.w = nil
	}
	if w.seg != nil {
		w.seg.dir.Release()
	}
}

// snapshot writes a consistent copy of the file being written, through
// begin (see store.Writer.Snapshot); seq is the live segment's sequence
// number (0 for an ordinary recording).
func (w *writer) snapshot(begin func(seq uint64, size int64) (io.Writer, error)) (int64, error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.w == nil {
		return 0, fmt.Errorf("the recording is closed")
	}
	var seq uint64
	if w.seg != nil {
		seq = w.seg.seq
	}
	return w.w.Snapshot(func(size int64) (io.Writer, error) { return begin(seq, size) })
}

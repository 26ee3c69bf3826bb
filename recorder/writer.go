package recorder

import (
	"fmt"
	"io"
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
// batch every flush interval and the loss counters about once a second.
// At the first write error it stops writing, says so in one line (at that
// moment, whatever else is happening), and closes failed; err says why.
type writer struct {
	w        *store.Writer
	q        *queue
	counters counterSource
	every    time.Duration
	log      io.Writer
	path     string

	failed     chan struct{} // closed at the first write error
	err        error         // set before failed is closed
	countersAt int64
}

// run commits until stop is closed, then once more.
func (w *writer) run(stop <-chan struct{}) {
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			w.flush()
		case <-stop:
			w.flush()
			return
		}
	}
}

func (w *writer) flush() {
	t := now()
	var counters *bpf.Stats
	if t-w.countersAt >= int64(countersEvery) {
		w.countersAt = t
		if st, err := w.counters.Stats(); err == nil {
			counters = &st
		}
	}
	b := w.q.take(counters, t)
	if w.err != nil {
		return // after a write error, records are dropped (the stop record says why)
	}
	if err := w.w.Commit(&b); err != nil {
		w.err = err
		w.q.close()
		fmt.Fprintf(w.log, "forensic: %s: %v: recording stopped, what was committed is kept; the workload continues\n", w.path, err)
		close(w.failed)
		return
	}
	w.q.giveBack(b)
}

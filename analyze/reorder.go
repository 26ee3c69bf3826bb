package analyze

import (
	"errors"

	"github.com/retrivium/forensic/store"
)

// EventsInOrder streams the run's events in the order the analysis
// replays them and hands them to an Observer: a second pass over a run
// (forensic diff reading again a few of the calls it summarized) numbers
// each process's calls as the first pass did.
func EventsInOrder(r Source, fn func(*store.Event) error) error { return eventsInOrder(r, fn) }

// eventsInOrder streams the run's events to replay in time order. Stored
// events are nearly ordered already (one ring buffer, committed in arrival
// order); a bounded reorder window repairs what is not, so totals at a
// moment never count a release that happened after it.
//
// Reading, decoding and reordering run on a goroutine of their own, a few
// batches ahead of the replay: the two halves cost about the same, and
// on two CPUs a 10M-call analysis takes the longer of them instead of
// their sum. Events reach replay in the same order either way.
func eventsInOrder(r Source, replay func(*store.Event) error) error {
	batches := make(chan []store.Event, inFlight-1)
	free := make(chan []store.Event, inFlight)
	for range inFlight {
		free <- make([]store.Event, 0, batchEvents)
	}
	stop := make(chan struct{}) // closed when the replay ends early
	var readErr error
	go func() {
		defer close(batches)
		readErr = readInOrder(r, batches, free, stop)
	}()
	var err error
	for b := range batches {
		for i := 0; i < len(b) && err == nil; i++ {
			if err = replay(&b[i]); err != nil {
				close(stop)
			}
		}
		free <- b[:0]
	}
	if err != nil {
		return err
	}
	return readErr
}

// batchEvents and inFlight size the hand-over from reading to replay:
// batches of 4096 events (about 600 KB), at most inFlight of them
// allocated, recycled through free.
const (
	batchEvents = 4096
	inFlight    = 3
)

// errReplayStopped ends reading when the replay has stopped on an error
// of its own (which is the one returned).
var errReplayStopped = errors.New("replay stopped")

// readInOrder reads the events through the reorder window and sends them
// in batches, taking empty batches from free, until the run is read or
// stop is closed.
func readInOrder(r Source, batches, free chan []store.Event, stop <-chan struct{}) error {
	win := &reorder{}
	cur := <-free
	send := func() error {
		select {
		case batches <- cur:
			return nil
		case <-stop:
			return errReplayStopped
		}
	}
	add := func(e *store.Event) error {
		if cur = append(cur, *e); len(cur) < cap(cur) {
			return nil
		}
		if err := send(); err != nil {
			return err
		}
		select {
		case cur = <-free:
			return nil
		case <-stop:
			return errReplayStopped
		}
	}
	err := r.Events(func(e *store.Event) error {
		if next, ok := win.push(e); ok {
			return add(next)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for next, ok := win.pop(); ok; next, ok = win.pop() {
		if err := add(next); err != nil {
			return err
		}
	}
	if len(cur) > 0 {
		return send() // the last batch: no empty one is needed after it
	}
	return nil
}

// reorderWindow is how many events the replay holds to restore time order
// (about 1.2 MB, cache-sized). Recorded runs are out of order by
// microseconds; an event stored early but stamped late stays in the window
// however small it is, so only an event stamped earlier than the 8192
// stored before it would be replayed late.
const reorderWindow = 1 << 13

// reorder restores time order over a window of events. Input is nearly
// sorted, so an event usually lands at the end and costs one copy.
type reorder struct {
	buf  []store.Event // buf[head:] sorted by End, then Start
	head int
}

func eventBefore(a, b *store.Event) bool {
	if a.End != b.End {
		return a.End < b.End
	}
	return a.Start < b.Start
}

// push adds a copy of e; when the window is full it returns the earliest.
func (w *reorder) push(e *store.Event) (*store.Event, bool) {
	if w.head > 0 && w.head == len(w.buf) {
		w.buf, w.head = w.buf[:0], 0
	} else if w.head >= reorderWindow {
		n := copy(w.buf, w.buf[w.head:])
		w.buf, w.head = w.buf[:n], 0
	}
	c := *e
	if len(e.Key) > 0 {
		c.Key = append([]byte(nil), e.Key...)
	}
	w.buf = append(w.buf, c)
	for i := len(w.buf) - 1; i > w.head && eventBefore(&w.buf[i], &w.buf[i-1]); i-- {
		w.buf[i], w.buf[i-1] = w.buf[i-1], w.buf[i]
	}
	if len(w.buf)-w.head > reorderWindow {
		return w.pop()
	}
	return nil, false
}

// pop returns the earliest event held, valid until the next push.
func (w *reorder) pop() (*store.Event, bool) {
	if w.head == len(w.buf) {
		return nil, false
	}
	w.head++
	return &w.buf[w.head-1], true
}

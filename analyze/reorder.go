package analyze

import "github.com/retrivium/forensic/store"

// EventsInOrder streams the run's events in the order the analysis
// replays them and hands them to an Observer: a second pass over a run
// (forensic diff reading again a few of the calls it summarized) numbers
// each process's calls as the first pass did.
func EventsInOrder(r Source, fn func(*store.Event) error) error { return eventsInOrder(r, fn) }

// eventsInOrder streams the run's events to replay in time order. Stored
// events are nearly ordered already (one ring buffer, committed in arrival
// order); a bounded reorder window repairs what is not, so totals at a
// moment never count a release that happened after it.
func eventsInOrder(r Source, replay func(*store.Event) error) error {
	win := &reorder{}
	err := r.Events(func(e *store.Event) error {
		if next, ok := win.push(e); ok {
			return replay(next)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for next, ok := win.pop(); ok; next, ok = win.pop() {
		if err := replay(next); err != nil {
			return err
		}
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

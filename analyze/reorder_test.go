package analyze

import (
	"errors"
	"testing"

	"github.com/retrivium/forensic/store"
)

// eventStream is a Source whose Events yields n calls, stored in pairs
// out of order, and fails with err (when set) after failAt of them; it
// says how many it yielded and what its callback returned last.
type eventStream struct {
	Source
	n, failAt int
	err       error
	yielded   int
	last      error
}

func (s *eventStream) Events(fn func(*store.Event) error) error {
	for i := 0; i < s.n; i++ {
		if s.err != nil && i == s.failAt {
			return s.err
		}
		end := int64(i ^ 1) // 1, 0, 3, 2, ...: each pair stored backwards
		e := store.Event{PID: 7, End: end, Start: end}
		e.Key = []byte{byte(end)}
		s.yielded++
		if s.last = fn(&e); s.last != nil {
			return s.last
		}
	}
	return nil
}

// The replay gets every event once, in time order, across the batches
// handed from the reading goroutine; a replay that fails stops the
// reading and its error is the one returned; a reading error is
// returned after the events read before it were replayed.
func TestEventsInOrderHandsOverBatches(t *testing.T) {
	n := batchEvents*inFlight*3 + 17
	replayFail := errors.New("replay failed")
	readFail := errors.New("read failed")
	for _, tc := range []struct {
		name     string
		failAt   int   // replay fails at this event (-1: never)
		readErr  error // the source fails after readAt events
		readAt   int
		want     error
		replayed int // when the source does not fail
	}{
		{"all", -1, nil, 0, nil, n},
		{"replay fails", 100, nil, 0, replayFail, 101},
		{"read fails", -1, readFail, batchEvents + 5, readFail, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &eventStream{n: n, failAt: tc.readAt, err: tc.readErr}
			replayed := 0
			prev := int64(-1)
			err := eventsInOrder(src, func(e *store.Event) error {
				if e.End < prev || len(e.Key) != 1 || e.Key[0] != byte(e.End) {
					t.Fatalf("event %d (key %v) after %d: out of order or mixed up", e.End, e.Key, prev)
				}
				prev = e.End
				replayed++
				if replayed-1 == tc.failAt {
					return replayFail
				}
				return nil
			})
			if !errors.Is(err, tc.want) && err != tc.want {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if tc.readErr == nil && replayed != tc.replayed {
				t.Errorf("replayed %d events, want %d", replayed, tc.replayed)
			}
			if tc.failAt >= 0 && (src.yielded >= n || !errors.Is(src.last, errReplayStopped)) {
				t.Errorf("the source yielded %d of %d events (its callback said %v): reading did not stop", src.yielded, n, src.last)
			}
		})
	}
}

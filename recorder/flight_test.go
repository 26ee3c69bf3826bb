package recorder

import (
	"testing"
	"time"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/flight"
	"github.com/retrivium/forensic/logging"
	"github.com/retrivium/forensic/store"
)

// noCounters is a counterSource with nothing counted.
type noCounters struct{}

func (noCounters) Stats() (bpf.Stats, error) { return bpf.Stats{}, nil }

// flightWriter is a writer of a flight recording in dir whose segments
// close at age.
func flightWriter(t *testing.T, dir string, q *queue, age time.Duration) *writer {
	t.Helper()
	pol, err := flight.NewPolicy(flight.MinMaxBytes, time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	pol.SegmentAge = age
	d, err := flight.Create(dir, "test-run", pol, flight.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := &segments{dir: d, pol: pol, run: store.RunInfo{ID: "test-run"}, names: []string{"cuMemAlloc_v2"}, log: logging.Discard()}
	w := &writer{q: q, counters: noCounters{}, every: time.Millisecond, log: logging.Discard(), failed: make(chan struct{}), seg: g,
		rotated: func(t int64, st store.Stats) store.StopInfo {
			return store.StopInfo{Time: t, Reason: store.StopRotated, Stats: st}
		}}
	if w.w, err = g.open(now()); err != nil {
		t.Fatal(err)
	}
	return w
}

// The writer closes a segment when it is old enough, with a stop record
// "rotated" counting the events of it and those before, and the next
// begins with the inventory and libraries; at the end the recording reads
// as one, every event once, with the recording's own stop record.
func TestWriterRotates(t *testing.T) {
	dir := t.TempDir()
	q := newQueue()
	q.setInventory(&store.Inventory{Library: "libnvidia-ml.so.1"})
	q.addLibrary(store.Library{Path: "/usr/lib/libcuda.so.1", Device: 1, Inode: 2})
	w := flightWriter(t, dir, q, 30*time.Millisecond)
	total := 0
	for i := 0; i < 3; i++ {
		for j := 0; j < 10; j++ {
			q.addCall(&store.Event{PID: 1, TID: 1, Start: now(), End: now(), Stack: -1, Dev: -1}, nil, nil, false)
			total++
		}
		w.flush(false)
		time.Sleep(40 * time.Millisecond)
		w.flush(false) // due: the segment is closed, the next begun
	}
	if w.err != nil {
		t.Fatal(w.err)
	}
	if err := w.stop(store.StopInfo{Time: now(), Reason: "stopped", Stats: q.statsNow()}); err != nil {
		t.Fatal(err)
	}
	w.close()

	x, err := flight.ReadIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(x.Segments) < 4 {
		t.Fatalf("%d segments, want one per rotation and the last", len(x.Segments))
	}
	seen := uint64(0)
	for i, s := range x.Segments[:len(x.Segments)-1] {
		r, err := store.Open(dir + "/" + s.File)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := r.Stop()
		inv, _ := r.Inventory()
		libs, _ := r.Libraries()
		r.Close()
		seen += s.Calls
		if st == nil || st.Reason != store.StopRotated || st.Stats.Events != seen || inv == nil || len(libs) != 1 || s.Live {
			t.Errorf("segment %d: stop %+v (%d events so far), inventory %v, %d libraries", i+1, st, seen, inv, len(libs))
		}
	}
	set, err := flight.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	n := 0
	set.Events(func(*store.Event) error { n++; return nil })
	st, _ := set.Stop()
	if n != total || st == nil || st.Reason != "stopped" || st.Stats.Events != uint64(total) {
		t.Errorf("read %d events of %d, stop %+v", n, total, st)
	}
}

// A quiet flight recorder commits samples alone at most once a second; a
// call is committed at the next flush, and the last flush commits all.
func TestWriterQuietCommits(t *testing.T) {
	q := newQueue()
	w := flightWriter(t, t.TempDir(), q, time.Hour)
	w.quietCommits = true
	defer w.close()
	w.flush(false) // the first commit
	q.addSamples([]store.Sample{{Kept: "first"}})
	w.flush(false)
	if _, others := q.pendingLen(); others != 1 {
		t.Errorf("a sample alone was committed %v after the last commit", time.Duration(now()-w.committedAt))
	}
	q.addCall(&store.Event{PID: 1, Stack: -1}, nil, nil, false)
	w.flush(false)
	if ev, others := q.pendingLen(); ev != 0 || others != 0 {
		t.Errorf("with a call queued, %d events and %d records left uncommitted", ev, others)
	}
	q.addSamples([]store.Sample{{Kept: "first"}})
	w.flush(true)
	if _, others := q.pendingLen(); others != 0 {
		t.Error("the last flush left a sample uncommitted")
	}
}

// countingCounters counts its readings.
type countingCounters struct{ reads int }

func (c *countingCounters) Stats() (bpf.Stats, error) { c.reads++; return bpf.Stats{}, nil }

// The loss counters are read with every commit that holds a failed call,
// not only once a second: a live analysis of the failure then has counters
// read after it.
func TestWriterReadsCountersWithAFailure(t *testing.T) {
	q := newQueue()
	w := flightWriter(t, t.TempDir(), q, time.Hour)
	c := &countingCounters{}
	w.counters = c
	defer w.close()
	w.flush(false) // the first commit reads them
	before := c.reads
	q.addCall(&store.Event{PID: 1, Stack: -1}, nil, nil, false)
	w.flush(false)
	if c.reads != before {
		t.Fatalf("a successful call within the second read the counters (%d readings)", c.reads-before)
	}
	q.addCall(&store.Event{PID: 1, Stack: -1, Result: 2}, nil, nil, false)
	w.flush(false)
	if c.reads != before+1 {
		t.Fatalf("a failed call's commit: %d readings, want 1", c.reads-before)
	}
	w.flush(false)
	if c.reads != before+1 {
		t.Errorf("the commit after it read the counters again")
	}
}

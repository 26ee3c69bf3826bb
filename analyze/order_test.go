package analyze

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

// Events written out of time order (a later release stored before earlier
// calls) must not change the totals at the failure: the live-bytes replay
// restores time order.
func TestTotalsIgnoreStorageOrder(t *testing.T) {
	for _, extra := range []int{0, 200000} {
		r, err := store.Open(buildRun(t, extra))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := Analyze(r, Options{})
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range rep.MemoryViews {
			if v.Field == "traced device allocations" && v.GPU == 1 {
				if v.Before == nil || *v.Before != 2<<30 || v.At == nil || *v.At != 2<<30 {
					t.Errorf("%d extra calls: GPU 1 before %v at %v, want 2 GiB held since long before", extra, v.Before, v.At)
				}
			}
		}
	}
}

// writeRun stores events (in the order given) for one process whose CUDA
// device 0 is GPU 0, and returns the analysis and the reader.
func writeRun(t *testing.T, symbols []string, events []store.Event) (*store.Reader, *Report) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run.db")
	run := store.RunInfo{ID: "order", Version: "test", Clock: store.ClockName, ClockStart: tClock, Mode: "pid", TargetPID: 7,
		Interval: 100 * time.Millisecond}
	w, err := store.Create(path, store.CreateOptions{}, run, symbols)
	if err != nil {
		t.Fatal(err)
	}
	w.Reserve = 0
	procs := []store.Process{{PID: 7, Start: tClock, Exe: "/bin/app", Root: true,
		Devices: []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}}}
	if err := w.Commit(&store.Batch{Events: events, Processes: procs}); err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(store.StopInfo{Time: tClock + int64(time.Second), Reason: "workload-exited"}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	return openAnalyzed(t, path)
}

func callAt(sym uint16, at int64, res int32, f cuda.Fields) store.Event {
	return store.Event{Symbol: sym, PID: 7, TID: 7, Start: at, End: at + 1000, Result: res, Fields: f, Dev: 0, Stack: -1}
}

// The HTML report replays live bytes in time order too: a release stored
// before its allocation still frees it, in the traced line and in the
// calls leading up to the failure.
func TestHTMLTracedLiveIgnoresStorageOrder(t *testing.T) {
	ms := int64(time.Millisecond)
	r, rep := writeRun(t, []string{"cuMemAlloc_v2", "cuMemFree_v2"}, []store.Event{
		callAt(1, tClock+200*ms, 0, cuda.Fields{Has: cuda.FieldTarget, Target: 0x1000}),
		callAt(0, tClock+100*ms, 0, cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: gib, Ptr: 0x1000}),
		callAt(0, tClock+300*ms, 2, cuda.Fields{Has: cuda.FieldSize, Size: 80 * gib}),
	})
	d, err := collectHTML(r, rep)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.lead) != 3 {
		t.Fatalf("%d calls lead up to the failure, want 3", len(d.lead))
	}
	for _, m := range d.lead {
		want := int64(0) // freed at +200 ms
		if m.end == tClock+100*ms+1000 {
			want = int64(gib)
		}
		if m.live != want {
			t.Errorf("traced live after the call ending at %d: %d, want %d", m.end-tClock, m.live, want)
		}
	}
	tr := d.gpus[0].traced
	last := bucket{}
	for _, b := range tr.b {
		if b.n > 0 {
			last = b
		}
	}
	end := last.min // the bucket's later value
	if last.maxT > last.minT {
		end = last.max
	}
	if end != 0 {
		t.Errorf("the traced line ends at %d bytes, want 0", end)
	}
}

// A grant whose peer device the record lacks may map through BAR1: it is
// counted, as the verdict judges it (peerDevice), not taken for a grant to
// device 0.
func TestGrantWithoutPeerCounted(t *testing.T) {
	ms := int64(time.Millisecond)
	_, rep := writeRun(t, []string{"cuMemSetAccess", "cuMemAlloc_v2"}, []store.Event{
		callAt(0, tClock+100*ms, 0, cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr | cuda.FieldPeer, Size: 32 * mibB, Ptr: 0x1000, Peer: 0}),
		callAt(0, tClock+110*ms, 0, cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr | cuda.FieldPeer, Size: 16 * mibB, Ptr: 0x2000, Peer: 1}),
		callAt(0, tClock+120*ms, 0, cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: 8 * mibB, Ptr: 0x3000}),
		callAt(1, tClock+300*ms, 2, cuda.Fields{Has: cuda.FieldSize, Size: 80 * gib}),
	})
	got := int64(-1)
	for _, v := range rep.MemoryViews {
		if v.Field == "traced aperture mappings" && v.GPU == 0 && v.At != nil {
			got = int64(*v.At)
		}
	}
	if got != int64(24*mibB) {
		t.Errorf("traced aperture mappings at the failure = %d, want %d (the grant to device 1 and the one with no peer)", got, 24*mibB)
	}
}

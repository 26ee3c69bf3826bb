package analyze

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/internal/runfixture"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// Names the fixture's run uses.
const (
	tClock = runfixture.TClock
	gib    = uint64(1) << 30
	mibB   = uint64(1) << 20
)

// Events written out of time order (a later release stored before earlier
// calls) must not change the totals at the failure: the live-bytes replay
// restores time order.
func TestTotalsIgnoreStorageOrder(t *testing.T) {
	for _, extra := range []int{0, 200000} {
		r, err := store.Open(runfixture.BuildRun(t, extra))
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
func writeRun(t *testing.T, symbols []string, events []store.Event) (*store.Reader, *report.Report) {
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

// The timeline shares the analysis' replay: a release stored before its
// allocation still frees it, in the traced line and in the calls leading
// up to the failure.
func TestTimelineTracedLiveIgnoresStorageOrder(t *testing.T) {
	ms := int64(time.Millisecond)
	_, rep := writeRun(t, []string{"cuMemAlloc_v2", "cuMemFree_v2"}, []store.Event{
		callAt(1, tClock+200*ms, 0, cuda.Fields{Has: cuda.FieldTarget, Target: 0x1000}),
		callAt(0, tClock+100*ms, 0, cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: gib, Ptr: 0x1000}),
		callAt(0, tClock+300*ms, 2, cuda.Fields{Has: cuda.FieldSize, Size: 80 * gib}),
	})
	d := rep.Timeline
	if len(d.Lead) != 3 {
		t.Fatalf("%d calls lead up to the failure, want 3", len(d.Lead))
	}
	for _, m := range d.Lead {
		want := uint64(0) // freed at +200 ms
		if m.EndNS == tClock+100*ms+1000 {
			want = gib
		}
		if m.Live == nil || *m.Live != want {
			t.Errorf("traced live after the call ending at %d: %v, want %d", m.EndNS-tClock, m.Live, want)
		}
	}
	tr := d.GPUs[0].Traced
	last := report.Bucket{}
	for _, b := range tr.Buckets {
		if b.N > 0 {
			last = b
		}
	}
	end := last.Min // the bucket's later value
	if last.MaxT > last.MinT {
		end = last.Max
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

// The timeline's traced line agrees with the memory-view table, and keeps
// the calls leading up to the failure.
func TestTimelineAgreesWithTable(t *testing.T) {
	_, rep := openAnalyzed(t, runfixture.BuildRun(t, 0))
	tl := rep.Timeline
	rows := 0
	for _, v := range rep.MemoryViews {
		if v.Field != "traced device allocations" || v.Peak == nil {
			continue
		}
		rows++
		var g *report.GPUTrack
		for i := range tl.GPUs {
			if tl.GPUs[i].Index == v.GPU {
				g = &tl.GPUs[i]
			}
		}
		if g == nil || g.Traced == nil || g.Traced.Peak != *v.Peak {
			t.Errorf("GPU %d: traced line peak differs from the table's %d", v.GPU, *v.Peak)
		}
	}
	if rows != 2 {
		t.Errorf("%d traced rows, want one per GPU", rows)
	}
	if len(tl.Lead) != 10 {
		t.Errorf("%d calls leading up to the failure, want its 10 calls (3 setup, 6 allocations, the failure)", len(tl.Lead))
	}
}

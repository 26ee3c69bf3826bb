package rundiff

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/retrivium/forensic/analyze"
	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// writeRun writes a run.db of one process making device allocations of
// the given sizes (MiB; a negative one fails with out of memory).
func writeRun(t *testing.T, name string, mib ...int64) string {
	t.Helper()
	const clock = int64(1_000_000_000)
	path := filepath.Join(t.TempDir(), name+".db")
	w, err := store.Create(path, store.CreateOptions{}, store.RunInfo{ID: name, Clock: store.ClockName, ClockStart: clock,
		Mode: "spawn", Interval: 100 * time.Millisecond}, []string{"cuMemAlloc_v2", "cuMemFree_v2"})
	if err != nil {
		t.Fatal(err)
	}
	w.Reserve = 0
	var evs []store.Event
	for i, m := range mib {
		e := store.Event{Symbol: 0, PID: 7, TID: 7, Start: clock + int64(i+1)*1e6, End: clock + int64(i+1)*1e6 + 10, Dev: 0, Stack: -1,
			Fields: cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: uint64(max(m, -m)) << 20, Ptr: uint64(i+1) << 32}}
		if m < 0 {
			e.Result, e.Fields.Has = 2, cuda.FieldSize
		}
		evs = append(evs, e)
	}
	b := &store.Batch{Events: evs, Processes: []store.Process{{PID: 7, Start: clock, Exe: "/bin/serve", Args: []string{"serve"}, Root: true,
		Devices: []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}}}}
	if err := w.Commit(b); err != nil {
		t.Fatal(err)
	}
	n := uint64(len(evs))
	if err := w.Stop(store.StopInfo{Time: clock + int64(time.Second), Reason: "workload-exited", Stats: store.Stats{Calls: n, Events: n}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// Runs read side by side keep their own calls, in the order given, and
// compare as the failing run's extra allocation.
func TestReadAllReadsRunsSideBySide(t *testing.T) {
	paths := []string{writeRun(t, "good1", 100, 50), writeRun(t, "good2", 100, 50), writeRun(t, "bad", 100, 2048, -50)}
	var srcs []analyze.Source
	for _, p := range paths {
		r, err := store.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		srcs = append(srcs, r)
	}
	runs, err := ReadAll(srcs, Options{Analyze: analyze.Options{Symbolizer: noSymbols{}}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{2, 2, 3} {
		if got := runs[i].Procs[7].Len(); got != want || runs[i].Report.Run.Path != paths[i] {
			t.Errorf("run %d (%s): %d calls summarized, want %d of %s", i, runs[i].Report.Run.Path, got, want, paths[i])
		}
	}
	d, err := Diff(runs)
	if err != nil {
		t.Fatal(err)
	}
	if f := d.Differences[0]; f.Call == nil || f.Departure != "extra-call" || *f.Call.Size != 2048<<20 || !f.Unique {
		t.Errorf("first difference %+v, want the unique extra 2 GiB call", f)
	}
}

// noSymbols names no frame (the test's stacks are not on this machine).
type noSymbols struct{}

func (noSymbols) Symbolize([]store.Frame, []analyze.File, []store.Mapping) *report.Stack {
	return &report.Stack{Frames: []report.Frame{}}
}

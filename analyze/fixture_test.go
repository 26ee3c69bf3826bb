package analyze

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// ms is a millisecond on the run clock.
const ms = int64(time.Millisecond)

// runSpec is a small recording written to a real run.db for a test:
// events, samples, processes (default: pid 7, the workload, whose CUDA
// device 0 is GPU 0), libraries, and how the run ended.
type runSpec struct {
	symbols    []string
	events     []store.Event
	samples    []store.Sample
	procs      []store.Process
	libs       []store.Library
	neighbours []store.Neighbour // processes NVML listed that were not recorded
	workload   *store.Exit       // the spawned workload's exit, in the stop record
	abrupt     bool              // no stop record
	drops      []store.Drops     // periodic readings of the loss counters
	stopAfter  int64             // stop time after the clock start (default 1 s)
	lostHolds  uint64            // libcuda mappings not held, in the stop record
	markers    []store.Marker    // forensic mark's labelled points
}

// write stores the spec as a run.db and returns its path.
func (sp runSpec) write(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run.db")
	run := store.RunInfo{ID: "fixture", Version: "test", Clock: store.ClockName, ClockStart: tClock, Mode: "spawn",
		Command: []string{"/bin/app"}, Interval: 100 * time.Millisecond}
	w, err := store.Create(path, store.CreateOptions{}, run, sp.symbols)
	if err != nil {
		t.Fatal(err)
	}
	w.Reserve = 0
	procs := sp.procs
	if procs == nil {
		procs = []store.Process{{PID: 7, Start: tClock, Exe: "/bin/app", Root: true,
			Devices: []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}}}
	}
	inv := store.Inventory{Init: store.Status{Code: 0, Name: "NVML_SUCCESS"}, Library: "libnvidia-ml.so.1"}
	b := &store.Batch{Events: sp.events, Samples: sp.samples, Processes: procs, Libraries: sp.libs, Inventory: &inv, Drops: sp.drops,
		Neighbours: sp.neighbours, Markers: sp.markers}
	if err := w.Commit(b); err != nil {
		t.Fatal(err)
	}
	if !sp.abrupt {
		after := sp.stopAfter
		if after == 0 {
			after = int64(time.Second)
		}
		n := uint64(len(sp.events))
		if err := w.Stop(store.StopInfo{Time: tClock + after, Reason: "workload-exited", Workload: sp.workload,
			Stats: store.Stats{Calls: n, Events: n, LostHolds: sp.lostHolds}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// analyze writes and analyzes the spec, handing every call and sample value
// to obs when it is not nil.
func (sp runSpec) analyze(t *testing.T, obs report.Observer) *report.Report {
	t.Helper()
	r, err := store.Open(sp.write(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rep, err := Analyze(r, Options{Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// call is a call of pid 7 on device 0, in context 1, returning at end.
func call(sym uint16, end int64, res int32, f cuda.Fields) store.Event {
	return store.Event{Symbol: sym, PID: 7, TID: 7, Start: end - 1000, End: end, Result: res, Fields: f, Ctx: 1, Dev: 0, Stack: -1}
}

// alloc is a successful cuMemAlloc_v2 (symbol id sym) of size at ptr.
func alloc(sym uint16, end int64, size, ptr uint64) store.Event {
	return call(sym, end, 0, cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: size, Ptr: ptr})
}

// free is a successful cuMemFree_v2 (symbol id sym) of ptr.
func free(sym uint16, end int64, ptr uint64) store.Event {
	return call(sym, end, 0, cuda.Fields{Has: cuda.FieldTarget, Target: ptr})
}

// fbSample is a usable framebuffer sample of GPU 0 reading used bytes of a
// 16 GiB device, taken at t (1 µs long).
func fbSample(t int64, used uint64) store.Sample {
	total := 16 * gib
	free := total - used
	return store.Sample{GPU: store.GPURef{Index: 0}, Kind: store.KindFramebuffer, Scope: store.ScopeDevice,
		API: "nvmlDeviceGetMemoryInfo_v2", Struct: "nvmlMemory_v2_t", Status: store.Status{Name: "NVML_SUCCESS"},
		Start: t, End: t + 1000, Total: &total, Used: &used, Free: &free}
}

// procSample is a per-process query of GPU 0 at t: usable, listing pids
// with the bytes each uses, or failed with status when status is not
// NVML_SUCCESS.
func procSample(t int64, status string, uses map[uint32]uint64) store.Sample {
	smp := store.Sample{GPU: store.GPURef{Index: 0}, Kind: store.KindProcesses, Scope: store.ScopeProcess,
		API: "nvmlDeviceGetComputeRunningProcesses_v3", Struct: "nvmlProcessInfo_v2_t", Status: store.Status{Name: status},
		Start: t, End: t + 1000}
	if status != "NVML_SUCCESS" {
		smp.Status.Code = 999
		return smp
	}
	for pid, used := range uses {
		u := used
		smp.Processes = append(smp.Processes, store.ProcUsage{PID: pid, Used: &u})
	}
	return smp
}

// viewRow returns the memory-view row of a field (and pid), or nil.
func viewRow(rep *report.Report, field string, pid uint32) *report.ViewRow {
	for i := range rep.MemoryViews {
		if v := &rep.MemoryViews[i]; v.Field == field && v.PID == pid {
			return v
		}
	}
	return nil
}

// mibOf shows an optional value for a test message.
func mibOf(v *uint64) any {
	if v == nil {
		return "none"
	}
	return float64(*v) / float64(mibB)
}

// sampleLog is an observer that keeps the per-process sample values.
type sampleLog struct {
	byPID map[uint32][]uint64
	calls []report.Call
}

func (l *sampleLog) Begin(*report.Report) error { return nil }
func (l *sampleLog) Call(c *report.Call) error {
	d := *c
	if c.Args.Ptr != nil {
		v := *c.Args.Ptr
		d.Args.Ptr = &v
	}
	if c.Args.DeviceHandle != nil {
		v := *c.Args.DeviceHandle
		d.Args.DeviceHandle = &v
	}
	l.calls = append(l.calls, d)
	return nil
}
func (l *sampleLog) Sample(v *report.SampleValue) error {
	if v.Kind == store.KindProcesses && v.Value != nil {
		if l.byPID == nil {
			l.byPID = map[uint32][]uint64{}
		}
		l.byPID[v.PID] = append(l.byPID[v.PID], *v.Value)
	}
	return nil
}

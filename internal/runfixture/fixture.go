// Package runfixture writes small but realistic run.db files for the tests
// of the analysis and its renderers: two processes on two GPUs, one failed
// allocation, samples of both views on both GPUs, a kernel log line with an
// Xid and a marker.
package runfixture

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

// The run BuildRun writes: two processes on two
// GPUs, one failed allocation, samples of both views on both GPUs, a
// kernel log line with an Xid and a marker.
const (
	TClock   = int64(5_000_000_000) // run clock at the start
	TFail    = TClock + 1_200_000_000
	PIDTrain = 4242
	PIDServe = 4300
	gib      = uint64(1) << 30
	mibB     = uint64(1) << 20
	// SymAlloc is the id of cuMemAlloc_v2 in Symbols.
	SymAlloc = symAlloc
)

// Symbols are the run's symbol names, indexed by the ids its events use.
var Symbols = []string{"cuInit", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuMemAlloc_v2", "cuMemFree_v2"}

const (
	symInit = iota
	symRetain
	symSetCurrent
	symAlloc
	symFree
)

func u64(v uint64) *uint64 { return &v }
func intp(v int) *int      { return &v }

// GPUUUID is the UUID of GPU i in the run.
func GPUUUID(i int) string { return fmt.Sprintf("GPU-0000000%d-aaaa-bbbb-cccc-dddddddddddd", i) }

// Sizes of the run's GPUs.
const (
	fbTotal    = 80 * gib
	fbReserved = 512 * mibB
	barTotal   = 256 * mibB
)

// BuildRun writes a small but realistic run.db and returns its path.
// extraCalls adds that many successful 4 KiB alloc/free pairs to the
// serving process (to exercise binning and streaming).
func BuildRun(t testing.TB, extraCalls int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run.db")
	wall := time.Date(2026, 3, 14, 9, 26, 53, 589793000, time.UTC)
	run := store.RunInfo{ID: "test-run-1", Version: "test", Clock: store.ClockName, ClockStart: TClock, WallStart: wall,
		Hostname: "gpu-node-7", Kernel: "6.8.0", Mode: "spawn", Command: []string{"python3", "train.py", "--batch", "64"},
		Interval: 100 * time.Millisecond, FlushInterval: 100 * time.Millisecond, RingBytes: 16 << 20, NVMLLibrary: "libnvidia-ml.so.1"}
	w, err := store.Create(path, store.CreateOptions{}, run, Symbols)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Reserve = 0
	inv := inventory()
	lib := store.Library{Path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1", HostPath: "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
		BuildID: "abc123", Attached: Symbols, Time: TClock}
	events := calls()
	commit(t, w, &store.Batch{Events: events, Processes: processes(), Inventory: &inv, Libraries: []store.Library{lib}})
	extra(t, w, extraCalls)
	samples := samples()
	xid := 31
	kmsg := []store.KernelLog{{Time: TFail + 100_000_000, Seq: 77, Priority: 4, Xid: &xid,
		Text: "NVRM: Xid (PCI:0000:41:00): 31, pid=4242, name=python3, Ch 00000010, MMU Fault: ENGINE GRAPHICS faulted @ 0x7f12_34560000"}}
	markers := []store.Marker{{Time: TClock + 700_000_000, Label: "weights loaded"}}
	commit(t, w, &store.Batch{Samples: samples, Kmsg: kmsg, Markers: markers})
	nEvents := uint64(len(events) + extraCalls)
	stats := store.Stats{Calls: nEvents, Events: nEvents, Samples: uint64(len(samples)), KernelLines: 1}
	if err := w.Stop(store.StopInfo{Time: TClock + 1_600_000_000, Wall: wall.Add(1600 * time.Millisecond), Reason: "workload-exited",
		Workload: &store.Exit{Time: TFail + 300_000_000, Code: intp(1)}, Stats: stats,
		TriggerDelay: store.DelayStats{Count: 1, Median: 700_000, Max: 700_000}}); err != nil {
		t.Fatal(err)
	}
	return path
}

func commit(t testing.TB, w *store.Writer, b *store.Batch) {
	t.Helper()
	if err := w.Commit(b); err != nil {
		t.Fatal(err)
	}
}

// inventory is two H100s.
func inventory() store.Inventory {
	inv := store.Inventory{Time: TClock, Library: "libnvidia-ml.so.1", InitAPI: "nvmlInit_v2",
		Init: store.Status{Code: 0, Name: "NVML_SUCCESS"}}
	for i := 0; i < 2; i++ {
		u, name, bus := GPUUUID(i), "NVIDIA H100 80GB HBM3", fmt.Sprintf("00000000:%02X:00.0", 0x41+2*i)
		ok := store.Status{Name: "NVML_SUCCESS"}
		inv.GPUs = append(inv.GPUs, store.GPUInventory{Index: i,
			UUID:       store.Obs[string]{Value: &u, API: "nvmlDeviceGetUUID", Status: ok},
			Name:       store.Obs[string]{Value: &name, API: "nvmlDeviceGetName", Status: ok},
			PCIBusID:   store.Obs[string]{Value: &bus, API: "nvmlDeviceGetPciInfo_v3", Status: ok},
			FBTotal:    store.Obs[uint64]{Value: u64(fbTotal), API: "nvmlDeviceGetMemoryInfo_v2", Status: ok},
			FBReserved: store.Obs[uint64]{Value: u64(fbReserved), API: "nvmlDeviceGetMemoryInfo_v2", Status: ok},
			BAR1Total:  store.Obs[uint64]{Value: u64(barTotal), API: "nvmlDeviceGetBAR1MemoryInfo", Status: ok},
		})
	}
	return inv
}

// processes are a training process on GPU 0 and its serving child on GPU 1.
func processes() []store.Process {
	return []store.Process{
		{PID: PIDTrain, PPID: 1, Start: TClock + 1_000_000, Comm: "python3", Exe: "/usr/bin/python3.11", Args: []string{"python3", "train.py", "--batch", "64"},
			Root: true, Exit: &store.Exit{Time: TFail + 300_000_000, Code: intp(1)},
			Devices: []store.DeviceMap{{Ordinal: 0, UUID: GPUUUID(0), GPU: 0, Method: "uuid"}}},
		{PID: PIDServe, PPID: PIDTrain, Start: TClock + 2_000_000, Comm: "serve", Exe: "/opt/bin/serve",
			Args:    []string{"serve", "--port", "8000"},
			Devices: []store.DeviceMap{{Ordinal: 1, UUID: GPUUUID(1), GPU: 1, Method: "uuid"}}},
	}
}

func ev(sym int, pid, tid uint32, start, end int64, res int32, dev int32, f cuda.Fields) store.Event {
	return store.Event{Symbol: uint16(sym), PID: pid, TID: tid, Start: start, End: end, Result: res, Fields: f, Dev: dev, Ctx: 1, Stack: -1}
}

// calls are the run's calls: set-up in both processes, 60 GiB of weights
// loaded on two threads and a 24 GiB request that fails, and the serving
// process's 2 GiB, freed at the end.
func calls() []store.Event {
	var events []store.Event
	for _, p := range []struct {
		pid uint32
		dev int32
		at  int64
	}{{PIDTrain, 0, TClock + 10_000_000}, {PIDServe, 1, TClock + 20_000_000}} {
		events = append(events,
			ev(symInit, p.pid, p.pid, p.at, p.at+2000, 0, -1, cuda.Fields{Has: cuda.FieldFlags}),
			ev(symRetain, p.pid, p.pid, p.at+5000, p.at+9000, 0, -1, cuda.Fields{Has: cuda.FieldPtr | cuda.FieldDevice, Ptr: 0xc0, Device: p.dev}),
			ev(symSetCurrent, p.pid, p.pid, p.at+10000, p.at+12000, 0, -1, cuda.Fields{Has: cuda.FieldTarget, Target: 0xc0}))
	}
	for i := 0; i < 6; i++ {
		at := TClock + 100_000_000 + int64(i)*100_000_000
		tid := uint32(PIDTrain + i%2)
		events = append(events, ev(symAlloc, PIDTrain, tid, at, at+40_000, 0, 0,
			cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: 10 * gib, Ptr: 0x7f0000000000 + uint64(i)<<36}))
	}
	events = append(events, ev(symAlloc, PIDTrain, PIDTrain, TFail-30_000, TFail, 2, 0, cuda.Fields{Has: cuda.FieldSize, Size: 24 * gib}))
	events = append(events, ev(symAlloc, PIDServe, PIDServe, TClock+150_000_000, TClock+150_020_000, 0, 1,
		cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: 2 * gib, Ptr: 0x7e0000000000}))
	return append(events, ev(symFree, PIDServe, PIDServe+1, TClock+1_450_000_000, TClock+1_450_010_000, 0, 1,
		cuda.Fields{Has: cuda.FieldTarget, Target: 0x7e0000000000}))
}

// extra commits n successful 4 KiB alloc/free calls of the serving
// process, in chunks, spread over the run.
func extra(t testing.TB, w *store.Writer, n int) {
	var chunk []store.Event
	for i := 0; i < n; i += 2 {
		at := TClock + 200_000_000 + int64(i)*(1_000_000_000/int64(max(n, 1)))
		p := uint64(0x7d0000000000 + i*4096)
		chunk = append(chunk,
			ev(symAlloc, PIDServe, PIDServe+1, at, at+3000, 0, 1, cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: 4096, Ptr: p}),
			ev(symFree, PIDServe, PIDServe+1, at+4000, at+5000, 0, 1, cuda.Fields{Has: cuda.FieldTarget, Target: p}))
		if len(chunk) >= 10000 {
			commit(t, w, &store.Batch{Events: chunk})
			chunk = chunk[:0]
		}
	}
	if len(chunk) > 0 {
		commit(t, w, &store.Batch{Events: chunk})
	}
}

// fbUsed is what NVML shows used on a GPU at t.
func fbUsed(gpu int, t int64) uint64 {
	if gpu == 1 {
		if t >= TClock+150_020_000 && t < TClock+1_450_010_000 {
			return 2 * gib
		}
		return 0
	}
	n := uint64(0)
	for i := 0; i < 6; i++ {
		if t >= TClock+100_040_000+int64(i)*100_000_000 {
			n++
		}
	}
	if t > TFail+250_000_000 {
		return 0 // the process exited
	}
	return n * 10 * gib
}

// samples are taken every 100 ms on both GPUs, framebuffer and BAR1, with
// one round the failure triggered.
func samples() []store.Sample {
	var samples []store.Sample
	round := uint64(0)
	add := func(t int64, trig []store.Trigger) {
		round++
		for g := 0; g < 2; g++ {
			ref := store.GPURef{Index: g, UUID: GPUUUID(g), PCIBusID: fmt.Sprintf("00000000:%02X:00.0", 0x41+2*g)}
			used := fbUsed(g, t)
			free := fbTotal - fbReserved - used
			samples = append(samples,
				store.Sample{Round: round, GPU: ref, Kind: store.KindFramebuffer, Scope: store.ScopeDevice,
					API: "nvmlDeviceGetMemoryInfo_v2", Struct: "nvmlMemory_v2_t", Status: store.Status{Name: "NVML_SUCCESS"},
					Start: t, End: t + 40_000, Total: u64(fbTotal), Reserved: u64(fbReserved), Used: u64(used), Free: u64(free), Triggers: trig},
				store.Sample{Round: round, GPU: ref, Kind: store.KindBAR1, Scope: store.ScopeAperture,
					API: "nvmlDeviceGetBAR1MemoryInfo", Struct: "nvmlBAR1Memory_t", Status: store.Status{Name: "NVML_SUCCESS"},
					Start: t + 40_000, End: t + 60_000, Total: u64(barTotal), Used: u64(6 * mibB), Free: u64(barTotal - 6*mibB), Triggers: trig})
		}
	}
	for at := TClock + 50_000_000; at <= TClock+1_550_000_000; at += 100_000_000 {
		add(at, nil)
		if at < TFail && at+100_000_000 > TFail {
			add(TFail+700_000, []store.Trigger{{PID: PIDTrain, TID: PIDTrain, Symbol: "cuMemAlloc_v2", End: TFail}})
		}
	}
	return samples
}

// BuildRunNoFailure is a run with one successful allocation and no
// samples at all (NVML did not initialize).
func BuildRunNoFailure(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ok.db")
	run := store.RunInfo{ID: "ok", Version: "test", Clock: store.ClockName, ClockStart: TClock, WallStart: time.Unix(1700000000, 0),
		Mode: "pid", TargetPID: 77, Interval: 100 * time.Millisecond}
	w, err := store.Create(path, store.CreateOptions{}, run, Symbols)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Reserve = 0
	inv := store.Inventory{Time: TClock, Library: "libnvidia-ml.so.1", InitAPI: "nvmlInit_v2",
		Init: store.Status{Code: 9, Name: "NVML_ERROR_DRIVER_NOT_LOADED"}}
	b := store.Batch{Inventory: &inv, Processes: []store.Process{{PID: 77, Start: TClock, Exe: "/bin/app", Root: true}},
		Events: []store.Event{{Symbol: symAlloc, PID: 77, TID: 77, Start: TClock + 10, End: TClock + 20, Dev: -1, Stack: -1,
			Fields: cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: 4096, Ptr: 0x1000}}}}
	if err := w.Commit(&b); err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(store.StopInfo{Time: TClock + 1000, Reason: "target-exited", Stats: store.Stats{Calls: 1, Events: 1}}); err != nil {
		t.Fatal(err)
	}
	return path
}

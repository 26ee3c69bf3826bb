// Package runsynth writes a synthetic run.db of a given size through the
// store's writer (store.Create, Writer.Commit, Writer.Stop), for timing the
// analyzer and diff on large recordings (bench/genrun, bench/largerun).
//
// The run looks like a long training job recorded by forensic: four
// processes (a launcher and three workers) of four threads each, on two
// GPUs; each thread initializes CUDA, then allocates and frees device,
// stream-ordered and pinned host memory with a bounded live set (a caching
// allocator's churn), with a few context switches; near the end one worker
// fails a few large allocations with CUDA_ERROR_OUT_OF_MEMORY, each followed
// by a failure-triggered NVML round. Every 100 ms an NVML round samples
// framebuffer (v2), BAR1 and per-process usage of each GPU, consistent with
// the traced live bytes. Call fields are decoded by the symbol table
// (cuda.Symbol.Decode) from the registers and out-parameters the probes
// capture. One commit holds one simulated second (ten 100 ms flushes).
package runsynth

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

const (
	gpus        = 2
	procs       = 4
	threadsPer  = 4
	interval    = int64(100 * time.Millisecond)
	liveTarget  = 48 // live device allocations a thread keeps
	failures    = 12
	basePID     = 31000
	fbTotal     = uint64(80 << 30)
	fbReserved  = uint64(1 << 30)
	bar1Total   = uint64(256 << 20)
	clockStart  = int64(5_000_000_000_000)
	commitEvery = 10 // rounds per commit
)

var uuids = [gpus]string{"GPU-b0ae225f-1d3a-d2cc-f557-bca7789e4f53", "GPU-20f087bd-45b9-565d-1459-f98a96132e85"}

type sym struct {
	s  *cuda.Symbol
	id uint16
}

func lookup(name string) sym {
	s, id, ok := cuda.Lookup(name)
	if !ok {
		panic(name + " is not in the symbol table")
	}
	return sym{s, uint16(id)}
}

var (
	symInit     = lookup("cuInit")
	symDevGet   = lookup("cuDeviceGet")
	symRetain   = lookup("cuDevicePrimaryCtxRetain")
	symSetCur   = lookup("cuCtxSetCurrent")
	symAlloc    = lookup("cuMemAlloc_v2")
	symFree     = lookup("cuMemFree_v2")
	symAsync    = lookup("cuMemAllocAsync")
	symFreeAs   = lookup("cuMemFreeAsync")
	symHost     = lookup("cuMemAllocHost_v2")
	symFreeHost = lookup("cuMemFreeHost")
)

type alloc struct {
	ptr, size uint64
}

type thread struct {
	pid, tid uint32
	proc     int
	started  bool
	live     []alloc // device allocations, oldest first
	pending  []func(t int64) store.Event
	nextPtr  uint64
}

type gen struct {
	rng      *rand.Rand
	threads  []*thread
	ctx      [procs]uint64
	liveGPU  [gpus]uint64 // traced device bytes live per GPU
	liveProc [procs]uint64
	stackID  int32
}

func (g *gen) event(th *thread, sy sym, t, dur int64, result int32, raw cuda.Raw) store.Event {
	raw.InOK = true
	raw.OutAOK = result == 0
	raw.OutBOK = result == 0
	return store.Event{Symbol: sy.id, PID: th.pid, TID: th.tid, Start: t - dur, End: t, Result: result,
		Fields: sy.s.Decode(&raw), Ctx: 1, Dev: 0, Stack: -1}
}

func le(v uint64) (b [32]byte) {
	binary.LittleEndian.PutUint64(b[:], v)
	return
}

// next returns the thread's next call ending at t.
func (g *gen) next(th *thread, t int64) store.Event {
	if len(th.pending) > 0 {
		f := th.pending[0]
		th.pending = th.pending[1:]
		return f(t)
	}
	if !th.started {
		th.started = true
		p := th.proc
		if th.tid == th.pid {
			th.pending = append(th.pending,
				func(t int64) store.Event {
					return g.event(th, symDevGet, t, 900, 0, cuda.Raw{Args: [6]uint64{0x7ffe10, 0}, OutA: le(0)})
				},
				func(t int64) store.Event {
					return g.event(th, symRetain, t, 180000, 0, cuda.Raw{Args: [6]uint64{0x7ffe18, 0}, OutA: le(g.ctx[p])})
				})
			th.pending = append(th.pending, func(t int64) store.Event {
				return g.event(th, symSetCur, t, 700, 0, cuda.Raw{Args: [6]uint64{g.ctx[p]}})
			})
			return g.event(th, symInit, t, 250000, 0, cuda.Raw{})
		}
		return g.event(th, symSetCur, t, 700, 0, cuda.Raw{Args: [6]uint64{g.ctx[th.proc]}})
	}
	gpu := th.proc % gpus
	r := g.rng.IntN(100)
	switch {
	case r < 2:
		return g.event(th, symSetCur, t, 600, 0, cuda.Raw{Args: [6]uint64{g.ctx[th.proc]}})
	case r < 14: // stream-ordered pair
		size := uint64(1<<20) << g.rng.IntN(4)
		ptr := th.nextPtr
		th.nextPtr += size
		g.liveGPU[gpu] += size
		g.liveProc[th.proc] += size
		th.pending = append(th.pending, func(t int64) store.Event {
			g.liveGPU[gpu] -= size
			g.liveProc[th.proc] -= size
			return g.event(th, symFreeAs, t, 1500, 0, cuda.Raw{Args: [6]uint64{ptr, 0}})
		})
		return g.event(th, symAsync, t, 2500, 0, cuda.Raw{Args: [6]uint64{0x7ffe20, size, 0}, OutA: le(ptr)})
	case r < 24: // pinned host pair
		ptr := 0x7f0000000000 + uint64(th.tid)<<24 + uint64(g.rng.IntN(64))<<16
		th.pending = append(th.pending, func(t int64) store.Event {
			return g.event(th, symFreeHost, t, 9000, 0, cuda.Raw{Args: [6]uint64{ptr}})
		})
		return g.event(th, symHost, t, 14000, 0, cuda.Raw{Args: [6]uint64{0x7ffe28, 64 << 10}, OutA: le(ptr)})
	case r < 62 && len(th.live) < 2*liveTarget || len(th.live) < liveTarget/2:
		size := uint64(64<<10) << g.rng.IntN(11) // 64 KiB .. 64 MiB
		ptr := th.nextPtr
		th.nextPtr += size
		th.live = append(th.live, alloc{ptr, size})
		g.liveGPU[gpu] += size
		g.liveProc[th.proc] += size
		return g.event(th, symAlloc, t, 3000+int64(size>>14), 0, cuda.Raw{Args: [6]uint64{0x7ffe30, size}, OutA: le(ptr)})
	default:
		i := 0
		if g.rng.IntN(4) == 0 {
			i = g.rng.IntN(len(th.live))
		}
		a := th.live[i]
		th.live = append(th.live[:i], th.live[i+1:]...)
		g.liveGPU[gpu] -= a.size
		g.liveProc[th.proc] -= a.size
		return g.event(th, symFree, t, 2000, 0, cuda.Raw{Args: [6]uint64{a.ptr}})
	}
}

// Options size a synthetic run.
type Options struct {
	// Calls and Samples are the call events and NVML samples written.
	Calls, Samples int
	// Seed seeds the workload's choices: two runs of one seed make the
	// same calls, up to the first failure.
	Seed uint64
	// NoFailures leaves out the failed allocations near the end: a good
	// run of the same job.
	NoFailures bool
}

// Write writes a synthetic run to path (replaced).
func Write(path string, o Options) error {
	return generate(path, o.Calls, o.Samples, o.Seed, !o.NoFailures)
}

func generate(path string, nCalls, nSamples int, seed uint64, fail bool) error {
	g := &gen{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	samplesPerRound := gpus * 3
	// Failure-triggered rounds take samples too; periodic rounds take the rest.
	rounds := (nSamples - failures*samplesPerRound) / samplesPerRound
	if rounds < 10 {
		return fmt.Errorf("-samples %d is too few", nSamples)
	}
	duration := int64(rounds) * interval
	meanGap := float64(duration) / float64(nCalls)

	names := make([]string, len(cuda.Symbols))
	for i, s := range cuda.Symbols {
		names[i] = s.Name
	}
	run := runInfo()
	os.Remove(path)
	w, err := store.Create(path, store.CreateOptions{}, run, names)
	if err != nil {
		return err
	}
	defer w.Close()

	b := &store.Batch{Stacks: map[int32][]store.Frame{}}
	b.Inventory = inventory()
	b.Libraries = []store.Library{{Path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1", HostPath: "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
		BuildID: "6f2c0e8d1a4b39c57e2d90ab13c4f5e6a7b8c9d0", Device: 2049, Inode: 1234567, Attached: names, Absent: []string{},
		Time: clockStart + 1_000_000}}
	processes := g.processes()
	b.Processes = processes
	b.Markers = []store.Marker{{Time: clockStart + duration/20, Label: "warmup done"}, {Time: clockStart + duration/2, Label: "epoch 2"}}

	// The failures: worker 2 (GPU 0) asks for 96 GiB at a few moments in
	// the last tenth of the run.
	failAt := map[int]bool{}
	for i := 0; fail && i < failures; i++ {
		failAt[int(float64(nCalls)*(0.9+0.008*float64(i)))] = true
	}
	failer := g.threads[2*threadsPer]

	var (
		t       = clockStart + 200_000_000
		round   uint64
		nextRnd = clockStart + interval
		stats   store.Stats
		delays  []int64
	)
	takeRound := func(at int64, trs []store.Trigger, kept string) {
		round++
		q := at
		for gi := 0; gi < gpus; gi++ {
			b.Samples = append(b.Samples, g.samples(round, gi, q, trs, kept)...)
			q += 150_000
		}
		stats.Samples += uint64(samplesPerRound)
	}
	takeRound(clockStart+50_000_000, nil, "first")
	for i := 0; i < nCalls; i++ {
		t += int64(g.rng.ExpFloat64()*meanGap) + 1
		for t >= nextRnd {
			takeRound(nextRnd, nil, "")
			nextRnd += interval
			if round%commitEvery == 0 {
				if err := w.Commit(b); err != nil {
					return err
				}
				b.Reset()
			}
		}
		var e store.Event
		if failAt[i] {
			th := failer
			g.stackID++
			e = g.event(th, symAlloc, t, 40_000, 2, cuda.Raw{Args: [6]uint64{0x7ffe30, 96 << 30}})
			e.Stack = g.stackID
			b.Stacks[e.Stack] = []store.Frame{{BuildID: "6f2c0e8d1a4b39c57e2d90ab13c4f5e6a7b8c9d0", Offset: 0x2a3f10},
				{BuildID: "7d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e", Offset: 0x1c8e42},
				{BuildID: "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567", Offset: 0x12a3b4}}
			d := int64(380_000 + g.rng.IntN(400_000))
			takeRound(t+d, []store.Trigger{{PID: e.PID, TID: e.TID, Symbol: "cuMemAlloc_v2", End: t}}, "failure")
			delays = append(delays, d)
		} else {
			e = g.next(g.threads[g.rng.IntN(len(g.threads))], t)
		}
		b.Events = append(b.Events, e)
		stats.Calls++
		stats.Events++
	}
	end := t + 50_000_000
	takeRound(end, nil, "last")
	return finish(w, b, run, processes, end, stats, delays)
}

// runInfo is the recording's run record: a three-worker torchrun job.
func runInfo() store.RunInfo {
	return store.RunInfo{ID: "genrun", Version: "bench", Clock: store.ClockName, ClockStart: clockStart,
		WallStart: time.Date(2025, 11, 3, 9, 0, 0, 0, time.UTC), Hostname: "bench", Kernel: "6.1.0",
		Mode: "spawn", Command: []string{"torchrun", "--nproc-per-node", "3", "train.py"}, RecorderPID: 30999,
		Interval: time.Duration(interval), FlushInterval: 100 * time.Millisecond, RingBytes: 16 << 20,
		Env: map[string]string{"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}}
}

// processes makes the job's processes (the launcher and its workers, each
// on one GPU) and their threads.
func (g *gen) processes() []store.Process {
	var processes []store.Process
	for p := 0; p < procs; p++ {
		pid := uint32(basePID + p*100)
		g.ctx[p] = 0x5555_0000_0000 + uint64(p)<<20
		pr := store.Process{PID: pid, PPID: uint32(basePID), Start: clockStart + int64(p)*50_000_000, Comm: "python3",
			Exe: "/usr/bin/python3.11", Args: []string{"python3", "train.py", fmt.Sprintf("--local-rank=%d", p)},
			Env:      map[string]string{"CUDA_VISIBLE_DEVICES": fmt.Sprint(p % gpus)},
			Devices:  []store.DeviceMap{{Ordinal: 0, UUID: uuids[p%gpus], GPU: p % gpus, Method: "visible-devices-index"}},
			Contexts: []store.Context{{Index: 1, Handle: g.ctx[p], Device: 0}},
			Maps: []store.Mapping{{Start: 0x400000, End: 0x6f0000, Path: "/usr/bin/python3.11", BuildID: "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"},
				{Start: 0x7f1000000000, End: 0x7f1002000000, Offset: 0, Path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
					BuildID: "6f2c0e8d1a4b39c57e2d90ab13c4f5e6a7b8c9d0"}}}
		if p == 0 {
			pr.Root, pr.PPID = true, 30999
			pr.PID = basePID
		}
		processes = append(processes, pr)
		for k := 0; k < threadsPer; k++ {
			g.threads = append(g.threads, &thread{pid: pr.PID, tid: pr.PID + uint32(k), proc: p,
				nextPtr: 0x7f2000000000 + uint64(p)<<40 + uint64(k)<<36})
		}
	}
	return processes
}

// finish commits the last records (the processes' exits, the counters)
// and the stop record, and closes the file.
func finish(w *store.Writer, b *store.Batch, run store.RunInfo, processes []store.Process, end int64,
	stats store.Stats, delays []int64) error {
	for i := range processes {
		code := 0
		processes[i].Exit = &store.Exit{Time: end - int64(procs-i)*1_000_000, Code: &code}
	}
	b.Processes = processes
	b.Drops = append(b.Drops, store.Drops{Time: end, Stats: stats})
	if err := w.Commit(b); err != nil {
		return err
	}
	code := 0
	ds := store.DelayStats{Count: len(delays)}
	if len(delays) > 0 {
		sorted := slices.Clone(delays)
		slices.Sort(sorted)
		ds.Median, ds.Max = sorted[len(sorted)/2], sorted[len(sorted)-1]
	}
	if err := w.Stop(store.StopInfo{Time: end + 1_000_000, Wall: run.WallStart.Add(time.Duration(end - clockStart)),
		Reason: "workload-exited", Workload: &store.Exit{Time: end, Code: &code}, Stats: stats, TriggerDelay: ds}); err != nil {
		return err
	}
	return w.Close()
}

// samples is one NVML round of one GPU: framebuffer (v2), BAR1 and the
// per-process list, consistent with the traced live bytes.
func (g *gen) samples(round uint64, gpu int, t int64, trs []store.Trigger, kept string) []store.Sample {
	ref := store.GPURef{Index: gpu, UUID: uuids[gpu], PCIBusID: fmt.Sprintf("00000000:%02X:00.0", 0x41+2*gpu)}
	p := func(v uint64) *uint64 { return &v }
	ctxOverhead := uint64(500 << 20)
	used := g.liveGPU[gpu] + ctxOverhead*uint64(procs/gpus)
	total, reserved := fbTotal, fbReserved
	free := total - reserved - min(used, total-reserved)
	b1used := uint64(6<<20) + uint64(g.rng.IntN(4))<<20
	var rows []store.ProcUsage
	for pi := gpu; pi < procs; pi += gpus {
		pid := uint32(basePID + pi*100)
		rows = append(rows, store.ProcUsage{PID: pid, Used: p(g.liveProc[pi] + ctxOverhead)})
	}
	ok := store.Status{Code: 0, Name: "NVML_SUCCESS"}
	return []store.Sample{
		{Round: round, GPU: ref, Kind: store.KindFramebuffer, Scope: store.ScopeDevice, API: "nvmlDeviceGetMemoryInfo_v2",
			Struct: "nvmlMemory_v2_t", Status: ok, Start: t, End: t + 35_000, Total: p(total), Reserved: p(reserved),
			Used: p(used), Free: p(free), Triggers: trs, Kept: kept},
		{Round: round, GPU: ref, Kind: store.KindBAR1, Scope: store.ScopeAperture, API: "nvmlDeviceGetBAR1MemoryInfo",
			Struct: "nvmlBAR1Memory_t", Status: ok, Start: t + 40_000, End: t + 60_000, Total: p(bar1Total), Used: p(b1used),
			Free: p(bar1Total - b1used), Triggers: trs, Kept: kept},
		{Round: round, GPU: ref, Kind: store.KindProcesses, Scope: store.ScopeProcess, API: "nvmlDeviceGetComputeRunningProcesses_v3",
			Struct: "nvmlProcessInfo_v2_t", Status: ok, Start: t + 65_000, End: t + 110_000, Processes: rows, Triggers: trs, Kept: kept},
	}
}

func inventory() *store.Inventory {
	ok := store.Status{Code: 0, Name: "NVML_SUCCESS"}
	str := func(v, api string) store.Obs[string] { return store.Obs[string]{Value: &v, API: api, Status: ok} }
	u64 := func(v uint64, api string) store.Obs[uint64] {
		return store.Obs[uint64]{Value: &v, API: api, Status: ok}
	}
	num := func(v int, api string) store.Obs[int] { return store.Obs[int]{Value: &v, API: api, Status: ok} }
	inv := &store.Inventory{Time: clockStart, Library: "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", Init: ok, InitAPI: "nvmlInit_v2",
		Driver: str("535.216.01", "nvmlSystemGetDriverVersion"), NVMLVersion: str("12.535.216.01", "nvmlSystemGetNVMLVersion"),
		CUDADriver: num(12020, "nvmlSystemGetCudaDriverVersion_v2"), DeviceCount: num(gpus, "nvmlDeviceGetCount_v2")}
	for i := 0; i < gpus; i++ {
		inv.GPUs = append(inv.GPUs, store.GPUInventory{Index: i, UUID: str(uuids[i], "nvmlDeviceGetUUID"),
			Name: str("NVIDIA H100 80GB HBM3", "nvmlDeviceGetName"), PCIBusID: str(fmt.Sprintf("00000000:%02X:00.0", 0x41+2*i), "nvmlDeviceGetPciInfo_v3"),
			FBTotal: u64(fbTotal, "nvmlDeviceGetMemoryInfo_v2"), FBReserved: u64(fbReserved, "nvmlDeviceGetMemoryInfo_v2"),
			BAR1Total: u64(bar1Total, "nvmlDeviceGetBAR1MemoryInfo"), MIGMode: num(0, "nvmlDeviceGetMigMode"),
			Persistence: num(1, "nvmlDeviceGetPersistenceMode"), ComputeMode: num(0, "nvmlDeviceGetComputeMode"),
			PCIeGen: num(5, "nvmlDeviceGetCurrPcieLinkGeneration"), PCIeWidth: num(16, "nvmlDeviceGetCurrPcieLinkWidth"),
			PCIeMaxGen: num(5, "nvmlDeviceGetMaxPcieLinkGeneration"), PCIeMaxWidth: num(16, "nvmlDeviceGetMaxPcieLinkWidth")})
	}
	return inv
}

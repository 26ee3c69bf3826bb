package analyze

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

const msNS = int64(time.Millisecond)

// capRun is a one-process run (pid 7) for judging capacity: its
// inventory, how its CUDA devices were matched, its calls and samples.
type capRun struct {
	inv     *store.Inventory
	devices []store.DeviceMap
	syms    []string
	events  []store.Event
	samples []store.Sample
	env     map[string]string
	exit    *store.Exit
	// interval is the run's sampling interval (default 100 ms).
	interval time.Duration
}

func (c capRun) analyze(t *testing.T) *report.Report {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run.db")
	interval := c.interval
	if interval == 0 {
		interval = 100 * time.Millisecond
	}
	run := store.RunInfo{ID: "capacity", Version: "test", Clock: store.ClockName, ClockStart: tClock, Mode: "spawn", TargetPID: 7,
		Interval: interval}
	w, err := store.Create(path, store.CreateOptions{}, run, c.syms)
	if err != nil {
		t.Fatal(err)
	}
	w.Reserve = 0
	procs := []store.Process{{PID: 7, Start: tClock, Exe: "/bin/app", Root: true, Env: c.env, Exit: c.exit, Devices: c.devices}}
	if err := w.Commit(&store.Batch{Events: c.events, Processes: procs, Samples: c.samples, Inventory: c.inv}); err != nil {
		t.Fatal(err)
	}
	stop := tClock + int64(time.Second)
	for _, e := range c.events {
		stop = max(stop, e.End+int64(time.Second))
	}
	if err := w.Stop(store.StopInfo{Time: stop, Reason: "workload-exited"}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	_, rep := openAnalyzed(t, path)
	return rep
}

// gpuInventory is one GPU, with MIG enabled and migs instances when
// migs > 0, or no GPU at all when n is 0.
func gpuInventory(n, migs int) *store.Inventory {
	ok := store.Status{Name: "NVML_SUCCESS"}
	inv := &store.Inventory{Time: tClock, Library: "libnvidia-ml.so.1", InitAPI: "nvmlInit_v2", Init: ok}
	for i := 0; i < n; i++ {
		u, name := fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", i), "H100"
		mode := 0
		if migs > 0 {
			mode = 1
		}
		g := store.GPUInventory{Index: i, UUID: store.Obs[string]{Value: &u, Status: ok}, Name: store.Obs[string]{Value: &name, Status: ok},
			MIGMode: store.Obs[int]{Value: &mode, Status: ok}}
		for m := 0; m < migs; m++ {
			mu := fmt.Sprintf("MIG-%08d-%04d-0000-0000-000000000000", i, m)
			g.MIG = append(g.MIG, store.MIGInventory{Index: m, UUID: store.Obs[string]{Value: &mu, Status: ok}})
		}
		inv.GPUs = append(inv.GPUs, g)
	}
	return inv
}

// memSample is a successful sample of GPU 0 at t (mig < 0: the whole GPU).
func memSample(kind string, mig int, t int64, total, reserved, free uint64, trig ...store.Trigger) store.Sample {
	ref := store.GPURef{Index: 0}
	scope := store.ScopeDevice
	switch {
	case kind == store.KindBAR1:
		scope = store.ScopeAperture
	case mig >= 0:
		scope, ref.MIGIndex = store.ScopeMIG, &mig
	}
	s := store.Sample{GPU: ref, Kind: kind, Scope: scope, API: "nvmlDeviceGetMemoryInfo_v2", Status: store.Status{Name: "NVML_SUCCESS"},
		Start: t, End: t + 20_000, Total: ptr(total), Used: ptr(total - reserved - free), Free: ptr(free), Triggers: trig}
	if reserved > 0 {
		s.Reserved = ptr(reserved)
	}
	return s
}

func missingFix(rep *report.Report) string {
	for _, m := range rep.Missing {
		if m.Decisive {
			return m.Fix
		}
	}
	return ""
}

func decisiveMissing(rep *report.Report) string {
	for _, m := range rep.Missing {
		if m.Decisive {
			return m.What
		}
	}
	return ""
}

// Under MIG, CUDA's devices are instances: a device whose instance the
// record does not name is not judged against the whole GPU, whose free
// memory says nothing about the instance's.
func TestMIGCapacity(t *testing.T) {
	zero, one := 0, 1
	samples := []store.Sample{
		// 7 GiB live on instance 0: the whole GPU still shows 8.5 GiB free.
		memSample(store.KindFramebuffer, -1, tClock+200*msNS, 16*gib, 512*mibB, 8*gib+512*mibB),
		memSample(store.KindFramebuffer, 0, tClock+200*msNS, 8*gib, 0, 768*mibB),
		memSample(store.KindFramebuffer, 1, tClock+200*msNS, 8*gib, 0, 7*gib+768*mibB),
	}
	events := []store.Event{
		callAt(0, tClock+100*msNS, 0, cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: 7 * gib, Ptr: 0x1000}),
		callAt(0, tClock+300*msNS, 2, cuda.Fields{Has: cuda.FieldSize, Size: gib}),
	}
	why := "GPU 0 has MIG enabled: CUDA device 0 is one of its MIG instances, and which one is not recorded"
	tests := []struct {
		name     string
		inv      *store.Inventory
		dev      store.DeviceMap
		capacity report.Capacity
		fix      string
	}{
		{"instance not recorded", gpuInventory(1, 2), store.DeviceMap{GPU: 0, Method: "single-gpu", Why: why},
			report.CapUnknown, "CUDA_VISIBLE_DEVICES=MIG-"},
		{"an older file that matched the whole GPU", gpuInventory(1, 2), store.DeviceMap{GPU: 0, Method: "single-gpu"},
			report.CapUnknown, "MIG-00000000-0001"},
		{"instance 0, nearly full", gpuInventory(1, 2), store.DeviceMap{GPU: 0, MIG: &zero, Method: "uuid"}, report.CapFBExhausted, ""},
		{"instance 1, with room", gpuInventory(1, 2), store.DeviceMap{GPU: 0, MIG: &one, Method: "uuid"}, report.CapFBHadRoom, ""},
		{"MIG off: the whole GPU", gpuInventory(1, 0), store.DeviceMap{GPU: 0, Method: "single-gpu"}, report.CapFBHadRoom, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := capRun{inv: tt.inv, devices: []store.DeviceMap{tt.dev}, syms: []string{"cuMemAlloc_v2"},
				events: events, samples: samples}.analyze(t)
			if rep.Capacity == nil || *rep.Capacity != tt.capacity {
				t.Fatalf("capacity %v, want %s: %s", rep.Capacity, tt.capacity, rep.Verdict)
			}
			if tt.fix != "" {
				if !strings.Contains(missingFix(rep), tt.fix) {
					t.Errorf("next time %q, want it to name %q", missingFix(rep), tt.fix)
				}
				if len(rep.NextSteps) != 1 || rep.NextSteps[0] != missingFix(rep) {
					t.Errorf("next steps %q, want the MIG advice alone", rep.NextSteps)
				}
			}
			if tt.dev.MIG != nil && tt.capacity == report.CapFBExhausted && !strings.Contains(rep.Verdict, "768.0 MiB free") {
				t.Errorf("not judged on the instance's own sample: %s", rep.Verdict)
			}
		})
	}
}

// accessGrant is a cuMemSetAccess of size bytes by device 0, granting the
// given devices read-write (a negative device: no access, a revoke).
func accessGrant(at int64, res int32, size uint64, devs ...int32) store.Event {
	f := cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr | cuda.FieldCount | cuda.FieldItems, Size: size,
		Ptr: 0x100000 + uint64(at/msNS)<<24, Count: uint64(len(devs)), Items: uint32(len(devs))}
	for _, d := range devs {
		g := cuda.Grant{Type: cuda.LocationDevice, Device: d, Flags: 3}
		if d < 0 {
			g.Device, g.Flags = -d, 0
		}
		f.Grants = append(f.Grants, g)
	}
	return callAt(0, at, map[bool]int32{true: 0, false: 205}[res == 0], f)
}

// A grant of a range to several peers may cost one mapping of the range
// or one per peer: the verdict is said only when both agree.
func TestPeerGrantCost(t *testing.T) {
	devs := []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}
	cut := accessGrant(tClock+300*msNS, 205, 100*mibB, 0, 1, 2, 3)
	cut.Flags, cut.Count = store.EventArrayCut, 6
	tests := []struct {
		name     string
		grant    store.Event
		free     uint64
		capacity report.Capacity
		figures  []string // in the decisive missing evidence
	}{
		{"3 peers, room for one mapping, not three", accessGrant(tClock+300*msNS, 205, 100*mibB, 0, 1, 2, 3), 188 * mibB,
			report.CapUnknown, []string{"100.0 MiB", "300.0 MiB", "188.0 MiB"}},
		{"3 peers, owner not granted", accessGrant(tClock+300*msNS, 205, 100*mibB, 2, 3, 1), 188 * mibB,
			report.CapUnknown, []string{"300.0 MiB"}},
		{"3 peers, room for three", accessGrant(tClock+300*msNS, 205, 100*mibB, 0, 1, 2, 3), 350 * mibB, report.CapBAR1HadRoom, nil},
		{"3 peers, no room for one", accessGrant(tClock+300*msNS, 205, 100*mibB, 0, 1, 2, 3), 50 * mibB, report.CapBAR1Exhausted, nil},
		{"one peer: exact", accessGrant(tClock+300*msNS, 205, 100*mibB, 0, 1), 188 * mibB, report.CapBAR1HadRoom, nil},
		{"one peer and two revokes: exact", accessGrant(tClock+300*msNS, 205, 100*mibB, 0, 1, -2, -3), 188 * mibB, report.CapBAR1HadRoom, nil},
		{"list cut: unread descriptors may be peers", cut, 350 * mibB, report.CapUnknown, []string{"500.0 MiB"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := capRun{inv: gpuInventory(1, 0), devices: devs, syms: []string{"cuMemSetAccess"}, events: []store.Event{tt.grant},
				samples: []store.Sample{memSample(store.KindBAR1, -1, tClock+200*msNS, 512*mibB, 0, tt.free)}}.analyze(t)
			if rep.Capacity == nil || *rep.Capacity != tt.capacity {
				t.Fatalf("capacity %v, want %s: %s", rep.Capacity, tt.capacity, rep.Verdict)
			}
			what := decisiveMissing(rep)
			for _, f := range tt.figures {
				if !strings.Contains(what, f) {
					t.Errorf("missing evidence %q does not name %s", what, f)
				}
			}
			if tt.capacity == report.CapUnknown && strings.Contains(strings.Join(rep.NextSteps, " "), "had room") {
				t.Errorf("next steps still say the aperture had room: %q", rep.NextSteps)
			}
		})
	}
}

// Grants made before the failure and released (at the process's exit)
// before the failure's own sample: the sample is corrected by them, and a
// grant to several peers corrects it by a range.
func TestEarlierPeerGrantReconciled(t *testing.T) {
	failAt := tClock + 300*msNS
	trig := store.Trigger{PID: 7, TID: 7, Symbol: "cuMemSetAccess", End: failAt + 1000}
	tests := []struct {
		name     string
		first    store.Event
		capacity report.Capacity
		text     string
	}{
		// 64 MiB to peers 1 and 2, 100 MiB to peer 1: at the failure 24 MiB
		// (the driver charges per peer) or 88 MiB (once) was free.
		{"an earlier grant to two peers", accessGrant(tClock+100*msNS, 0, 64*mibB, 0, 1, 2), report.CapUnknown, "between 24.0 MiB and 88.0 MiB"},
		{"earlier grants to one peer each", accessGrant(tClock+100*msNS, 0, 64*mibB, 0, 1), report.CapBAR1HadRoom, "88.0 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			events := []store.Event{tt.first, accessGrant(tClock+200*msNS, 0, 100*mibB, 0, 1), accessGrant(failAt, 205, 30*mibB, 0, 1)}
			rep := capRun{inv: gpuInventory(1, 0), devices: []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}},
				syms: []string{"cuMemSetAccess"}, events: events, exit: &store.Exit{Time: failAt + 50*msNS, Code: ptrInt(1)},
				samples: []store.Sample{memSample(store.KindBAR1, -1, failAt+60*msNS, 256*mibB, 0, 252*mibB, trig)}}.analyze(t)
			if rep.Capacity == nil || *rep.Capacity != tt.capacity {
				t.Fatalf("capacity %v, want %s: %s", rep.Capacity, tt.capacity, rep.Verdict)
			}
			if !strings.Contains(rep.Verdict+decisiveMissing(rep), tt.text) {
				t.Errorf("verdict and missing evidence do not say %q: %s / %s", tt.text, rep.Verdict, decisiveMissing(rep))
			}
		})
	}
}

func ptrInt(v int) *int { return &v }

// An allocation that failed with room to spare is not blamed on what
// NVML's free already leaves out: reserved memory, other processes.
func TestHadRoomNotBlamedOnReserved(t *testing.T) {
	other := uint64(2 * gib)
	smp := memSample(store.KindFramebuffer, -1, tClock+200*msNS, 16*gib, 512*mibB, 13*gib+512*mibB)
	smp.Processes = nil
	procs := memSample(store.KindFramebuffer, -1, tClock+200*msNS, 16*gib, 512*mibB, 13*gib+512*mibB)
	procs.Kind, procs.Scope, procs.Processes = store.KindProcesses, "process", []store.ProcUsage{{PID: 99, Used: &other}}
	rep := capRun{inv: gpuInventory(1, 0), devices: []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}, syms: []string{"cuMemAlloc_v2"},
		events:  []store.Event{callAt(0, tClock+300*msNS, 2, cuda.Fields{Has: cuda.FieldSize, Size: gib})},
		samples: []store.Sample{smp, procs}}.analyze(t)
	if rep.Capacity == nil || *rep.Capacity != report.CapFBHadRoom {
		t.Fatalf("capacity %v, want framebuffer-had-room: %s", rep.Capacity, rep.Verdict)
	}
	for _, bad := range []string{"reserved by the driver", "process 99 held"} {
		if strings.Contains(rep.Verdict, bad) {
			t.Errorf("the verdict blames %q: %s", bad, rep.Verdict)
		}
	}
	for _, want := range []string{"fragmentation", "per-process limit", "injected fault"} {
		if !strings.Contains(rep.Verdict, want) {
			t.Errorf("the verdict does not name %q: %s", want, rep.Verdict)
		}
	}
	for _, s := range rep.NextSteps {
		if strings.Contains(s, "reserved memory") {
			t.Errorf("a next step points at reserved memory: %q", s)
		}
	}
}

// The advice for an unknown GPU follows why it is unknown.
func TestUnknownGPUAdvice(t *testing.T) {
	failedNVML := gpuInventory(0, 0)
	failedNVML.Init = store.Status{Code: 12, Name: "NVML_ERROR_LIBRARY_NOT_FOUND"}
	twoGPUs := gpuInventory(2, 0)
	tests := []struct {
		name      string
		inv       *store.Inventory
		dev       int32
		why       string
		want, not string
		kind      store.DeviceWhy // as recorded; "" for an older file, which the reader fills in from why
	}{
		{"NVML did not start", failedNVML, 0, "NVML listed no GPUs", "--libnvidia-ml", "CUDA_DEVICE_ORDER", ""},
		{"NVML listed none", gpuInventory(0, 0), 0, "NVML listed no GPUs", "nvidia-smi -L", "CUDA_DEVICE_ORDER", ""},
		{"ambiguous order", twoGPUs, 0, "several unlike GPUs", "CUDA_DEVICE_ORDER=PCI_BUS_ID", "--libnvidia-ml", ""},
		{"MIG", gpuInventory(2, 2), 0, "MIG is enabled on GPU 0, 1", "CUDA_VISIBLE_DEVICES=MIG-", "CUDA_DEVICE_ORDER", ""},
		{"container", twoGPUs, 0, `NVIDIA_VISIBLE_DEVICES entry "7" matches no GPU`, "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", ""},
		{"no context", twoGPUs, -1, "", "before the process creates its CUDA context", "CUDA_DEVICE_ORDER", ""},
		// The kind decides, not the words.
		{"container, by its kind", twoGPUs, 0, "the runtime's device list names no GPU here", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
			store.WhyContainerVisible},
		{"order, whatever the words", twoGPUs, 0, "NVIDIA_VISIBLE_DEVICES is unset; several unlike GPUs", "CUDA_DEVICE_ORDER=PCI_BUS_ID",
			"check NVIDIA_VISIBLE_DEVICES", store.WhyOrder},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := callAt(0, tClock+300*msNS, 2, cuda.Fields{Has: cuda.FieldSize, Size: gib})
			e.Dev = tt.dev
			rep := capRun{inv: tt.inv, devices: []store.DeviceMap{{Ordinal: 0, GPU: -1, Method: "unknown", Why: tt.why, WhyKind: tt.kind}},
				syms: []string{"cuMemAlloc_v2"}, events: []store.Event{e}}.analyze(t)
			fix := missingFix(rep)
			if !strings.Contains(fix, tt.want) || strings.Contains(fix, tt.not) {
				t.Errorf("next time %q: want %q, not %q", fix, tt.want, tt.not)
			}
			for _, s := range rep.NextSteps {
				if strings.Contains(s, tt.not) {
					t.Errorf("next steps repeat the wrong advice: %q", s)
				}
			}
		})
	}
}

// With a long sampling interval the sample before a failure may be up to
// three intervals old, and every traced change since it counts: an
// allocation 7 s before the failure (beyond the 5 s kept for a lagging
// sample) still takes the room the sample showed.
func TestLongIntervalReconcilesEveryChange(t *testing.T) {
	sec := int64(time.Second)
	rep := capRun{inv: gpuInventory(1, 0), devices: []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}},
		syms: []string{"cuMemAlloc_v2"}, interval: 10 * time.Second,
		events: []store.Event{
			alloc(0, tClock+2*sec, 5*gib/2, 0x1000),
			call(0, tClock+9*sec, 2, cuda.Fields{Has: cuda.FieldSize, Size: gib}),
		},
		samples: []store.Sample{memSample(store.KindFramebuffer, -1, tClock+sec, 16*gib, 0, 3*gib)},
	}.analyze(t)
	if got := deref(rep.Capacity); got != report.CapFBExhausted {
		t.Errorf("capacity %s, want %s (3 GiB free at the sample, 2.5 GiB allocated since): %s", got, report.CapFBExhausted, rep.Verdict)
	}
}

// allocFreeSyms are the symbols of tests that allocate and free: 0 cuMemAlloc_v2, 1 cuMemFree_v2.
var allocFreeSyms = []string{"cuMemAlloc_v2", "cuMemFree_v2"}

// triggered marks a sample as taken because of pid 7's failure at end.
func triggered(smp store.Sample, end int64) store.Sample {
	smp.Triggers = []store.Trigger{{PID: 7, TID: 7, Symbol: "cuMemAlloc_v2", End: end}}
	return smp
}

// exitAt is an exit with status code at t.
func exitAt(t int64, code int) *store.Exit { return &store.Exit{Time: t, Code: &code} }

// A sample on the far side of a release the replay cannot size (the exit
// of a process already running when recording started, a free of memory
// allocated before it) is not reconciled as if exact: the nearest usable
// sample on the near side decides, or capacity is unknown.
func TestUntracedReleaseBetweenSampleAndFailure(t *testing.T) {
	fail := tClock + 300*ms
	oom := call(0, fail, 2, cuda.Fields{Has: cuda.FieldSize, Size: 2 * gib})
	// 16 GiB; the process holds 15 GiB from before recording: 1 GiB free.
	before := fbSample(tClock+260*ms, 15*gib)
	after := triggered(fbSample(fail+ms, 0), fail) // after its exit: all free
	late := func(exit *store.Exit) []store.Process {
		return []store.Process{{PID: 7, Start: tClock, Exe: "/bin/app", Root: true, AttachedLate: true, Exit: exit,
			Devices: []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}}}
	}
	cases := []struct {
		name    string
		events  []store.Event
		samples []store.Sample
		procs   []store.Process
		want    report.Capacity
		inText  string // in the decisive row's note or the missing evidence
	}{
		{"exit after the failure, a sample before it", []store.Event{oom}, []store.Sample{before, after},
			late(exitAt(fail+ms/2, 1)), report.CapFBExhausted, "came after pid 7 exited"},
		{"exit after the failure, no sample before it", []store.Event{oom}, []store.Sample{after},
			late(exitAt(fail+ms/2, 1)), report.CapUnknown, "pid 7 exited"},
		{"free of memory from before the record", []store.Event{oom, free(1, fail+ms/2, 0xdead0000)}, []store.Sample{after},
			late(exitAt(fail+50*ms, 1)), report.CapUnknown, "allocated before the record"},
		{"the process exits after the sample", []store.Event{oom}, []store.Sample{before, triggered(fbSample(fail+ms, 15*gib), fail), listing7(fail+ms, 15*gib)},
			late(exitAt(fail+2*ms, 1)), report.CapFBExhausted, "taken because of this failure"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := runSpec{symbols: allocFreeSyms, events: c.events, samples: c.samples, procs: c.procs,
				workload: exitAt(fail+ms, 1)}.analyze(t, nil)
			if rep.Capacity == nil || *rep.Capacity != c.want {
				t.Fatalf("capacity %v, want %s: %s", rep.Capacity, c.want, rep.Verdict)
			}
			var text []string
			for _, e := range rep.Evidence {
				if e.Decisive {
					text = append(text, e.Note)
				}
			}
			for _, m := range rep.Missing {
				text = append(text, m.What)
			}
			if !strings.Contains(strings.Join(text, " / "), c.inText) {
				t.Errorf("%q is not said: %q", c.inText, text)
			}
			if strings.Contains(rep.Verdict, "had room") {
				t.Errorf("the verdict says had room: %s", rep.Verdict)
			}
		})
	}
}

// A sticky code (a kernel's fault left on the context) is not judged
// against free memory, and the verdict says why.
func TestStickyCodeGetsNoCapacity(t *testing.T) {
	fail := tClock + 300*ms
	rep := runSpec{symbols: allocFreeSyms, events: []store.Event{
		alloc(0, tClock+100*ms, gib, 0xa000),
		call(0, fail, 700, cuda.Fields{Has: cuda.FieldSize, Size: gib}),
	}, samples: []store.Sample{triggered(fbSample(fail+ms, gib), fail)}}.analyze(t, nil)
	if rep.Capacity == nil || *rep.Capacity != report.CapNotApplicable {
		t.Fatalf("capacity %v, want not-applicable: %s", rep.Capacity, rep.Verdict)
	}
	if rep.Attribution != report.AttrMissingEvidence || !strings.Contains(rep.Verdict, "sticky") {
		t.Errorf("attribution %s, verdict %q: want missing-evidence, saying sticky", rep.Attribution, rep.Verdict)
	}
}

// A call the driver refused for want of a current context, on a thread
// with none, ran on no GPU; the same call in a context ran on its GPU.
func TestNoContextNoGPU(t *testing.T) {
	for _, ctx := range []uint32{0, 1} {
		e := call(0, tClock+100*ms, 201, cuda.Fields{Has: cuda.FieldSize, Size: gib})
		e.Ctx = ctx
		rep := runSpec{symbols: allocFreeSyms, events: []store.Event{e}}.analyze(t, nil)
		ff := rep.FirstFailure
		onGPU := ff.GPUIndex != nil || strings.Contains(rep.Verdict, "GPU 0")
		if onGPU != (ctx != 0) {
			t.Errorf("context %d: gpu %v, mapping %q, verdict %q", ctx, ff.GPUIndex, ff.GPUMapping, rep.Verdict)
		}
		if ctx == 0 && (ff.GPUMapping != report.MappingNoContext || ff.CUDADevice != -1) {
			t.Errorf("no context: mapping %q, CUDA device %d", ff.GPUMapping, ff.CUDADevice)
		}
	}
}

// bar1Of is a successful BAR1 sample of one GPU at t: free of a 256 MiB
// aperture.
func bar1Of(gpu int, t int64, free uint64, trig ...store.Trigger) store.Sample {
	s := memSample(store.KindBAR1, -1, t, 256*mibB, 0, free, trig...)
	s.GPU.Index, s.API = gpu, "nvmlDeviceGetBAR1MemoryInfo"
	return s
}

// decisiveRow is the evidence row the verdict compared the request with.
func decisiveRow(rep *report.Report) *report.Evidence {
	for i := range rep.Evidence {
		if rep.Evidence[i].Decisive {
			return &rep.Evidence[i]
		}
	}
	return nil
}

// freeRow is the "BAR1 free at the failure" evidence row.
func freeRow(rep *report.Report) *report.Evidence {
	for i := range rep.Evidence {
		if rep.Evidence[i].Field == "BAR1 free at the failure" {
			return &rep.Evidence[i]
		}
	}
	return nil
}

// A mapping through another GPU's aperture (an import of memory exported
// from GPU 1 by a process on GPU 0, or peer access from GPU 0 to a context
// on GPU 1) is judged on that GPU's BAR1, from a sample of that GPU: never
// on the caller's sample labelled with the other GPU's index.
func TestApertureOfAnotherGPU(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	failAt := tClock + 300*msNS
	trigIPC := store.Trigger{PID: 8, TID: 8, Symbol: "cuIpcOpenMemHandle_v2", End: failAt}
	trigPeer := store.Trigger{PID: 8, TID: 8, Symbol: "cuCtxEnablePeerAccess", End: failAt}
	two := []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}, {Ordinal: 1, GPU: 1, Method: "uuid"}}
	exporter := []store.Event{
		{Symbol: 0, PID: 7, TID: 7, Start: tClock + 99*msNS, End: tClock + 100*msNS, Ctx: 1, Dev: 1, Stack: -1,
			Fields: cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: 64 * mibB, Ptr: 0x1000}},
		{Symbol: 1, PID: 7, TID: 7, Start: tClock + 109*msNS, End: tClock + 110*msNS, Ctx: 1, Dev: 1, Stack: -1,
			Fields: cuda.Fields{Has: cuda.FieldTarget | cuda.FieldKey, Target: 0x1000, Key: key}},
	}
	ipcOpen := store.Event{Symbol: 2, PID: 8, TID: 8, Start: failAt - 1000, End: failAt, Result: 205, Ctx: 1, Dev: 0, Stack: -1,
		Fields: cuda.Fields{Has: cuda.FieldKey | cuda.FieldFlags, Key: key, Flags: 1}}
	peer := func(ctx uint64) store.Event {
		return store.Event{Symbol: 3, PID: 8, TID: 8, Start: failAt - 1000, End: failAt, Result: 205, Ctx: 1, Dev: 0, Stack: -1,
			Fields: cuda.Fields{Has: cuda.FieldPtr | cuda.FieldPeer | cuda.FieldFlags, Ptr: ctx, Peer: ctx}}
	}
	ctxs := []store.Context{{Index: 1, Handle: 0xa000, Device: 0}, {Index: 2, Handle: 0xb000, Device: 1}}
	tests := []struct {
		name     string
		event    store.Event
		samples  []store.Sample
		capacity report.Capacity
		gpu      int    // of the "BAR1 free at the failure" row (-1: no row)
		free     uint64 // its value
		decisive bool
		steps    string // in the next steps
		noSteps  string // not in the next steps
	}{
		{"import, both GPUs in the failure's round", ipcOpen,
			[]store.Sample{bar1Of(0, failAt+300_000, 252*mibB, trigIPC), bar1Of(1, failAt+340_000, 52*mibB, trigIPC)},
			report.CapBAR1Exhausted, 1, 52 * mibB, true, "resizable BAR1", ""},
		{"import, only the caller's GPU in the failure's round", ipcOpen,
			[]store.Sample{bar1Of(1, failAt-10*msNS, 52*mibB), bar1Of(0, failAt+300_000, 252*mibB, trigIPC)},
			report.CapBAR1Exhausted, 1, 52 * mibB, true, "", ""},
		{"import, the exporter's GPU never sampled", ipcOpen,
			[]store.Sample{bar1Of(0, failAt+300_000, 252*mibB, trigIPC)},
			report.CapUnknown, -1, 0, false, "", "had room"},
		{"import, the exporter's GPU had room", ipcOpen,
			[]store.Sample{bar1Of(0, failAt+300_000, 0, trigIPC), bar1Of(1, failAt+340_000, 200*mibB, trigIPC)},
			report.CapBAR1HadRoom, 1, 200 * mibB, true, "", ""},
		{"peer access, the peer's aperture full", peer(0xb000),
			[]store.Sample{bar1Of(0, failAt+300_000, 124*mibB, trigPeer), bar1Of(1, failAt+340_000, 0, trigPeer)},
			report.CapBAR1Exhausted, 1, 0, true, "", "exporting process"},
		{"peer access, size unknown: nothing decisive", peer(0xb000),
			[]store.Sample{bar1Of(0, failAt+300_000, 124*mibB, trigPeer), bar1Of(1, failAt+340_000, 24*mibB, trigPeer)},
			report.CapUnknown, 1, 24 * mibB, false, "before and after enabling peer access", "exporting process"},
		{"peer access, the peer context's GPU unknown", peer(0xc000),
			[]store.Sample{bar1Of(0, failAt+300_000, 0, trigPeer), bar1Of(1, failAt+340_000, 0, trigPeer)},
			report.CapUnknown, -1, 0, false, "before the process creates its contexts", "exporting process"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			procs := []store.Process{
				{PID: 7, Start: tClock, Exe: "/bin/exporter", Root: true, Devices: two},
				{PID: 8, Start: tClock, Exe: "/bin/importer", Devices: two, Contexts: ctxs},
			}
			rep := runSpec{symbols: []string{"cuMemAlloc_v2", "cuIpcGetMemHandle", "cuIpcOpenMemHandle_v2", "cuCtxEnablePeerAccess"},
				events: append(append([]store.Event(nil), exporter...), tt.event), samples: tt.samples, procs: procs}.analyze(t, nil)
			if rep.Capacity == nil || *rep.Capacity != tt.capacity {
				t.Fatalf("capacity %s, want %s: %s", capText(rep), tt.capacity, rep.Verdict)
			}
			row := freeRow(rep)
			switch {
			case tt.gpu < 0 && row != nil:
				t.Errorf("a BAR1 free row for an aperture never sampled: %+v", *row)
			case tt.gpu >= 0 && (row == nil || row.GPU == nil || *row.GPU != tt.gpu || row.Value == nil || *row.Value != tt.free):
				t.Fatalf("BAR1 free row %+v, want GPU %d with %d MiB", row, tt.gpu, tt.free/mibB)
			case row != nil && row.Decisive != tt.decisive:
				t.Errorf("BAR1 free row decisive %v, want %v (capacity %s)", row.Decisive, tt.decisive, tt.capacity)
			}
			if d := decisiveRow(rep); d != nil && !tt.decisive {
				t.Errorf("%q marked decisive although capacity is %s", d.Field, tt.capacity)
			}
			if rep.NearestSamples != nil && tt.gpu >= 0 && rep.NearestSamples.GPU != tt.gpu {
				t.Errorf("samples around the failure are of GPU %d, want the aperture's GPU %d", rep.NearestSamples.GPU, tt.gpu)
			}
			if ap := rep.FirstFailure.ApertureGPU; tt.gpu >= 0 && (ap == nil || *ap != tt.gpu) {
				t.Errorf("first failure's aperture GPU %v, want %d", ap, tt.gpu)
			}
			steps := strings.Join(rep.NextSteps, " | ")
			if tt.steps != "" && !strings.Contains(steps, tt.steps) {
				t.Errorf("next steps %q do not say %q", steps, tt.steps)
			}
			if tt.noSteps != "" && strings.Contains(steps+rep.Verdict, tt.noSteps) {
				t.Errorf("verdict or next steps say %q: %s | %s", tt.noSteps, rep.Verdict, steps)
			}
		})
	}
}

// capText is a report's capacity as text ("null" when none).
func capText(rep *report.Report) string {
	if rep.Capacity == nil {
		return "null"
	}
	return string(*rep.Capacity)
}

package analyze

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// ctxSyms: 0 cuMemAlloc_v2, 1 cuMemFree_v2, 2 cuDevicePrimaryCtxRetain,
// 3 cuCtxCreate_v2, 4 cuCtxDestroy_v2, 5 cuDevicePrimaryCtxRelease_v2.
var ctxSyms = []string{"cuMemAlloc_v2", "cuMemFree_v2", "cuDevicePrimaryCtxRetain",
	"cuCtxCreate_v2", "cuCtxDestroy_v2", "cuDevicePrimaryCtxRelease_v2"}

// ctxCall is a successful context call of pid 7 on CUDA device dev.
func ctxCall(sym uint16, end int64, dev int32, f cuda.Fields) store.Event {
	e := call(sym, end, 0, f)
	e.Dev = dev
	return e
}

// retainPrimary is cuDevicePrimaryCtxRetain of device 0's context 0xc0.
func retainPrimary(end int64) store.Event {
	return ctxCall(2, end, 0, cuda.Fields{Has: cuda.FieldPtr | cuda.FieldDevice, Ptr: 0xc0, Device: 0})
}

// listing is a per-process query of GPU 0 triggered by the failure at
// t-1ms, in the same round as the framebuffer sample taken then.
func listing(t int64, uses map[uint32]uint64) store.Sample {
	return triggered(procSample(t, "NVML_SUCCESS", uses), t-ms)
}

// listing7 is listing with pid 7 using used bytes.
func listing7(t int64, used uint64) store.Sample {
	return listing(t, map[uint32]uint64{7: used})
}

// A process followed from its start frees, when it exits (or destroys or
// releases a context), not only its traced allocations but its contexts'
// own memory, which no traced call sized: a sample on the far side of it
// is bounded on one side only. The real driver charges hundreds of MiB
// per context; here the failing process's context held 1 GiB, so the
// sample after its exit shows 1 GiB more free than the traced frees
// explain, and reconciling it as exact would say "had room" wrongly.
func TestContextMemoryReleaseBetweenSampleAndFailure(t *testing.T) {
	fail := tClock + 300*ms
	// 16 GiB; the process holds 14 GiB traced and 1 GiB of context: 1 GiB
	// free at the failure.
	setup := []store.Event{retainPrimary(tClock + 10*ms), alloc(0, tClock+20*ms, 14*gib, 0xa000)}
	oom := func(size uint64) store.Event {
		return call(0, fail, 2, cuda.Fields{Has: cuda.FieldSize, Size: size})
	}
	before := fbSample(fail-40*ms, 15*gib)
	afterExit := triggered(fbSample(fail+ms, 0), fail) // the context's 1 GiB freed too
	proc := func(exit int64, devs ...store.DeviceMap) []store.Process {
		if devs == nil {
			devs = []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}
		}
		return []store.Process{{PID: 7, Start: tClock, Exe: "/bin/app", Root: true, Exit: exitAt(exit, 1),
			Devices: devs, Contexts: []store.Context{{Index: 1, Handle: 0xc0, Device: 0}}}}
	}
	gpu1 := []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}, {Ordinal: 1, GPU: 1, Method: "uuid"}}
	create1 := ctxCall(3, tClock+30*ms, 1, cuda.Fields{Has: cuda.FieldPtr | cuda.FieldDevice, Ptr: 0xc1, Device: 1})
	cases := []struct {
		name    string
		events  []store.Event
		samples []store.Sample
		procs   []store.Process
		want    report.Capacity
		inText  string // in the decisive row's note or the missing evidence
	}{
		{"exit after the failure, a sample before it", []store.Event{oom(2 * gib)}, []store.Sample{before, afterExit},
			proc(fail + ms/2), report.CapFBExhausted, "came after pid 7 exited, freeing its CUDA context on GPU 0"},
		{"exit after the failure, no sample before it", []store.Event{oom(2 * gib)}, []store.Sample{afterExit},
			proc(fail + ms/2), report.CapUnknown, "pid 7 exited, freeing its CUDA context on GPU 0"},
		{"exhausted on the closed side", []store.Event{oom(4 * gib)}, []store.Sample{afterExit},
			proc(fail + ms/2), report.CapFBExhausted, "at most 2.00 GiB"},
		// The process list of the sample's round still shows the process:
		// its exit freed nothing before the sample.
		{"the process exits after the sample", []store.Event{oom(2 * gib)},
			[]store.Sample{triggered(fbSample(fail+ms, 13*gib), fail), listing7(fail+ms, 15*gib)},
			proc(fail + 2*ms), report.CapFBHadRoom, "taken because of this failure"},
		// Without a process list, the driver may have freed what the
		// process held at any moment after its last call (a library's
		// teardown runs before the kernel sees the exit).
		{"the process exits after a sample with no process list", []store.Event{oom(2 * gib)},
			[]store.Sample{triggered(fbSample(fail+ms, 0), fail)},
			proc(fail + 2*ms), report.CapUnknown, "pid 7 exited"},
		// NVML showed the process before, and the sample's round no longer
		// does: the sample saw its memory freed, though the exit came later.
		{"the process is gone from the sample's process list before its exit", []store.Event{oom(4 * gib)},
			[]store.Sample{procSample(tClock+100*ms, "NVML_SUCCESS", map[uint32]uint64{7: 15 * gib}),
				triggered(fbSample(fail+ms, 0), fail), listing(fail+ms, nil)},
			proc(fail + 2*ms), report.CapFBExhausted, "at most 2.00 GiB"},
		{"a context on another GPU destroyed between", []store.Event{create1, oom(2 * gib),
			ctxCall(4, fail+ms/2, 0, cuda.Fields{Has: cuda.FieldTarget, Target: 0xc1})},
			[]store.Sample{triggered(fbSample(fail+ms, 13*gib), fail), listing7(fail+ms, 15*gib)},
			proc(fail+50*ms, gpu1...), report.CapFBHadRoom, "taken because of this failure"},
		{"the primary context released between", []store.Event{oom(2 * gib),
			ctxCall(5, fail+ms/2, 0, cuda.Fields{Has: cuda.FieldDevice, Device: 0})},
			[]store.Sample{triggered(fbSample(fail+ms, 13*gib), fail)},
			proc(fail + 50*ms), report.CapUnknown, "released its primary CUDA context on GPU 0"},
		{"the primary context retained between an earlier sample and the failure", []store.Event{oom(2 * gib)},
			[]store.Sample{fbSample(tClock+5*ms, 0)},
			proc(fail + 50*ms), report.CapUnknown, "retained its primary CUDA context on GPU 0"},
		{"a context on the same GPU destroyed between", []store.Event{
			ctxCall(3, tClock+30*ms, 0, cuda.Fields{Has: cuda.FieldPtr | cuda.FieldDevice, Ptr: 0xc1, Device: 0}), oom(2 * gib),
			ctxCall(4, fail+ms/2, 0, cuda.Fields{Has: cuda.FieldTarget, Target: 0xc1})},
			[]store.Sample{triggered(fbSample(fail+ms, 13*gib), fail)},
			proc(fail + 50*ms), report.CapUnknown, "destroyed a CUDA context on GPU 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := runSpec{symbols: ctxSyms, events: append(append([]store.Event(nil), setup...), c.events...),
				samples: c.samples, procs: c.procs, workload: exitAt(fail+ms, 1)}.analyze(t, nil)
			if rep.Capacity == nil || *rep.Capacity != c.want {
				t.Fatalf("capacity %v, want %s: %s", rep.Capacity, c.want, rep.Verdict)
			}
			text := decisiveText(rep)
			if !strings.Contains(text, c.inText) {
				t.Errorf("%q is not said: %q", c.inText, text)
			}
			if c.want == report.CapUnknown && !strings.Contains(text, "--freeze-on-failure") {
				t.Errorf("what settles it is not said: %q", text)
			}
		})
	}
}

// decisiveText is the verdict, the decisive evidence rows' notes and the
// missing evidence, with its fixes.
func decisiveText(rep *report.Report) string {
	text := []string{rep.Verdict}
	for _, e := range rep.Evidence {
		if e.Decisive {
			text = append(text, e.Note)
		}
	}
	for _, m := range rep.Missing {
		text = append(text, m.What, m.Fix)
	}
	return strings.Join(text, " / ")
}

// The replay keeps a context's making (+) and release (-) as changes of
// unknown size in either GPU view, on the context's GPU: made at a create
// or retain; released at a destroy or release, and at an exit for each
// context still held (none for one already destroyed or released).
func TestContextReleasesLogged(t *testing.T) {
	fail := tClock + 300*ms
	oom := call(0, fail, 2, cuda.Fields{Has: cuda.FieldSize, Size: gib})
	create := func(ptr uint64, dev int32) store.Event {
		return ctxCall(3, tClock+30*ms, dev, cuda.Fields{Has: cuda.FieldPtr | cuda.FieldDevice, Ptr: ptr, Device: dev})
	}
	destroy := func(ptr uint64) store.Event {
		return ctxCall(4, fail+ms, 0, cuda.Fields{Has: cuda.FieldTarget, Target: ptr})
	}
	release := ctxCall(5, fail+ms, 0, cuda.Fields{Has: cuda.FieldDevice, Device: 0})
	devs := []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}, {Ordinal: 1, GPU: 1, Method: "uuid"}}
	cases := []struct {
		name   string
		events []store.Event
		ctxs   []store.Context // the record's contexts
		late   bool
		want   []string // the changes: made (+) or released (-), and the GPU (-1 any)
	}{
		{"retained, exits", []store.Event{retainPrimary(tClock + 10*ms), oom}, nil, false, []string{"+0", "-0"}},
		{"retained and released, exits", []store.Event{retainPrimary(tClock + 10*ms), oom, release}, nil, false, []string{"+0", "-0"}},
		{"retained twice, released once", []store.Event{retainPrimary(tClock + 10*ms), retainPrimary(tClock + 11*ms), oom, release},
			nil, false, []string{"+0", "+0", "-0", "-0"}},
		{"two GPUs, exits", []store.Event{create(0xc1, 0), create(0xc2, 1), oom}, nil, false, []string{"+0", "+1", "-0", "-1"}},
		{"created and destroyed, exits", []store.Event{create(0xc1, 0), oom, destroy(0xc1)}, nil, false, []string{"+0", "-0"}},
		{"a recorded context the replay never saw made", []store.Event{oom},
			[]store.Context{{Index: 1, Handle: 0xc9, Device: -1}}, false, []string{"--1"}},
		{"already running: its exit is of unknown size anyway", []store.Event{retainPrimary(tClock + 10*ms), oom}, nil, true, []string{"+0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			procs := []store.Process{{PID: 7, Start: tClock, Exe: "/bin/app", Root: true, Exit: exitAt(fail+2*ms, 1),
				AttachedLate: c.late, Devices: devs, Contexts: c.ctxs}}
			r, err := store.Open(runSpec{symbols: ctxSyms, events: c.events, procs: procs}.write(t))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			s, err := newState(r, Options{NoTimeline: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.findFailures(); err != nil {
				t.Fatal(err)
			}
			s.pickFirst()
			if err := s.passEvents(); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range s.replay.opaque {
				if o.ctx {
					if o.view != viewMixed {
						t.Errorf("%s: view %v, want either", o.why, o.view)
					}
					sign := "-"
					if o.acquire {
						sign = "+"
					}
					got = append(got, sign+strconv.Itoa(o.gpu))
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("context releases on GPUs %v, want %v", got, c.want)
			}
		})
	}
}

// The sample a failure triggered came after the failing process exited:
// it lists neither the process nor its memory, and its free is far above
// the value the verdict judged by (at most 2 GiB). No budget is built
// from it at the failure: its parts would say the memory was free.
func TestNoBudgetFromASampleAfterTheFailingProcessExited(t *testing.T) {
	fail := tClock + 300*ms
	events := []store.Event{retainPrimary(tClock + 10*ms), alloc(0, tClock+20*ms, 14*gib, 0xa000),
		call(0, fail, 2, cuda.Fields{Has: cuda.FieldSize, Size: 4 * gib})}
	procs := []store.Process{{PID: 7, Start: tClock, Exe: "/bin/app", Root: true, Exit: exitAt(fail+ms/2, 1),
		Devices: []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}, Contexts: []store.Context{{Index: 1, Handle: 0xc0, Device: 0}}}}
	samples := []store.Sample{triggered(fbSample(fail+ms, 0), fail), listing(fail+ms, nil)}
	rep := runSpec{symbols: ctxSyms, events: events, samples: samples, procs: procs, workload: exitAt(fail+ms, 1)}.analyze(t, nil)
	if rep.Capacity == nil || *rep.Capacity != report.CapFBExhausted {
		t.Fatalf("capacity %v, want framebuffer-exhausted: %s", rep.Capacity, rep.Verdict)
	}
	if b := budgetsAt(rep, "first-failure"); len(b) != 0 {
		t.Errorf("a budget at the failure from the sample after the exit: %+v", b)
	}
	for _, l := range rep.Glance() {
		if l.Label == "held by" && !strings.Contains(l.Text, "pid 7 14.00 GiB") {
			t.Errorf("held by %q does not name the process's 14 GiB", l.Text)
		}
	}
}

package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// fixaSyms: 0 cuMemAlloc_v2, 1 cuMemFree_v2.
var fixaSyms = []string{"cuMemAlloc_v2", "cuMemFree_v2"}

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
			rep := runSpec{symbols: fixaSyms, events: c.events, samples: c.samples, procs: c.procs,
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

// A failed release is recovered only when the same process later released
// the same handle: freeing another pointer does not undo it.
func TestRecoveredReleaseNeedsTheSameHandle(t *testing.T) {
	badFree := func(end int64, ptr uint64) store.Event {
		return call(1, end, 1, cuda.Fields{Has: cuda.FieldTarget, Target: ptr})
	}
	cases := []struct {
		name  string
		later uint64 // the pointer a later free succeeds on
		want  bool
	}{
		{"another pointer", 0xb000, false},
		{"the same pointer", 0xa000, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs := []store.Event{alloc(0, tClock+10*ms, gib, 0xa000), alloc(0, tClock+20*ms, gib, 0xb000),
				badFree(tClock+30*ms, 0xa000), free(1, tClock+40*ms, c.later)}
			rep := runSpec{symbols: fixaSyms, events: evs}.analyze(t, nil)
			if len(rep.Failures) != 1 {
				t.Fatalf("failures %+v", rep.Failures)
			}
			if rep.Failures[0].Recovered != c.want {
				t.Errorf("recovered %v, want %v", rep.Failures[0].Recovered, c.want)
			}
		})
	}
}

// A sticky code (a kernel's fault left on the context) is not judged
// against free memory, and the verdict says why.
func TestStickyCodeGetsNoCapacity(t *testing.T) {
	fail := tClock + 300*ms
	rep := runSpec{symbols: fixaSyms, events: []store.Event{
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
		rep := runSpec{symbols: fixaSyms, events: []store.Event{e}}.analyze(t, nil)
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

// When every failure was recovered, a non-zero exit of the workload is
// unexplained by the record (missing evidence); with exit 0 the failure
// did no harm, and the advice is not to make the request fit.
func TestRecoveredFailureThenExit(t *testing.T) {
	fail := tClock + 300*ms
	evs := []store.Event{
		alloc(0, tClock+100*ms, 8*gib, 0xa000),
		call(0, fail, 2, cuda.Fields{Has: cuda.FieldSize, Size: 10 * gib}),
		free(1, fail+10*ms, 0xa000),
		alloc(0, fail+20*ms, 10*gib, 0xb000),
	}
	smp := []store.Sample{triggered(fbSample(fail+ms, 8*gib), fail)}
	for _, code := range []int{1, 0} {
		x := exitAt(fail+100*ms, code)
		procs := []store.Process{{PID: 7, Start: tClock, Exe: "/bin/app", Root: true, Exit: x,
			Devices: []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}}}
		rep := runSpec{symbols: fixaSyms, events: evs, samples: smp, procs: procs, workload: x}.analyze(t, nil)
		if n := strings.Count(rep.Verdict, "The first failed operation"); n != 1 {
			t.Errorf("exit %d: the verdict names the first failed operation %d times: %s", code, n, rep.Verdict)
		}
		steps := strings.Join(rep.NextSteps, " / ")
		switch code {
		case 1:
			if rep.Attribution != report.AttrMissingEvidence || !strings.Contains(rep.Verdict, "exited with status 1") {
				t.Errorf("exit 1: attribution %s, verdict %q", rep.Attribution, rep.Verdict)
			}
		case 0:
			if rep.Attribution != report.AttrAllocation || strings.Contains(steps, "make the request fit") {
				t.Errorf("exit 0: attribution %s, next steps %q", rep.Attribution, steps)
			}
		}
	}
}

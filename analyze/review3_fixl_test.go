package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// A failed allocation is recovered only by a later success on the same
// CUDA device: memory found on another GPU does not satisfy a request its
// own GPU could not.
func TestRecoveredNeedsTheSameDevice(t *testing.T) {
	fail := tClock + 300*ms
	cases := []struct {
		name    string
		laterOn int32 // the device of the later, larger success
		want    bool
	}{
		{"another device", 1, false},
		{"the same device", 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			later := alloc(0, fail+20*ms, 2*gib, 0xb000)
			later.Dev = c.laterOn
			evs := []store.Event{call(0, fail, 2, cuda.Fields{Has: cuda.FieldSize, Size: gib}), later}
			x := exitAt(fail+100*ms, 1)
			procs := []store.Process{{PID: 7, Start: tClock, Exe: "/bin/app", Root: true, Exit: x,
				Devices: []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}, {Ordinal: 1, GPU: 1, Method: "uuid"}}}}
			smp := []store.Sample{triggered(fbSample(fail+ms, 15*gib+gib/2), fail)}
			rep := runSpec{symbols: fixaSyms, events: evs, samples: smp, procs: procs, workload: x}.analyze(t, nil)
			if len(rep.Failures) != 1 || rep.Failures[0].Recovered != c.want {
				t.Fatalf("failures %+v, want recovered %v", rep.Failures, c.want)
			}
			if c.want {
				return
			}
			if rep.Attribution != report.AttrAllocation || rep.Capacity == nil || *rep.Capacity != report.CapFBExhausted {
				t.Errorf("attribution %s, capacity %v, want allocation, framebuffer-exhausted: %s", rep.Attribution, rep.Capacity, rep.Verdict)
			}
			if strings.Contains(rep.Verdict, "recovered") {
				t.Errorf("the verdict says recovered: %s", rep.Verdict)
			}
		})
	}
}

// When an identity query failed before the first failed allocation, the
// verdict does not call the allocation the first failed operation: it is
// the first failed allocation, and the earlier call it names as the cause
// is the one the failure list can mark.
func TestFirstFailureAfterAnEarlierQuery(t *testing.T) {
	syms := []string{"cuMemAlloc_v2", "cuDeviceGet"}
	const notInit = 3 // CUDA_ERROR_NOT_INITIALIZED
	cases := []struct {
		name  string
		query bool // cuDeviceGet failed first
		lead  string
	}{
		{"an earlier failed query", true, "The first failed allocation is cuMemAlloc_v2"},
		{"the allocation alone", false, "The first failed operation is cuMemAlloc_v2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs := []store.Event{call(0, tClock+200*ms, notInit, cuda.Fields{Has: cuda.FieldSize, Size: gib})}
			if c.query {
				evs = append(evs, call(1, tClock+100*ms, notInit, cuda.Fields{}))
			}
			rep := runSpec{symbols: syms, events: evs}.analyze(t, nil)
			if rep.FirstFailure == nil || rep.FirstFailure.Symbol != "cuMemAlloc_v2" || rep.Attribution != report.AttrNotMemory {
				t.Fatalf("first %+v, attribution %s", rep.FirstFailure, rep.Attribution)
			}
			if !strings.HasPrefix(rep.Verdict, c.lead) {
				t.Errorf("verdict %q, want it to begin %q", rep.Verdict, c.lead)
			}
			if c.query && (!rep.Cause.Names(&rep.Failures[0]) || rep.Cause.Names(&rep.Failures[1])) {
				t.Errorf("cause %+v does not name the earlier query alone: %+v", rep.Cause, rep.Failures)
			}
		})
	}
}

// Page-locked host memory that could not be had (cuMemHostAlloc, or
// cuMemHostRegister, which pins what it registers) is an allocation
// problem of host memory, judged against no GPU view, with next steps for
// pinned memory; a registration refused for a mapping reason stays a
// mapping problem.
func TestHostPinnedMemoryFailures(t *testing.T) {
	syms := []string{"cuMemHostRegister_v2", "cuMemHostAlloc"}
	cases := []struct {
		name  string
		sym   uint16
		res   int32
		want  report.Attribution
		steps bool
	}{
		{"register out of memory", 0, 2, report.AttrAllocation, true},
		{"host alloc out of memory", 1, 2, report.AttrAllocation, true},
		{"register of a registered range", 0, 712, report.AttrMapping, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := call(c.sym, tClock+100*ms, c.res, cuda.Fields{Has: cuda.FieldSize, Size: 100 << 20})
			rep := runSpec{symbols: syms, events: []store.Event{e}}.analyze(t, nil)
			if rep.Attribution != c.want || rep.Capacity == nil || *rep.Capacity != report.CapNotApplicable {
				t.Fatalf("attribution %s, capacity %v, want %s, not-applicable: %s", rep.Attribution, rep.Capacity, c.want, rep.Verdict)
			}
			steps := strings.Join(rep.NextSteps, " / ")
			if got := strings.Contains(steps, "ulimit -l") && strings.Contains(steps, "pin_memory"); got != c.steps {
				t.Errorf("pinned-memory next steps %v, want %v: %q", got, c.steps, steps)
			}
			if c.steps && (strings.Contains(rep.Verdict, "mapping problem") || !strings.Contains(rep.Verdict, "page-locked")) {
				t.Errorf("verdict %q", rep.Verdict)
			}
		})
	}
}

// What is live at the first failure is counted by kind, so a report can
// name a mapping a mapping; and the verdict on a recovered failure before
// a bad exit reads as English.
func TestLiveKindsAndRecoveredWording(t *testing.T) {
	fail := tClock + 300*ms
	evs := []store.Event{
		alloc(0, tClock+100*ms, gib, 0xa000), alloc(0, tClock+150*ms, gib, 0xb000),
		call(0, fail, 2, cuda.Fields{Has: cuda.FieldSize, Size: 10 * gib}),
		alloc(0, fail+20*ms, 10*gib, 0xc000),
	}
	x := exitAt(fail+100*ms, 1)
	procs := []store.Process{{PID: 7, Start: tClock, Exe: "/bin/app", Root: true, Exit: x,
		Devices: []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}}}
	rep := runSpec{symbols: fixaSyms, events: evs, procs: procs, workload: x}.analyze(t, nil)
	if len(rep.LiveAtFailure) != 1 {
		t.Fatalf("live %+v", rep.LiveAtFailure)
	}
	l := rep.LiveAtFailure[0]
	if len(l.Kinds) != 1 || l.Kinds[0] != (report.KindCount{Kind: "device-pointer", Count: 2}) {
		t.Errorf("kinds %+v, want 2 device-pointer", l.Kinds)
	}
	if !strings.Contains(rep.Verdict, "after it recovered from each of its failed calls") || strings.Contains(rep.Verdict, "call of its") {
		t.Errorf("verdict %q", rep.Verdict)
	}
}

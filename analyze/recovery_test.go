package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// Recovered failures: what counts as recovering one, and what a run whose
// failures were all recovered says.

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
			rep := runSpec{symbols: allocFreeSyms, events: evs}.analyze(t, nil)
			if len(rep.Failures) != 1 {
				t.Fatalf("failures %+v", rep.Failures)
			}
			if rep.Failures[0].Recovered != c.want {
				t.Errorf("recovered %v, want %v", rep.Failures[0].Recovered, c.want)
			}
		})
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
		rep := runSpec{symbols: allocFreeSyms, events: evs, samples: smp, procs: procs, workload: x}.analyze(t, nil)
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
			rep := runSpec{symbols: allocFreeSyms, events: evs, samples: smp, procs: procs, workload: x}.analyze(t, nil)
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

// A recovered first failure before an unrecovered one is named in one
// short sentence; it names the pid that recovered only when that is not
// the pid of the failure the verdict is about.
func TestRecoveredFirstFailureNamesItsPIDOnlyWhenAnother(t *testing.T) {
	for _, c := range []struct {
		name    string
		lastPID uint32 // the pid of the unrecovered failure
		wantPID bool
	}{
		{"the same process", 7, false},
		{"another process", 8, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			oom := func(end int64, size uint64) store.Event {
				return call(0, end, 2, cuda.Fields{Has: cuda.FieldSize, Size: size})
			}
			last := oom(tClock+300*ms, 40*gib)
			last.PID, last.TID = c.lastPID, c.lastPID
			evs := []store.Event{oom(tClock+100*ms, 2*gib), alloc(0, tClock+200*ms, 2*gib, 0xa000), last}
			rep := runSpec{symbols: allocFreeSyms, events: evs}.analyze(t, nil)
			if rep.FirstUnrecovered == nil {
				t.Fatalf("no unrecovered failure: %s", rep.Verdict)
			}
			note := "The first failed operation, cuMemAlloc_v2 of 2.00 GiB at +0.100 s"
			if c.wantPID {
				note = "The first failed operation, cuMemAlloc_v2 of 2.00 GiB by pid 7 at +0.100 s"
			}
			if !strings.Contains(rep.Verdict, note+" (CUDA_ERROR_OUT_OF_MEMORY), was recovered: its process later succeeded at it") {
				t.Errorf("verdict lacks %q: %s", note, rep.Verdict)
			}
		})
	}
}

// A failure after a recovered first failure is described by what its own
// process held then: its evidence counts the traced allocations live at
// it, not those live at the first failure.
func TestLaterFailureEvidenceHoldsWhatItsProcessHeldThen(t *testing.T) {
	oom := func(end int64, size uint64) store.Event {
		return call(0, end, 2, cuda.Fields{Has: cuda.FieldSize, Size: size})
	}
	evs := []store.Event{alloc(0, tClock+10*ms, 3*gib, 0xa000), alloc(0, tClock+20*ms, 3*gib, 0xb000),
		oom(tClock+30*ms, 4*gib), free(1, tClock+40*ms, 0xb000), alloc(0, tClock+50*ms, 4*gib, 0xc000),
		free(1, tClock+60*ms, 0xc000), oom(tClock+70*ms, 6*gib)}
	rep := runSpec{symbols: allocFreeSyms, events: evs}.analyze(t, nil)
	if rep.FirstUnrecovered == nil {
		t.Fatalf("no unrecovered failure: %s", rep.Verdict)
	}
	held := func(ev []report.Evidence) string {
		for _, e := range ev {
			if e.Field == "traced device allocations of this process" && e.Value != nil {
				return report.HumanBytes(*e.Value) + " in " + e.Note
			}
		}
		return "none"
	}
	if got := held(rep.Evidence); got != "6.00 GiB in 2 allocations" {
		t.Errorf("at the first failure: %s, want 6.00 GiB in 2 allocations", got)
	}
	if got := held(rep.FirstUnrecovered.Evidence); got != "3.00 GiB in 1 allocation" {
		t.Errorf("at the unrecovered failure: %s, want 3.00 GiB in 1 allocation", got)
	}
}

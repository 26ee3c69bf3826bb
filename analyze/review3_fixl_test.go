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

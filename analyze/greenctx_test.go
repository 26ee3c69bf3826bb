package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// greenSyms: 0 cuMemAlloc_v2, 1 cuMemFree_v2, 2 cuDevicePrimaryCtxRetain,
// 3 cuGreenCtxCreate, 4 cuGreenCtxDestroy.
var greenSyms = []string{"cuMemAlloc_v2", "cuMemFree_v2", "cuDevicePrimaryCtxRetain",
	"cuGreenCtxCreate", "cuGreenCtxDestroy"}

// A green context holds framebuffer of its own like any context, which no
// traced call sizes: made or destroyed between a sample and the failure,
// it leaves the sample's value open on that side, and "had room" is never
// said from it.
func TestGreenContextMemoryBoundsTheSample(t *testing.T) {
	fail := tClock + 300*ms
	setup := []store.Event{
		ctxCall(2, tClock+10*ms, 0, cuda.Fields{Has: cuda.FieldPtr | cuda.FieldDevice, Ptr: 0xc0, Device: 0}),
		alloc(0, tClock+20*ms, 14*gib, 0xa000),
	}
	oom := call(0, fail, 2, cuda.Fields{Has: cuda.FieldSize, Size: 2 * gib})
	green := func(end int64) store.Event {
		return ctxCall(3, end, 0, cuda.Fields{Has: cuda.FieldPtr | cuda.FieldDevice, Ptr: 0x6c1, Device: 0})
	}
	destroy := ctxCall(4, fail+ms/2, 0, cuda.Fields{Has: cuda.FieldTarget, Target: 0x6c1})
	procs := []store.Process{{PID: 7, Start: tClock, Exe: "/bin/app", Root: true, Exit: exitAt(fail+50*ms, 1),
		Devices:  []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}},
		Contexts: []store.Context{{Index: 1, Handle: 0xc0, Device: 0}, {Index: 2, Handle: 0x6c1, Device: 0}}}}
	cases := []struct {
		name    string
		events  []store.Event
		samples []store.Sample
		inText  string
	}{
		{"destroyed between the failure and a later sample",
			[]store.Event{green(tClock + 30*ms), oom, destroy},
			[]store.Sample{triggered(fbSample(fail+ms, 13*gib), fail)}, "destroyed a CUDA context on GPU 0"},
		{"created between an earlier sample and the failure",
			[]store.Event{green(tClock + 30*ms), oom},
			[]store.Sample{fbSample(tClock+25*ms, 3*gib)}, "created a CUDA context on GPU 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := runSpec{symbols: greenSyms, events: append(append([]store.Event(nil), setup...), c.events...),
				samples: c.samples, procs: procs, workload: exitAt(fail+ms, 1)}.analyze(t, nil)
			if rep.Capacity == nil || *rep.Capacity != report.CapUnknown {
				t.Fatalf("capacity %v, want unknown: %s", rep.Capacity, rep.Verdict)
			}
			if text := decisiveText(rep); !strings.Contains(text, c.inText) {
				t.Errorf("%q is not said: %q", c.inText, text)
			}
		})
	}
}

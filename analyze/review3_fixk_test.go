package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

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

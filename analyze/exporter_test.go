package analyze

import (
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// An import names no size: the mapped size comes from the exporter's
// allocation, and the evidence carries that allocation's time, never 0.
func TestExporterSizedEvidenceHasTime(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	allocAt := tClock + 100*ms
	events := []store.Event{
		alloc(0, allocAt, 512*mibB, 0x1000),
		call(1, tClock+110*ms, 0, cuda.Fields{Has: cuda.FieldTarget | cuda.FieldKey, Target: 0x1000, Key: key}),
		{Symbol: 2, PID: 8, TID: 8, Start: tClock + 200*ms, End: tClock + 200*ms + 1000, Result: 205, Ctx: 1, Dev: 0, Stack: -1,
			Fields: cuda.Fields{Has: cuda.FieldKey | cuda.FieldFlags, Key: key, Flags: 1}},
	}
	procs := []store.Process{
		{PID: 7, Start: tClock, Exe: "/bin/exporter", Root: true, Devices: []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}},
		{PID: 8, Start: tClock, Exe: "/bin/importer", Devices: []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}},
	}
	rep := runSpec{symbols: []string{"cuMemAlloc_v2", "cuIpcGetMemHandle", "cuIpcOpenMemHandle_v2"}, events: events, procs: procs}.analyze(t, nil)
	var ev *report.Evidence
	for i := range rep.Evidence {
		if rep.Evidence[i].Field == "mapped size" {
			ev = &rep.Evidence[i]
		}
	}
	if ev == nil || ev.Value == nil || *ev.Value != 512*mibB {
		t.Fatalf("no mapped size of 512 MiB in the evidence: %+v", rep.Evidence)
	}
	if ev.TimeNS != allocAt {
		t.Errorf("mapped size at %d ns into the run, want the exporter's allocation at %d", ev.TimeNS-tClock, allocAt-tClock)
	}
}

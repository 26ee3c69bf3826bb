package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
	"google.golang.org/protobuf/proto"

	pb "github.com/retrivium/forensic/render/perfetto/traceproto"
)

// forensic export writes Perfetto's protobuf trace of a recorded run by
// default: decoded with Perfetto's own message definitions, it has one
// slice per stored call, the failed call's name and its process and thread
// tracks, and separate counters for framebuffer and BAR1.
func TestExportPerfettoProtobuf(t *testing.T) {
	w := newWorld(t)
	res := w.record(nil, filepath.Join(simDir, "scenarios", "weights_oom"))
	trace := filepath.Join(w.dir, "trace.pftrace")
	if out, err := binCommand(bin{}, "export", res.db, "-o", trace).CombinedOutput(); err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	data, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	var tr pb.Trace
	if err := proto.Unmarshal(data, &tr); err != nil {
		t.Fatalf("not a Perfetto trace: %v", err)
	}
	begins, names, tracks := 0, map[string]bool{}, map[string]bool{}
	for _, p := range tr.GetPacket() {
		if ev := p.GetTrackEvent(); ev != nil && ev.GetType() == pb.TrackEvent_TYPE_SLICE_BEGIN {
			begins++
		}
		for _, n := range p.GetInternedData().GetEventNames() {
			names[n.GetName()] = true
		}
		if d := p.GetTrackDescriptor(); d != nil {
			tracks[d.GetName()+d.GetProcess().GetProcessName()+d.GetThread().GetThreadName()] = true
		}
	}
	_, events, _ := stored(t, res.db)
	if begins != len(events) {
		t.Errorf("%d slices for %d stored calls", begins, len(events))
	}
	if !names["cuMemAlloc_v2"] {
		t.Errorf("the failed call's symbol is not a slice name: %v", names)
	}
	var fb, bar1 bool
	for name := range tracks {
		lower := strings.ToLower(name)
		if strings.Contains(lower, "framebuffer") && strings.Contains(lower, "bar1") {
			t.Errorf("track %q mixes framebuffer and BAR1", name)
		}
		fb = fb || strings.Contains(lower, "framebuffer free")
		bar1 = bar1 || strings.Contains(lower, "bar1 free")
		if strings.Contains(name, "weights_oom") {
			names["process track"] = true
		}
	}
	if !fb || !bar1 || !names["process track"] {
		t.Errorf("tracks %v: want the process's and separate framebuffer and BAR1 counters", tracks)
	}
	if per := float64(len(data)) / float64(len(events)); per > 200 {
		t.Errorf("%.0f bytes per call for a short run", per)
	}
}

// chromeEvents exports a run as trace-event JSON.
func chromeEvents(t *testing.T, db string) []chromeEvent {
	t.Helper()
	out := filepath.Join(t.TempDir(), "trace.json")
	if b, err := binCommand(bin{}, "export", "--format", "chrome-json", "-o", out, db).CombinedOutput(); err != nil {
		t.Fatalf("export: %v\n%s", err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []chromeEvent `json:"traceEvents"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("export is not JSON: %v", err)
	}
	return doc.TraceEvents
}

type chromeEvent struct {
	Ph   string         `json:"ph"`
	Name string         `json:"name"`
	TS   float64        `json:"ts"`
	Args map[string]any `json:"args"`
}

// A process that exited holds nothing: its "process used" row ends at 0,
// and its exported counter drops to 0, while the process still running
// keeps its value.
func TestExitedProcessHoldsNothing(t *testing.T) {
	w := newWorld(t)
	res := w.record(nil, script("init; fork { init; use 0; alloc 1G; sleep 400 }; use 0; alloc 2G; sleep 900; wait")...)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	rep, _ := analyzeJSON(t, res.db)
	var child, parent *report.ViewRow
	for i := range rep.MemoryViews {
		v := &rep.MemoryViews[i]
		if v.Field != "process used" || v.Peak == nil {
			continue
		}
		switch *v.Peak {
		case 1 << 30:
			child = v
		case 2 << 30:
			parent = v
		}
	}
	if child == nil || parent == nil {
		t.Fatalf("no process used rows for the child (1 GiB) and the parent (2 GiB): %+v", rep.MemoryViews)
	}
	if child.End == nil || *child.End != 0 {
		t.Errorf("the exited child ends at %s, want 0", valText(child.End))
	}
	// In the export, the child's counter drops to 0 while the parent's
	// still reads 2 GiB.
	childName := "GPU 0 framebuffer used by pid " + strconv.FormatUint(uint64(child.PID), 10)
	parentName := "GPU 0 framebuffer used by pid " + strconv.FormatUint(uint64(parent.PID), 10)
	cur := map[string]float64{}
	dropped := false
	for _, e := range chromeEvents(t, res.db) {
		if e.Ph != "C" || (e.Name != childName && e.Name != parentName) {
			continue
		}
		cur[e.Name], _ = e.Args["bytes"].(float64)
		if v, ok := cur[childName]; ok && v == 0 && cur[parentName] == 2<<30 {
			dropped = true
		}
	}
	if !dropped {
		t.Errorf("the exited child's counter never dropped to 0 while the parent held 2 GiB: last values %v", cur)
	}
}

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
	if out, err := exec.Command(binPath, "export", res.db, "-o", trace).CombinedOutput(); err != nil {
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

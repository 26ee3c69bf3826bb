package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// A mapping through another GPU's aperture is judged on that GPU's BAR1,
// from that GPU's sample, recorded on two simulated GPUs: an IPC open by a
// process on GPU 0 of memory exported on GPU 1, whose BAR1 a VMM grant
// nearly filled (52 MiB free, 64 MiB needed; GPU 0 had 252 MiB), and peer
// access from GPU 0 to a context on GPU 1, whose BAR1 had 24 MiB left
// (GPU 0 had 124 MiB).
func TestReview3ApertureOfAnotherGPU(t *testing.T) {
	t.Run("IPC open of another GPU's memory", func(t *testing.T) {
		w := newWorld(t, "SIMGPU_DEVICES=2", "SIMGPU_BAR1_TOTAL=256M")
		h := filepath.Join(w.dir, "handle")
		script := fmt.Sprintf("%[1]s 'init; use 1; vmm 200M 1 0; alloc 64M; ipc-export %[2]s; sleep 1000' & sleep 0.3; "+
			"%[1]s 'init; use 0; ipc-open %[2]s; sleep 300; exit 1'; wait", simwork, h)
		res := w.record(nil, "/bin/sh", "-c", script)
		rep, _ := analyzeJSON(t, res.db)
		ff := rep.FirstFailure
		if ff == nil || !strings.HasPrefix(ff.Symbol, "cuIpcOpenMemHandle") {
			t.Fatalf("first failure %+v, want the IPC open: %s", ff, res.stderr)
		}
		if got := deref(rep.Capacity); got != string(report.CapBAR1Exhausted) {
			t.Fatalf("capacity %s, want bar1-exhausted: %s", got, rep.Verdict)
		}
		checkFreeRow(t, rep, 1, 52, true)
		if ff.ApertureGPU == nil || *ff.ApertureGPU != 1 || ff.ApertureOf != "exporter" {
			t.Errorf("aperture GPU %v of %q, want GPU 1 of the exporter", ff.ApertureGPU, ff.ApertureOf)
		}
		if rep.NearestSamples == nil || rep.NearestSamples.GPU != 1 {
			t.Errorf("samples around the failure %+v, want GPU 1's", rep.NearestSamples)
		}
		if !strings.Contains(rep.Verdict, "52.0 MiB free") || strings.Contains(rep.Verdict, "252.0 MiB") {
			t.Errorf("verdict does not judge GPU 1's 52 MiB: %s", rep.Verdict)
		}
	})
	t.Run("peer access to another GPU's context", func(t *testing.T) {
		w := newWorld(t, "SIMGPU_DEVICES=2", "SIMGPU_BAR1_TOTAL=128M", "SIMGPU_PEER_BAR1=32M")
		res := w.record(nil, simwork, "init; use 1; vmm 100M 1 0; use 0; peer 1; sleep 200; exit 1")
		rep, raw := analyzeJSON(t, res.db)
		ff := rep.FirstFailure
		if ff == nil || ff.Symbol != "cuCtxEnablePeerAccess" {
			t.Fatalf("first failure %+v, want cuCtxEnablePeerAccess: %s", ff, res.stderr)
		}
		if got := deref(rep.Capacity); got != string(report.CapUnknown) {
			t.Fatalf("capacity %s, want unknown (peer access names no size): %s", got, rep.Verdict)
		}
		checkFreeRow(t, rep, 1, 24, false)
		for _, e := range rep.Evidence {
			if e.Decisive {
				t.Errorf("%q marked decisive although capacity is unknown", e.Field)
			}
		}
		if ff.ApertureGPU == nil || *ff.ApertureGPU != 1 || ff.ApertureOf != "peer" {
			t.Errorf("aperture GPU %v of %q, want GPU 1 of the peer", ff.ApertureGPU, ff.ApertureOf)
		}
		if ff.GPUIndex == nil || *ff.GPUIndex != 0 || !strings.Contains(rep.Verdict, "on GPU 0") {
			t.Errorf("the call ran on GPU 0 (its context's): gpu %v, %s", ff.GPUIndex, rep.Verdict)
		}
		steps := strings.Join(rep.NextSteps, " | ")
		if strings.Contains(steps, "exporting process") || !strings.Contains(steps, "enabling peer access") {
			t.Errorf("next steps are not peer access's: %s", steps)
		}
		ffRaw, _ := raw["first_failure"].(map[string]any)
		if ffRaw["aperture_of"] != "peer" {
			t.Errorf("JSON first_failure.aperture_of %v, want peer", ffRaw["aperture_of"])
		}
		// The HTML's lead table: the process mapped on GPU 1 and failed on
		// GPU 0, so its live column cannot be headed "GPU 0".
		html := filepath.Join(w.dir, "r.html")
		if out, err := exec.Command(binPath, "report", res.db, "-o", html).CombinedOutput(); err != nil {
			t.Fatalf("forensic report: %v: %s", err, out)
		}
		b, err := os.ReadFile(html)
		if err != nil {
			t.Fatal(err)
		}
		page := string(b)
		if strings.Contains(page, "traced live on GPU 0 after it") || !strings.Contains(page, "traced live on the call&#39;s GPU after it") {
			t.Errorf("the lead table's live column is headed with one GPU though its calls ran on two")
		}
	})
}

// checkFreeRow checks the "BAR1 free at the failure" evidence row: its GPU,
// value in MiB, and whether it is marked decisive.
func checkFreeRow(t *testing.T, rep *report.Report, gpu int, mib uint64, decisive bool) {
	t.Helper()
	for _, e := range rep.Evidence {
		if e.Field != "BAR1 free at the failure" {
			continue
		}
		if e.GPU == nil || *e.GPU != gpu || e.Value == nil || *e.Value != mib<<20 || e.Decisive != decisive {
			t.Errorf("BAR1 free row: GPU %v, %v bytes, decisive %v; want GPU %d, %d MiB, decisive %v",
				e.GPU, e.Value, e.Decisive, gpu, mib, decisive)
		}
		return
	}
	t.Errorf("no BAR1 free row in the evidence: %+v", rep.Evidence)
}

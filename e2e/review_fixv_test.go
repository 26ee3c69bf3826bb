package e2e

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// The verdicts a user's review found confidently wrong, recorded on the
// simulated GPU: a MIG instance judged by the whole GPU's free memory,
// grants to several peers judged as one mapping, an allocation with room
// blamed on reserved memory, and the wrong advice when NVML is missing.

// migUUID asks `forensic inventory` for a MIG instance's UUID in w.
func migUUID(t *testing.T, w *world, index int) string {
	t.Helper()
	cmd := exec.Command(binPath, "inventory", "--json", "--libnvidia-ml", simNVML)
	cmd.Env = w.environ()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("inventory: %v", err)
	}
	var inv store.Inventory
	if err := json.Unmarshal(out, &inv); err != nil {
		t.Fatal(err)
	}
	if len(inv.GPUs) != 1 || len(inv.GPUs[0].MIG) <= index || inv.GPUs[0].MIG[index].UUID.Value == nil {
		t.Fatalf("inventory lists no MIG instance %d: %s", index, out)
	}
	return *inv.GPUs[0].MIG[index].UUID.Value
}

func TestReviewMIGInstance(t *testing.T) {
	tests := []struct {
		name     string
		script   string
		visible  int // index of the MIG instance CUDA_VISIBLE_DEVICES names, -1 none
		capacity report.Capacity
		mig      int // the failure's MIG index, -1 unknown
	}{
		// 7 GiB fill most of instance 0 (8 GiB); the whole GPU still shows
		// 8.5 GiB free.
		{"nothing names the instance", "init; use 0; alloc 7G; alloc 1G; exit 1", -1, report.CapUnknown, -1},
		{"the second instance, unnamed", "init; use 1; alloc 7G; alloc 1G; exit 1", -1, report.CapUnknown, -1},
		{"cuDeviceGetUuid_v2 names it", "init; use 0; uuid 0; alloc 7G; alloc 1G; exit 1", -1, report.CapFBExhausted, 0},
		{"named by v2, then v1 names the GPU", "init; use 1; uuid 1; uuid-v1 1; alloc 7G; alloc 1G; exit 1", -1, report.CapFBExhausted, 1},
		{"cuDeviceGetUuid names only the GPU", "init; use 0; uuid-v1 0; alloc 7G; alloc 1G; exit 1", -1, report.CapUnknown, -1},
		{"CUDA_VISIBLE_DEVICES=MIG-<uuid>", "init; use 0; alloc 7G; alloc 1G; exit 1", 0, report.CapFBExhausted, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A 200 MiB aperture: with 256 MiB, 768 MiB free would be the
			// reserved 512 MiB plus BAR1's total to the check of outputs.
			w := newWorld(t, "SIMGPU_MIG=2", "SIMGPU_FB_TOTAL=16G", "SIMGPU_BAR1_TOTAL=200M")
			if tt.visible >= 0 {
				w.env = append(w.env, "CUDA_VISIBLE_DEVICES="+migUUID(t, w, tt.visible))
			}
			res := w.record(nil, simwork, tt.script)
			rep, _ := analyzeJSON(t, res.db)
			ff := rep.FirstFailure
			if ff == nil || ff.Symbol != "cuMemAlloc_v2" {
				t.Fatalf("first failure %+v, want the 1 GiB allocation", ff)
			}
			if got := deref(rep.Capacity); got != string(tt.capacity) {
				t.Fatalf("capacity %s, want %s: %s", got, tt.capacity, rep.Verdict)
			}
			gotMIG := -1
			if ff.MIGIndex != nil {
				gotMIG = *ff.MIGIndex
			}
			if gotMIG != tt.mig || ff.GPUIndex == nil || *ff.GPUIndex != 0 {
				t.Errorf("failure on GPU %v MIG %d, want GPU 0 MIG %d", ff.GPUIndex, gotMIG, tt.mig)
			}
			if tt.capacity == report.CapFBExhausted && !strings.Contains(rep.Verdict, "768.0 MiB free") {
				t.Errorf("not judged on the instance's own memory: %s", rep.Verdict)
			}
			if tt.capacity == report.CapUnknown {
				if !hasMissing(rep.Missing, "MIG enabled", "does not say which") {
					t.Errorf("the unknown instance is not the missing evidence: %+v", rep.Missing)
				}
				if !anyContains(rep.NextSteps, "CUDA_VISIBLE_DEVICES=MIG-") || anyContains(rep.NextSteps, "CUDA_DEVICE_ORDER") {
					t.Errorf("next steps %q, want the MIG advice", rep.NextSteps)
				}
			}
			checkOutputs(t, w, res.db)
		})
	}
}

func TestReviewPeerGrants(t *testing.T) {
	// When the failure's sample is taken before the process exits it reads
	// the 24 MiB free exactly; after the exit, which also frees the
	// context's own memory (some of it mapped through BAR1), free at the
	// failure is at most the sample's less the grants it released (88 MiB
	// when they cost one mapping each). Either is honest; "had room" never
	// is. The grants to three peers are held stopped at the failure, so
	// that the per-peer cost is the only doubt.
	exhausted24 := map[report.Capacity][]string{report.CapBAR1Exhausted: {"24.0 MiB free"}}
	tests := []struct {
		name   string
		script string
		flags  []string
		want   map[report.Capacity][]string // each acceptable capacity, with what the verdict or the missing evidence says
	}{
		// The simulated driver charges each peer: 300 MiB needed, 188 free.
		{"a grant to three peers", "init; use 0; vmm 64M 0 1; vmm 100M 0 1 2 3; exit 1", []string{"--freeze-on-failure"},
			map[report.Capacity][]string{report.CapUnknown: {"100.0 MiB", "300.0 MiB", "188.0 MiB"}}},
		{"a grant to three peers, owner not granted", "init; use 0; vmm 64M 0 1; vmm 100M 2 3 1; exit 1", []string{"--freeze-on-failure"},
			map[report.Capacity][]string{report.CapUnknown: {"300.0 MiB"}}},
		// An earlier grant to two peers: 24 MiB free (per peer) or 88.
		{"an earlier grant to two peers", "init; use 0; vmm 64M 0 1 2; vmm 100M 0 1; vmm 30M 0 1; exit 1", nil,
			map[report.Capacity][]string{report.CapUnknown: {"88.0 MiB"}, report.CapBAR1Exhausted: exhausted24[report.CapBAR1Exhausted]}},
		{"an earlier grant to two peers, frozen at the failure", "init; use 0; vmm 64M 0 1 2; vmm 100M 0 1; vmm 30M 0 1; exit 1",
			[]string{"--freeze-on-failure"}, exhausted24},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, "SIMGPU_DEVICES=4")
			res := w.record(tt.flags, simwork, tt.script)
			rep, _ := analyzeJSON(t, res.db)
			if ff := rep.FirstFailure; ff == nil || ff.Symbol != "cuMemSetAccess" || ff.ResultName != "CUDA_ERROR_MAP_FAILED" {
				t.Fatalf("first failure %+v, want cuMemSetAccess MAP_FAILED", ff)
			}
			words, ok := tt.want[report.Capacity(deref(rep.Capacity))]
			if !ok {
				t.Fatalf("capacity %s, want one of %v: %s", deref(rep.Capacity), tt.want, rep.Verdict)
			}
			said := rep.Verdict
			for _, m := range rep.Missing {
				if m.Decisive {
					said += " " + m.What
				}
			}
			for _, word := range words {
				if !strings.Contains(said, word) {
					t.Errorf("%q not said: %s", word, said)
				}
			}
			if anyContains(rep.NextSteps, "had room") {
				t.Errorf("next steps say the aperture had room: %q", rep.NextSteps)
			}
			checkOutputs(t, w, res.db)
		})
	}
}

func TestReviewRoomNotReserved(t *testing.T) {
	w := newWorld(t, "SIMGPU_FAIL=cuMemAlloc_v2:3:2")
	// Held stopped until its sample is read: a sample read after the exit
	// cannot say "had room", since the exit also freed the context's own
	// memory, of a size no traced call gives.
	res := w.record([]string{"--freeze-on-failure"}, simwork, "init; use 0; alloc 1G; alloc 1G; alloc 1G; exit 1")
	rep, _ := analyzeJSON(t, res.db)
	if got := deref(rep.Capacity); got != string(report.CapFBHadRoom) {
		t.Fatalf("capacity %s, want framebuffer-had-room: %s", got, rep.Verdict)
	}
	if strings.Contains(rep.Verdict, "reserved by the driver") || anyContains(rep.NextSteps, "reserved memory") {
		t.Errorf("reserved memory blamed for a request that had room: %s / %q", rep.Verdict, rep.NextSteps)
	}
	for _, want := range []string{"fragmentation", "per-process limit", "injected fault"} {
		if !strings.Contains(rep.Verdict, want) {
			t.Errorf("the verdict does not name %s: %s", want, rep.Verdict)
		}
	}
}

func TestReviewNoNVMLAdvice(t *testing.T) {
	w := newWorld(t)
	res := w.record([]string{"--libnvidia-ml", w.dir + "/absent/libnvidia-ml.so.1"}, simwork, "init; use 0; alloc 100G; exit 1")
	rep, _ := analyzeJSON(t, res.db)
	if got := deref(rep.Capacity); got != string(report.CapUnknown) {
		t.Fatalf("capacity %s, want unknown without NVML: %s", got, rep.Verdict)
	}
	if !hasMissing(rep.Missing, "GPU of the failing call is unknown") {
		t.Fatalf("the unknown GPU is not missing evidence: %+v", rep.Missing)
	}
	if !anyContains(rep.NextSteps, "--libnvidia-ml") {
		t.Errorf("next steps %q do not point --libnvidia-ml at the driver's library", rep.NextSteps)
	}
	for _, m := range rep.Missing {
		if strings.Contains(m.Fix, "CUDA_DEVICE_ORDER") {
			t.Errorf("device-order advice for a missing NVML: %+v", m)
		}
	}
	if anyContains(rep.NextSteps, "CUDA_DEVICE_ORDER") {
		t.Errorf("next steps repeat the device-order advice: %q", rep.NextSteps)
	}
}

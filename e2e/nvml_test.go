package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// samples reads every stored sample.
func samples(t *testing.T, db string) []store.Sample {
	t.Helper()
	r, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []store.Sample
	r.Samples(func(s *store.Sample) error { out = append(out, *s); return nil })
	return out
}

// textOf runs the human analysis.
func textOf(t *testing.T, db string) string {
	t.Helper()
	out, err := binCommand(bin{}, "analyze", "--no-color", db).CombinedOutput()
	if err != nil {
		t.Fatalf("analyze: %v\n%s", err, out)
	}
	return string(out)
}

// With BAR1 unsupported, every BAR1 sample says so and carries no value;
// every output says "not supported", never 0.
func TestBAR1Unsupported(t *testing.T) {
	w := newWorld(t, "SIMGPU_NVML_UNSUPPORTED=nvmlDeviceGetBAR1MemoryInfo")
	res := w.record(nil, filepath.Join(simDir, "scenarios", "ipc_map"))
	if res.code != 1 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	n := 0
	for _, s := range samples(t, res.db) {
		if s.Kind != store.KindBAR1 {
			continue
		}
		n++
		if s.Status.Name != "NVML_ERROR_NOT_SUPPORTED" || s.Total != nil || s.Used != nil || s.Free != nil {
			t.Errorf("BAR1 sample %+v: want NOT_SUPPORTED and no values", s)
		}
	}
	if n == 0 {
		t.Fatal("no BAR1 samples stored at all: an unsupported query is evidence too")
	}
	rep, _ := analyzeJSON(t, res.db)
	if deref(rep.Capacity) != string(report.CapUnknown) {
		t.Errorf("capacity %s, want unknown (the mapping needs BAR1, which cannot be read)", deref(rep.Capacity))
	}
	for _, v := range rep.MemoryViews {
		if v.View != "bar1" || v.Field == "traced aperture mappings" {
			continue
		}
		if !strings.Contains(v.Support, "not supported") || v.Start != nil || v.End != nil || v.Peak != nil || v.At != nil {
			t.Errorf("BAR1 row %q: support %q, values %v %v", v.Field, v.Support, v.Start, v.End)
		}
	}
	text := textOf(t, res.db)
	if !strings.Contains(text, "not supported") {
		t.Error("text output does not say BAR1 is not supported")
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, "BAR1 free ") && strings.Contains(line, " 0.0") {
			t.Errorf("text shows a zero for an unsupported field: %q", line)
		}
	}
}

// With nvmlDeviceGetMemoryInfo_v2 unsupported, v1 is used and recorded as
// v1 with the reason; reserved is unknown, not zero.
func TestMemoryInfoV1Fallback(t *testing.T) {
	w := newWorld(t, "SIMGPU_NVML_UNSUPPORTED=nvmlDeviceGetMemoryInfo_v2")
	res := w.record(nil, filepath.Join(simDir, "scenarios", "weights_oom"))
	if res.code != 1 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	n := 0
	for _, s := range samples(t, res.db) {
		if s.Kind != store.KindFramebuffer {
			continue
		}
		n++
		if s.API != "nvmlDeviceGetMemoryInfo" || s.Struct != "nvmlMemory_t" || !strings.Contains(s.Fallback, "NOT_SUPPORTED") {
			t.Errorf("sample %s %s fallback %q: want v1 and why", s.API, s.Struct, s.Fallback)
		}
		if s.Reserved != nil || s.Free == nil {
			t.Errorf("v1 sample: reserved %v (want unknown), free %v", s.Reserved, s.Free)
		}
	}
	if n == 0 {
		t.Fatal("no framebuffer samples")
	}
	rep, _ := analyzeJSON(t, res.db)
	if deref(rep.Capacity) != string(report.CapFBExhausted) {
		t.Errorf("capacity %s: v1 free still decides", deref(rep.Capacity))
	}
	for _, v := range rep.MemoryViews {
		if v.Field == "framebuffer reserved" && (v.Start != nil || !strings.Contains(v.Support, "not supported")) {
			t.Errorf("reserved row under v1: %+v", v)
		}
	}
	r, _ := store.Open(res.db)
	inv, _ := r.Inventory()
	r.Close()
	if inv == nil || len(inv.GPUs) != 1 || inv.GPUs[0].FBReserved.Value != nil {
		t.Errorf("inventory reserved under v1: %+v", inv)
	}
}

// Two simulated GPUs are sampled with their own identities, and a failure
// on the second is judged against the second, whose sample comes first in
// the round it triggered.
func TestFailureOnSecondGPU(t *testing.T) {
	w := newWorld(t, "SIMGPU_DEVICES=2", "SIMGPU_FB_TOTAL=8G")
	res := w.record(nil, simwork, `init; use 0; alloc 1G; use 1; uuid 1; until-fail { alloc 2G }; free-all`)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	if !strings.Contains(res.stderr, "delay from failure to sample: median") {
		t.Errorf("the run summary does not print the failure-to-sample delay:\n%s", res.stderr)
	}
	ids := map[int]string{}
	var trig []store.Sample
	for _, s := range samples(t, res.db) {
		if s.GPU.UUID == "" || s.GPU.PCIBusID == "" {
			t.Fatalf("sample without GPU identity: %+v", s.GPU)
		}
		if old, ok := ids[s.GPU.Index]; ok && old != s.GPU.UUID {
			t.Fatalf("GPU %d seen as %s and %s", s.GPU.Index, old, s.GPU.UUID)
		}
		ids[s.GPU.Index] = s.GPU.UUID
		if len(s.Triggers) > 0 {
			trig = append(trig, s)
		}
	}
	if len(ids) != 2 || ids[0] == ids[1] {
		t.Fatalf("GPU identities %v, want two distinct", ids)
	}
	if len(trig) == 0 || trig[0].GPU.Index != 1 {
		t.Fatalf("failure-triggered round does not start with GPU 1: %+v", trig)
	}
	rep, _ := analyzeJSON(t, res.db)
	ff := rep.FirstFailure
	if ff == nil || ff.GPUIndex == nil || *ff.GPUIndex != 1 || ff.GPU == nil || *ff.GPU != ids[1] {
		t.Fatalf("first failure on GPU %v (%v), want 1 (%s)", ff.GPUIndex, ff.GPU, ids[1])
	}
	if deref(rep.Capacity) != string(report.CapFBExhausted) {
		t.Errorf("capacity %s", deref(rep.Capacity))
	}
	for _, e := range rep.Evidence {
		if strings.HasPrefix(e.Field, "framebuffer free") && (e.GPU == nil || *e.GPU != 1) {
			t.Errorf("evidence %q from GPU %v, want GPU 1", e.Field, e.GPU)
		}
	}
	if rep.NearestSamples == nil || rep.NearestSamples.GPU != 1 || len(rep.NearestSamples.At) == 0 ||
		rep.NearestSamples.At[0].DelayNS == nil {
		t.Errorf("nearest samples %+v", rep.NearestSamples)
	}
	if rep.Sampling.DelayMedian == nil || rep.Sampling.DelayMax == nil {
		t.Error("no trigger delay distribution in the report")
	}
}

// A kernel log line written during a recording appears in the analysis at
// its place in time.
func TestKernelLogLine(t *testing.T) {
	w := newWorld(t)
	go1, go2 := filepath.Join(w.dir, "go1"), filepath.Join(w.dir, "go2")
	done := make(chan result, 1)
	go func() {
		done <- w.record(nil, simwork, "init; use 0; alloc 1M; touch "+go1+"; wait-file "+go2+"; alloc 1T; free-all")
	}()
	if !waitFor(20*time.Second, func() bool { return exists(go1) }) {
		t.Fatal("workload did not start")
	}
	line := "NVRM: Xid (PCI:0000:00:00): 31, forensic-e2e " + filepath.Base(w.dir)
	f, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("/dev/kmsg: %v", err)
	}
	f.WriteString(line + "\n")
	f.Close()
	time.Sleep(50 * time.Millisecond)
	os.WriteFile(go2, nil, 0o600)
	res := <-done
	rep, _ := analyzeJSON(t, res.db)
	_, evs, _ := stored(t, res.db)
	var firstAlloc, failed int64
	for _, e := range evs {
		if e.Name == "cuMemAlloc_v2" && e.Result == 0 {
			firstAlloc = e.End
		}
		if e.Name == "cuMemAlloc_v2" && e.Result != 0 {
			failed = e.End
		}
	}
	var got *report.KernelLine
	for i, k := range rep.KernelLog {
		if strings.Contains(k.Text, filepath.Base(w.dir)) {
			got = &rep.KernelLog[i]
		}
	}
	if got == nil {
		t.Fatalf("kernel line not in the analysis: %+v", rep.KernelLog)
	}
	if got.Xid == nil || *got.Xid != 31 {
		t.Errorf("Xid %v, want 31", got.Xid)
	}
	if got.TimeNS <= firstAlloc || got.TimeNS >= failed || got.Position != "before" {
		t.Errorf("kernel line at %d (%s), want between the first allocation (%d) and the failure (%d)",
			got.TimeNS, got.Position, firstAlloc, failed)
	}
	if !strings.Contains(textOf(t, res.db), "forensic-e2e") {
		t.Error("text output lacks the kernel line")
	}
}

// MIG: each instance's memory is sampled with its own scope; BAR1 stays
// whole-GPU; a process on an instance is judged against the instance.
func TestMIGInstances(t *testing.T) {
	w := newWorld(t, "SIMGPU_MIG=2", "SIMGPU_FB_TOTAL=16G")
	res := w.record(nil, simwork, `init; use 1; uuid 1; until-fail { alloc 2G }; free-all`)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	migScoped, bar1Whole := 0, 0
	for _, s := range samples(t, res.db) {
		if s.Scope == store.ScopeMIG && s.GPU.MIGIndex != nil && s.GPU.MIGUUID != "" {
			migScoped++
		}
		if s.Kind == store.KindBAR1 {
			if s.Scope != store.ScopeAperture || s.GPU.MIGIndex != nil {
				t.Errorf("BAR1 sample at scope %s, MIG %v", s.Scope, s.GPU.MIGIndex)
			}
			bar1Whole++
		}
	}
	if migScoped == 0 || bar1Whole == 0 {
		t.Fatalf("MIG-scoped samples %d, BAR1 samples %d", migScoped, bar1Whole)
	}
	rep, _ := analyzeJSON(t, res.db)
	ff := rep.FirstFailure
	if ff == nil || ff.MIGIndex == nil || *ff.MIGIndex != 1 {
		t.Fatalf("first failure %+v: want MIG instance 1", ff)
	}
	if deref(rep.Capacity) != string(report.CapFBExhausted) {
		t.Errorf("capacity %s, want the MIG instance's framebuffer exhausted", deref(rep.Capacity))
	}
	found := false
	for _, e := range rep.Evidence {
		if strings.HasPrefix(e.Field, "framebuffer free") && e.Scope == store.ScopeMIG {
			found = true
		}
	}
	if !found {
		t.Errorf("capacity not judged on the MIG instance: %+v", rep.Evidence)
	}
}

// Long runs thin periodic samples but keep the first, the last and those
// around each failure.
func TestSampleThinningKeepsLandmarks(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=2G", "SIMGPU_FB_RESERVED=0")
	res := w.record([]string{"--interval", "5ms", "--keep-samples", "5"}, simwork,
		`init; use 0; sleep 600; alloc 1G; alloc 2G; sleep 600; free-all`)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	rounds := map[uint64]string{}
	for _, s := range samples(t, res.db) {
		rounds[s.Round] = s.Kept
	}
	kept := map[string]int{}
	for _, why := range rounds {
		kept[why]++
	}
	for _, why := range []string{"first", "before-failure", "failure", "after-failure", "last"} {
		if kept[why] == 0 {
			t.Errorf("no round kept as %q: %v", why, kept)
		}
	}
	_, _, stop := stored(t, res.db)
	if stop.Stats.SamplesThinned == 0 {
		t.Error("nothing was thinned in a 1.2 s run at 5 ms with a budget of 5")
	}
	if len(rounds) > 120 {
		t.Errorf("%d rounds stored: the sequence is not bounded", len(rounds))
	}
}

// forensic inventory needs no root where NVML allows it.
func TestInventoryWithoutRoot(t *testing.T) {
	w := newWorld(t, "SIMGPU_DEVICES=2")
	dir, err := os.MkdirTemp("", "forensic-inv-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o777)
	cmd := binCommand(bin{}, "inventory", "--json", "--libnvidia-ml", simNVML)
	cmd.Env = append(os.Environ(), "SIMGPU_STATE="+filepath.Join(dir, "state"), "SIMGPU_DEVICES=2")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Dir = "/"
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("inventory as nobody: %v %s", err, out)
	}
	for _, want := range []string{`"GPU-`, `"bar1_total_bytes"`, `"framebuffer_total_bytes"`, `"nvmlDeviceGetBAR1MemoryInfo"`, `"pcie_generation"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("inventory lacks %s", want)
		}
	}
	_ = w
	// NVIDIA's real NVML without a driver: the reason, and a non-zero exit.
	real := filepath.Join(nvidiaDir, "libnvidia-ml.so.1")
	if exists(real) {
		out, err := binCommand(bin{}, "inventory", "--libnvidia-ml", real).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !strings.Contains(string(out), "NVML_ERROR_") {
			t.Errorf("inventory with a driverless NVML: %v %s", err, out)
		}
	}
}

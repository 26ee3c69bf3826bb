package e2e

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrivium/forensic/internal/e2eenv"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// A workload that forks two children which allocate and fail: all three
// processes are recorded with their exit status.
func TestForkedChildrenRecorded(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=4G", "SIMGPU_FB_RESERVED=0")
	res := w.record(nil, simwork, `init; use 0; alloc 1G;
		fork { init; use 0; until-fail { alloc 512M }; exit 3 };
		fork { init; use 0; until-fail { alloc 512M }; exit 4 };
		wait; free-all`)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	w.checkComplete(res.db)
	rep, _ := analyzeJSON(t, res.db)
	if len(rep.Processes) != 3 {
		t.Fatalf("%d processes recorded, want 3: %+v", len(rep.Processes), rep.Processes)
	}
	codes := map[int]bool{}
	var root uint32
	for _, p := range rep.Processes {
		if p.Exit == nil || p.Exit.Code == nil {
			t.Errorf("pid %d: no exit status recorded", p.PID)
			continue
		}
		codes[*p.Exit.Code] = true
		if p.Root {
			root = p.PID
		}
	}
	if !codes[0] || !codes[3] || !codes[4] {
		t.Errorf("exit codes %v, want 0 (parent), 3 and 4 (children)", codes)
	}
	for _, p := range rep.Processes {
		if !p.Root && p.PPID != root {
			t.Errorf("child %d has parent %d, want %d", p.PID, p.PPID, root)
		}
		if !p.Root && p.Failed == 0 {
			t.Errorf("child %d: no failed call recorded", p.PID)
		}
	}
	if rep.Attribution != report.AttrAllocation {
		t.Errorf("attribution %s, want allocation", rep.Attribution)
	}
}

// Four threads allocating at once on two simulated GPUs: every event has
// its thread and its GPU.
func TestThreadsOnTwoGPUs(t *testing.T) {
	w := newWorld(t, "SIMGPU_DEVICES=2")
	res := w.record(nil, simwork, `init; threads 4 { use %d; repeat 25 { alloc 1M } }`)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	w.checkComplete(res.db)
	// The workload logged, per thread, the device each call ran on.
	want := map[uint32]int32{}
	f, _ := os.Open(w.calls)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 5 && fs[2] == "cuMemAlloc_v2" {
			tid, _ := strconv.Atoi(fs[1])
			dev, _ := strconv.Atoi(fs[4])
			want[uint32(tid)] = int32(dev)
		}
	}
	f.Close()
	if len(want) != 4 {
		t.Fatalf("%d threads in the call log, want 4", len(want))
	}
	_, evs, _ := stored(t, res.db)
	perGPU := map[int32]int{}
	for _, e := range evs {
		if e.Name != "cuMemAlloc_v2" {
			continue
		}
		d, ok := want[e.TID]
		if !ok {
			t.Fatalf("event from unknown thread %d", e.TID)
		}
		if e.Dev != d {
			t.Errorf("thread %d: event on CUDA device %d, the thread used %d", e.TID, e.Dev, d)
		}
		perGPU[e.Dev]++
	}
	if perGPU[0] != 50 || perGPU[1] != 50 {
		t.Errorf("allocations per device %v, want 50 and 50", perGPU)
	}
	// Both simulated GPUs are the same model, so CUDA order is NVML order.
	rep, _ := analyzeJSON(t, res.db)
	for _, p := range rep.Processes {
		for _, d := range p.Devices {
			if d.GPU == nil || int32(*d.GPU) != d.Ordinal || d.Method == "unknown" {
				t.Errorf("device map %+v", d)
			}
		}
	}
	// The process exits without freeing: the peak is 50 MiB per GPU, and
	// its exit returns it all (the driver frees a dead process's memory).
	views := map[int]bool{}
	for _, v := range rep.MemoryViews {
		if v.Field == "traced device allocations" && v.Peak != nil && *v.Peak == 50<<20 && v.End != nil && *v.End == 0 {
			views[v.GPU] = true
		}
	}
	if !views[0] || !views[1] {
		t.Errorf("traced live bytes per GPU do not peak at 50 MiB and end at 0: %+v", views)
	}
}

// Calls through unversioned, _v2 and _ptsz names are each recorded under
// their own name, with sizes read at the right width.
func TestVersionedNames(t *testing.T) {
	w := newWorld(t)
	res := w.record(nil, simwork, `init; use 0;
		alloc-v1 1M; alloc 2M; alloc-async 3M; alloc-async-ptsz 4M; alloc-pitch-v1 1000 4 4; alloc-pitch 1000 4 4;
		alloc-host-v1 64K; alloc-host 64K; host-register-v1 64K; host-register 64K; array-v1 16 16; array 16 16;
		pool-create; alloc-pool 1M; alloc-pool-ptsz 1M; gfx; gfx-ptsz; map-array; map-array-ptsz;
		ctx-v1 0; ctx-pop; ctx-v3 0; ctx-pop; uuid-v1 0; uuid 0; pci 0; free-all`)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	w.checkComplete(res.db)
	_, evs, _ := stored(t, res.db)
	sizes := map[string]uint64{}
	for _, e := range evs {
		if e.Result == 0 && e.Has&1 != 0 {
			sizes[e.Name] = e.Size
		}
	}
	for sym, want := range map[string]uint64{"cuMemAlloc": 1 << 20, "cuMemAlloc_v2": 2 << 20,
		"cuMemAllocAsync": 3 << 20, "cuMemAllocAsync_ptsz": 4 << 20, "cuMemAllocPitch": 1024 * 4,
		"cuMemAllocPitch_v2": 1024 * 4, "cuMemAllocHost": 64 << 10, "cuArrayCreate": 16 * 16 * 4, "cuArrayCreate_v2": 16 * 16 * 4} {
		if sizes[sym] != want {
			t.Errorf("%s size %d, want %d", sym, sizes[sym], want)
		}
	}
}

// startWorkload runs simwork outside the recorder, as an unrelated process.
func (w *world) startWorkload(script string) *exec.Cmd {
	w.t.Helper()
	cmd := exec.Command(simwork, script)
	cmd.Env = w.environ()
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// startRecorder runs `forensic record` in the background and waits until
// it says it is recording.
func (w *world) startRecorder(flags ...string) (*exec.Cmd, string, *strings.Builder) {
	w.t.Helper()
	db := filepath.Join(w.dir, "run.db")
	args := append([]string{"record", "-o", db, "--force", "--libnvidia-ml", simNVML}, flags...)
	cmd := exec.Command(binPath, args...)
	cmd.Env = w.environ()
	var stderr strings.Builder
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := false
		for sc.Scan() {
			stderr.WriteString(sc.Text() + "\n")
			if !once && strings.Contains(sc.Text(), "recording") {
				once = true
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		w.t.Fatalf("recorder not ready: %s", stderr.String())
	}
	w.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); pw.Close() })
	return cmd, db, &stderr
}

func waitExit(t *testing.T, cmd *exec.Cmd, d time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(d):
		cmd.Process.Kill()
		t.Fatalf("%s did not exit within %v", cmd.Path, d)
	}
}

// --pid on a process already running: its later calls and those of the
// child it starts are recorded; its earlier ones cannot be, and the
// analysis says so.
func TestRecordPID(t *testing.T) {
	w := newWorld(t)
	target := w.startWorkload(`init; use 0; alloc 1M; wait-signal; alloc 2M; fork { init; use 0; alloc 3M }; wait; free-all`)
	waitFor(5*time.Second, func() bool { return exists(w.state) })
	time.Sleep(200 * time.Millisecond) // let it make its first calls
	rec, db, stderr := w.startRecorder("--libcuda", simCUDA, "--pid", strconv.Itoa(target.Process.Pid))
	target.Process.Signal(syscall.SIGUSR1)
	waitExit(t, target, 20*time.Second)
	waitExit(t, rec, 20*time.Second)
	_, evs, stop := stored(t, db)
	if stop == nil || stop.Reason != "target-exited" {
		t.Fatalf("stop = %+v; recorder said:\n%s", stop, stderr)
	}
	var sizes []uint64
	pids := map[uint32]bool{}
	for _, e := range evs {
		pids[e.PID] = true
		if e.Name == "cuMemAlloc_v2" {
			sizes = append(sizes, e.Size)
		}
	}
	if len(sizes) != 2 || sizes[0] != 2<<20 || sizes[1] != 3<<20 {
		t.Errorf("allocations recorded %v, want the 2 MiB after attaching and the child's 3 MiB (not the 1 MiB before)", sizes)
	}
	if len(pids) != 2 || !pids[uint32(target.Process.Pid)] {
		t.Errorf("events from pids %v, want the target and its child", pids)
	}
	rep, _ := analyzeJSON(t, db)
	late := false
	for _, p := range rep.Processes {
		if p.PID == uint32(target.Process.Pid) {
			late = p.AttachedLate
		}
	}
	if !late {
		t.Error("the target is not marked as attached late")
	}
	if rep.Attribution != report.AttrMissingEvidence {
		t.Errorf("attribution %s: calls before attaching are unknown, want missing-evidence", rep.Attribution)
	}
}

// --all records unrelated processes: one running before the recorder, one
// started after it through a libcuda file the recorder had not seen (held
// at its mapping until attached), the way a container brings its own
// driver library.
func TestRecordAll(t *testing.T) {
	w := newWorld(t)
	other := filepath.Join(w.dir, "container", "libcuda.so.1")
	os.MkdirAll(filepath.Dir(other), 0o755)
	data, err := os.ReadFile(simCUDA)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(other, data, 0o755)

	a := w.startWorkload(`init; use 0; wait-signal; alloc 5M; free`)
	waitFor(5*time.Second, func() bool { return exists(w.state) })
	time.Sleep(200 * time.Millisecond)
	rec, db, stderr := w.startRecorder("--all")
	bcmd := exec.Command(simwork, `init; use 0; sleep 2500; alloc 7M; free`)
	bcmd.Env = w.environ("SIMWORK_LIBCUDA=" + other)
	if err := bcmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.Process.Signal(syscall.SIGUSR1)
	waitExit(t, a, 20*time.Second)
	waitExit(t, bcmd, 20*time.Second)
	rec.Process.Signal(syscall.SIGINT)
	waitExit(t, rec, 20*time.Second)

	_, evs, stop := stored(t, db)
	if stop == nil {
		t.Fatalf("no stop record; recorder said:\n%s", stderr)
	}
	got := map[uint32]uint64{}
	for _, e := range evs {
		if e.Name == "cuMemAlloc_v2" {
			got[e.PID] = e.Size
		}
	}
	if got[uint32(a.Process.Pid)] != 5<<20 {
		t.Errorf("process started before the recorder: allocation %d, want 5 MiB", got[uint32(a.Process.Pid)])
	}
	if got[uint32(bcmd.Process.Pid)] != 7<<20 {
		t.Errorf("process started after, through another libcuda file: allocation %d, want 7 MiB", got[uint32(bcmd.Process.Pid)])
	}
	rep, _ := analyzeJSON(t, db)
	paths := map[string]bool{}
	for _, l := range rep.Coverage {
		paths[l.Path] = true
	}
	if !paths[other] {
		t.Errorf("coverage lists %v, want the late library %s too", paths, other)
	}
}

// NVIDIA's real libcuda on a machine without a GPU: cuInit fails with
// CUDA_ERROR_NO_DEVICE and later calls with CUDA_ERROR_NOT_INITIALIZED.
// Every call is recorded with the real library's result code; NVIDIA's
// real NVML cannot start, which is recorded as evidence too.
func TestRealNVIDIALibraries(t *testing.T) {
	realCUDA := filepath.Join(nvidiaDir, "libcuda.so.1")
	realNVML := filepath.Join(nvidiaDir, "libnvidia-ml.so.1")
	e2eenv.Need(t, exists(realCUDA) && exists(realNVML), "NVIDIA's libraries are not in build/nvidia (run make nvidia-libs)")
	w := newWorld(t)
	db := filepath.Join(w.dir, "run.db")
	cmd := exec.Command(binPath, "record", "-o", db, "--libcuda", realCUDA, "--libnvidia-ml", realNVML, "--",
		simwork, `init; use 0; alloc 1M; alloc-host 1M; host-register 1M; vmm 2M; free-all`)
	cmd.Env = w.environ("SIMWORK_LIBCUDA=" + realCUDA)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("record: %v\n%s", err, out)
	}
	w.checkComplete(db)
	_, evs, _ := stored(t, db)
	results := map[string]int32{}
	for _, e := range evs {
		if e.Depth == 0 {
			results[e.Name] = e.Result
		}
	}
	if results["cuInit"] != 100 {
		t.Errorf("cuInit result %d, want 100 (CUDA_ERROR_NO_DEVICE)", results["cuInit"])
	}
	if results["cuMemAlloc_v2"] != 3 {
		t.Errorf("cuMemAlloc_v2 result %d, want 3 (CUDA_ERROR_NOT_INITIALIZED)", results["cuMemAlloc_v2"])
	}
	rep, _ := analyzeJSON(t, db)
	if rep.Attribution != report.AttrNotMemory || deref(rep.Capacity) != string(report.CapNotApplicable) {
		t.Errorf("verdict %s / %s, want not-memory / not-applicable", rep.Attribution, deref(rep.Capacity))
	}
	if rep.Cause == nil || rep.Cause.Symbol != "cuInit" || rep.Cause.ResultName != "CUDA_ERROR_NO_DEVICE" {
		t.Errorf("cause %+v, want the failed cuInit", rep.Cause)
	}
	if !strings.Contains(rep.Verdict, "cuInit") {
		t.Errorf("verdict does not name cuInit: %s", rep.Verdict)
	}
	nvml := false
	for _, m := range rep.Missing {
		if strings.Contains(m.What, "NVML did not initialize") && strings.Contains(m.What, "NVML_ERROR_") {
			nvml = true
		}
	}
	if !nvml {
		t.Errorf("the failed NVML initialization is not listed as missing: %+v", rep.Missing)
	}
	if len(rep.Coverage) != 1 || len(rep.Coverage[0].Hooked) < 60 || rep.Coverage[0].BuildID == "" {
		t.Errorf("coverage of the real libcuda: %+v", rep.Coverage)
	}
	r, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	inv, _ := r.Inventory()
	if inv == nil || inv.Init.Code == 0 || inv.Init.Name == "" {
		t.Errorf("inventory does not record the failed nvmlInit: %+v", inv)
	}
}

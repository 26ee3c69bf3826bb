package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrivium/forensic/report"
)

// Workloads written the way frameworks call the driver, not the way a test
// would: caching allocators that retry, expandable segments, pools that run
// out without a driver call failing, interrupted jobs, a libcuda forensic
// cannot see, and mappings bigger than the aperture. Each once gave a
// confident wrong answer.
var frameworkScenarios = []scenario{
	{
		// PyTorch's caching allocator: an out-of-memory frees the cache and
		// retries (recovered); the job dies of a later failure of another
		// size.
		name:   "caching allocator: recovered, then fatal",
		cmd:    script("init; use 0; alloc 6G; alloc 6G; alloc 8G; free; free; alloc 8G; alloc 6G; alloc 4G; exit 1"),
		symbol: "cuMemAlloc_v2", result: "CUDA_ERROR_OUT_OF_MEMORY", attribution: "allocation", capacity: "framebuffer-exhausted",
		check: func(t *testing.T, rep *report.Report, w *world) {
			ff, u := rep.FirstFailure, rep.FirstUnrecovered
			if ff == nil || !ff.Recovered || *ff.Size != 8<<30 {
				t.Fatalf("first failure %+v: want the recovered 8 GiB request", ff)
			}
			if u == nil || u.Recovered || u.Size == nil || *u.Size != 4<<30 {
				t.Fatalf("first unrecovered %+v: want the fatal 4 GiB request", u)
			}
			if u.Attribution != report.AttrAllocation || u.Capacity == nil || *u.Capacity != report.CapFBExhausted {
				t.Errorf("first unrecovered judged %s / %v, want allocation / framebuffer-exhausted", u.Attribution, deref(u.Capacity))
			}
			if !hasDecisive(u.Evidence, "framebuffer free at the failure") {
				t.Errorf("the unrecovered failure has no capacity evidence of its own: %+v", u.Evidence)
			}
			if !strings.HasPrefix(rep.Verdict, "The first failure the process did not recover from is cuMemAlloc_v2 of 4.00 GiB") {
				t.Errorf("the verdict does not lead with the fatal failure: %s", rep.Verdict)
			}
			for _, f := range rep.Failures {
				if f.PossibleConsequence {
					t.Errorf("%s of %d at %d is called a consequence of a recovered failure", f.Symbol, *f.Size, f.TimeNS)
				}
			}
		},
	},
	{
		// PyTorch's expandable segments: address space reserved once, then
		// physical chunks created into it until cuMemCreate runs out.
		name:   "expandable segments: cuMemCreate after a reservation",
		cmd:    script("init; use 0; alloc 4G; expandable 64G 2G; exit 1"),
		symbol: "cuMemCreate", result: "CUDA_ERROR_OUT_OF_MEMORY", attribution: "allocation", capacity: "framebuffer-exhausted",
		check: func(t *testing.T, rep *report.Report, w *world) {
			for _, v := range rep.MemoryViews {
				if v.Field == "traced aperture mappings" {
					t.Errorf("the reservation or the owner's own access counted as BAR1: %+v", v)
				}
			}
			if !strings.Contains(rep.Verdict, "2.00 GiB requested") {
				t.Errorf("the verdict does not name the 2 GiB chunk: %s", rep.Verdict)
			}
		},
	},
	{
		// The driver frees an exiting process's memory in the process, before
		// the kernel sees it end; the sample the failure triggered falls in
		// between and shows the memory free. The process list of that round
		// no longer shows the process, so the sample is read as taken after
		// the release, not as room at the failure.
		name:   "memory freed by a teardown before the exit is seen",
		env:    []string{"SIMGPU_EXIT_DELAY_MS=400", "SIMGPU_NVML_DELAY_MS=40"},
		cmd:    script("init; use 0; alloc 4G; sleep 250; expandable 64G 2G; exit 1"),
		symbol: "cuMemCreate", result: "CUDA_ERROR_OUT_OF_MEMORY", attribution: "allocation", capacity: "framebuffer-exhausted",
		check: func(t *testing.T, rep *report.Report, w *world) {
			// The triggered sample is known to follow the release although
			// the exit came later.
			var said []string
			for _, e := range rep.Evidence {
				if e.Decisive {
					said = append(said, e.Note)
				}
			}
			if !strings.Contains(strings.Join(said, " / "), "the sample this failure triggered, ") ||
				!strings.Contains(strings.Join(said, " / "), "came after pid") {
				t.Errorf("the triggered sample is not said to follow the release: %q", said)
			}
		},
	},
	{
		// A framework's own pool (JAX preallocation, a PyTorch memory
		// fraction) runs out with no driver call failing; the job exits 1.
		name:        "framework pool exhausted without a failed driver call",
		cmd:         script(`init; use 0; alloc 12G; print "RuntimeError: CUDA out of memory in the framework's pool"; exit 1`),
		attribution: "missing-evidence",
		check: func(t *testing.T, rep *report.Report, w *world) {
			if !strings.Contains(rep.Verdict, "the record cannot rule a failure out") {
				t.Errorf("the verdict does not say the record cannot rule a failure out: %s", rep.Verdict)
			}
			if !hasMissing(rep.Missing, "exited with status 1", "memory pool") {
				t.Errorf("missing evidence does not explain the exit: %+v", rep.Missing)
			}
		},
	},
	{
		// A libcuda forensic does not attach to (not named libcuda.so*),
		// dlopened from the workload's own directory: NVML sees the memory,
		// the record has no call.
		name: "workload on a libcuda forensic cannot see",
		setup: func(t *testing.T, w *world) func() {
			shim := filepath.Join(w.dir, "private", "libnvshim.so")
			os.MkdirAll(filepath.Dir(shim), 0o755)
			copyFile(t, simCUDA, shim)
			w.env = append(w.env, "SIMWORK_LIBCUDA="+shim)
			return func() {}
		},
		cmd:         script("init; use 0; alloc 3G; sleep 300; exit 1"),
		attribution: "missing-evidence",
		check: func(t *testing.T, rep *report.Report, w *world) {
			if !hasMissing(rep.Missing, "NVML shows process", "3.00 GiB") {
				t.Errorf("NVML's view of the untraced memory is not missing evidence: %+v", rep.Missing)
			}
			if !hasMissing(rep.Missing, "no traced call was recorded") {
				t.Errorf("a workload with no traced call is not flagged: %+v", rep.Missing)
			}
		},
	},
	{
		// NCCL's cuMem buffers and PyTorch's expandable segments grant
		// access owner first: [GPU 0, GPU 1]. The peer's grant maps through
		// GPU 0's BAR1, which is nearly full.
		name:   "access grant to owner and peer with BAR1 nearly full",
		env:    []string{"SIMGPU_DEVICES=2", "SIMGPU_BAR1_TOTAL=64M", "SIMGPU_BAR1_USED=40M"},
		cmd:    script("init; use 0; vmm 32M 0 1"),
		symbol: "cuMemSetAccess", result: "CUDA_ERROR_MAP_FAILED", attribution: "mapping", capacity: "bar1-exhausted",
		check: checkGrants(0, 1),
	},
	{
		name:   "access grant to peer then owner with BAR1 nearly full",
		env:    []string{"SIMGPU_DEVICES=2", "SIMGPU_BAR1_TOTAL=64M", "SIMGPU_BAR1_USED=40M"},
		cmd:    script("init; use 0; vmm 32M 1 0"),
		symbol: "cuMemSetAccess", result: "CUDA_ERROR_MAP_FAILED", attribution: "mapping", capacity: "bar1-exhausted",
		check: checkGrants(1, 0),
	},
	{
		// A grant to the owner alone maps nothing through the aperture.
		name:   "access grant to the owner only, injected failure",
		env:    []string{"SIMGPU_DEVICES=2", "SIMGPU_BAR1_TOTAL=64M", "SIMGPU_BAR1_USED=40M", "SIMGPU_FAIL=cuMemSetAccess:1:205"},
		cmd:    script("init; use 0; vmm 32M 0"),
		symbol: "cuMemSetAccess", result: "CUDA_ERROR_MAP_FAILED", attribution: "mapping", capacity: "not-applicable",
	},
	{
		// An IPC open of 512 MiB against a 256 MiB aperture can never work.
		name:   "IPC mapping larger than the whole aperture",
		cmd:    []string{filepath.Join(simDir, "scenarios", "ipc_map")},
		symbol: "cuIpcOpenMemHandle_v2", result: "CUDA_ERROR_MAP_FAILED", attribution: "mapping", capacity: "bar1-exhausted",
		check: func(t *testing.T, rep *report.Report, w *world) {
			ff := rep.FirstFailure
			if ff.Size == nil || *ff.Size != 512<<20 || ff.SizeSource == "" {
				t.Errorf("IPC open size %v (from %q), want 512 MiB from the exporter", ff.Size, ff.SizeSource)
			}
			for _, want := range []string{"needed 512.0 MiB", "only 256.0 MiB in all", "can never succeed on this GPU", "BAR1 is the PCIe window"} {
				if !strings.Contains(rep.Verdict, want) {
					t.Errorf("verdict lacks %q: %s", want, rep.Verdict)
				}
			}
			if !anyContains(rep.NextSteps, "resizable BAR") || !anyContains(rep.NextSteps, "smaller") {
				t.Errorf("next steps do not fit a BAR1 failure: %q", rep.NextSteps)
			}
		},
	},
	{
		name:   "IPC mapping that would fit an empty aperture",
		env:    []string{"SIMGPU_BAR1_TOTAL=1G", "SIMGPU_BAR1_USED=900M"},
		cmd:    []string{filepath.Join(simDir, "scenarios", "ipc_map")},
		symbol: "cuIpcOpenMemHandle_v2", result: "CUDA_ERROR_MAP_FAILED", attribution: "mapping", capacity: "bar1-exhausted",
		check: func(t *testing.T, rep *report.Report, w *world) {
			for _, want := range []string{"needed 512.0 MiB", "of 1.00 GiB", "free"} {
				if !strings.Contains(rep.Verdict, want) {
					t.Errorf("verdict lacks %q: %s", want, rep.Verdict)
				}
			}
			if !strings.Contains(rep.Verdict, "The mapping did not fit in the aperture.") {
				t.Errorf("a request smaller than the aperture is not said to have not fitted what was free: %s", rep.Verdict)
			}
		},
	},
}

// checkGrants checks that the first failure lists the granted devices in
// call order, GPU 1 as the owner's peer, and that the verdict names it.
func checkGrants(devs ...int32) func(t *testing.T, rep *report.Report, w *world) {
	return func(t *testing.T, rep *report.Report, w *world) {
		gs := rep.FirstFailure.Grants
		if len(gs) != len(devs) {
			t.Fatalf("grants %+v, want devices %v", gs, devs)
		}
		for i, g := range gs {
			if g.CUDADevice != devs[i] || g.Peer != (g.CUDADevice != 0) || g.Access != "read-write" || g.GPU == nil {
				t.Errorf("grant %d = %+v, want CUDA device %d (peer %v)", i, g, devs[i], devs[i] != 0)
			}
		}
		if !strings.Contains(rep.Verdict, "granting CUDA device 1 (GPU 1) access") {
			t.Errorf("the verdict does not name the peer: %s", rep.Verdict)
		}
		if !strings.Contains(rep.Verdict, "needed 32.0 MiB of GPU 0's BAR1 aperture") {
			t.Errorf("the verdict does not judge the owner's aperture: %s", rep.Verdict)
		}
	}
}

func TestFrameworkScenarios(t *testing.T) {
	for _, sc := range frameworkScenarios {
		t.Run(sc.name, sc.run)
	}
}

// Ctrl-C of a hung job (SIGINT to the terminal's process group, recorder
// and workload alike), and SIGTERM to the recorder (passed on to the
// workload), are interruptions: no call failed, so the attribution is
// none, said as such, with no crash advice.
func TestInterruptedIsNotCrashed(t *testing.T) {
	for _, tt := range []struct {
		name  string
		group bool
		sig   syscall.Signal
	}{{"ctrl-c", true, syscall.SIGINT}, {"sigterm", false, syscall.SIGTERM}} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			ready := filepath.Join(w.dir, "ready")
			db := filepath.Join(w.dir, "run.db")
			cmd := binCommand(bin{w: w}, "record", "-o", db, "--libcuda", simCUDA, "--libnvidia-ml", simNVML,
				"--", simwork, "init; use 0; alloc 1G; touch "+ready+"; wait-signal")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if !waitFor(20*time.Second, func() bool { return exists(ready) }) {
				cmd.Process.Kill()
				t.Fatal("the workload did not start")
			}
			target := cmd.Process.Pid
			if tt.group {
				target = -target
			}
			syscall.Kill(target, tt.sig)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				t.Fatal("the recording did not end")
			}
			rep, _ := analyzeJSON(t, db)
			if rep.Attribution != report.AttrNone {
				t.Errorf("attribution %s, want none: %s (missing %+v)", rep.Attribution, rep.Verdict, rep.Missing)
			}
			if rep.Run.Interrupted != tt.sig.String() && rep.Run.Interrupted != signalName(tt.sig) {
				t.Errorf("run.interrupted %q, want %s", rep.Run.Interrupted, signalName(tt.sig))
			}
			if !strings.Contains(rep.Verdict, "interrupted") || strings.Contains(rep.Verdict, "core dump") {
				t.Errorf("the verdict does not say the run was interrupted: %s", rep.Verdict)
			}
			for _, m := range rep.Missing {
				if strings.Contains(m.What, "died of") {
					t.Errorf("an interruption is reported as a death: %+v", m)
				}
			}
		})
	}
}

func signalName(s syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM"}[s]
}

func hasDecisive(ev []report.Evidence, field string) bool {
	for _, e := range ev {
		if e.Decisive && e.Field == field && e.Value != nil {
			return true
		}
	}
	return false
}

// hasMissing reports whether a missing item's text contains every word.
func hasMissing(ms []report.Missing, words ...string) bool {
	for _, m := range ms {
		all := true
		for _, w := range words {
			all = all && strings.Contains(m.What, w)
		}
		if all {
			return true
		}
	}
	return false
}

func anyContains(list []string, s string) bool {
	for _, l := range list {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// Pinning host memory past the simulated driver's limit, by registering
// or by allocating it: an allocation problem of page-locked host memory,
// never judged on the framebuffer or BAR1, with next steps for pinned
// memory.
func TestHostPinnedMemoryAdvice(t *testing.T) {
	for _, step := range []string{"host-register 100M", "host-alloc 100M"} {
		t.Run(step, func(t *testing.T) {
			w := newWorld(t, "SIMGPU_PIN_LIMIT=64M", "SIMGPU_FB_TOTAL=1G")
			res := w.record(nil, simwork, "init; use 0; alloc 500M; "+step+"; sleep 200; exit 1")
			rep, _ := analyzeJSON(t, res.db)
			if rep.FirstFailure == nil || rep.Capacity == nil {
				t.Fatalf("no failure judged: %s", rep.Verdict)
			}
			if rep.Attribution != report.AttrAllocation || *rep.Capacity != report.CapNotApplicable {
				t.Errorf("attribution %s, capacity %s: %s", rep.Attribution, *rep.Capacity, rep.Verdict)
			}
			text := textAt80(t, res.db)
			i, j := strings.Index(text, "\nNEXT STEPS"), strings.Index(text, "\nFIRST FAILURE")
			if i < 0 || j < i {
				t.Fatalf("no NEXT STEPS before FIRST FAILURE:\n%s", text)
			}
			if steps := text[i:j]; !strings.Contains(steps, "ulimit -l") || !strings.Contains(steps, "pin_memory") {
				t.Errorf("NEXT STEPS lack pinned-memory advice:\n%s", text)
			}
			if !strings.Contains(strings.Join(strings.Fields(text), " "), "It is an allocation problem of page-locked (pinned) host memory.") {
				t.Errorf("not called an allocation problem of pinned host memory:\n%s", text)
			}
		})
	}
}

func TestAdviceWithoutNVML(t *testing.T) {
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
	// The fix for the missing NVML is NVML's library, not the device order.
	nvmlFix := false
	for _, m := range rep.Missing {
		nvmlFix = nvmlFix || strings.Contains(m.What, "NVML did not initialize") &&
			strings.Contains(m.Fix, "point --libnvidia-ml at the driver's libnvidia-ml.so.1")
	}
	if !nvmlFix {
		t.Errorf("no missing evidence asks for NVML's library: %+v", rep.Missing)
	}
	if anyContains(rep.NextSteps, "CUDA_DEVICE_ORDER") {
		t.Errorf("next steps repeat the device-order advice: %q", rep.NextSteps)
	}
}

// The first allocation starts "up to first failure": "before first
// allocation" holds no allocation.
func TestFirstAllocationStartsUpToFirstFailure(t *testing.T) {
	w := newWorld(t)
	res := w.record(nil, script("init; use 0; sleep 150; alloc 2G; alloc 1G; alloc 40G; exit 1")...)
	rep, _ := analyzeJSON(t, res.db)
	if rep.FirstFailure == nil || rep.FirstFailure.Phase != "up to first failure" {
		t.Fatalf("first failure %+v, want it in \"up to first failure\"", rep.FirstFailure)
	}
	var traced *report.ViewRow
	for i := range rep.MemoryViews {
		if rep.MemoryViews[i].Field == "traced device allocations" {
			traced = &rep.MemoryViews[i]
		}
	}
	if traced == nil || len(traced.Phases) != 3 {
		t.Fatalf("traced row %+v, want three phases", traced)
	}
	for i, want := range []uint64{0, 3 << 30} {
		p := traced.Phases[i]
		if p.Peak == nil || *p.Peak != want {
			t.Errorf("phase %q peaks at %s, want %d", p.Phase, valText(p.Peak), want)
		}
	}
}

// A workload that never loaded libcuda (recorded without --libcuda) gets
// no framework-pool advice and no "record again without --libcuda": it is
// told it never loaded libcuda.
func TestWorkloadWithoutLibcuda(t *testing.T) {
	w := newWorld(t)
	db := filepath.Join(w.dir, "run.db")
	cmd := binCommand(bin{w: w}, "record", "-o", db, "--libnvidia-ml", simNVML, "--", simwork, "print hello; exit 1")
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("the workload exits 1, forensic record exited 0:\n%s", out)
	}
	out := textAt80(t, db)
	flat := strings.Join(strings.Fields(out), " ")
	if !strings.Contains(flat, "never loaded libcuda") || !strings.Contains(flat, "exited with status 1") {
		t.Errorf("not told the workload never loaded libcuda:\n%s", out)
	}
	// The advice is for a workload that never reached the driver: its own
	// output and whether it finds libcuda.so.1, not a framework's pool.
	for _, want := range []string{"it made no CUDA driver call", "next time: read the workload's own error output",
		"check that it finds the driver's libcuda.so.1"} {
		if !strings.Contains(flat, want) {
			t.Errorf("does not say %q:\n%s", want, out)
		}
	}
}

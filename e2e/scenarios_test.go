package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrivium/forensic/internal/e2eenv"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// scenario is one recorded failure (or non-failure) with its expected
// verdict.
type scenario struct {
	name  string
	env   []string // SIMGPU_* for the world
	cmd   []string // the workload
	flags []string // extra flags for forensic record
	real  bool     // NVIDIA's real libcuda and NVML instead of the simulator
	setup func(t *testing.T, w *world) func()
	// during runs beside the recording (writes to /dev/kmsg, ...).
	during func(t *testing.T, w *world)

	symbol, result string // first failure ("" = none)
	attribution    string
	capacity       string // "" = null
	check          func(t *testing.T, rep *report.Report, w *world)
}

func script(s string) []string { return []string{simwork, s} }

var scenarios = []scenario{
	{
		name: "genuine exhaustion", cmd: []string{filepath.Join(simDir, "scenarios", "weights_oom")},
		symbol: "cuMemAlloc_v2", result: "CUDA_ERROR_OUT_OF_MEMORY", attribution: "allocation", capacity: "framebuffer-exhausted",
	},
	{
		name: "out of memory with room to spare", env: []string{"SIMGPU_FAIL=cuMemAlloc_v2:3:2"},
		cmd:    script("init; use 0; alloc 1G; alloc 1G; alloc 1G; sleep 50; free-all"),
		symbol: "cuMemAlloc_v2", result: "CUDA_ERROR_OUT_OF_MEMORY", attribution: "allocation", capacity: "framebuffer-had-room",
		check: func(t *testing.T, rep *report.Report, w *world) {
			if strings.Contains(rep.Verdict, "exhausted") {
				t.Errorf("verdict claims exhaustion the samples contradict: %s", rep.Verdict)
			}
			// NVML's free already leaves reserved memory out: it is not
			// what refused a request that had room.
			if strings.Contains(rep.Verdict, "reserved by the driver") || !strings.Contains(rep.Verdict, "fragmentation") {
				t.Errorf("verdict does not say what can refuse a request with room: %s", rep.Verdict)
			}
		},
	},
	{
		name: "another process holds the memory", env: []string{"SIMGPU_FB_TOTAL=16G"},
		setup: func(t *testing.T, w *world) func() {
			ready := filepath.Join(w.dir, "hog-ready")
			hog := w.startWorkload("init; use 0; alloc 14G; touch " + ready + "; wait-signal; free-all")
			if !waitFor(10*time.Second, func() bool { return exists(ready) }) {
				t.Fatal("hog did not allocate")
			}
			w.hog = hog.Process.Pid
			return func() { hog.Process.Signal(syscall.SIGUSR1) }
		},
		cmd:    script("init; use 0; alloc 2G"),
		symbol: "cuMemAlloc_v2", result: "CUDA_ERROR_OUT_OF_MEMORY", attribution: "allocation", capacity: "framebuffer-exhausted",
		check: func(t *testing.T, rep *report.Report, w *world) {
			want := fmt.Sprintf("NVML usage of process %d (not recorded)", w.hog)
			for _, e := range rep.Evidence {
				if e.Field == want && e.Value != nil && *e.Value == 14<<30 {
					return
				}
			}
			t.Errorf("the other process's 14 GiB is not in the evidence (%s): %+v", want, rep.Evidence)
		},
	},
	{
		// Held stopped until its sample is read: the child exits right
		// after the failure, and its exit frees its context's own memory
		// (some of it mapped through BAR1 on a real driver), of a size no
		// traced call gives. A sample read after the exit (or the first
		// one, before the child made its context) only bounds BAR1 free
		// from above, and "had room" cannot be said from it.
		name: "failed IPC mapping with BAR1 room", env: []string{"SIMGPU_BAR1_TOTAL=2G", "SIMGPU_FAIL=cuIpcOpenMemHandle_v2:1:205"},
		cmd: []string{filepath.Join(simDir, "scenarios", "ipc_map")}, flags: []string{"--freeze-on-failure"},
		symbol: "cuIpcOpenMemHandle_v2", result: "CUDA_ERROR_MAP_FAILED", attribution: "mapping", capacity: "bar1-had-room",
	},
	{
		name:   "mapping with BAR1 nearly full",
		cmd:    []string{filepath.Join(simDir, "scenarios", "ipc_map")},
		symbol: "cuIpcOpenMemHandle_v2", result: "CUDA_ERROR_MAP_FAILED", attribution: "mapping", capacity: "bar1-exhausted",
	},
	{
		name: "failed host registration", env: []string{"SIMGPU_PIN_LIMIT=64M"},
		cmd:    script("init; use 0; host-register 128M"),
		symbol: "cuMemHostRegister_v2", result: "CUDA_ERROR_OUT_OF_MEMORY", attribution: "allocation", capacity: "not-applicable",
	},
	{
		name: "virtual memory mapping that never uses BAR1", env: []string{"SIMGPU_FAIL=cuMemMap:1:2"},
		cmd:    script("init; use 0; vmm 64M"),
		symbol: "cuMemMap", result: "CUDA_ERROR_OUT_OF_MEMORY", attribution: "mapping", capacity: "not-applicable",
	},
	{
		name: "recovered failure, then a terminal one", env: []string{"SIMGPU_FB_TOTAL=8G", "SIMGPU_FB_RESERVED=0"},
		cmd:    script("init; use 0; alloc 6G; alloc 4G; free; alloc 4G; alloc 8G; free-all"),
		symbol: "cuMemAlloc_v2", result: "CUDA_ERROR_OUT_OF_MEMORY", attribution: "allocation", capacity: "framebuffer-exhausted",
		check: func(t *testing.T, rep *report.Report, w *world) {
			if len(rep.Failures) != 2 || !rep.Failures[0].Recovered || rep.Failures[1].Recovered {
				t.Fatalf("failures %+v: want the first recovered, the second terminal", rep.Failures)
			}
			if !strings.Contains(rep.Verdict, "recovered") {
				t.Errorf("verdict does not say the first failure was recovered: %s", rep.Verdict)
			}
		},
	},
	{
		name: "framebuffer queries unsupported", env: []string{"SIMGPU_NVML_UNSUPPORTED=nvmlDeviceGetMemoryInfo_v2,nvmlDeviceGetMemoryInfo"},
		cmd:    []string{filepath.Join(simDir, "scenarios", "weights_oom")},
		symbol: "cuMemAlloc_v2", result: "CUDA_ERROR_OUT_OF_MEMORY", attribution: "allocation", capacity: "unknown",
		check: func(t *testing.T, rep *report.Report, w *world) {
			ok := false
			for _, m := range rep.Missing {
				ok = ok || (m.Decisive && strings.Contains(m.What, "not supported"))
			}
			if !ok {
				t.Errorf("the unsupported query is not named as the missing evidence: %+v", rep.Missing)
			}
		},
	},
	{
		name:        "no failure",
		cmd:         script("init; use 0; alloc 1G; alloc-host 1M; free-all"),
		attribution: "none",
	},
	{
		name: "failure on the second of two GPUs", env: []string{"SIMGPU_DEVICES=2", "SIMGPU_FB_TOTAL=8G"},
		cmd:    script("init; use 0; alloc 1G; use 1; until-fail { alloc 2G }; free-all"),
		symbol: "cuMemAlloc_v2", result: "CUDA_ERROR_OUT_OF_MEMORY", attribution: "allocation", capacity: "framebuffer-exhausted",
		check: func(t *testing.T, rep *report.Report, w *world) {
			if rep.FirstFailure.GPUIndex == nil || *rep.FirstFailure.GPUIndex != 1 {
				t.Errorf("first failure on GPU %v, want 1", rep.FirstFailure.GPUIndex)
			}
		},
	},
	{
		name: "sticky illegal address on an allocation", env: []string{"SIMGPU_FAIL=cuMemAlloc_v2:3:700"},
		cmd:    script("init; use 0; alloc 1M; alloc 1M; touch {dir}/xid; wait-file {dir}/xid-done; alloc 1M; alloc 1M"),
		during: writeXid,
		symbol: "cuMemAlloc_v2", result: "CUDA_ERROR_ILLEGAL_ADDRESS", attribution: "missing-evidence", capacity: "not-applicable",
		check: func(t *testing.T, rep *report.Report, w *world) {
			xid := false
			for _, e := range rep.Evidence {
				xid = xid || (e.Field == "Xid" && e.Value != nil && *e.Value == 13)
			}
			if !xid {
				t.Errorf("the Xid line is not evidence: %+v", rep.Evidence)
			}
			if len(rep.Failures) < 2 || !rep.Failures[1].PossibleConsequence {
				t.Errorf("the later failure in the same context is not flagged as a possible consequence: %+v", rep.Failures)
			}
		},
	},
	{
		name:   "no context: not a memory problem",
		cmd:    script("init; alloc 1M"),
		symbol: "cuMemAlloc_v2", result: "CUDA_ERROR_INVALID_CONTEXT", attribution: "not-memory", capacity: "not-applicable",
	},
	{
		name: "NVIDIA's real libcuda without a GPU", real: true,
		cmd:    script("init; use 0; alloc 1M"),
		symbol: "cuMemAlloc_v2", result: "CUDA_ERROR_NOT_INITIALIZED", attribution: "not-memory", capacity: "not-applicable",
		check: func(t *testing.T, rep *report.Report, w *world) {
			if rep.Cause == nil || rep.Cause.Symbol != "cuInit" {
				t.Errorf("cause %+v, want the failed cuInit", rep.Cause)
			}
		},
	},
}

// writeXid writes an Xid line to the kernel log when the workload asks.
func writeXid(t *testing.T, w *world) {
	if !waitFor(20*time.Second, func() bool { return exists(filepath.Join(w.dir, "xid")) }) {
		t.Error("workload never asked for the Xid")
		return
	}
	f, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
	if err == nil {
		fmt.Fprintf(f, "NVRM: Xid (PCI:0000:41:00): 13, pid=%d, Graphics SM Warp Exception (forensic e2e)\n", os.Getpid())
		f.Close()
	}
	time.Sleep(50 * time.Millisecond)
	os.WriteFile(filepath.Join(w.dir, "xid-done"), nil, 0o600)
}

func TestScenarios(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, sc.run)
	}
}

// run records the scenario's workload and checks its verdict and every
// output format.
func (sc scenario) run(t *testing.T) {
	w := newWorld(t, sc.env...)
	cmd := make([]string, len(sc.cmd))
	for i, c := range sc.cmd {
		cmd[i] = strings.ReplaceAll(c, "{dir}", w.dir)
	}
	if sc.setup != nil {
		defer sc.setup(t, w)()
	}
	flags := append([]string(nil), sc.flags...)
	if sc.real {
		rc, rn := filepath.Join(nvidiaDir, "libcuda.so.1"), filepath.Join(nvidiaDir, "libnvidia-ml.so.1")
		e2eenv.Need(t, exists(rc) && exists(rn), "NVIDIA's libraries are not in build/nvidia (run make nvidia-libs)")
		w.env = append(w.env, "SIMWORK_LIBCUDA="+rc)
		flags = append(flags, "--libcuda", rc, "--libnvidia-ml", rn)
	}
	if sc.during != nil {
		go sc.during(t, w)
	}
	how := onSim
	if sc.real {
		how = onReal
	}
	res := w.recordAs(how, flags, cmd...)
	rep, raw, out := analyzeJSONBytes(t, res.db)
	checkGolden(t, w, out)
	if sc.symbol == "" {
		if rep.FirstFailure != nil || raw["first_failure"] != nil {
			t.Errorf("first failure %+v, want null", rep.FirstFailure)
		}
	} else if ff := rep.FirstFailure; ff == nil || ff.Symbol != sc.symbol || ff.ResultName != sc.result {
		t.Fatalf("first failure %+v, want %s %s", ff, sc.symbol, sc.result)
	}
	if string(rep.Attribution) != sc.attribution {
		t.Errorf("attribution %s, want %s (%s)", rep.Attribution, sc.attribution, rep.Verdict)
	}
	if got := deref(rep.Capacity); (sc.capacity == "" && rep.Capacity != nil) || (sc.capacity != "" && got != sc.capacity) {
		t.Errorf("capacity %s, want %q (%s)", got, sc.capacity, rep.Verdict)
	}
	if sc.capacity == "" && raw["capacity"] != nil {
		t.Errorf("capacity in JSON is %v, want null", raw["capacity"])
	}
	if sc.check != nil && rep.FirstFailure != nil || sc.check != nil && sc.symbol == "" {
		sc.check(t, rep, w)
	}
	checkOutputs(t, w, res.db)
	// Its default text report reads at 80 columns: no sentence over
	// readcheck.MaxWords words, and the first 25 lines say what failed, the
	// numbers the verdict compared, a next step and the failing process's
	// command line.
	checkReadable(t, res.db)
}

// checkOutputs renders every output format of a run and checks that none
// shows a framebuffer value added to a BAR1 value (rule 1): for every pair
// of a framebuffer and a BAR1 reading of the same GPU, the sum must not
// appear in bytes, MiB or GiB. The JSON must match the schema too.
func checkOutputs(t *testing.T, w *world, db string) {
	t.Helper()
	html := filepath.Join(w.dir, "report.html")
	trace := filepath.Join(w.dir, "trace.json")
	outputs := map[string][]byte{}
	for name, args := range map[string][]string{
		"text": {"analyze", "--no-color", db}, "json": {"analyze", "--json", db},
		"report": {"report", db, "-o", html}, "export": {"export", "--format", "chrome-json", db, "-o", trace},
	} {
		out, err := binCommand(bin{}, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		outputs[name] = out
	}
	outputs["report"], _ = os.ReadFile(html)
	outputs["export"], _ = os.ReadFile(trace)
	if err := report.ValidateReportJSON(outputs["json"]); err != nil {
		t.Errorf("analyze --json does not match the schema: %v", err)
	}
	r, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	fb := map[int]map[uint64]bool{}
	bar := map[int]map[uint64]bool{}
	r.Samples(func(s *store.Sample) error {
		m := fb
		if s.Kind == store.KindBAR1 {
			m = bar
		} else if s.Kind != store.KindFramebuffer {
			return nil
		}
		if m[s.GPU.Index] == nil {
			m[s.GPU.Index] = map[uint64]bool{}
		}
		for _, v := range []*uint64{s.Total, s.Reserved, s.Used, s.Free} {
			if v != nil && *v != 0 {
				m[s.GPU.Index][*v] = true
			}
		}
		return nil
	})
	r.Close()
	render := func(v uint64) []string {
		return []string{strconv.FormatUint(v, 10), fmt.Sprintf("%.1f MiB", float64(v)/(1<<20)),
			fmt.Sprintf("%.2f GiB", float64(v)/(1<<30)), fmt.Sprintf(" %.1f ", float64(v)/(1<<20))}
	}
	// A rendering a single reading also produces proves nothing (a small
	// BAR1 value vanishes when a sum is rounded to GiB).
	legit := map[string]bool{}
	for _, m := range []map[int]map[uint64]bool{fb, bar} {
		for _, vals := range m {
			for v := range vals {
				for _, f := range render(v) {
					legit[f] = true
				}
			}
		}
	}
	var forms []string
	for gpu, fvals := range fb {
		for f := range fvals {
			for b := range bar[gpu] {
				for _, form := range render(f + b) {
					if !legit[form] {
						forms = append(forms, form)
					}
				}
			}
		}
	}
	for name, out := range outputs {
		text := string(out)
		for _, f := range forms {
			if strings.HasPrefix(f, " ") && name != "text" {
				continue // a bare MiB figure is the text table's; elsewhere it is any number
			}
			re := regexp.MustCompile(`(^|[^0-9.])` + regexp.QuoteMeta(f) + `($|[^0-9])`)
			if loc := re.FindStringIndex(text); loc != nil {
				t.Errorf("%s output shows %s, a framebuffer value plus a BAR1 value: ...%s...", name, f,
					text[max(0, loc[0]-60):min(len(text), loc[1]+60)])
			}
		}
		if lower := strings.ToLower(text); strings.Contains(lower, "total gpu memory") {
			t.Errorf("%s output speaks of a total GPU memory", name)
		}
	}
}

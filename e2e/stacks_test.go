package e2e

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/retrivium/forensic/internal/e2eenv"
	"github.com/retrivium/forensic/internal/elfnote"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

var (
	callchainO2 = filepath.Join(simDir, "scenarios", "callchain_o2")
	callchainO1 = filepath.Join(simDir, "scenarios", "callchain_o1")
	ctypesOOM   = filepath.Join(repo, "testdata", "stacks", "ctypes_oom.py")
	debPython   = "/usr/bin/python3"
	// ctypesModule is Debian's stripped _ctypes; python3.11-dbg carries its
	// symbols under /usr/lib/debug/.build-id.
	ctypesModule = "/usr/lib/python3.11/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so"
)

// hasDetachedDebug reports whether the debug file named by path's build id
// is installed, so a stack through path can name its static functions.
func hasDetachedDebug(t *testing.T, path string) bool {
	t.Helper()
	id := elfnote.BuildID(path)
	if len(id) < 3 {
		return false
	}
	return exists(filepath.Join("/usr/lib/debug/.build-id", id[:2], id[2:]+".debug"))
}

// functions lists a stack's function names, innermost first.
func functions(st *report.Stack) []string {
	var out []string
	for _, f := range st.Frames {
		out = append(out, f.Function)
	}
	return out
}

// inOrder reports whether want appear in got in this order, each right
// after the one before.
func inOrder(got, want []string) bool {
	for i := range got {
		if i+len(want) <= len(got) && strings.Join(got[i:i+len(want)], "\x00") == strings.Join(want, "\x00") {
			return true
		}
	}
	return false
}

// A C program built -O2 -fomit-frame-pointer fails a cuMemAlloc_v2 four
// calls deep: the stack, unwound from the registers and stack copied at
// the return, names every function from the failing one to main and is
// complete (the kernel's frame-pointer walk stops after one frame there).
func TestStackWithoutFramePointers(t *testing.T) {
	w := newWorld(t)
	e2eenv.Need(t, exists(callchainO2), "callchain_o2 is not built (run make)")
	res := w.record(nil, callchainO2, simCUDA)
	if res.code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", res.code, res.stderr)
	}
	rep, _ := analyzeJSON(t, res.db)
	ff := rep.FirstFailure
	if ff == nil || ff.Symbol != "cuMemAlloc_v2" || ff.Stack == nil {
		t.Fatalf("first failure %+v", ff)
	}
	st := ff.Stack
	names := functions(st)
	if st.Method != "unwound" || st.Stop != "outermost" || st.Partial || st.Note != "" {
		t.Errorf("stack method %q stop %q partial %v note %q; want unwound to the outermost frame", st.Method, st.Stop, st.Partial, st.Note)
	}
	if len(names) == 0 || names[0] != "alloc_weights" || !inOrder(names, []string{"alloc_weights", "load_model", "run_job", "main"}) {
		t.Errorf("frames %q; want alloc_weights, load_model, run_job, main in a row", names)
	}
	for _, f := range st.Frames {
		if f.Language != report.LangNative || f.Library == "" {
			t.Errorf("frame %+v: want a native frame in a named file", f)
		}
	}
	if names[len(names)-1] != "_start" {
		t.Errorf("outermost frame %q, want _start", names[len(names)-1])
	}
}

// marks reads a script's "# LINE:name" marks: name -> line number.
func marks(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		if _, m, ok := strings.Cut(sc.Text(), "# LINE:"); ok {
			out[strings.TrimSpace(m)] = n
		}
	}
	return out
}

// Debian's python3 (3.11) reaches the simulated libcuda through ctypes and
// fails a cuMemAlloc_v2 inside nested functions: the failure's stack
// carries the Python frames read in the probe at the return (function,
// file and line, innermost first) in place of the evaluation loop's
// native frames, and the human report lists them before the native ones.
func TestStackPythonCtypes(t *testing.T) {
	w := newWorld(t)
	e2eenv.Need(t, exists(debPython), "Debian's /usr/bin/python3 is not installed (scripts/deps.sh test)")
	e2eenv.Need(t, hasDetachedDebug(t, ctypesModule), "no detached debug symbols for "+ctypesModule+": python3.11-dbg of the same version is not installed (scripts/deps.sh test)")
	res := w.record(nil, debPython, ctypesOOM, simCUDA)
	if res.code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", res.code, res.stderr)
	}
	rep, raw := analyzeJSON(t, res.db)
	ff := rep.FirstFailure
	if ff == nil || ff.Symbol != "cuMemAlloc_v2" || ff.Stack == nil {
		t.Fatalf("first failure %+v", ff)
	}
	st := ff.Stack
	if st.Python != "ok" {
		t.Errorf("python %q, want ok (note %q)", st.Python, st.Note)
	}
	m := marks(t, ctypesOOM)
	want := []struct {
		fn   string
		line int
	}{{"Driver.alloc", m["alloc"]}, {"grow_cache", m["grow"]}, {"load_weights", m["load"]}, {"main", m["main"]}, {"<module>", m["module"]}}
	var py []report.Frame
	firstPy, lastNativeBefore := -1, -1
	for i, f := range st.Frames {
		if f.Language == report.LangPython {
			py = append(py, f)
			if firstPy < 0 {
				firstPy = i
			}
		} else if firstPy < 0 {
			lastNativeBefore = i
		}
	}
	if len(py) != len(want) {
		t.Fatalf("%d Python frames %+v, want %d", len(py), py, len(want))
	}
	for i, w := range want {
		if py[i].Function != w.fn || py[i].Line != w.line || py[i].File != ctypesOOM {
			t.Errorf("Python frame %d = %s %s:%d, want %s %s:%d", i, py[i].Function, py[i].File, py[i].Line, w.fn, ctypesOOM, w.line)
		}
	}
	// The native frames between libcuda's caller and the Python frames:
	// the ctypes call into the driver.
	if lastNativeBefore < 0 || !strings.Contains(strings.Join(functions(&report.Stack{Frames: st.Frames[:firstPy]}), " "), "_ctypes_callproc") {
		t.Errorf("native frames before the Python ones: %q; want the ctypes call", functions(&report.Stack{Frames: st.Frames[:max(firstPy, 0)]}))
	}
	frames := raw["first_failure"].(map[string]any)["stack"].(map[string]any)["frames"].([]any)
	if l := frames[firstPy].(map[string]any)["language"]; l != "python" {
		t.Errorf("--json language of a Python frame = %v", l)
	}
	if l := frames[0].(map[string]any)["language"]; l != "native" {
		t.Errorf("--json language of a native frame = %v", l)
	}
	out, err := binCommand(bin{}, "analyze", "--no-color", res.db).Output()
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	p, n := strings.Index(text, "  python    Driver.alloc"), strings.Index(text, "  native    ")
	if p < 0 || n < 0 || p > n {
		t.Errorf("human report: Python frames at %d, native at %d; want the Python frames first:\n%s", p, n, text)
	}
}

// A Python process forked (no exec) from a recorded one runs the same
// interpreter: its failure's stack has its Python frames too.
func TestStackPythonForkedChild(t *testing.T) {
	w := newWorld(t)
	e2eenv.Need(t, exists(debPython), "Debian's /usr/bin/python3 is not installed (scripts/deps.sh test)")
	res := w.record(nil, debPython, ctypesOOM, simCUDA, "1099511627776", "1", "fork")
	if res.code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", res.code, res.stderr)
	}
	rep, _ := analyzeJSON(t, res.db)
	ff := rep.FirstFailure
	if ff == nil || ff.Stack == nil {
		t.Fatalf("first failure %+v", ff)
	}
	var py []string
	for _, f := range ff.Stack.Frames {
		if f.Language == report.LangPython {
			py = append(py, f.Function)
		}
	}
	if ff.Stack.Python != "ok" || !inOrder(py, []string{"Driver.alloc", "grow_cache", "load_weights", "main", "<module>"}) {
		t.Errorf("forked child's stack: python %q, frames %q", ff.Stack.Python, py)
	}
	for _, p := range rep.Processes {
		if p.PID == ff.PID && p.Root {
			t.Error("the failure is the parent's, not the forked child's")
		}
	}
}

// NVIDIA's real libcuda, without a GPU, fails cuInit (100) called from a
// program built -O1: the unwound stack has no frame outside the mappings
// and reaches main; a walk that met an address outside every mapping
// would end there, marked partial.
func TestStackNVIDIALibcuda(t *testing.T) {
	w := newWorld(t)
	realCUDA := filepath.Join(nvidiaDir, "libcuda.so.1")
	e2eenv.Need(t, exists(realCUDA), "NVIDIA's libraries are not in build/nvidia (run make nvidia-libs)")
	e2eenv.Need(t, exists(callchainO1), "callchain_o1 is not built (run make)")
	db := filepath.Join(w.dir, "run.db")
	cmd := binCommand(bin{w: w}, "record", "-o", db, "--libcuda", realCUDA, "--libnvidia-ml", simNVML, "--", callchainO1, realCUDA)
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("callchain succeeded against NVIDIA's libcuda without a GPU:\n%s", out)
	}
	rep, _ := analyzeJSON(t, db)
	ff := rep.FirstFailure
	if ff == nil || ff.Symbol != "cuInit" || ff.Result != 100 || ff.Stack == nil {
		t.Fatalf("first failure %+v; want cuInit -> 100 with a stack", ff)
	}
	st := ff.Stack
	for i, f := range st.Frames {
		if f.Library == "" && (i != len(st.Frames)-1 || st.Stop != "outside-mappings") {
			t.Errorf("frame %d %+v lies outside every mapping without ending the walk", i, f)
		}
	}
	if st.Partial != (st.Stop != "outermost") {
		t.Errorf("partial %v with stop %q", st.Partial, st.Stop)
	}
	if names := functions(st); !inOrder(names, []string{"init_driver", "run_job", "main"}) || st.Stop != "outermost" {
		t.Errorf("frames %q, stop %q; want init_driver, run_job, main, to the outermost frame", names, st.Stop)
	}
}

// A failure storm at two call sites captures two stacks; every other
// failure refers to its site's capture, and its stack in the report says
// so. A storm of failures each at a new call site is bounded by the rate
// limit, which counts what it skipped.
func TestStackCaptureBounded(t *testing.T) {
	w := newWorld(t)
	e2eenv.Need(t, exists(debPython), "Debian's /usr/bin/python3 is not installed (scripts/deps.sh test)")
	res := w.record(nil, debPython, ctypesOOM, simCUDA, "1099511627776", "200")
	if res.code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", res.code, res.stderr)
	}
	caps, refs, fails, stop := captureCounts(t, res.db)
	if fails != 200 || caps != 2 || refs != 198 || stop.Stats.StackSkipped != 0 || stop.Stats.StackLost != 0 {
		t.Errorf("%d failures: %d captured, %d referring; skipped %d, lost %d; want 200: 2, 198, 0, 0",
			fails, caps, refs, stop.Stats.StackSkipped, stop.Stats.StackLost)
	}
	rep, _ := analyzeJSON(t, res.db)
	shared := 0
	for _, f := range rep.Failures {
		if f.Stack != nil && f.Stack.SharedFrom != nil {
			shared++
			if py := functions(f.Stack); !inOrder(py, []string{"Driver.alloc"}) || !strings.Contains(f.Stack.Note, "same call site") {
				t.Errorf("shared stack %q note %q", py, f.Stack.Note)
			}
		}
	}
	if shared == 0 {
		t.Error("no listed failure shows its call site's capture")
	}

	res = w.record(nil, debPython, ctypesOOM, simCUDA, "1099511627776", "600", "new")
	caps, refs, fails, stop = captureCounts(t, res.db)
	st := stop.Stats
	if fails != 600 || refs != 0 || st.StackSkipped == 0 || uint64(caps)+st.StackSkipped+st.StackLost != 600 {
		t.Errorf("600 new call sites: %d captured, %d referring, %d skipped, %d lost", caps, refs, st.StackSkipped, st.StackLost)
	}
	if rep, _ := analyzeJSON(t, res.db); rep.Loss.StackSkipped != st.StackSkipped || rep.Loss.StackLost != st.StackLost {
		t.Errorf("--json loss says %d skipped, %d lost; the stop record %d, %d", rep.Loss.StackSkipped, rep.Loss.StackLost,
			st.StackSkipped, st.StackLost)
	}
	t.Logf("600 new call sites: %d captured, %d skipped by the rate limit", caps, st.StackSkipped)
}

// captureCounts counts a run's failed calls, those with a (named)
// capture of their own and the references to a capture.
func captureCounts(t *testing.T, db string) (caps, refs, fails int, stop *store.StopInfo) {
	t.Helper()
	r, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	err = r.Failures(func(e *store.Event) error {
		fails++
		n, err := r.NamedStack(e.PID, e.TID, e.End)
		if n != nil {
			caps++
		}
		return err
	})
	if err == nil {
		err = r.StackRefs(func(*store.StackRef) error { refs++; return nil })
	}
	if err != nil {
		t.Fatal(err)
	}
	if stop, err = r.Stop(); err != nil || stop == nil {
		t.Fatalf("stop record: %v", err)
	}
	return caps, refs, fails, stop
}

// Under --stacks every device allocation gets a stack: a loop allocating
// at one call site is captured once, the other allocations refer to it.
func TestStackCapturesOfAllocations(t *testing.T) {
	w := newWorld(t)
	res := w.record([]string{"--stacks"}, simwork, "init; use 0; repeat 5 { alloc 1M }; free-all")
	r, err := store.Open(res.db)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	caps, allocs := 0, 0
	err = r.Events(func(e *store.Event) error {
		if e.Name == "cuMemAlloc_v2" {
			allocs++
			if n, _ := r.NamedStack(e.PID, e.TID, e.End); n != nil {
				caps++
				if len(n.Frames) == 0 || n.Frames[0].Function == "" {
					t.Errorf("named stack of a successful allocation: %+v", n)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	refs := 0
	r.StackRefs(func(*store.StackRef) error { refs++; return nil })
	if allocs != 5 || caps != 1 || refs != 4 {
		t.Errorf("%d allocations: %d captured, %d referring; want 5: 1, 4", allocs, caps, refs)
	}
}

// The same failure recorded in flight mode: analyze of the recording's
// directory unwinds the capture stored in its segment, as for a run.db.
func TestStackInFlightRecording(t *testing.T) {
	w := newWorld(t)
	e2eenv.Need(t, exists(callchainO2), "callchain_o2 is not built (run make)")
	dir := filepath.Join(w.dir, "flight")
	cmd := binCommand(bin{w: w}, "record", "--flight", "-o", dir, "--libcuda", simCUDA, "--libnvidia-ml", simNVML,
		"--", callchainO2, simCUDA)
	if out, err := cmd.CombinedOutput(); err == nil || cmd.ProcessState.ExitCode() != 1 {
		t.Fatalf("record --flight: %v, want exit 1:\n%s", err, out)
	}
	rep, _ := analyzeJSON(t, dir)
	ff := rep.FirstFailure
	if ff == nil || ff.Stack == nil {
		t.Fatalf("first failure %+v", ff)
	}
	if names := functions(ff.Stack); ff.Stack.Method != "unwound" || !inOrder(names, []string{"alloc_weights", "load_model", "run_job", "main"}) {
		t.Errorf("stack %s %q; want unwound through alloc_weights, load_model, run_job, main", ff.Stack.Method, names)
	}
}

// A stack frame wider than an 80-column terminal wraps in the text
// report: the program's whole file name and the frame's offset are there.
func TestStackFramesWrapAt80Columns(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=1G")
	name := "simwork-" + strings.Repeat("with-a-long-name-", 4)
	prog := filepath.Join(w.dir, name)
	b, err := os.ReadFile(simwork)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, b, 0o755); err != nil {
		t.Fatal(err)
	}
	res := w.record(nil, prog, "init; use 0; alloc 2G; exit 1")
	if res.code != 1 {
		t.Fatalf("exit %d, want the workload's 1: %s", res.code, res.stderr)
	}
	cmd := binCommand(bin{}, "analyze", "--no-color", res.db)
	cmd.Env = append(os.Environ(), "COLUMNS=80")
	out, _ := cmd.Output()
	var joined strings.Builder
	for i, l := range strings.Split(string(out), "\n") {
		if utf8.RuneCountInString(l) > 80 {
			t.Errorf("line %d is %d columns: %q", i+1, utf8.RuneCountInString(l), l)
		}
		joined.WriteString(strings.ReplaceAll(l, " ", ""))
	}
	if !regexp.MustCompile(`\+0x[0-9a-f]+\(` + regexp.QuoteMeta(name) + `\)`).MatchString(joined.String()) {
		t.Errorf("no frame in %s with its offset and whole file name:\n%s", name, out)
	}
	if _, stack, _ := strings.Cut(string(out), "  stack"); strings.Contains(strings.Split(stack, "\n\n")[0], "…") {
		t.Errorf("a stack frame was cut:\n%s", out)
	}
}

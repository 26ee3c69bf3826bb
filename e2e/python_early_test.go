package e2e

import (
	"context"
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retrivium/forensic/internal/e2eenv"
	"github.com/retrivium/forensic/report"
)

// earlyRuns is how many times the early-failure workload is recorded per
// interpreter: FORENSIC_EARLY_RUNS (100 for the full check, about 5
// minutes per interpreter on a 2-core machine), else 10, which keeps
// `make test` short.
func earlyRuns(t *testing.T) int {
	t.Helper()
	s := os.Getenv("FORENSIC_EARLY_RUNS")
	if s == "" {
		return 10
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("FORENSIC_EARLY_RUNS=%q: want a positive count", s)
	}
	return n
}

// busyCores keeps every CPU busy until the test ends (or 20 minutes, a
// bound for a test that hangs): the recorder's reader, which must locate
// the interpreter before the workload's first failure, competes for the
// CPUs with the workload and with these loops.
func busyCores(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	t.Cleanup(cancel)
	for range runtime.NumCPU() {
		go func() {
			for n := 0; ; n++ {
				if n%(1<<20) == 0 && ctx.Err() != nil {
					return
				}
			}
		}()
	}
}

// sharedLibpython is a CPython of 3.10 to 3.13 built with a shared
// libpython (pyenv builds them so), or "" when none is installed.
func sharedLibpython() string {
	home, _ := os.UserHomeDir()
	for _, v := range []string{"3.13.0", "3.12.1", "3.11.7", "3.10.13"} {
		minor := v[:len(v)-len(filepath.Ext(v))]
		py := filepath.Join(home, ".pyenv", "versions", v, "bin", "python"+minor)
		if exists(py) && linksLibpythonFile(py) {
			return py
		}
	}
	return ""
}

// checkEarlyFrames records the early-failure workload runs times with
// python, both CPUs busy, and checks that every first failure has its
// three Python frames with their lines, and names the interpreter's
// version and build.
func checkEarlyFrames(t *testing.T, python, build string) {
	busyCores(t)
	runs := earlyRuns(t)
	m := marks(t, ctypesEarly)
	want := []string{fmt.Sprint("alloc:", m["alloc"]), fmt.Sprint("main:", m["main"]), fmt.Sprint("<module>:", m["module"])}
	var missed, unsaid []string // runs without their frames; those whose stack does not say why
	var after []time.Duration
	for i := range runs {
		w := newWorld(t)
		res := w.record(nil, python, ctypesEarly, simCUDA)
		if res.code != 1 {
			t.Fatalf("run %d: exit %d, want 1; stderr:\n%s", i, res.code, res.stderr)
		}
		rep, _ := analyzeJSON(t, res.db)
		ff := rep.FirstFailure
		if ff == nil || ff.Stack == nil {
			t.Fatalf("run %d: first failure %+v", i, ff)
		}
		got := pythonLines(ff.Stack)
		if ff.Stack.PythonBuild != build || ff.Stack.PythonVersion == "" {
			t.Errorf("run %d: interpreter %q, build %q; want a version, build %s", i, ff.Stack.PythonVersion, ff.Stack.PythonBuild, build)
		}
		if ff.Stack.Python != "ok" || !slices.Equal(got, want) {
			missed = append(missed, fmt.Sprintf("run %d: python %q, frames %q, note %q", i, ff.Stack.Python, got, ff.Stack.Note))
			if ff.Stack.Python == "" || ff.Stack.Python == "ok" {
				unsaid = append(unsaid, missed[len(missed)-1])
			}
		}
		for _, p := range rep.Processes {
			if p.PID == ff.PID {
				after = append(after, time.Duration(ff.TimeNS-p.StartNS))
			}
		}
	}
	slices.Sort(after)
	if len(after) > 0 {
		t.Logf("%s: %d runs; failure after the process's start: median %v, max %v", python, runs, after[len(after)/2], after[len(after)-1])
	}
	if len(missed) == 0 {
		return
	}
	// A -race build of the recorder runs several times slower. The process
	// is held at its libcuda mapping until its exec is read, but for 2 s
	// at most: a reader further behind than that lets it run, and fail,
	// before its interpreter is located. That is a question of speed,
	// which the plain build answers; what every build owes is to say so in
	// the stack.
	if raceBuild(t) {
		for _, m := range unsaid {
			t.Errorf("a run lost its Python frames without saying why: %s", m)
		}
		t.Logf("race build: %d of %d runs said why their Python frames are missing:\n%s", len(missed), runs, missed)
		return
	}
	t.Errorf("%d of %d runs lost their Python frames:\n%s", len(missed), runs, missed)
}

// pythonLines are a stack's Python frames as "function:line".
func pythonLines(st *report.Stack) []string {
	var out []string
	for _, f := range st.Frames {
		if f.Language == report.LangPython {
			out = append(out, fmt.Sprint(f.Function, ":", f.Line))
		}
	}
	return out
}

// raceBuild reports whether the binary under test was built with -race.
func raceBuild(t *testing.T) bool {
	t.Helper()
	bi, err := buildinfo.ReadFile(binPath)
	if err != nil {
		t.Fatalf("build info of %s: %v", binPath, err)
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// Debian's python3 (3.11, the interpreter in the executable) fails its
// first allocation through ctypes as soon as it has started, with both
// CPUs busy: every run's stack has its Python frames.
func TestPythonEarlyFailureFramesEveryRun(t *testing.T) {
	e2eenv.Need(t, exists(debPython), "Debian's /usr/bin/python3 is not installed (scripts/deps.sh test)")
	checkEarlyFrames(t, debPython, "static")
}

// A recorder whose event reader is far behind (every exec record read
// 400 ms late, as a -race build on a busy machine can be) still gives an
// early failure its Python frames: the program maps libcuda before its
// exec is read and is held at that mapping until it is, so its
// interpreter is located before its first call fails.
func TestPythonFramesWhenTheReaderIsBehindTheExec(t *testing.T) {
	e2eenv.Need(t, exists(debPython), "Debian's /usr/bin/python3 is not installed (scripts/deps.sh test)")
	m := marks(t, ctypesEarly)
	w := newWorld(t, "FORENSIC_TEST_EXEC_READ_DELAY=400ms")
	res := w.record(nil, debPython, ctypesEarly, simCUDA)
	if res.code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", res.code, res.stderr)
	}
	rep, _ := analyzeJSON(t, res.db)
	ff := rep.FirstFailure
	if ff == nil || ff.Stack == nil {
		t.Fatalf("first failure %+v", ff)
	}
	got := pythonLines(ff.Stack)
	want := []string{fmt.Sprint("alloc:", m["alloc"]), fmt.Sprint("main:", m["main"]), fmt.Sprint("<module>:", m["module"])}
	if ff.Stack.Python != "ok" || !slices.Equal(got, want) {
		t.Errorf("python %q, frames %q, note %q; want ok, %q", ff.Stack.Python, got, ff.Stack.Note, want)
	}
	_, _, stop := stored(t, res.db)
	if stop == nil || stop.Hold.Count < 1 || stop.Hold.Max < int64(300*time.Millisecond) {
		t.Errorf("stop record %+v: want the process held at its libcuda mapping while its exec was unread", stop)
	}
}

// The same with an interpreter in a shared libpython, which the loader
// maps after the exec: the recorder locates it at the exec, not at the
// process's first recorded call, which comes after the failure.
func TestPythonEarlyFailureSharedLibpythonFramesEveryRun(t *testing.T) {
	py := sharedLibpython()
	if py == "" {
		t.Skip("no CPython 3.10-3.13 built with a shared libpython (pyenv's) is installed")
	}
	checkEarlyFrames(t, py, "shared")
}

// linksLibpythonFile reports whether an executable needs a shared
// libpython.
func linksLibpythonFile(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	libs, _ := f.ImportedLibraries()
	return slices.ContainsFunc(libs, func(l string) bool { return strings.HasPrefix(l, "libpython") })
}

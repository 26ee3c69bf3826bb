package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/retrivium/forensic/internal/e2eenv"
	"github.com/retrivium/forensic/report"
)

var (
	// trixieRoot is a minimal Debian trixie root with its python3 (3.13),
	// made once by `make roots` (scripts/make-root.sh).
	trixieRoot  = filepath.Join(repo, "build", "roots", "trixie")
	ctypesEarly = filepath.Join(repo, "testdata", "stacks", "ctypes_early.py")
)

// pivotScript runs a command with ROOT as the root of a private mount
// namespace, as container runtimes do: ROOT bind-mounted on itself,
// pivot_root into it, the old root unmounted, /proc mounted.
const pivotScript = `root=$1; shift
mount --bind "$root" "$root" && cd "$root" && mkdir -p .oldroot && pivot_root . .oldroot &&
cd / && mount -t proc proc /proc && umount -l /.oldroot && rmdir /.oldroot && exec "$@"`

// inRoot is a workload placed inside the trixie root: the simulated
// libcuda copied there (a file of the root, with an inode of its own, as
// a container image carries its libraries), the early-failure script and
// the simulated GPU's state file, each known by its path inside the root
// (in) and on this machine (host).
type inRoot struct {
	w                    *world
	hostDir, dir         string
	hostLibcuda, libcuda string
	script               string
}

// newInRoot prepares a world whose workload runs in the trixie root.
func newInRoot(t *testing.T) *inRoot {
	t.Helper()
	e2eenv.Need(t, exists(filepath.Join(trixieRoot, ".complete")), "the Debian trixie root is not made (make roots)")
	hostDir, err := os.MkdirTemp(filepath.Join(trixieRoot, "tmp"), "forensic-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostDir) })
	r := &inRoot{hostDir: hostDir, dir: strings.TrimPrefix(hostDir, trixieRoot)}
	for _, f := range []string{simCUDA, ctypesEarly} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(hostDir, filepath.Base(f)), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r.hostLibcuda = filepath.Join(hostDir, "libcuda.so.1")
	r.libcuda = filepath.Join(r.dir, "libcuda.so.1")
	r.script = filepath.Join(r.dir, filepath.Base(ctypesEarly))
	// The recorder's NVML and the workload's libcuda share the state
	// file: the recorder names it on this machine, the workload inside
	// the root (env below; the last SIMGPU_STATE wins).
	r.w = newWorld(t, "SIMGPU_STATE="+filepath.Join(hostDir, "simgpu.state"))
	return r
}

// command is the workload's command inside the root, after the prefix
// that enters it.
func (r *inRoot) command(prefix ...string) []string {
	return append(prefix, "/usr/bin/env", "SIMGPU_STATE="+filepath.Join(r.dir, "simgpu.state"),
		"python3", r.script, r.libcuda)
}

// checkRootStack checks the first failure of a recording of the
// early-failure script in the root: every Python frame with its function,
// file (as the process named it) and line; native frames from the ctypes
// call through the interpreter's Py_BytesMain and its main to _start, the
// walk complete; the interpreter recorded at its path inside the root.
func (r *inRoot) checkRootStack(t *testing.T, res result) {
	t.Helper()
	if res.code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", res.code, res.stderr)
	}
	rep, _ := analyzeJSON(t, res.db)
	ff := rep.FirstFailure
	if ff == nil || ff.Symbol != "cuMemAlloc_v2" || ff.Stack == nil {
		t.Fatalf("first failure %+v", ff)
	}
	st := ff.Stack
	if st.Python != "ok" || st.Partial || st.Stop != "outermost" {
		t.Errorf("stack: python %q, partial %v, stop %q, note %q; want ok, complete, outermost", st.Python, st.Partial, st.Stop, st.Note)
	}
	if !strings.HasPrefix(st.PythonVersion, "3.13.") || st.PythonBuild != "static" || st.PythonFile != "/usr/bin/python3.13" {
		t.Errorf("interpreter %q %q %q, want CPython 3.13, static, /usr/bin/python3.13", st.PythonVersion, st.PythonBuild, st.PythonFile)
	}
	m := marks(t, ctypesEarly)
	want := []report.Frame{{Function: "alloc", Line: m["alloc"]}, {Function: "main", Line: m["main"]}, {Function: "<module>", Line: m["module"]}}
	var py, native []report.Frame
	for _, f := range st.Frames {
		if f.Language == report.LangPython {
			py = append(py, f)
		} else if len(py) > 0 {
			native = append(native, f) // those the Python frames ran on
		}
	}
	if len(py) != len(want) {
		t.Fatalf("Python frames %+v, want %d", py, len(want))
	}
	for i, w := range want {
		if py[i].Function != w.Function || py[i].Line != w.Line || py[i].File != r.script {
			t.Errorf("Python frame %d = %s %s:%d, want %s %s:%d", i, py[i].Function, py[i].File, py[i].Line, w.Function, r.script, w.Line)
		}
	}
	// The program's main: CPython's main() is `return Py_BytesMain(argc,
	// argv)`, a tail call, so Py_BytesMain stands in its place, called by
	// the C library's start (Debian's libc keeps __libc_start_call_main
	// in no symbol table of the root), and the walk ends at _start.
	fns := functions(&report.Stack{Frames: native})
	i := slices.Index(fns, "Py_BytesMain")
	if i < 0 || !slices.Equal(fns[i:], []string{"Py_BytesMain", "", "__libc_start_main", "_start"}) || native[i+1].Library != "libc.so.6" {
		t.Errorf("native frames after the Python ones %q; want Py_BytesMain, the C library's start, then _start last", fns)
	}
	for _, f := range native[:max(i, 0)] {
		if f.Library != "python3.13" {
			t.Errorf("frame %+v between the evaluation loop and Py_BytesMain is not the interpreter's", f)
		}
	}
	var exe string
	for _, p := range rep.Processes {
		if p.PID == ff.PID {
			exe = p.Exe
		}
	}
	if exe != "/usr/bin/python3.13" {
		t.Errorf("process executable %q, want /usr/bin/python3.13 (as the process named it)", exe)
	}
}

// Python 3.13 of a Debian trixie root, run under chroot, fails a CUDA
// allocation through ctypes with the root's copy of libcuda and exits: its
// stack has every Python frame and the native frames to _start, and the
// interpreter is recorded at the path the process used, not under the
// chroot directory.
func TestContainerChrootPythonFrames(t *testing.T) {
	r := newInRoot(t)
	res := r.w.record([]string{"--libcuda", r.hostLibcuda}, r.command("chroot", trixieRoot)...)
	r.checkRootStack(t, res)
}

// The same in a private mount namespace whose root is the trixie root
// (pivot_root, as container runtimes do): the process's files have no
// path on this machine once it has exited, and it exits right after its
// failure; the recorder finds them through the root it held open.
func TestContainerPivotRootPythonFrames(t *testing.T) {
	r := newInRoot(t)
	_, err := exec.LookPath("unshare")
	e2eenv.Need(t, err == nil, "unshare (util-linux) is not installed")
	res := r.w.record([]string{"--libcuda", r.hostLibcuda},
		r.command("unshare", "-m", "--propagation", "private", "/bin/sh", "-c", pivotScript, "pivot", trixieRoot)...)
	r.checkRootStack(t, res)
}

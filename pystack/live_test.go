package pystack

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/retrivium/forensic/internal/e2eenv"
	"github.com/retrivium/forensic/internal/elfnote"
	"github.com/retrivium/forensic/unwind"
)

// interpreter is one CPython found on this machine.
type interpreter struct {
	path         string // sys.executable
	major, minor int
}

func (i interpreter) String() string { return fmt.Sprintf("%d.%d (%s)", i.major, i.minor, i.path) }

// pythons finds the interpreters to test against: python3 and python3.X on
// PATH, those listed in $FORENSIC_PYTHONS (colon-separated), and pyenv's
// installed versions. Each is asked its own version and executable.
func pythons(t *testing.T) []interpreter {
	var cands []string
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		for _, n := range []string{"python3", "python3.10", "python3.11", "python3.12", "python3.13", "python3.14"} {
			if p := filepath.Join(dir, n); fileExists(p) {
				cands = append(cands, p)
			}
		}
	}
	cands = append(cands, filepath.SplitList(os.Getenv("FORENSIC_PYTHONS"))...)
	root := os.Getenv("PYENV_ROOT")
	if root == "" {
		if home, err := os.UserHomeDir(); err == nil {
			root = filepath.Join(home, ".pyenv")
		}
	}
	found, _ := filepath.Glob(filepath.Join(root, "versions", "*", "bin", "python3"))
	cands = append(cands, found...)
	seen := map[string]bool{}
	var out []interpreter
	for _, c := range cands {
		b, err := exec.Command(c, "-c", "import sys; print(sys.version_info[0], sys.version_info[1], sys.executable)").Output()
		f := strings.Fields(string(b))
		if err != nil || len(f) != 3 {
			continue
		}
		exe, err := filepath.EvalSymlinks(f[2])
		if err != nil || seen[exe] {
			continue
		}
		seen[exe] = true
		in := interpreter{path: exe}
		in.major, _ = strconv.Atoi(f[0])
		in.minor, _ = strconv.Atoi(f[1])
		if in.major == 3 && in.minor >= 6 {
			out = append(out, in)
		}
	}
	e2eenv.Need(t, len(out) > 0, "no python3 found")
	return out
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func supportedVersion(in interpreter) bool {
	_, err := layoutFor(in.major, in.minor)
	return err == nil
}

// blocked is a running blocked.py, stopped in its ctypes read.
type blocked struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	tid    int
	script string
}

const script = "../testdata/stacks/blocked.py"

// startBlocked runs blocked.py and waits until its chain is blocked in
// read(2).
func startBlocked(t *testing.T, in interpreter, args ...string) *blocked {
	t.Helper()
	abs, _ := filepath.Abs(script)
	cmd := exec.Command(in.path, append([]string{abs}, args...)...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := &blocked{cmd: cmd, stdin: stdin, script: abs}
	t.Cleanup(b.stop)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if _, err2 := fmt.Sscanf(line, "ready %d", &b.tid); err != nil || err2 != nil {
		t.Fatalf("%s: %q, %v", in, line, err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		sc, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/syscall", cmd.Process.Pid, b.tid))
		if strings.HasPrefix(string(sc), "0 0x0 ") { // read(0, ...)
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d never blocked in read: %q", b.tid, sc)
		}
	}
}

func (b *blocked) stop() {
	b.stdin.Close()
	b.cmd.Process.Kill()
	b.cmd.Wait()
}

// threadRegs stops one thread with PTRACE_SEIZE/INTERRUPT and reads its
// registers: what a probe sees at that instant.
func threadRegs(t *testing.T, tid int) unix.PtraceRegs {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.PtraceSeize(tid); err != nil {
		t.Fatalf("ptrace seize %d: %v", tid, err)
	}
	defer unix.PtraceDetach(tid)
	if err := unix.PtraceInterrupt(tid); err != nil {
		t.Fatal(err)
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(tid, &ws, unix.WALL, nil); err != nil {
		t.Fatal(err)
	}
	var regs unix.PtraceRegs
	if err := unix.PtraceGetRegs(tid, &regs); err != nil {
		t.Fatal(err)
	}
	return regs
}

// marks returns the line of each "# LINE:name" mark of the script.
func marks(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for i, l := range strings.Split(string(b), "\n") {
		if _, m, ok := strings.Cut(l, "# LINE:"); ok {
			out[strings.TrimSpace(m)] = i + 1
		}
	}
	return out
}

// procMaps reads a process's executable mappings with build ids.
func procMaps(t *testing.T, pid int) []unwind.Mapping {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []unwind.Mapping
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.Contains(f[1], "x") {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		m := unwind.Mapping{Path: strings.Join(f[5:], " ")}
		m.Start, _ = strconv.ParseUint(lo, 16, 64)
		m.End, _ = strconv.ParseUint(hi, 16, 64)
		m.Offset, _ = strconv.ParseUint(f[2], 16, 64)
		if strings.HasPrefix(m.Path, "/") {
			m.BuildID = elfnote.BuildID(m.Path)
		}
		out = append(out, m)
	}
	return out
}

type wantFrame struct {
	fn, mark string
}

// chainFrames are the frames blocked.py's chain must show, innermost
// first; 3.10 has no qualified names.
func chainFrames(minor int) []wantFrame {
	run := "Worker.run"
	if minor < 11 {
		run = "run"
	}
	return []wantFrame{{"block", "block"}, {"inner", "inner"}, {"inner", "recurse"}, {"inner", "recurse"}, {"inner", "recurse"}, {run, "run"}}
}

func TestLivePython(t *testing.T) {
	for _, in := range pythons(t) {
		for _, mode := range []string{"main", "thread"} {
			t.Run(fmt.Sprintf("%d.%d %s %s", in.major, in.minor, filepath.Base(filepath.Dir(filepath.Dir(in.path))), mode), func(t *testing.T) {
				livePython(t, in, mode)
			})
		}
	}
}

func livePython(t *testing.T, in interpreter, mode string) {
	var args []string
	if mode == "thread" {
		args = []string{"thread"}
	}
	b := startBlocked(t, in, args...)
	pid := b.cmd.Process.Pid
	maps := procMaps(t, pid)
	target, err := Locate(maps, unwind.LocalFiles{})
	if !supportedVersion(in) {
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), fmt.Sprintf("%d.%d", in.major, in.minor)) {
			t.Fatalf("CPython %s: Locate = %v, want an error naming the unsupported version", in, err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if target.Version.Major != in.major || target.Version.Minor != in.minor {
		t.Fatalf("located %s in %s, the interpreter is %s", target.Version, target.Path, in)
	}
	regs := threadRegs(t, b.tid)
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	frames, st, err := target.Walk(mem, ThreadKey{TID: uint32(b.tid), PthreadID: regs.Fs_base})
	if err != nil {
		t.Fatal(err)
	}
	checkChain(t, b, frames, in.minor, mode)
	t.Logf("%s: %d Python frames, %d raw, %d memory reads", target.Version, len(frames), len(st.Frames), st.Reads)
	native := unwindNative(t, pid, maps, regs)
	entries, evals := 0, 0
	for _, f := range frames {
		if f.Entry {
			entries++
		}
	}
	for _, f := range native.Frames {
		if strings.HasPrefix(f.Function, "_PyEval_EvalFrameDefault") {
			evals++
		}
	}
	if !native.Complete() || entries != evals {
		t.Errorf("native walk %s (%s), %d frames, %d evaluation loop frames; %d Python entry frames",
			native.Stop, native.Detail, len(native.Frames), evals, entries)
	}
	checkOtherThread(t, target, mem, b, mode)
}

// checkChain compares the frames with the script's marks.
func checkChain(t *testing.T, b *blocked, frames []Frame, minor int, mode string) {
	t.Helper()
	lines := marks(t, b.script)
	want := chainFrames(minor)
	if mode == "main" {
		want = append(want, wantFrame{"main", "main"}, wantFrame{"<module>", "module"})
	}
	var got []string
	for _, f := range frames {
		got = append(got, fmt.Sprintf("%s %s:%d", f.Function, filepath.Base(f.File), f.Line))
	}
	if len(frames) < len(want) || (mode == "main" && len(frames) != len(want)) {
		t.Fatalf("frames %v, want %v", got, want)
	}
	for i, w := range want {
		f := frames[i]
		if f.Function != w.fn || f.File != b.script || f.Line != lines[w.mark] {
			t.Errorf("frame %d: %s, want %s %s:%d", i, got[i], w.fn, filepath.Base(b.script), lines[w.mark])
		}
	}
	for _, f := range frames[len(want):] {
		if mode == "thread" && filepath.Base(f.File) != "threading.py" {
			t.Errorf("outer frame %s %s:%d, want threading.py's", f.Function, f.File, f.Line)
		}
	}
}

// checkOtherThread walks the thread that was not blocked: in thread mode
// the main thread, busy running Python and taking the GIL, must show its
// own frames, not the blocked thread's.
func checkOtherThread(t *testing.T, target *Target, mem Memory, b *blocked, mode string) {
	t.Helper()
	if mode != "thread" {
		if target.Layout.ThreadNativeID >= 0 {
			if _, err := target.FindThread(mem, ThreadKey{TID: 1}); !errors.Is(err, ErrNoThread) {
				t.Errorf("a thread of another process: %v, want ErrNoThread", err)
			}
		} else if _, err := target.FindThread(mem, ThreadKey{TID: uint32(b.tid)}); !errors.Is(err, ErrNoThread) {
			t.Errorf("3.10 without a pthread id: %v, want ErrNoThread", err)
		}
		return
	}
	if target.Layout.ThreadNativeID < 0 {
		return // 3.10 needs the main thread's fs base: a second ptrace stop
	}
	pid := b.cmd.Process.Pid
	frames, _, err := target.Walk(mem, ThreadKey{TID: uint32(pid)})
	if err != nil {
		t.Fatal(err)
	}
	lines := marks(t, b.script)
	var got []string
	for _, f := range frames {
		got = append(got, fmt.Sprintf("%s:%d", f.Function, f.Line))
	}
	// The main thread runs freely: it may be at either line of its loop,
	// or inside is_alive(), at the instant of the read.
	module := fmt.Sprintf("<module>:%d", lines["module"])
	loop := []string{fmt.Sprintf("main:%d", lines["loop"]), fmt.Sprintf("main:%d", lines["spin"])}
	if n := len(got); n < 2 || got[n-1] != module || !slices.Contains(loop, got[n-2]) {
		t.Errorf("main thread frames %v, want ... %v or %v, %s", got, loop[0], loop[1], module)
	}
}

// unwindNative walks the blocked thread's native stack from its registers
// and a copy of its stack.
func unwindNative(t *testing.T, pid int, maps []unwind.Mapping, regs unix.PtraceRegs) unwind.Result {
	t.Helper()
	var c unwind.Capture
	c.Mappings = maps
	for reg, v := range map[int]uint64{unwind.RegRIP: regs.Rip, unwind.RegRSP: regs.Rsp, unwind.RegRBP: regs.Rbp,
		unwind.RegRBX: regs.Rbx, unwind.RegR12: regs.R12, unwind.RegR13: regs.R13, unwind.RegR14: regs.R14, unwind.RegR15: regs.R15} {
		c.Regs.Set(reg, v)
	}
	c.Stack = readStack(t, pid, regs.Rsp, 1<<20)
	r := unwind.New(unwind.LocalFiles{}, 0).Unwind(c)
	var names []string
	for _, f := range r.Frames {
		names = append(names, fmt.Sprintf("%s(%s)", f.Function, filepath.Base(f.Path)))
	}
	last := r.Frames[len(r.Frames)-1]
	t.Logf("native: %d frames, %s, outermost return address %d bytes above sp: %s",
		len(r.Frames), r.Stop, last.Slot-regs.Rsp, strings.Join(names, " "))
	return r
}

// readStack copies the stack from sp to the end of its mapping, at most
// max bytes.
func readStack(t *testing.T, pid int, sp uint64, max uint64) unwind.Stack {
	t.Helper()
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	end := sp
	for _, line := range strings.Split(string(b), "\n") {
		lo, hi, _ := strings.Cut(strings.Fields(line + " x")[0], "-")
		s, _ := strconv.ParseUint(lo, 16, 64)
		e, _ := strconv.ParseUint(hi, 16, 64)
		if s <= sp && sp < e {
			end = e
		}
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := make([]byte, min(end-sp, max))
	n, err := f.ReadAt(data, int64(sp))
	if err != nil && n == 0 {
		t.Fatal(err)
	}
	return unwind.Stack{Addr: sp, Data: data[:n]}
}

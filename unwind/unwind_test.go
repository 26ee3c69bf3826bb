package unwind

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// chainProgram builds one variant of the test chain and returns its
// capture.
type chainProgram struct {
	name string
	// build compiles into dir and returns the executable.
	build func(t *testing.T, dir string) string
	args  []string
	// want are the innermost frames' names, in order.
	want []string
	// inLib are the functions expected in libchain.so.
	inLib []string
	// via is the expected Via of frames 1..len(want)-1 (ViaCFI if nil).
	via []Via
	// last is the expected name of the outermost frame.
	last string
	// check inspects the walk further.
	check func(t *testing.T, u *Unwinder, c captured, r Result)
}

func exeChain(compiler string, flags ...string) func(t *testing.T, dir string) string {
	return func(t *testing.T, dir string) string {
		if _, err := exec.LookPath(compiler); err != nil {
			t.Skipf("%s not installed", compiler)
		}
		if compiler == "gcc" {
			return gcc(t, dir, "chain", append(flags, "chain.c")...)
		}
		return compile(t, compiler, dir, "chain", append(flags, sourceFor(compiler))...)
	}
}

func sourceFor(compiler string) string {
	if compiler == "g++" {
		return "chain.cpp"
	}
	return "chain.c"
}

// soChain builds libchain.so with libFlags and chain_so against it.
func soChain(libFlags ...string) func(t *testing.T, dir string) string {
	return func(t *testing.T, dir string) string {
		gcc(t, dir, "libchain.so", append([]string{"-shared", "-fPIC"}, append(libFlags, "libchain.c")...)...)
		return gcc(t, dir, "chain_so", "-O2", "-fomit-frame-pointer", "chain_so.c", "-L"+dir, "-lchain", "-Wl,-rpath=$ORIGIN")
	}
}

// compile is gcc() for another compiler.
func compile(t *testing.T, compiler, dir, out string, args ...string) string {
	t.Helper()
	src, _ := filepath.Abs(stacksDir)
	full := []string{"-Wall", "-Werror", "-I", src, "-o", filepath.Join(dir, out)}
	for _, a := range args {
		if strings.HasSuffix(a, ".c") || strings.HasSuffix(a, ".cpp") {
			a = filepath.Join(src, a)
		}
		full = append(full, a)
	}
	if b, err := exec.Command(compiler, full...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", compiler, strings.Join(full, " "), err, b)
	}
	return filepath.Join(dir, out)
}

var chainWant = []string{"d", "c", "b", "a", "main"}

func TestUnwindChain(t *testing.T) {
	needGCC(t)
	noUnwindTables := []string{"-fno-asynchronous-unwind-tables", "-fno-unwind-tables"}
	programs := []chainProgram{
		{name: "gcc -O2 executable", build: exeChain("gcc", "-O2", "-fomit-frame-pointer"), want: chainWant, last: "_start"},
		{name: "gcc -O1 executable", build: exeChain("gcc", "-O1", "-fomit-frame-pointer"), want: chainWant, last: "_start"},
		{name: "gcc -O3 executable", build: exeChain("gcc", "-O3", "-fomit-frame-pointer"), want: chainWant, last: "_start"},
		{name: "clang -O2 executable", build: exeChain("clang", "-O2", "-fomit-frame-pointer"), want: chainWant, last: "_start"},
		{name: "g++ -O2 C++ names", build: exeChain("g++", "-O2", "-fomit-frame-pointer"),
			want: []string{"forensic_test::Chain::d", "forensic_test::Chain::c", "forensic_test::step<7>", "forensic_test::a", "main"}, last: "_start"},
		{name: "thread", build: exeChain("gcc", "-O2", "-fomit-frame-pointer"), args: []string{"thread"},
			want: []string{"d", "c", "b", "a", "thread_main", "start_thread"}, last: "clone3"},
		{name: "shared library", build: soChain("-O2", "-fomit-frame-pointer"), want: chainWant, inLib: []string{"d", "c", "b"}, last: "_start"},
		{name: "library without CFI, with frame pointers", build: soChain(append([]string{"-O2", "-fno-omit-frame-pointer"}, noUnwindTables...)...),
			want: chainWant, inLib: []string{"d", "c", "b"}, last: "_start",
			via: []Via{ViaFramePointer, ViaFramePointer, ViaFramePointer, ViaCFI}},
		{name: "library with only .debug_frame", build: soChain(append([]string{"-O2", "-g", "-fomit-frame-pointer"}, noUnwindTables...)...),
			want: chainWant, inLib: []string{"d", "c", "b"}, last: "_start", check: onlyDebugFrame},
	}
	for _, p := range programs {
		t.Run(p.name, func(t *testing.T) {
			dir := t.TempDir()
			exe := p.build(t, dir)
			c := runCapture(t, dir, exe, p.args, nil)
			u := New(LocalFiles{}, 0)
			r := u.Unwind(c.Capture)
			got := names(r)
			if !r.Complete() || len(got) < len(p.want) || !slices.Equal(got[:len(p.want)], p.want) || got[len(got)-1] != p.last {
				t.Fatalf("walk %v, stop %s (%s); want %v ... %s, complete", got, r.Stop, r.Detail, p.want, p.last)
			}
			checkFrames(t, r, p)
			if p.check != nil {
				p.check(t, u, c, r)
			}
		})
	}
}

// checkFrames checks how each expected frame was found and which file
// holds it.
func checkFrames(t *testing.T, r Result, p chainProgram) {
	t.Helper()
	for i, f := range r.Frames[:len(p.want)] {
		want := ViaCFI
		switch {
		case i == 0:
			want = ViaRegisters
		case p.via != nil && i-1 < len(p.via):
			want = p.via[i-1]
		}
		if f.Via != want {
			t.Errorf("frame %d (%s) found by %s, want %s", i, f.Function, f.Via, want)
		}
		lib := slices.Contains(p.inLib, f.Function)
		if lib != (filepath.Base(f.Path) == "libchain.so") || f.BuildID == "" || f.Offset == 0 {
			t.Errorf("frame %d: %s+%#x in %s (build id %q)", i, f.Function, f.Offset, f.Path, f.BuildID)
		}
		if i > 0 && (f.Slot < r.Frames[i-1].Slot || f.Slot == 0) {
			t.Errorf("frame %d: return address read at %#x, below the callee's %#x", i, f.Slot, r.Frames[i-1].Slot)
		}
	}
}

// onlyDebugFrame checks that libchain.so's frames came from .debug_frame:
// its .eh_frame has no FDE for them.
func onlyDebugFrame(t *testing.T, u *Unwinder, c captured, r Result) {
	m, _ := mappingOf(c.Mappings, r.Frames[0].Addr)
	mod := u.module(m)
	v, _ := mod.vaddr(r.Frames[0].FileOffset)
	if mod.debug == nil {
		t.Fatal("libchain.so has no .debug_frame")
	}
	if mod.eh != nil {
		if _, err := mod.eh.find(v); !errors.Is(err, ErrNoCFI) {
			t.Fatalf(".eh_frame covers d: %v", err)
		}
	}
}

// chainCapture builds the -O2 chain and captures it once for the tests
// that alter the capture.
func chainCapture(t testing.TB) captured {
	t.Helper()
	needGCC(t)
	dir := t.TempDir()
	return runCapture(t, dir, gcc(t, dir, "chain", "-O2", "-fomit-frame-pointer", "chain.c"), nil, nil)
}

// refusing opens no file whose path ends with suffix.
type refusing struct {
	LocalFiles
	suffix string
}

func (r refusing) Open(m Mapping) (File, error) {
	if strings.HasSuffix(m.Path, r.suffix) {
		return nil, fmt.Errorf("%s: %w", m.Path, fs.ErrNotExist)
	}
	return r.LocalFiles.Open(m)
}

func TestUnwindStops(t *testing.T) {
	c := chainCapture(t)
	good := New(LocalFiles{}, 0).Unwind(c.Capture)
	if !good.Complete() || len(good.Frames) < 5 {
		t.Fatalf("reference walk %v: %s", names(good), good.Stop)
	}
	slot := good.Frames[2].Slot // where c's frame holds its return into b
	tests := []struct {
		name     string
		edit     func(c *Capture)
		files    Files
		depth    int
		stop     Stop
		frames   int    // expected number of frames
		lastAddr uint64 // expected address of the last frame, when set
	}{
		{name: "garbage return address", edit: func(c *Capture) { putU64(c, slot, 0x4141414141414141) },
			stop: StopOutsideMappings, frames: 3, lastAddr: 0x4141414141414141},
		{name: "stack address as return address", edit: func(c *Capture) { putU64(c, slot, c.Stack.Addr+64) },
			stop: StopOutsideMappings, frames: 3, lastAddr: c.Stack.Addr + 64},
		{name: "zero return address", edit: func(c *Capture) { putU64(c, slot, 0) }, stop: StopOutsideMappings, frames: 3},
		{name: "stack copy cut short", edit: func(c *Capture) { c.Stack.Data = c.Stack.Data[:slot-c.Stack.Addr] },
			stop: StopStackEnd, frames: 2},
		{name: "file not at hand, no frame pointer", edit: func(c *Capture) { c.Regs.Known &^= 1 << RegRBP },
			files: refusing{suffix: "/chain"}, stop: StopNoFile, frames: 1},
		{name: "no mappings", edit: func(c *Capture) { c.Mappings = nil }, stop: StopOutsideMappings, frames: 1},
		{name: "no stack pointer", edit: func(c *Capture) { c.Regs.Known &^= 1 << RegRSP }, stop: StopBadCFI},
		{name: "depth limit", depth: 3, stop: StopDepth, frames: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cp := c.Capture
			cp.Stack.Data = slices.Clone(c.Stack.Data)
			if tc.edit != nil {
				tc.edit(&cp)
			}
			files := tc.files
			if files == nil {
				files = LocalFiles{}
			}
			r := New(files, tc.depth).Unwind(cp)
			if r.Stop != tc.stop || len(r.Frames) != tc.frames || r.Complete() {
				t.Fatalf("walk %v stopped %s (%s), complete %v; want %s after %d frames", names(r), r.Stop, r.Detail, r.Complete(), tc.stop, tc.frames)
			}
			if tc.lastAddr != 0 && r.Frames[len(r.Frames)-1].Addr != tc.lastAddr {
				t.Errorf("last frame %#x, want %#x", r.Frames[len(r.Frames)-1].Addr, tc.lastAddr)
			}
			for i, f := range r.Frames {
				if i < len(good.Frames) && f.Mapped && f.Addr != good.Frames[i].Addr {
					t.Errorf("frame %d %#x differs from the reference walk's %#x", i, f.Addr, good.Frames[i].Addr)
				}
			}
		})
	}
}

func putU64(c *Capture, addr, v uint64) {
	off := addr - c.Stack.Addr
	for i := 0; i < 8; i++ {
		c.Stack.Data[off+uint64(i)] = byte(v >> (8 * i))
	}
}

// TestUnwindPLT walks from inside a lazy-binding PLT entry of a real
// executable, where the CFA is the .plt FDE's DW_CFA_def_cfa_expression:
// before the entry's push the return address is at rsp, after it at rsp+8.
func TestUnwindPLT(t *testing.T) {
	needGCC(t)
	dir := t.TempDir()
	exe := gcc(t, dir, "chain", "-O2", "-fomit-frame-pointer", "chain.c")
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	plt := f.Section(".plt")
	if plt == nil || plt.Size < 48 {
		t.Skip("no lazy-binding .plt in this toolchain's output")
	}
	const base = 0x555555554000
	m := Mapping{Start: base, End: base + 0x100000, Path: exe}
	// A return address into main, right after its call to a.
	u := New(LocalFiles{}, 0)
	ret := symbolAddr(t, f, "main") + 9
	for _, tc := range []struct {
		inEntry uint64
		slot    uint64
	}{{0, 0}, {6, 0}, {10, 0}, {11, 8}, {15, 8}} {
		const sp = 0x7ffd0000
		stack := Stack{Addr: sp, Data: make([]byte, 64)}
		c := Capture{Stack: stack, Mappings: []Mapping{m}}
		c.Regs.Set(RegRIP, base+plt.Addr+16+tc.inEntry) // the first entry after PLT0
		c.Regs.Set(RegRSP, sp)
		putU64(&c, sp+tc.slot, base+ret)
		r := u.Unwind(c)
		if len(r.Frames) < 2 || r.Frames[1].Addr != base+ret || r.Frames[1].Slot != sp+tc.slot || r.Frames[1].Function != "main" {
			t.Errorf("PLT entry +%d: walk %v (%s: %s), want main's return address read at sp+%d", tc.inEntry, names(r), r.Stop, r.Detail, tc.slot)
		}
	}
}

func symbolAddr(t *testing.T, f *elf.File, name string) uint64 {
	t.Helper()
	syms, _ := f.Symbols()
	for _, s := range syms {
		if s.Name == name {
			return s.Value
		}
	}
	t.Fatalf("no symbol %s", name)
	return 0
}

// TestUnwindConcurrent walks one capture from several goroutines sharing an
// Unwinder (run with -race).
func TestUnwindConcurrent(t *testing.T) {
	c := chainCapture(t)
	u := New(LocalFiles{}, 0)
	want := names(New(LocalFiles{}, 0).Unwind(c.Capture))
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			if got := names(u.Unwind(c.Capture)); !slices.Equal(got, want) {
				errs <- fmt.Errorf("walk %v, want %v", got, want)
				return
			}
			errs <- nil
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

package recorder

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/store"
)

func TestMergeMaps(t *testing.T) {
	m := func(start, end uint64, path string) store.Mapping {
		return store.Mapping{Start: start, End: end, Path: path}
	}
	tests := []struct {
		name          string
		old, cur, out []store.Mapping
	}{
		{"first read", nil, []store.Mapping{m(10, 20, "a")}, []store.Mapping{m(10, 20, "a")}},
		{"an unloaded library stays", []store.Mapping{m(10, 20, "a"), m(30, 40, "gone")}, []store.Mapping{m(10, 20, "a")},
			[]store.Mapping{m(10, 20, "a"), m(30, 40, "gone")}},
		{"a remapped range is the new file's", []store.Mapping{m(10, 20, "a"), m(30, 40, "old")},
			[]store.Mapping{m(35, 45, "new"), m(10, 20, "a")}, []store.Mapping{m(10, 20, "a"), m(35, 45, "new")}},
		{"adjacent ranges do not overlap", []store.Mapping{m(20, 30, "b")}, []store.Mapping{m(10, 20, "a")},
			[]store.Mapping{m(10, 20, "a"), m(20, 30, "b")}},
	}
	for _, tt := range tests {
		if got := mergeMaps(tt.old, tt.cur); !reflect.DeepEqual(got, tt.out) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.out)
		}
	}
}

func TestPythonDirs(t *testing.T) {
	for _, tt := range []struct {
		py   *store.Python
		want []string
	}{
		{nil, nil},
		{&store.Python{Version: "3.11.2", Path: "/usr/bin/python3.11"},
			[]string{"/usr/lib/python3.11/lib-dynload", "/usr/local/lib/python3.11/lib-dynload"}},
		{&store.Python{Version: "3.12", Path: "/opt/py/lib/libpython3.12.so.1.0"},
			[]string{"/opt/py/lib/python3.12/lib-dynload", "/opt/py/local/lib/python3.12/lib-dynload"}},
	} {
		if got := pythonDirs(tt.py); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%+v: %v, want %v", tt.py, got, tt.want)
		}
	}
}

// statOf returns a file's kernel device and inode.
func statOf(t *testing.T, path string) fileKey {
	t.Helper()
	k, ok := statKey(path)
	if !ok {
		t.Fatalf("stat %s", path)
	}
	return k
}

func vmaRecord(pid, tid uint32, at uint64, vmas ...bpf.VMA) []byte {
	var v struct {
		Kind, Flags uint8
		N           uint16
		Pid, Tid    uint32
		Pad         uint32
		TsExit      uint64
	}
	v.Kind, v.N, v.Pid, v.Tid, v.TsExit = bpf.KindVMAs, uint16(len(vmas)), pid, tid, at
	rec := recordOf(&v)
	for _, a := range vmas {
		e := make([]byte, 88)
		le := func(off int, x uint64) {
			for i := 0; i < 8; i++ {
				e[off+i] = byte(x >> (8 * i))
			}
		}
		le(0, a.Start)
		le(8, a.End)
		le(16, a.Offset)
		le(24, a.Ino)
		le(32, uint64(a.Dev))
		copy(e[40:], a.Name)
		rec = append(rec, e...)
	}
	return rec
}

func ustackRecord(pid, tid uint32, at uint64, sp uint64, stack []byte) []byte {
	var h struct {
		Kind, Flags uint8
		Symbol      uint16
		Pid, Tid    uint32
		StackLen    uint32
		TsExit      uint64
		Regs        [9]uint64
	}
	h.Kind, h.Flags, h.Pid, h.Tid, h.StackLen, h.TsExit = bpf.KindUStack, bpf.UStackFailed, pid, tid, uint32(len(stack)), at
	h.Regs[0], h.Regs[1] = 0x400100, sp
	return append(recordOf(&h), stack...)
}

// Under --keep-stack-bytes a capture is stored with its mappings resolved
// to files: by range in the process's /proc maps, by device and inode
// among files another process mapped, by name in a directory of a known
// file; one found nowhere keeps its name. Its Python frames and
// references are stored too, and a corrupt record is counted.
func TestHandlerStoresCaptures(t *testing.T) {
	h, q, _, _ := testHandler(t, nil)
	h.keepBytes = true
	dir := t.TempDir()
	seen, near := filepath.Join(dir, "libseen.so"), filepath.Join(dir, "libnear.so")
	for _, p := range []string{seen, near} {
		if err := os.WriteFile(p, []byte("not elf"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ks, kn := statOf(t, seen), statOf(t, near)
	writeMaps := func(pid int, lines string) {
		d := filepath.Join(h.proc, fmt.Sprint(pid))
		os.MkdirAll(d, 0o755)
		if err := os.WriteFile(filepath.Join(d, "maps"), []byte(lines), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeMaps(200, fmt.Sprintf("7f0000000000-7f0000001000 r-xp 00000000 %02x:%02x %d %s\n", ks.Dev>>20, ks.Dev&0xfffff, ks.Ino, seen))
	writeMaps(100, "00400000-00402000 r-xp 00001000 fd:01 1234 /app/train\n")
	stack := []byte{1, 2, 3, 4}
	h.run(&ring{recs: [][]byte{
		allocCall(t, 200, 4096, 0, -1, 500), // pid 200's maps: libseen.so is known
		allocCall(t, 100, 1<<40, 2, -1, 1000),
		vmaRecord(100, 100, 2000,
			bpf.VMA{Start: 0x400000, End: 0x402000, Offset: 0x1000, Dev: 0xfd00001, Ino: 1234, Name: "train"},
			bpf.VMA{Start: 0x7f1000000000, End: 0x7f1000001000, Dev: ks.Dev, Ino: ks.Ino, Name: "libseen.so"},
			bpf.VMA{Start: 0x7f2000000000, End: 0x7f2000001000, Dev: kn.Dev, Ino: kn.Ino, Name: "libnear.so"},
			bpf.VMA{Start: 0x7f3000000000, End: 0x7f3000001000, Dev: 1, Ino: 2, Name: "libnowhere.so"}),
		ustackRecord(100, 100, 2000, 0x7ffd0000, stack),
		recordOf(&bpf.StackRef{Kind: bpf.KindStackRef, Pid: 100, Tid: 100, TsExit: 3000, RefTid: 100, RefTs: 2000}),
		{bpf.KindUStack, 0, 0}, // cut short
	}})
	b := q.take(nil, 0)
	if len(b.Captures) != 1 || len(b.StackRefs) != 1 || q.stats.DecodeErrors != 1 {
		t.Fatalf("%d captures, %d references, %d decode errors; want 1, 1, 1", len(b.Captures), len(b.StackRefs), q.stats.DecodeErrors)
	}
	c := b.Captures[0]
	if c.PID != 100 || c.Time != 2000 || !c.Failed || c.Regs.SP != 0x7ffd0000 || string(c.Stack) != string(stack) {
		t.Errorf("capture %+v", c)
	}
	paths := []string{"/app/train", seen, near, ""}
	if len(c.Maps) != len(paths) {
		t.Fatalf("capture mappings %+v", c.Maps)
	}
	for i, p := range paths {
		if c.Maps[i].Path != p {
			t.Errorf("mapping %d resolved to %q, want %q", i, c.Maps[i].Path, p)
		}
	}
	if c.Maps[3].Name != "libnowhere.so" || c.Maps[3].Inode != 2 {
		t.Errorf("unresolved mapping %+v: want its name and inode kept", c.Maps[3])
	}
	if r := b.StackRefs[0]; r != (store.StackRef{PID: 100, TID: 100, Time: 3000, RefTID: 100, RefTime: 2000}) {
		t.Errorf("reference %+v", r)
	}
}

// fakeSink records what the probes would be told.
type fakeSink map[uint32][2]uint64

func (f fakeSink) SetPython(pid uint32, minor int, runtime uint64) error {
	f[pid] = [2]uint64{uint64(minor), runtime}
	return nil
}

// The interpreter of a Python process is found among its mappings, told
// to the probes and kept with the process; files that are no interpreter
// are looked at once.
func TestPythonFinderLocates(t *testing.T) {
	const exe = "/usr/bin/python3.11"
	f, err := elf.Open(exe)
	if err != nil {
		t.Skipf("no %s: %v", exe, err)
	}
	var text elf.ProgHeader
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			text = p.ProgHeader
		}
	}
	f.Close()
	page := text.Off &^ 4095
	base := uint64(0x555500000000)
	py := store.Mapping{Start: base + text.Vaddr&^4095, End: base + text.Vaddr + text.Filesz, Offset: page, Path: exe}
	libc := store.Mapping{Start: 0x7f0000000000, End: 0x7f0000100000, Path: "/nonexistent/libc.so.6"}
	sink := fakeSink{}
	pf := newPythonFinder(sink)
	other := newProcState(store.Process{PID: 9, Maps: []store.Mapping{libc}})
	pf.locate(other, 9, "/proc")
	if other.rec.Python != nil || len(sink) != 0 || !pf.notPython["path:"+libc.Path] {
		t.Fatalf("a process without an interpreter: %+v, told %v", other.rec.Python, sink)
	}
	p := newProcState(store.Process{PID: 7, Maps: []store.Mapping{libc, py}})
	pf.locate(p, 7, "/proc")
	got := p.rec.Python
	if got == nil || got.Error != "" || got.Path != exe || got.Runtime == 0 || len(got.Version) < 4 || got.Version[:4] != "3.11" {
		t.Fatalf("located %+v", got)
	}
	if s, ok := sink[7]; !ok || s[0] != 11 || s[1] != got.Runtime {
		t.Errorf("probes told %v, want 3.11 at %#x", sink, got.Runtime)
	}
	delete(sink, 7)
	pf.locate(p, 7, "/proc")
	if len(sink) != 0 {
		t.Error("located again after it was found")
	}
}

// A child forked before the reader located its parent's interpreter is
// told it when the reader handles the fork: the fork tracepoint had
// nothing to copy then. A parent without a usable interpreter gives none.
func TestForkedChildInheritsPython(t *testing.T) {
	for _, tt := range []struct {
		name string
		py   *store.Python
		want bool
	}{
		{"located", &store.Python{Version: "3.11.2", Runtime: 0x5555aa00}, true},
		{"no layout", &store.Python{Version: "3.9.1", Error: "CPython 3.9: no layout"}, false},
		{"not Python", nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sink := fakeSink{}
			h, _, _, _ := testHandler(t, nil)
			h.py = newPythonFinder(sink)
			h.addRoot(store.Process{PID: 100, Python: tt.py})
			h.run(&ring{recs: [][]byte{procRecord(bpf.ProcFork, 101, 100, 2000, 0)}})
			got, told := sink[101]
			if told != tt.want || told && got != [2]uint64{11, 0x5555aa00} {
				t.Errorf("child told %v %v, want told=%v (minor 11, the parent's runtime)", told, got, tt.want)
			}
		})
	}
}

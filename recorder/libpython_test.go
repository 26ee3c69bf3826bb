package recorder

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/store"
)

// lockedSink records what the probes would be told, from any goroutine.
type lockedSink struct {
	mu   sync.Mutex
	told map[uint32][2]uint64
}

func (s *lockedSink) SetPython(pid uint32, minor int, runtime uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.told == nil {
		s.told = map[uint32][2]uint64{}
	}
	s.told[pid] = [2]uint64{uint64(minor), runtime}
	return nil
}

func (s *lockedSink) of(pid uint32) ([2]uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.told[pid]
	return v, ok
}

// writeNeedsELF writes an ELF file whose dynamic section needs lib, and
// nothing else: what linksLibpython reads of an executable.
func writeNeedsELF(t *testing.T, path, lib string) {
	t.Helper()
	dynstr := "\x00" + lib + "\x00"
	shstr := "\x00.dynstr\x00.dynamic\x00.shstrtab\x00"
	var dyn bytes.Buffer
	binary.Write(&dyn, binary.LittleEndian, []elf.Dyn64{{Tag: int64(elf.DT_NEEDED), Val: 1}, {Tag: int64(elf.DT_NULL)}})
	const ehsize, shentsize = 64, 64
	dynOff := uint64(ehsize + len(dynstr))
	shstrOff := dynOff + uint64(dyn.Len())
	shOff := shstrOff + uint64(len(shstr))
	hdr := elf.Header64{Type: uint16(elf.ET_DYN), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Shoff: shOff, Ehsize: ehsize, Shentsize: shentsize, Shnum: 4, Shstrndx: 3}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS], hdr.Ident[elf.EI_DATA], hdr.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	sections := []elf.Section64{{},
		{Name: 1, Type: uint32(elf.SHT_STRTAB), Off: ehsize, Size: uint64(len(dynstr)), Addralign: 1},
		{Name: 9, Type: uint32(elf.SHT_DYNAMIC), Off: dynOff, Size: uint64(dyn.Len()), Link: 1, Addralign: 8, Entsize: 16},
		{Name: 18, Type: uint32(elf.SHT_STRTAB), Off: shstrOff, Size: uint64(len(shstr)), Addralign: 1}}
	var out bytes.Buffer
	binary.Write(&out, binary.LittleEndian, hdr)
	out.WriteString(dynstr)
	out.Write(dyn.Bytes())
	out.WriteString(shstr)
	binary.Write(&out, binary.LittleEndian, sections)
	if err := os.WriteFile(path, out.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	if !linksLibpython(path) {
		t.Fatalf("%s does not read as needing %s", path, lib)
	}
}

// fakeProcess makes pid a process of the handler's /proc that runs exe
// (its root the recorder's) and maps what maps lists.
func fakeProcess(t *testing.T, h *handler, pid uint32, exe, maps string) string {
	t.Helper()
	dir := filepath.Join(h.proc, fmt.Sprint(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(exe, filepath.Join(dir, "exe")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(dir, "root")); err != nil {
		t.Fatal(err)
	}
	replaceMaps(t, dir, maps)
	return dir
}

func replaceMaps(t *testing.T, dir, maps string) {
	t.Helper()
	tmp := filepath.Join(dir, "maps.new")
	if err := os.WriteFile(tmp, []byte(maps), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "maps")); err != nil {
		t.Fatal(err)
	}
}

// within runs f and says whether it returned within d: long enough on
// the busiest machine for a reader that does not wait, far shorter than
// the libpython watches of these tests.
func within(d time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// The exec of a program that needs a shared libpython the loader never
// maps does not hold up the reader: the next record, another process's
// failure, is handled at once, while the watch goes on beside it; when
// reading ends, the watch is stopped and its goroutine gone.
func TestExecOfSharedLibpythonProgramDoesNotBlockReader(t *testing.T) {
	h, q, trig, _ := testHandler(t, nil)
	sink := &lockedSink{}
	h.py = newPythonFinder(sink)
	h.pyWait = time.Hour
	exe := filepath.Join(t.TempDir(), "python3.12")
	writeNeedsELF(t, exe, "libpython3.12.so.1.0")
	fakeProcess(t, h, 300, exe, "555500000000-555500001000 r-xp 00000000 00:00 0 "+exe+"\n")

	exec := bpf.Proc{Kind: bpf.KindProc, What: bpf.ProcExec, Pid: 300, Tid: 300, Ppid: 1, Ts: 1000}
	if !within(20*time.Second, func() { h.handle(recordOf(&exec)) }) {
		t.Fatal("the reader waited at the exec for libpython to be mapped")
	}
	if h.procs[300].watch == nil {
		t.Fatal("no libpython watch started at the exec of a program that needs one")
	}
	src := &ring{recs: [][]byte{allocCall(t, 100, 2<<30, 2, -1, 2000)}}
	if !within(20*time.Second, func() { h.run(src) }) {
		t.Fatal("the reader did not end while a libpython watch was on")
	}
	if b := q.take(nil, 0); len(b.Events) != 1 || b.Events[0].PID != 100 || len(trig) != 1 {
		t.Errorf("%d events, %d sample requests: want the other process's failure and its sample", len(b.Events), len(trig))
	}
	p := h.procs[300]
	if p.watch != nil || p.rec.Python != nil {
		t.Errorf("after reading ended: watch %v, python %+v; want the watch let go, nothing located", p.watch, p.rec.Python)
	}
	if _, told := sink.of(300); told {
		t.Error("the probes were told an interpreter that was never mapped")
	}
}

// libpythonText is the mapping of the executable segment of a shared
// libpython at base, as /proc/PID/maps shows it.
func libpythonText(t *testing.T, lib string, base uint64) string {
	t.Helper()
	f, err := elf.Open(lib)
	if err != nil {
		t.Skipf("no %s: %v", lib, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			start := base + p.Vaddr&^4095
			return fmt.Sprintf("%x-%x r-xp %08x 00:00 0 %s\n", start, base+p.Vaddr+p.Filesz, p.Off&^4095, lib)
		}
	}
	t.Fatalf("%s has no executable segment", lib)
	return ""
}

// The loader maps libpython after the exec: the watch finds it in the
// mappings read after that, tells the probes, and the reader keeps it
// with the process at its next record. A watch stopped first (the
// process executed another program, or exited) tells the probes nothing.
func TestLibpythonWatchLocatesInterpreterMappedAfterExec(t *testing.T) {
	const lib = "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0"
	for _, tt := range []struct {
		name      string
		stopFirst bool
	}{
		{"mapped after the exec", false},
		{"another program before it is mapped", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h, _, _, _ := testHandler(t, nil)
			sink := &lockedSink{}
			h.py = newPythonFinder(sink)
			h.pyWait = time.Hour
			exe := filepath.Join(t.TempDir(), "python3.11")
			writeNeedsELF(t, exe, filepath.Base(lib))
			text := libpythonText(t, lib, 0x7f0000000000)
			own := "555500000000-555500001000 r-xp 00000000 00:00 0 " + exe + "\n"
			dir := fakeProcess(t, h, 300, exe, own)

			exec := bpf.Proc{Kind: bpf.KindProc, What: bpf.ProcExec, Pid: 300, Tid: 300, Ppid: 1, Ts: 1000}
			h.handle(recordOf(&exec))
			p := h.procs[300]
			w := p.watch
			if w == nil {
				t.Fatal("no libpython watch started at the exec")
			}
			if tt.stopFirst {
				p.stopWatch()
			}
			replaceMaps(t, dir, own+text) // the loader maps libpython
			if !within(20*time.Second, func() {
				for {
					if _, py, ended := w.peek(); ended || py != nil {
						return
					}
					time.Sleep(time.Millisecond)
				}
			}) {
				t.Fatal("the watch neither located the interpreter nor ended")
			}
			h.process(300, 2000) // the process's next record
			got, told := sink.of(300)
			if tt.stopFirst {
				if told || p.rec.Python != nil {
					t.Errorf("stopped watch: probes told %v, python %+v; want neither", got, p.rec.Python)
				}
				return
			}
			py := p.rec.Python
			if py == nil || py.Error != "" || py.Path != lib || len(py.Version) < 4 || py.Version[:4] != "3.11" {
				t.Fatalf("kept %+v, want %s's 3.11 interpreter", py, lib)
			}
			if !told || got != [2]uint64{11, py.Runtime} {
				t.Errorf("probes told %v (%v), want 3.11 at %#x", got, told, py.Runtime)
			}
			if p.watch != nil {
				t.Error("the watch was not let go once its result was taken")
			}
			if !hasMapping(p.rec.Maps, lib) {
				t.Errorf("mappings %+v: want the libpython the watch read", p.rec.Maps)
			}
		})
	}
}

func hasMapping(maps []store.Mapping, path string) bool {
	for _, m := range maps {
		if m.Path == path {
			return true
		}
	}
	return false
}

// peek is what the watch holds, without taking it.
func (w *pyWatch) peek() (maps []store.Mapping, py *store.Python, ended bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.maps, w.py, w.done
}

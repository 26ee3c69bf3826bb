package bpf

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/internal/e2eenv"
)

// buildNest compiles testdata/nest.c into a program whose cuMemAlloc_v2
// calls cuMemFree_v2, in this kernel's test directory.
func buildNest(t *testing.T) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	e2eenv.Need(t, err == nil, "no C compiler (cc)")
	exe := filepath.Join(t.TempDir(), "nest")
	if out, err := exec.Command(cc, "-O1", "-DNEST_MAIN", "-o", exe, "testdata/nest.c").CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	return exe
}

// symbolOffsets returns the table ids of the named symbols and their file
// offsets in an ELF file.
func symbolOffsets(t *testing.T, path string, names ...string) ([]int, []uint64) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	var offs []uint64
	for _, name := range names {
		_, id, ok := cuda.Lookup(name)
		if !ok {
			t.Fatalf("%s is not in the symbol table", name)
		}
		for _, s := range syms {
			if s.Name != name {
				continue
			}
			for _, p := range f.Progs {
				if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && s.Value >= p.Vaddr && s.Value < p.Vaddr+p.Memsz {
					ids, offs = append(ids, id), append(offs, s.Value-p.Vaddr+p.Off)
				}
			}
		}
	}
	if len(ids) != len(names) {
		t.Fatalf("found %d of %v in %s", len(ids), names, path)
	}
	return ids, offs
}

// readCalls reads call records until n have come or the wait is over.
func readCalls(t *testing.T, o *Objects, n int, wait time.Duration) []Call {
	t.Helper()
	rd, err := o.NewReader()
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	rd.SetDeadline(time.Now().Add(wait))
	var calls []Call
	for len(calls) < n {
		rec, err := rd.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var c Call
		var p Proc
		if kind, err := Decode(rec.RawSample, &c, &p); err == nil && kind == KindCall {
			calls = append(calls, c)
		}
	}
	return calls
}

// The return probe matches each return to its own entry: a nested call's
// return to the inner frame, and when an inner call never returns
// (longjmp), the outer call's return to the outer frame, flagged
// reordered; nothing is counted unmatched.
func TestNestedAndAbandonedCalls(t *testing.T) {
	e2eenv.NeedRoot(t)
	exe := buildNest(t)
	o, err := Load(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	ids, offs := symbolOffsets(t, exe, "cuMemAlloc_v2", "cuMemFree_v2")
	links, err := o.Attach(exe, ids, offs)
	if err != nil {
		t.Fatal(err)
	}
	defer CloseLinks(links)

	// Sizes: 1 nests a free, 2 nests a free that longjmps out, 3 is
	// plain, 4 fails.
	cmd := exec.Command(exe, "1", "2", "3", "4")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := o.Track(uint32(cmd.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	in.Write([]byte{1})
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("nest: %v", err)
	}
	calls := readCalls(t, o, 5, 5*time.Second)

	type want struct {
		sym    int
		depth  uint8
		result int32
		flags  uint32
		out    uint64
	}
	alloc, free := ids[0], ids[1]
	wants := []want{
		{free, 1, 0, 0, 0},
		{alloc, 0, 0, 0, 0x7001},
		{alloc, 0, 0, CallReordered, 0x7002},
		{alloc, 0, 0, 0, 0x7003},
		{alloc, 0, 2, 0, 0},
	}
	if len(calls) != len(wants) {
		t.Fatalf("got %d call records, want %d: %+v", len(calls), len(wants), calls)
	}
	for i, w := range wants {
		c := calls[i]
		out := binary.LittleEndian.Uint64(c.OutA[:])
		if int(c.Symbol) != w.sym || c.Depth != w.depth || c.Result != w.result || c.Flags != w.flags || (w.result == 0 && out != w.out) ||
			c.Pid != uint32(cmd.Process.Pid) || c.TsEntry == 0 || c.TsExit < c.TsEntry {
			t.Errorf("call %d: %s depth %d result %d flags %#x out %#x, pid %d, %d..%d; want %s depth %d result %d flags %#x out %#x",
				i, cuda.Symbols[c.Symbol].Name, c.Depth, c.Result, c.Flags, out, c.Pid, c.TsEntry, c.TsExit,
				cuda.Symbols[w.sym].Name, w.depth, w.result, w.flags, w.out)
		}
	}
	s, err := o.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.Calls != 5 || s.Unmatched != 0 || s.LostCalls != 0 || s.TooDeep != 0 {
		t.Errorf("counters %+v; want 5 calls, nothing unmatched or lost", s)
	}
}

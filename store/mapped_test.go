package store

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/retrivium/forensic/cuda"
)

// rssKB is the resident size smaps reports for the mapping that starts at
// addr (-1 when there is none).
func rssKB(t *testing.T, addr uintptr) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := fmt.Sprintf("%x-", addr)
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, head) {
			in = true
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			n, err := strconv.Atoi(strings.Fields(line)[1])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return -1
}

// mmapAt maps length bytes at addr (nil: anywhere), or fails the test.
func mmapAt(t *testing.T, fd int, addr unsafe.Pointer, length, prot, flags int) []byte {
	t.Helper()
	p, err := unix.MmapPtr(fd, 0, addr, uintptr(length), prot, flags)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	b := unsafe.Slice((*byte)(p), length)
	t.Cleanup(func() { unix.MunmapPtr(p, uintptr(length)) })
	return b
}

// releaseMapped drops the resident pages of the file's read-only mappings
// and nothing else: not the memory right after the mapping (a past
// version, sized from the file instead of the mapping, zeroed the heap
// there), not a private writable mapping of the same file (its changes
// exist nowhere else). The file's mapping reads the same afterwards.
func TestReleaseMappedTouchesOnlyTheFile(t *testing.T) {
	pg := os.Getpagesize()
	const pages = 32
	content := make([]byte, pages*pg)
	for i := range content {
		content[i] = byte(i*31 + i>>12)
	}
	path := filepath.Join(t.TempDir(), "mapped")
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	id := fileIDOf(st)

	// Anonymous memory for the file mapping and the pages after it; then
	// the file is mapped over the first part, so the rest lies right
	// after it.
	region := mmapAt(t, -1, nil, 2*pages*pg, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	after := region[pages*pg:]
	for i := range after {
		after[i] = 0xa5
	}
	base := uintptr(unsafe.Pointer(&region[0]))
	shared := mmapAt(t, int(f.Fd()), unsafe.Pointer(&region[0]), pages*pg, unix.PROT_READ, unix.MAP_SHARED|unix.MAP_FIXED)
	priv := mmapAt(t, int(f.Fd()), nil, pages*pg, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	copy(priv, bytes.Repeat([]byte{0x5a}, len(priv)))

	var sum, wantSum int
	for i := 0; i < len(shared); i += pg {
		sum += int(shared[i])
		wantSum += int(content[i])
	}
	if sum != wantSum {
		t.Fatal("the file's mapping does not read as the file")
	}
	if got := rssKB(t, base); got < pages*pg/1024 {
		t.Fatalf("file mapping resident %d kB before the release, want all %d", got, pages*pg/1024)
	}
	if n := len(mappingsOf(id)); n != 2 {
		t.Fatalf("%d mappings of the file found, want 2", n)
	}

	releaseMapped(id)

	if got := rssKB(t, base); got != 0 {
		t.Errorf("file mapping still resident: %d kB", got)
	}
	if !bytes.Equal(after, bytes.Repeat([]byte{0xa5}, len(after))) {
		t.Error("memory after the file's mapping changed")
	}
	if !bytes.Equal(priv, bytes.Repeat([]byte{0x5a}, len(priv))) {
		t.Error("a private writable mapping of the file lost its changes")
	}
	if !bytes.Equal(shared, content) {
		t.Error("the file's mapping reads differently after the release")
	}
}

// A pass over the events releases the mapped pages as it goes, so what
// stays resident is about one release interval, not the file; every event
// still reads back.
func TestEventsReleaseMappedPages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.db")
	w, err := Create(path, CreateOptions{}, testRun(), []string{"cuMemAlloc_v2"})
	if err != nil {
		t.Fatal(err)
	}
	w.Reserve = 0
	const commits, per = 40, 10000
	var want uint64
	for c := 0; c < commits; c++ {
		evs := make([]Event, per)
		for i := range evs {
			size := uint64(c*per + i)
			want += size
			evs[i] = Event{PID: 7, TID: 7, Start: int64(c*1e9 + i*1000), End: int64(c*1e9 + i*1000 + 500), Dev: 0, Stack: -1,
				Fields: cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: size, Ptr: 0x7f0000000000 + size<<12}}
		}
		if err := w.Commit(&Batch{Events: evs}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	st, _ := os.Stat(path)

	for _, tc := range []struct {
		every   int
		release bool
	}{{1 << 40, false}, {256 << 10, true}} {
		r, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		r.releaseEvery = tc.every
		var n int
		var got uint64
		if err := r.Events(func(e *Event) error { n++; got += e.Size; return nil }); err != nil {
			t.Fatal(err)
		}
		maps := mappingsOf(r.file)
		if len(maps) != 1 {
			t.Fatalf("%d mappings of run.db", len(maps))
		}
		resident := rssKB(t, maps[0].start)
		r.Close()
		if n != commits*per || got != want {
			t.Fatalf("read %d events summing %d, want %d summing %d", n, got, commits*per, want)
		}
		t.Logf("release every %d bytes: %d kB resident after a pass over a %d kB file", tc.every, resident, st.Size()/1024)
		if tc.release && resident > 1024 {
			t.Errorf("%d kB of run.db resident after a releasing pass", resident)
		}
		if !tc.release && resident < int(st.Size()/1024/2) {
			t.Errorf("only %d kB resident without releases: the check above proves nothing", resident)
		}
	}
}

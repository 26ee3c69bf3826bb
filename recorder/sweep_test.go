package recorder

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/retrivium/forensic/logging"
	"github.com/retrivium/forensic/store"
)

// writeMaps makes a fake /proc/PID/maps mapping each libcuda file key.
func writeMaps(t *testing.T, proc string, pid int, keys ...fileKey) {
	t.Helper()
	dir := filepath.Join(proc, fmt.Sprint(pid))
	os.MkdirAll(dir, 0o755)
	var text string
	for i, k := range keys {
		text += fmt.Sprintf("%x-%x r-xp 00000000 %02x:%02x %d /usr/lib/libcuda.so.%d\n",
			0x7f0000000000+i*0x100000, 0x7f0000010000+i*0x100000, k.Dev>>20, k.Dev&0xfffff, k.Ino, i)
	}
	if err := os.WriteFile(filepath.Join(dir, "maps"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// mapsOnUnmark is a probeTarget whose unmarking of one file lets a
// process map it (a process that maps the file while the sweep runs).
type mapsOnUnmark struct {
	probes
	t    *testing.T
	proc string
	key  fileKey
}

func (p *mapsOnUnmark) UnmarkAttached(dev uint32, ino uint64) error {
	p.probes.UnmarkAttached(dev, ino)
	if (fileKey{dev, ino}) == p.key {
		writeMaps(p.t, p.proc, 300, p.key)
	}
	return nil
}

// The sweep takes the probes off the files no process maps and keeps
// those a process maps, including one mapped while it looked (told by the
// map hook in between); a detached file leaves the segments' libraries.
func TestSweepDetachesUnmapped(t *testing.T) {
	proc := t.TempDir()
	inUse, idle, raced := fileKey{Dev: 8<<20 | 1, Ino: 11}, fileKey{Dev: 8<<20 | 1, Ino: 12}, fileKey{Dev: 8<<20 | 1, Ino: 13}
	writeMaps(t, proc, 100, inUse)
	writeMaps(t, proc, 200) // a process with no libcuda
	p := &mapsOnUnmark{t: t, proc: proc, key: raced}
	a := newAttacher(p)
	a.hooked = true
	q := newQueue()
	for i, k := range []fileKey{inUse, idle, raced} {
		lib := store.Library{Path: fmt.Sprintf("/lib%d/libcuda.so.1", i), Device: uint64(i), Inode: k.Ino}
		a.byFile[[2]uint64{uint64(i), k.Ino}] = &attachedFile{lib: lib, keys: []fileKey{k}}
		q.addLibrary(lib)
	}
	w := &sweeper{att: a, q: q, proc: proc, self: 1, log: logging.Discard()}
	w.sweep()
	if n := len(a.byFile); n != 2 || a.attachedCount() != 2 {
		t.Fatalf("%d files attached after the sweep, want 2", n)
	}
	for _, af := range a.byFile {
		if af.keys[0] == idle {
			t.Errorf("%s kept: no process maps it", af.lib.Path)
		}
	}
	if len(p.unmarked) != 2 || len(p.marked) != 1 || p.marked[0] != raced {
		t.Errorf("unmarked %v, marked again %v: want both unmapped files unmarked, the raced one marked again", p.unmarked, p.marked)
	}
	var b store.Batch
	q.seg.begin(&b)
	if len(b.Libraries) != 2 {
		t.Errorf("a new segment begins with %d libraries, want the 2 still attached", len(b.Libraries))
	}
}

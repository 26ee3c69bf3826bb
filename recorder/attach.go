package recorder

import (
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

// probeTarget is what the attacher needs of the loaded BPF objects.
type probeTarget interface {
	Attach(path string, ids []int, offsets []uint64) ([]link.Link, error)
	MarkAttached(dev uint32, ino uint64) error
	UnmarkAttached(dev uint32, ino uint64) error
}

// attacher puts the probes on libcuda files, once per file, and takes them
// all off at the stop (in flight mode, also those of files no process maps
// any more: sweep.go). The session attaches at start-up, the holder while
// recording, and the stop detaches: mu guards the links and the table.
type attacher struct {
	objs probeTarget
	// hooked: the map hook is in, so files must be marked attached in it.
	hooked bool
	mu     sync.Mutex
	byFile map[[2]uint64]*attachedFile // by the recorder's (dev, inode)
	done   bool                        // detached: attach nothing more
}

// attachedFile is one libcuda file the attacher dealt with: its record,
// its probes' links, and the file as the kernel's mappings name it (zero
// for a --libcuda file).
type attachedFile struct {
	lib   store.Library
	links []link.Link
	keys  []fileKey // every name the map hook was given for it
}

func newAttacher(objs probeTarget) *attacher {
	return &attacher{objs: objs, byFile: map[[2]uint64]*attachedFile{}}
}

// attach puts the probes on every hooked symbol a file exports, unless
// that file (by device and inode) was attached already, and then tells the
// map hook the file needs no hold any more. It returns the file's library
// record and whether this call attached it. A file that could not be
// attached gets a record with Error, once.
//
// The hook learns of the file only once its probes are in: until then,
// every process that maps it is held, and its hold waits in the ring for
// the holder, which handles holds one at a time and so continues such a
// process only after this attach has returned. Marked earlier, a process
// mapping the file during the attach would run unprobed, and its first
// calls would be missing from the record without any loss counted.
func (a *attacher) attach(lf LibFile) (store.Library, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	// Marked even on failure, but only after the attempt: holding every
	// later process at a file that cannot be attached would gain nothing.
	defer a.mark(lf.Key)
	k := [2]uint64{lf.Dev, lf.Ino}
	if af, ok := a.byFile[k]; ok {
		if lf.Key != (fileKey{}) && !slices.Contains(af.keys, lf.Key) {
			af.keys = append(af.keys, lf.Key)
		}
		return af.lib, false
	}
	lib := store.Library{Path: lf.Path, HostPath: lf.HostPath, BuildID: lf.BuildID, Device: lf.Dev, Inode: lf.Ino, Time: now()}
	if a.done {
		lib.Error = "recording stopped while attaching"
		return lib, false
	}
	af := &attachedFile{}
	if lf.Key != (fileKey{}) {
		af.keys = []fileKey{lf.Key}
	}
	a.byFile[k] = af
	links, err := a.probe(&lib, lf.HostPath)
	if err != nil {
		lib.Error = err.Error()
	}
	af.lib, af.links = lib, links
	return lib, true
}

// mark tells the map hook that the file the kernel names key needs no
// hold: its probes are in, or it cannot be attached. Called with mu held,
// after the attach.
func (a *attacher) mark(key fileKey) {
	if a.hooked && key != (fileKey{}) {
		a.objs.MarkAttached(key.Dev, key.Ino)
	}
}

// probe attaches to the symbols a file exports and fills the record's
// attached and absent lists.
func (a *attacher) probe(lib *store.Library, path string) ([]link.Link, error) {
	cov, err := CoverageOf(path)
	if err != nil {
		return nil, err
	}
	lib.Absent, lib.Unknown = cov.Absent, cov.Unknown
	ids := make([]int, 0, len(cov.Attach))
	for id := range cov.Attach {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	byOffset := map[uint64]string{}
	var attach []int
	var offsets []uint64
	for _, id := range ids {
		off := cov.Attach[id]
		name := cuda.Symbols[id].Name
		if other, dup := byOffset[off]; dup {
			// Two names for one function: probing both would record each
			// call twice.
			lib.Absent = append(lib.Absent, name+" (alias of "+other+")")
			continue
		}
		byOffset[off] = name
		attach = append(attach, id)
		offsets = append(offsets, off)
	}
	links, err := a.objs.Attach(path, attach, offsets)
	if err != nil {
		return nil, err
	}
	for _, id := range attach {
		lib.Attached = append(lib.Attached, cuda.Symbols[id].Name)
	}
	return links, nil
}

// symbols reports how many hooked symbols are attached, over all files.
func (a *attacher) symbols() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, af := range a.byFile {
		n += len(af.lib.Attached)
	}
	return n
}

// attachedCount reports how many files the probes are on.
func (a *attacher) attachedCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, af := range a.byFile {
		if af.lib.Error == "" {
			n++
		}
	}
	return n
}

// files lists the paths of the files attached.
func (a *attacher) files() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, af := range a.byFile {
		if af.lib.Error == "" {
			out = append(out, af.lib.Path)
		}
	}
	sort.Strings(out)
	return out
}

// detach removes every probe; nothing is attached afterwards.
func (a *attacher) detach() {
	a.mu.Lock()
	var links []link.Link
	for _, af := range a.byFile {
		links = append(links, af.links...)
		af.links = nil
	}
	a.done = true
	a.mu.Unlock()
	bpf.CloseLinks(links)
}

// describe is the line printed for an attached library.
// logAttach says, at info level (a library that could not be attached:
// warning), what describe says of a library.
func logAttach(log *slog.Logger, lib *store.Library) {
	if lib.Error != "" {
		log.Warn(describe(lib), "library", lib.Path)
		return
	}
	log.Info(describe(lib), "library", lib.Path)
}

func describe(lib *store.Library) string {
	id := lib.BuildID
	if len(id) > 12 {
		id = id[:12]
	}
	if id == "" {
		id = "none"
	}
	s := fmt.Sprintf("attached %s (build id %s, %d symbols)", lib.Path, id, len(lib.Attached))
	if lib.Error != "" {
		s = fmt.Sprintf("could not attach to %s (build id %s): %s", lib.Path, id, lib.Error)
	}
	switch {
	case lib.MappedBy == 0:
		s += ", given with --libcuda"
	case lib.Held > 0:
		s += fmt.Sprintf(", mapped by pid %d (held %v)", lib.MappedBy, time.Duration(lib.Held).Round(time.Microsecond))
	default:
		s += fmt.Sprintf(", mapped by pid %d", lib.MappedBy)
	}
	return s
}

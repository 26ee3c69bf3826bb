package recorder

import (
	"context"
	"debug/elf"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/retrivium/forensic/pystack"
	"github.com/retrivium/forensic/store"
	"github.com/retrivium/forensic/unwind"
)

// libpythonWait bounds how long a program that links a shared libpython
// is watched, from its exec, for the loader to map the library; the
// loader maps a program's libraries within a millisecond or two of the
// exec, long before the interpreter runs any Python code, unless the
// process is held off the CPUs (a busy machine: then its first failure
// is that much later too). The watch ends as soon as the process is gone.
const (
	libpythonWait = 500 * time.Millisecond
	libpythonPoll = 2 * time.Millisecond
)

// pyWatch locates, off the event reader, the interpreter of a program
// that links a shared libpython (python.org's, pyenv's and conda's
// --enable-shared builds). The library is mapped by the loader after the
// exec, so the exec's mappings do not have it yet, and a failure before
// the next read of the mappings (the process's first recorded call)
// would have no Python frames. The reader must not wait for the loader
// itself: while it waits no ring record is read, and a failure storm of
// other processes fills the ring. So a goroutine reads the mappings
// again until the library is there, tells the probes, and leaves what it
// found here for the reader to take with the process's next record.
//
// mu is held from before the probes are told until the result is stored:
// a record the probes made with the interpreter known comes after the
// probes were told, so the reader, which takes the result under mu,
// always finds it (and never marks a process whose frames were read as
// one whose interpreter was not located).
type pyWatch struct {
	stop context.CancelFunc
	mu   sync.Mutex
	ctx  context.Context // done: stopped, or libpythonWait has passed
	done bool            // the goroutine has ended
	maps []store.Mapping // the mappings that showed the interpreter
	py   *store.Python   // nil: not located
}

// watchLibpython starts watching an exec of a program that needs a
// shared libpython, unless Python frames are not read or the interpreter
// was located already. exe is the executed file, as the exec record
// names it: a watch does not tell the probes of another program's
// interpreter. A watch that starts marks the exec (stamped ts) read when
// it ends, not before: a process held at its libcuda mapping until then
// has its interpreter told to the probes by the time it runs on.
func (h *handler) watchLibpython(p *procState, pid uint32, exe fileKey, ts uint64) bool {
	if h.py == nil || p.rec.Python != nil || !linksLibpython(filepath.Join(h.proc, strconv.FormatUint(uint64(pid), 10), "exe")) {
		return false
	}
	w := newPyWatch(h.pyWait)
	p.watch = w
	h.watches.Add(1)
	go func() {
		defer h.watches.Done()
		defer h.markRead(pid, ts) // after the result is stored
		defer w.finish()
		w.run(h.py, h.proc, pid, h.ids, exe)
	}()
	return true
}

// markRead tells the probes that the exec of pid stamped ts has been read.
func (h *handler) markRead(pid uint32, ts uint64) {
	if h.execs != nil {
		h.execs.MarkExecRead(pid, ts)
	}
}

// newPyWatch is a watch that ends after d unless stopped before.
func newPyWatch(d time.Duration) *pyWatch {
	ctx, stop := context.WithTimeout(context.Background(), d)
	return &pyWatch{ctx: ctx, stop: stop}
}

// run reads the process's mappings at once, then every libpythonPoll,
// until they show an interpreter whose memory reads as one, the process
// is gone, or the watch is stopped. The first read is not put off: the
// loader may have mapped the library since the reader read the exec's
// mappings, and every poll waited is time in which an early failure
// goes without its Python frames.
func (w *pyWatch) run(f *pythonFinder, procRoot string, pid uint32, ids *buildIDCache, exe fileKey) {
	tick := time.NewTicker(libpythonPoll)
	defer tick.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-w.ctx.Done():
				return
			case <-tick.C:
			}
		}
		// No held root: the reader may close it meanwhile, and the
		// process's own /proc/PID/root opens as long as it lives.
		maps := readMappings(procRoot, pid, ids, "")
		if maps == nil {
			return // gone
		}
		t, py := interpreterIn(maps, pid, procRoot)
		if py == nil || (py.Error != "" && py.Version != "") {
			// Not mapped yet, or located but its memory did not read as
			// the interpreter's (its _Py_DebugOffsets): the loader had
			// mapped the code but not yet the data over it. Look again.
			continue
		}
		if !runsFile(procRoot, pid, exe) {
			return // another program since, or another process
		}
		w.hand(maps, py, func() {
			if py.Error == "" {
				f.tell(pid, t, py)
			}
		})
		return
	}
}

// hand tells the probes (tell) and stores what the watch found, unless
// the watch was stopped: the process executed another program or exited
// since, or recording ended.
func (w *pyWatch) hand(maps []store.Mapping, py *store.Python, tell func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx.Err() != nil {
		return
	}
	tell()
	w.maps, w.py = maps, py
}

// finish marks the watch ended.
func (w *pyWatch) finish() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
	w.stop()
}

// end stops the watch; once it returns the watch tells the probes
// nothing more.
func (w *pyWatch) end() {
	w.mu.Lock()
	w.stop()
	w.mu.Unlock()
}

// take returns what the watch found, and whether it has ended.
func (w *pyWatch) take() (maps []store.Mapping, py *store.Python, ended bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	maps, py = w.maps, w.py
	w.maps, w.py = nil, nil
	return maps, py, w.done || py != nil
}

// adoptWatch takes into the process's record what its libpython watch
// found, if anything yet; a watch that has ended is let go.
func (h *handler) adoptWatch(p *procState, pid uint32) {
	if p.watch == nil {
		return
	}
	maps, py, ended := p.watch.take()
	if ended {
		p.watch.end()
		p.watch = nil
	}
	if maps != nil {
		p.rec.Maps = mergeMaps(p.rec.Maps, maps)
		h.files.addMaps(maps, "seen", p.opener(h.proc, pid))
		p.dirty = true
	}
	if py != nil && p.rec.Python == nil {
		// The reader may have located it itself meanwhile, at the
		// process's first call: the same interpreter.
		p.rec.Python = py
		p.dirty = true
	}
}

// stopWatch stops the process's libpython watch, if any: its program is
// no longer the one watched.
func (p *procState) stopWatch() {
	if p.watch != nil {
		p.watch.end()
		p.watch = nil
	}
}

// endWatches stops every libpython watch, waits for their goroutines,
// and takes what they found: the reader is done.
func (h *handler) endWatches() {
	for _, p := range h.procs {
		if p.watch != nil {
			p.watch.end()
		}
	}
	h.watches.Wait()
	for pid, p := range h.procs {
		h.adoptWatch(p, pid)
	}
}

// interpreterIn locates a CPython interpreter among mappings named like
// one (libpython3.X.so*), checked against the process's memory but not
// yet told to the probes: nil when none is one.
func interpreterIn(maps []store.Mapping, pid uint32, procRoot string) (*pystack.Target, *store.Python) {
	for _, m := range maps {
		if !pystack.IsInterpreterName(filepath.Base(m.Path)) {
			continue
		}
		t, err := pystack.Locate([]unwind.Mapping{unwindMapping(m)}, unwind.LocalFiles{})
		if errors.Is(err, pystack.ErrNotPython) {
			continue
		}
		return t, checkedInterpreter(t, err, m, pid, procRoot)
	}
	return nil, nil
}

// runsFile says whether process pid runs the file exe (its device and
// inode) now. A zero key (the record named no file) trusts /proc.
func runsFile(procRoot string, pid uint32, exe fileKey) bool {
	if exe.Ino == 0 {
		return true
	}
	k, ok := statKey(filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "exe"))
	return ok && k == exe
}

// linksLibpython reports whether an executable needs a shared libpython.
func linksLibpython(exe string) bool {
	f, err := elf.Open(exe)
	if err != nil {
		return false
	}
	defer f.Close()
	libs, _ := f.ImportedLibraries()
	for _, l := range libs {
		if strings.HasPrefix(l, "libpython") {
			return true
		}
	}
	return false
}

package recorder

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/pystack"
	"github.com/retrivium/forensic/store"
	"github.com/retrivium/forensic/unwind"
)

// pythonSink is where a located CPython process is told to the probes, so
// that its stack captures read its Python frames (*bpf.Objects).
type pythonSink interface {
	SetPython(pid uint32, minor int, runtime uint64) error
}

// pyStatus names the probes' Python walk statuses in run.db.
var pyStatus = map[uint8]string{
	bpf.PyOK: "ok", bpf.PyNoThread: "no-thread", bpf.PyFault: "fault", bpf.PyTruncated: "truncated",
	bpf.PyNoLayout: "no-layout",
}

// onStack handles one record of a stack capture: the capture goes to the
// namer, which unwinds and names it off this goroutine; its raw parts are
// stored only under --keep-stack-bytes. A capture also re-reads its
// process's mappings (captures are rate-limited in the probes), so a
// library loaded since the last read is known when the stack is unwound,
// even if the process exits right after.
func (h *handler) onStack(raw []byte) {
	var err error
	switch raw[0] {
	case bpf.KindUStack:
		var u bpf.UStack
		if err = bpf.DecodeUStack(raw, &u); err == nil {
			h.capture(&u)
		}
	case bpf.KindPyStack:
		var ps bpf.PyStack
		if err = bpf.DecodePyStack(raw, &ps); err == nil {
			st := pyStackOf(&ps)
			h.pyst = &st
			if h.keepBytes {
				h.q.addPyStack(st)
			}
		}
	case bpf.KindPyCode:
		var c bpf.PyCode
		if err = bpf.DecodePyCode(raw, &c); err == nil {
			pc := pyCodeOf(&c)
			h.name(nameJob{code: &pc})
			if h.keepBytes {
				h.q.addPyCode(pc)
			}
		}
	case bpf.KindVMAs:
		var v bpf.VMAs
		if err = bpf.DecodeVMAs(raw, &v); err == nil {
			h.vmas = &v
		}
	case bpf.KindStackRef:
		var r bpf.StackRef
		if err = bpf.DecodeStackRef(raw, &r); err == nil {
			h.q.addStackRef(store.StackRef{PID: r.Pid, TID: r.Tid, Time: int64(r.TsExit), RefTID: r.RefTid,
				RefTime: int64(r.RefTs)})
		}
	}
	if err != nil {
		h.q.decodeError()
	}
}

// capture stores a stack capture with the mappings its process had at the
// call's return.
func (h *handler) capture(u *bpf.UStack) {
	t := int64(u.TsExit)
	p := h.process(u.Pid, t)
	var cur []store.Mapping
	if p.mapsAt != t {
		cur = h.readMaps(p, u.Pid)
		p.mapsAt = t
	}
	v := h.vmas
	h.vmas = nil
	if v == nil || v.Pid != u.Pid || v.Tid != u.Tid || v.TsExit != u.TsExit {
		v = nil
	}
	ps := h.pyst
	h.pyst = nil
	if ps == nil || ps.PID != u.Pid || ps.TID != u.Tid || ps.Time != t {
		ps = nil
	}
	r := u.Regs
	c := store.Capture{PID: u.Pid, TID: u.Tid, Time: t, Symbol: u.Symbol, Maps: h.captureMaps(p, v, cur),
		Failed: u.Flags&bpf.UStackFailed != 0, Fault: u.Flags&bpf.UStackFault != 0,
		Regs: store.Regs{IP: r.IP, SP: r.SP, BP: r.BP, BX: r.BX, R12: r.R12, R13: r.R13, R14: r.R14, R15: r.R15,
			FSBase: r.FSBase},
		Stack: bytes.Clone(u.Stack)}
	if p.rec.Python == nil {
		p.rec.Python = unlocated(c.Maps)
		p.dirty = p.dirty || p.rec.Python != nil
	}
	var interp *store.Python
	if p.rec.Python != nil {
		py := *p.rec.Python
		interp = &py
	}
	h.name(nameJob{capture: &c, interp: interp, pyStack: ps})
	if h.keepBytes {
		h.q.addCapture(c)
	}
}

func pyStackOf(ps *bpf.PyStack) store.PyStack {
	out := store.PyStack{PID: ps.Pid, TID: ps.Tid, Time: int64(ps.TsExit), Status: pyStatus[ps.Status],
		Minor: int(ps.Minor), Thread: ps.Tstate, Frames: []store.PyFrame{}}
	if out.Status == "" {
		out.Status = "status " + strconv.Itoa(int(ps.Status))
	}
	for i := 0; i < int(ps.Nframes) && i < len(ps.Frames); i++ {
		out.Frames = append(out.Frames, store.PyFrame{Code: ps.Frames[i].Code, Instr: ps.Frames[i].Instr,
			Owner: ps.Owner[i] &^ bpf.PyOwnerEntry, Entry: ps.Owner[i]&bpf.PyOwnerEntry != 0})
	}
	return out
}

func pyCodeOf(c *bpf.PyCode) store.PyCode {
	str := func(i int) store.PyString {
		return store.PyString{State: c.State[i], Length: uint64(c.Length[i]), Data: bytes.Clone(c.Data[i])}
	}
	return store.PyCode{PID: c.Pid, Code: c.Code, Time: int64(c.Ts), Minor: int(c.Minor), Type: c.Type,
		FirstLine: c.FirstLine, FirstTraceable: c.FirstTraceable, Filename: str(0), Name: str(1), QualName: str(2),
		LineTable: bytes.Clone(c.LineTable), LineTableSize: uint64(c.LineTableSize), Fault: c.Flags&bpf.PyCodeFault != 0}
}

// captureMaps resolves the mappings the probes listed at a capture to
// files: by address range against the process's mappings as read now
// (when it is still there) or before, else by device and inode among the
// files known, else by name (fileIndex.byDevIno). A file found nowhere
// keeps its name and no path: frames in it are unwound no further. Without
// a list (the address space was busy) the mappings read now stand, else
// those read before.
func (h *handler) captureMaps(p *procState, v *bpf.VMAs, cur []store.Mapping) []store.Mapping {
	if v == nil || v.Flags&bpf.VMAsBusy != 0 {
		if cur != nil {
			return cur
		}
		return append([]store.Mapping(nil), p.rec.Maps...)
	}
	out := make([]store.Mapping, 0, len(v.List))
	via := p.opener(h.proc, v.Pid)
	for _, a := range v.List {
		m := store.Mapping{Start: a.Start, End: a.End, Offset: a.Offset, Dev: a.Dev, Inode: a.Ino}
		if k, ok := sameMapping(a, cur, p.rec.Maps); ok {
			m.Path, m.Host, m.BuildID = k.Path, k.Host, k.BuildID
		} else if f, ok := h.files.byDevIno(fileKey{a.Dev, a.Ino}, a.Name, libraryDirs(p)); ok {
			m.Path, m.Host, m.BuildID = f.Path, f.Open, f.BuildID
		} else if seen, host, ok := p.inRoot(fileKey{a.Dev, a.Ino}, a.Name); ok {
			m.Path, m.Host, m.BuildID = seen, filepath.Join(via.proc, seen), h.ids.get(host)
			h.files.addMaps([]store.Mapping{m}, "root", via)
		} else {
			m.Name = a.Name
		}
		if m.Path != "" && m.BuildID == "" {
			m.Host, m.BuildID = h.readable(m.Path, m.Host, via)
		}
		out = append(out, m)
	}
	return out
}

// readable returns the host path of a file that can still be read (none
// when its own path reads it: a /proc/PID/root path dies with its
// process) and its build id. The file of a process whose root is held
// (another root) is read through that root or not at all: the same path
// on this machine is another file.
func (h *handler) readable(path, host string, via rootOpener) (string, string) {
	if host != "" {
		if id := h.ids.get(via.open(host)); id != "" || via.held != "" {
			return host, id
		}
	}
	return "", h.ids.get(path)
}

// sameMapping finds a listed mapping among those read from /proc: the
// same range and offset of a file of the same name.
func sameMapping(a bpf.VMA, lists ...[]store.Mapping) (store.Mapping, bool) {
	for _, l := range lists {
		for _, m := range l {
			if m.Start == a.Start && m.End == a.End && m.Offset == a.Offset &&
				strings.HasPrefix(filepath.Base(m.Path), a.Name) {
				return m, true
			}
		}
	}
	return store.Mapping{}, false
}

// unlocated says why a process that maps a CPython interpreter (by its
// file's name) has no Python frames when the recorder never located the
// interpreter while the process lived (it exited, or was held off the
// CPUs, before its mappings showed it): nil when no mapping is one.
func unlocated(maps []store.Mapping) *store.Python {
	for _, m := range maps {
		name := m.Name
		if m.Path != "" {
			name = filepath.Base(m.Path)
		}
		if pystack.IsInterpreterName(name) {
			return &store.Python{Path: cmp.Or(m.Path, name),
				Error:     "the interpreter (" + name + ") was not located before the call returned; the process was gone when its mappings were read",
				ErrorKind: store.PyUnlocated}
		}
	}
	return nil
}

// libraryDirs are where a process's libraries that no read of its
// mappings showed are looked for by name, besides the directories of
// every file known: its CPython's lib-dynload and its executable's
// prefix's lib, where a shared libpython lives (pyenv's, python.org's
// --enable-shared builds: bin/python3.X beside lib/libpython3.X.so).
func libraryDirs(p *procState) []string {
	dirs := pythonDirs(p.rec.Python)
	if filepath.IsAbs(p.rec.Exe) {
		dirs = append(dirs, filepath.Join(filepath.Dir(filepath.Dir(p.rec.Exe)), "lib"))
	}
	return dirs
}

// pythonDirs are where a CPython installation keeps its extension
// modules (lib-dynload), for finding a module's file by its name.
func pythonDirs(py *store.Python) []string {
	if py == nil || py.Path == "" {
		return nil
	}
	v := py.Version
	if i := strings.LastIndexByte(v, '.'); strings.Count(v, ".") == 2 && i > 0 {
		v = v[:i]
	}
	prefix := filepath.Dir(filepath.Dir(py.Path))
	return []string{filepath.Join(prefix, "lib", "python"+v, "lib-dynload"),
		filepath.Join(prefix, "local", "lib", "python"+v, "lib-dynload")}
}

// mergeMaps adds newly read mappings to those kept: a new mapping
// replaces the old ones it overlaps (the address range was remapped);
// old ones elsewhere stay, so the frames of a library unloaded since a
// capture still resolve. Sorted by address.
func mergeMaps(old, cur []store.Mapping) []store.Mapping {
	out := append([]store.Mapping(nil), cur...)
	for _, o := range old {
		overlaps := false
		for _, n := range cur {
			if o.Start < n.End && n.Start < o.End {
				overlaps = true
				break
			}
		}
		if !overlaps {
			out = append(out, o)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// unwindMapping converts a stored mapping.
func unwindMapping(m store.Mapping) unwind.Mapping {
	return unwind.Mapping{Start: m.Start, End: m.End, Offset: m.Offset, Path: m.Path, Host: m.Host, BuildID: m.BuildID}
}

// pythonFinder locates the CPython interpreter of recorded processes and
// tells the probes where it is. Each file is checked once per recording
// (keyed by build id, else path): most mapped files are no interpreter.
type pythonFinder struct {
	sink      pythonSink
	notPython map[string]bool
}

func newPythonFinder(sink pythonSink) *pythonFinder {
	return &pythonFinder{sink: sink, notPython: map[string]bool{}}
}

// locate looks for the interpreter among the process's mappings, unless
// it was found (or refused) since its last exec. A process whose
// interpreter is not mapped yet (a shared libpython before the loader
// maps it) is looked at again with its next mappings.
func (f *pythonFinder) locate(p *procState, pid uint32, procRoot string) {
	if f == nil || p.rec.Python != nil {
		return
	}
	seen := map[string]bool{}
	for _, m := range p.rec.Maps {
		key := m.BuildID
		if key == "" {
			key = "path:" + m.Path
		}
		if seen[key] || f.notPython[key] {
			continue
		}
		seen[key] = true
		t, err := pystack.Locate([]unwind.Mapping{unwindMapping(m)}, unwind.LocalFiles{})
		if errors.Is(err, pystack.ErrNotPython) {
			f.notPython[key] = true
			continue
		}
		py := checkedInterpreter(t, err, m, pid, procRoot)
		if py.Error == "" {
			f.tell(pid, t, py)
		}
		p.rec.Python = py
		p.dirty = true
		return
	}
}

// inherit tells the probes that a forked child (no exec) runs its
// parent's interpreter, at the same addresses. The fork tracepoint copies
// the parent's entry itself, but only if the parent's interpreter was
// located before the fork: a process that forks early in its life (a
// launcher, a worker pool) can fork before the reader has handled its
// exec. Telling the probes again is harmless.
func (f *pythonFinder) inherit(pid uint32, py *store.Python) {
	if f == nil || f.sink == nil || py == nil || py.Error != "" {
		return
	}
	var major, minor int
	if _, err := fmt.Sscanf(py.Version, "%d.%d", &major, &minor); err != nil || major != 3 {
		return
	}
	f.sink.SetPython(pid, minor, py.Runtime)
}

// checkedInterpreter checks a located interpreter against the process's
// own debug offsets (3.13+) and says what run.db keeps of it.
func checkedInterpreter(t *pystack.Target, err error, m store.Mapping, pid uint32, procRoot string) *store.Python {
	if err != nil {
		return &store.Python{Path: m.Path, Error: err.Error(), ErrorKind: store.PyUnsupported}
	}
	py := &store.Python{Version: t.Version.String(), Path: t.Path, Runtime: t.Runtime, CodeType: t.CodeType}
	if t.Layout.DebugOffsets {
		mem, err := os.Open(filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "mem"))
		if err == nil {
			err = t.CheckDebugOffsets(mem)
			mem.Close()
		}
		if err != nil {
			py.Error, py.ErrorKind = err.Error(), store.PyUnsupported
		}
	}
	return py
}

// tell tells the probes where process pid's interpreter is; py says why
// they could not be told.
func (f *pythonFinder) tell(pid uint32, t *pystack.Target, py *store.Python) {
	if f.sink == nil {
		return
	}
	if err := f.sink.SetPython(pid, t.Layout.Minor, t.Runtime); err != nil {
		py.Error, py.ErrorKind = err.Error(), store.PyProbe
	}
}

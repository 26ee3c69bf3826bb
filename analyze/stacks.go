package analyze

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/retrivium/forensic/internal/elfnote"
	"github.com/retrivium/forensic/pystack"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
	"github.com/retrivium/forensic/unwind"
)

// CaptureSource is what a Source offers when its recording has stack
// captures (*store.Reader and *store.Set do): the registers, stack bytes,
// mappings and Python frames copied at a call's return, and the
// references from calls at a call site captured before. A Source without it is analyzed with the
// frame-pointer stacks only.
type CaptureSource interface {
	Capture(pid, tid uint32, t int64) (*store.Capture, error)
	PyStack(pid, tid uint32, t int64) (*store.PyStack, error)
	PyCodes(pid uint32) ([]store.PyCode, error)
	StackRefs(fn func(*store.StackRef) error) error
}

var (
	_ CaptureSource = (*store.Reader)(nil)
	_ CaptureSource = (*store.Set)(nil)
)

// callKey names a call: its process, thread and return time.
type callKey struct {
	pid, tid uint32
	t        int64
}

func keyOf(f *failed) callKey { return callKey{f.e.PID, f.e.TID, f.e.End} }

// captures is what the analysis uses of a recording's stack captures.
type captures struct {
	src  CaptureSource
	refs map[callKey]store.StackRef // the references of the calls that get stacks
	unw  *unwind.Unwinder
	// codes holds each process's copied code objects, read once.
	codes map[uint32][]store.PyCode
}

// loadCaptures prepares the captures, with the references of the
// failures that get a stack: the first failure, the first unrecovered
// one and those the failure list shows stacks for.
func (s *state) loadCaptures() error {
	src, ok := s.r.(CaptureSource)
	if !ok {
		return nil
	}
	want := map[callKey]bool{}
	for _, f := range []*failed{s.first, s.unrecovered} {
		if f != nil {
			want[keyOf(f)] = true
		}
	}
	for i, f := range s.failures {
		if i >= s.opts.MaxStacks {
			break
		}
		want[keyOf(f)] = true
	}
	for _, f := range s.headroomCalls() {
		want[keyOf(f)] = true
	}
	c := &captures{src: src, refs: map[callKey]store.StackRef{}, codes: map[uint32][]store.PyCode{},
		unw: unwind.New(runFiles{s: s}, 0)}
	err := src.StackRefs(func(r *store.StackRef) error {
		if k := (callKey{r.PID, r.TID, r.Time}); want[k] {
			c.refs[k] = *r
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.caps = c
	return nil
}

// captureOf returns the capture of a failure's stack: its own, else that
// of its call site (a reference), within the same process's life.
func (s *state) captureOf(f *failed) (*store.Capture, bool, error) {
	if s.caps == nil {
		return nil, false, nil
	}
	k := keyOf(f)
	c, err := s.caps.src.Capture(k.pid, k.tid, k.t)
	if c != nil || err != nil {
		return c, false, err
	}
	r, ok := s.caps.refs[k]
	if !ok {
		return nil, false, nil
	}
	if s.processAt(k.pid, r.RefTime) != s.processAt(k.pid, k.t) {
		return nil, false, nil // the pid was reused: not this process's site
	}
	c, err = s.caps.src.Capture(k.pid, r.RefTID, r.RefTime)
	return c, c != nil, err
}

// processAt returns the record of process pid that was running at t
// (the latest started before t), or nil.
func (s *state) processAt(pid uint32, t int64) *store.Process {
	var best *store.Process
	for i := range s.procList {
		p := &s.procList[i]
		if p.PID == pid && p.Start <= t && (best == nil || p.Start > best.Start) {
			best = p
		}
	}
	if best == nil {
		return s.procs[pid]
	}
	return best
}

// capturedStack unwinds a failure's captured stack and puts its Python
// frames in; nil when it has no capture.
func (s *state) capturedStack(f *failed) *report.Stack {
	c, shared, err := s.captureOf(f)
	if err != nil {
		return &report.Stack{Frames: []report.Frame{}, Partial: true, Method: "unwound", Note: "stack capture unreadable: " + err.Error()}
	}
	if c == nil {
		return nil
	}
	res := s.caps.unw.Unwind(unwindCapture(c))
	st := &report.Stack{Method: "unwound", Stop: res.Stop.String(), Partial: !res.Complete()}
	native := nativeFrames(res, c.Maps)
	var notes []string
	if !res.Complete() {
		notes = append(notes, fmt.Sprintf("the walk stopped after %d frames: %s (%s)", len(res.Frames), res.Stop.Text(), res.Detail))
	}
	py, pyNote := s.pythonFrames(f.e.PID, c)
	st.Python = pyNote
	st.Frames = mergePython(native, py)
	if pyNote != "" && pyNote != "ok" {
		notes = append(notes, pythonText(pyNote))
	}
	if shared {
		t := c.Time
		st.SharedFrom = &t
		notes = append(notes, fmt.Sprintf("captured at an earlier call from the same call site (thread %d, %s)", c.TID, s.rel(c.Time)))
	}
	st.Note = strings.Join(notes, "; ")
	return st
}

// unwindCapture converts a stored capture into the unwinder's input.
func unwindCapture(c *store.Capture) unwind.Capture {
	var regs unwind.Registers
	r := c.Regs
	for _, v := range []struct {
		reg int
		val uint64
	}{{unwind.RegRIP, r.IP}, {unwind.RegRSP, r.SP}, {unwind.RegRBP, r.BP}, {unwind.RegRBX, r.BX},
		{unwind.RegR12, r.R12}, {unwind.RegR13, r.R13}, {unwind.RegR14, r.R14}, {unwind.RegR15, r.R15}} {
		regs.Set(v.reg, v.val)
	}
	maps := make([]unwind.Mapping, 0, len(c.Maps))
	for _, m := range c.Maps {
		maps = append(maps, unwind.Mapping{Start: m.Start, End: m.End, Offset: m.Offset, Path: m.Path, Host: m.Host, BuildID: m.BuildID})
	}
	return unwind.Capture{Regs: regs, Stack: unwind.Stack{Addr: r.SP, Data: c.Stack}, Mappings: maps}
}

// nativeFrames converts a walk's frames.
func nativeFrames(res unwind.Result, maps []store.Mapping) []report.Frame {
	out := make([]report.Frame, 0, len(res.Frames))
	for _, fr := range res.Frames {
		rf := report.Frame{Address: fr.Addr, Language: report.LangNative, Via: fr.Via.String(),
			Function: fr.Function, Offset: fr.Offset, Library: filepath.Base(fr.Path)}
		if fr.Path == "" {
			rf.Library = ""
			for _, m := range maps {
				if m.Start <= fr.Addr && fr.Addr < m.End && m.Name != "" {
					rf.Library = m.Name
				}
			}
		}
		if rf.Function == "" {
			rf.Offset = 0
		}
		out = append(out, rf)
	}
	return out
}

// evalLoop names the native function that runs a run of Python frames.
const evalLoop = "_PyEval_EvalFrameDefault"

// mergePython puts the Python frames in the native stack: the i-th run of
// Python frames (innermost first, each ending at an entry frame) replaces
// the i-th evaluation loop frame. Runs beyond the evaluation loop frames
// the native walk reached (it stopped early) follow its last frame.
func mergePython(native []report.Frame, py []pystack.Frame) []report.Frame {
	var runs [][]report.Frame
	var cur []report.Frame
	for _, f := range py {
		cur = append(cur, report.Frame{Function: f.Function, File: f.File, Line: f.Line, Language: report.LangPython})
		if f.Entry {
			runs = append(runs, cur)
			cur = nil
		}
	}
	if cur != nil {
		runs = append(runs, cur) // the outermost run was cut short
	}
	out := make([]report.Frame, 0, len(native)+len(py))
	for _, f := range native {
		if f.Function == evalLoop && len(runs) > 0 {
			out = append(out, runs[0]...)
			runs = runs[1:]
			continue
		}
		out = append(out, f)
	}
	for _, r := range runs {
		out = append(out, r...)
	}
	return out
}

// pythonFrames resolves the Python frames captured with a stack, and says
// what became of them ("" for a process that is no CPython).
func (s *state) pythonFrames(pid uint32, c *store.Capture) ([]pystack.Frame, string) {
	proc := s.processAt(pid, c.Time)
	if proc == nil || proc.Python == nil {
		return nil, ""
	}
	py := proc.Python
	if py.Error != "" {
		return nil, "not read: " + py.Error
	}
	ps, err := s.caps.src.PyStack(pid, c.TID, c.Time)
	if err != nil {
		return nil, "unreadable: " + err.Error()
	}
	if ps == nil {
		return nil, "not-captured"
	}
	t, err := pystack.NewTarget(py.Version, py.Path, py.Runtime, py.CodeType)
	if err != nil {
		return nil, "not read: " + err.Error()
	}
	codes, err := s.pyCodes(pid)
	if err != nil {
		return nil, "unreadable: " + err.Error()
	}
	raw := &pystack.Stack{Thread: ps.Thread, Truncated: ps.Status == "truncated"}
	need := map[uint64]*pystack.RawCode{}
	for _, f := range ps.Frames {
		raw.Frames = append(raw.Frames, pystack.RawFrame{Code: f.Code, Instr: f.Instr, Owner: f.Owner, Entry: f.Entry})
		need[f.Code] = codeAt(codes, f.Code, c.Time, t.CodeType)
	}
	frames, err := t.Resolve(raw, need)
	if err != nil {
		return frames, "unreadable: " + err.Error()
	}
	return frames, ps.Status
}

// pyCodes returns the code objects copied for a process, read once.
func (s *state) pyCodes(pid uint32) ([]store.PyCode, error) {
	if cs, ok := s.caps.codes[pid]; ok {
		return cs, nil
	}
	cs, err := s.caps.src.PyCodes(pid)
	if err == nil {
		s.caps.codes[pid] = cs
	}
	return cs, err
}

// codeAt returns the copy of a code object that stood at time t: the
// latest copied at or before it. A code object no capture copied gets an
// empty one, which names the frame as unknown.
func codeAt(codes []store.PyCode, addr uint64, t int64, codeType uint64) *pystack.RawCode {
	var best *store.PyCode
	for i := range codes {
		c := &codes[i]
		if c.Code == addr && c.Time <= t && (best == nil || c.Time > best.Time) {
			best = c
		}
	}
	if best == nil {
		return &pystack.RawCode{Addr: addr, Type: codeType}
	}
	str := func(p store.PyString) pystack.RawString {
		return pystack.RawString{State: p.State, Length: p.Length, Data: p.Data}
	}
	return &pystack.RawCode{Addr: addr, Type: best.Type, FirstLine: best.FirstLine, FirstTraceable: best.FirstTraceable,
		Filename: str(best.Filename), Name: str(best.Name), QualName: str(best.QualName),
		LineTable: best.LineTable, LineTableLen: best.LineTableSize}
}

// pythonText says in words what became of a process's Python frames.
func pythonText(status string) string {
	switch status {
	case "truncated":
		return "the outermost Python frames were not read (more than the probe reads)"
	case "no-thread":
		return "no Python frames: the interpreter had no thread state for this thread"
	case "fault":
		return "Python frames incomplete: a read of the interpreter's memory failed"
	case "not-captured":
		return "no Python frames: the interpreter was not located yet when the call returned"
	}
	return "Python frames " + status
}

// runFiles opens the files a walk needs: the mapping's own path (through
// the process's root when recorded), else another file the run saw with
// the same build id; each checked by build id. Debug files come from
// /usr/lib/debug by build id.
type runFiles struct{ s *state }

// Open implements unwind.Files.
func (r runFiles) Open(m unwind.Mapping) (unwind.File, error) {
	cands := []string{m.Host, m.Path}
	if m.BuildID != "" {
		for _, f := range r.s.files() {
			if unwind.SameBuildID(f.BuildID, m.BuildID) {
				cands = append(cands, f.Open, f.Path)
			}
		}
	}
	for _, p := range cands {
		if p == "" || !filepath.IsAbs(p) {
			continue
		}
		if m.BuildID != "" && !unwind.SameBuildID(elfnote.BuildID(p), m.BuildID) {
			continue
		}
		if f, err := os.Open(p); err == nil {
			return f, nil
		}
	}
	if m.Path == "" {
		return nil, fmt.Errorf("mapping %#x-%#x: its file was not found by the recorder: %w", m.Start, m.End, fs.ErrNotExist)
	}
	if m.BuildID != "" && readable(m.Path) {
		return nil, fmt.Errorf("%s: %w", m.Path, unwind.ErrBuildID)
	}
	return nil, fmt.Errorf("%s: %w", m.Path, fs.ErrNotExist)
}

// OpenDebug implements unwind.Files.
func (r runFiles) OpenDebug(buildID string) (unwind.File, error) {
	return unwind.LocalFiles{}.OpenDebug(buildID)
}

package analyze

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/retrivium/forensic/internal/elfnote"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/stackname"
	"github.com/retrivium/forensic/store"
	"github.com/retrivium/forensic/unwind"
)

// CaptureSource is what a Source offers when its recording has stack
// captures (*store.Reader and *store.Set do): the stacks the recorder
// unwound and named (schema 3), and, in files that have them (written
// before stacks were named by the recorder, or with --keep-stack-bytes),
// the registers, stack bytes, mappings and Python frames copied at a
// call's return; and the references from calls at a call site captured
// before. A Source without it is analyzed with the frame-pointer stacks
// only.
type CaptureSource interface {
	NamedStack(pid, tid uint32, t int64) (*store.NamedStack, error)
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
	for k, ls := range s.splitsOrNil() {
		for _, l := range ls {
			want[callKey{k.pid, l.tid, l.at}] = true // the budget's call sites
		}
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

// namedOf returns the named stack of a failure: its own, else that of
// its call site (a reference), within the same process's life.
func (s *state) namedOf(f *failed) (*store.NamedStack, bool, error) {
	if s.caps == nil {
		return nil, false, nil
	}
	k := keyOf(f)
	n, err := s.stackAt(k.pid, k.tid, k.t)
	if n != nil || err != nil {
		return n, false, err
	}
	r, ok := s.caps.refs[k]
	if !ok {
		return nil, false, nil
	}
	if s.processAt(k.pid, r.RefTime) != s.processAt(k.pid, k.t) {
		return nil, false, nil // the pid was reused: not this process's site
	}
	n, err = s.stackAt(k.pid, r.RefTID, r.RefTime)
	return n, n != nil, err
}

// stackAt returns the named stack of a capture: as the recorder named it,
// else (a file written before stacks were named by the recorder) named
// now from its raw capture and the files at hand; nil when there is no
// capture.
func (s *state) stackAt(pid, tid uint32, t int64) (*store.NamedStack, error) {
	n, err := s.caps.src.NamedStack(pid, tid, t)
	if n != nil || err != nil {
		return n, err
	}
	c, err := s.caps.src.Capture(pid, tid, t)
	if c == nil || err != nil {
		return nil, err
	}
	named := stackname.Name(s.caps.unw, c, s.pythonOf(pid, c))
	return &named, nil
}

// pythonOf gathers what naming a raw capture's Python frames takes.
func (s *state) pythonOf(pid uint32, c *store.Capture) stackname.Python {
	proc := s.processAt(pid, c.Time)
	if proc == nil || proc.Python == nil {
		return stackname.Python{}
	}
	py := stackname.Python{Interp: proc.Python}
	if proc.Python.Error != "" {
		return py
	}
	py.Stack, py.Err = s.caps.src.PyStack(pid, c.TID, c.Time)
	if py.Err == nil && py.Stack != nil {
		py.Codes, py.Err = s.pyCodes(pid)
	}
	return py
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

// capturedStack gives a failure the stack of its capture, with its
// Python frames in; nil when it has no capture.
func (s *state) capturedStack(f *failed) *report.Stack {
	n, shared, err := s.namedOf(f)
	if err != nil {
		return &report.Stack{Frames: []report.Frame{}, Partial: true, Method: "unwound", Note: "stack capture unreadable: " + err.Error()}
	}
	if n == nil {
		return nil
	}
	stop, _ := unwind.ParseStop(n.Stop)
	st := &report.Stack{Method: "unwound", Stop: n.Stop, Partial: stop != unwind.StopOutermost}
	var notes []string
	if st.Partial {
		notes = append(notes, fmt.Sprintf("the walk stopped after %d frames: %s (%s)", len(n.Frames), stop.Text(), n.Detail))
	}
	st.Python = n.Python
	if proc := s.processAt(n.PID, n.Time); proc != nil && n.Python != "" {
		st.PythonVersion, st.PythonBuild, st.PythonFile = pythonBuild(proc.Python)
	}
	st.Frames = mergePython(nativeFrames(n.Frames), n.PyFrames)
	if n.Python != "" && n.Python != "ok" {
		notes = append(notes, pythonText(n.Python))
	}
	if shared {
		t := n.Time
		st.SharedFrom = &t
		notes = append(notes, fmt.Sprintf("captured at an earlier call from the same call site (thread %d, %s)", n.TID, s.rel(n.Time)))
	}
	st.Note = strings.Join(notes, "; ")
	return st
}

// pythonBuild says which CPython a process ran, as the recorder located
// it: its version, "static" (in the executable) or "shared" (a
// libpython3.X.so), and its file as the process named it.
func pythonBuild(py *store.Python) (version, build, file string) {
	if py == nil || py.Version == "" {
		return "", "", ""
	}
	build = "static"
	if strings.HasPrefix(filepath.Base(py.Path), "libpython") {
		build = "shared"
	}
	return py.Version, build, py.Path
}

// nativeFrames converts a named stack's native frames.
func nativeFrames(frames []store.NamedFrame) []report.Frame {
	out := make([]report.Frame, 0, len(frames))
	for _, fr := range frames {
		rf := report.Frame{Address: fr.Addr, Language: report.LangNative, Via: fr.Via,
			Function: fr.Function, Offset: fr.Offset, Library: fr.Name}
		if fr.Path != "" {
			rf.Library = filepath.Base(fr.Path)
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
func mergePython(native []report.Frame, py []store.NamedPyFrame) []report.Frame {
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
	case "no-capture":
		return "no Python frames: the call's stack was not captured"
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

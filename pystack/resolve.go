package pystack

import "fmt"

// Frame is one Python frame, innermost first.
type Frame struct {
	// Function is the qualified name (3.11+: "Worker.run"), or the plain
	// name on 3.10, which has no co_qualname.
	Function string
	File     string
	// Line is the line being executed, 0 when unknown (no line for the
	// instruction, or a line table cut short).
	Line      int
	FirstLine int // the line the function starts at
	// Entry marks the first Python frame run by one C call of the
	// evaluation loop: each maps to one _PyEval_EvalFrameDefault frame of
	// the native stack (on 3.10 every frame does).
	Entry bool
	Code  uint64 // the code object
}

// Resolve turns captured frames into named frames, using the code objects
// copied for them (codes, by address). Frames the interpreter itself would
// not show are left out: 3.12+'s C-stack shim frames (which mark an entry
// instead), frames that have not started (incomplete), and, when the
// target knows PyCode_Type, frames whose executable is no code object.
// A frame whose code object is missing from codes is an error.
func (t *Target) Resolve(st *Stack, codes map[uint64]*RawCode) ([]Frame, error) {
	l := t.Layout
	var out []Frame
	for i, rf := range st.Frames {
		if l.FrameOwner >= 0 && rf.Owner == ownedByCStack {
			if n := len(out); n > 0 {
				out[n-1].Entry = true
			}
			continue
		}
		c := codes[rf.Code]
		if c == nil {
			return out, fmt.Errorf("frame %d: code object %#x was not copied", i, rf.Code)
		}
		if t.CodeType != 0 && c.Type != t.CodeType {
			continue
		}
		addr := int64(int32(rf.Instr)) * 2 // 3.10: f_lasti counts code units
		if l.Lines != lines310 {
			addr = int64(rf.Instr) - int64(c.Addr) - l.CodeAdaptive
			if rf.Owner != ownedByGenerator && addr < int64(c.FirstTraceable)*2 {
				continue // not started: _PyFrame_IsIncomplete
			}
		}
		f := Frame{
			Function:  c.Name.String(),
			File:      c.Filename.String(),
			FirstLine: int(c.FirstLine),
			Line:      lineAt(l.Lines, c.LineTable, c.FirstLine, addr),
			Entry:     rf.Entry || l.Lines == lines310,
			Code:      rf.Code,
		}
		if l.CodeQualname >= 0 {
			f.Function = c.QualName.String()
		}
		out = append(out, f)
	}
	return out, nil
}

// Walk captures, copies and resolves the Python stack of one thread of a
// live process: Capture, ReadCode once per code object, Resolve. For
// layouts that have them, the process's own debug offsets are checked
// first.
func (t *Target) Walk(mem Memory, key ThreadKey) ([]Frame, *Stack, error) {
	if err := t.CheckDebugOffsets(mem); err != nil {
		return nil, nil, err
	}
	st, err := t.Capture(mem, key, 0)
	if err != nil {
		return nil, nil, err
	}
	codes := map[uint64]*RawCode{}
	for _, rf := range st.Frames {
		if codes[rf.Code] != nil || (t.Layout.FrameOwner >= 0 && rf.Owner == ownedByCStack) {
			continue
		}
		c, n, err := t.ReadCode(mem, rf.Code)
		st.Reads += n
		if err != nil {
			return nil, st, fmt.Errorf("code object %#x: %w", rf.Code, err)
		}
		codes[rf.Code] = c
	}
	frames, err := t.Resolve(st, codes)
	return frames, st, err
}

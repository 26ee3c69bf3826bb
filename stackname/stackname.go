// Package stackname turns a stack capture (the registers, stack bytes and
// Python frames a probe copied at a call's return) into the named stack a
// report shows: native frames unwound from the files' call-frame
// information and named from their symbol tables, and the Python frames
// named from the code objects copied with them.
//
// The recorder runs it soon after each capture, while the process's files
// are there, and stores only the result (store.NamedStack): no register
// and no byte of the process's memory leaves the recording machine, and a
// run.db gives the same stacks on any machine. analyze runs it on the raw
// captures of files recorded before stacks were named by the recorder.
package stackname

import (
	"github.com/retrivium/forensic/pystack"
	"github.com/retrivium/forensic/store"
	"github.com/retrivium/forensic/unwind"
)

// Python is what naming a capture's Python frames takes. A zero Python
// (no interpreter) names none.
type Python struct {
	// Interp is the process's interpreter as the recorder located it (or
	// refused it); nil for a process that is no CPython.
	Interp *store.Python
	// Stack is the Python frames read with the capture; nil when the
	// probe read none.
	Stack *store.PyStack
	// Codes are the process's code objects copied up to the capture.
	Codes []store.PyCode
	// Err: reading Stack or Codes failed.
	Err error
}

// Name unwinds a capture and names its frames.
func Name(u *unwind.Unwinder, c *store.Capture, py Python) store.NamedStack {
	res := u.Unwind(Input(c))
	n := store.NamedStack{PID: c.PID, TID: c.TID, Time: c.Time, Stop: res.Stop.String(), Detail: res.Detail,
		Frames: make([]store.NamedFrame, 0, len(res.Frames))}
	for _, fr := range res.Frames {
		nf := store.NamedFrame{Addr: fr.Addr, Via: fr.Via.String(), Path: fr.Path, BuildID: fr.BuildID,
			Function: fr.Function, Offset: fr.Offset}
		if fr.Path == "" {
			nf.BuildID = ""
			for _, m := range c.Maps {
				if m.Start <= fr.Addr && fr.Addr < m.End && m.Name != "" {
					nf.Name = m.Name
				}
			}
		}
		if nf.Function == "" {
			nf.Offset = 0
		}
		n.Frames = append(n.Frames, nf)
	}
	frames, status, code := pythonFrames(c, py)
	n.Python, n.PythonStatus = status, code
	for _, f := range frames {
		n.PyFrames = append(n.PyFrames, store.NamedPyFrame{Function: f.Function, File: f.File, Line: f.Line, Entry: f.Entry})
	}
	return n
}

// Input converts a stored capture into the unwinder's input.
func Input(c *store.Capture) unwind.Capture {
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
		maps = append(maps, unwind.Mapping{Start: m.Start, End: m.End, Offset: m.Offset, Path: m.Path, Host: m.Host,
			BuildID: m.BuildID})
	}
	return unwind.Capture{Regs: regs, Stack: unwind.Stack{Addr: r.SP, Data: c.Stack}, Mappings: maps}
}

// pythonFrames resolves the Python frames captured with a stack, and says
// what became of them, in words and as a status ("" for a process that
// is no CPython).
func pythonFrames(c *store.Capture, py Python) ([]pystack.Frame, string, store.PyStatus) {
	if py.Interp == nil {
		return nil, "", ""
	}
	if py.Interp.Error != "" {
		code := store.PyNotRead
		if py.Interp.ErrorKind == store.PyUnlocated {
			code = store.PyNotLocated
		}
		return nil, "not read: " + py.Interp.Error, code
	}
	if py.Err != nil {
		return nil, "unreadable: " + py.Err.Error(), store.PyUnreadable
	}
	if py.Stack == nil {
		return nil, string(store.PyNotCaptured), store.PyNotCaptured
	}
	ip := py.Interp
	t, err := pystack.NewTarget(ip.Version, ip.Path, ip.Runtime, ip.CodeType)
	if err != nil {
		return nil, "not read: " + err.Error(), store.PyNotRead
	}
	ps := py.Stack
	raw := &pystack.Stack{Thread: ps.Thread, Truncated: ps.Status == "truncated"}
	need := map[uint64]*pystack.RawCode{}
	for _, f := range ps.Frames {
		raw.Frames = append(raw.Frames, pystack.RawFrame{Code: f.Code, Instr: f.Instr, Owner: f.Owner, Entry: f.Entry})
		need[f.Code] = CodeAt(py.Codes, f.Code, c.Time, t.CodeType)
	}
	frames, err := t.Resolve(raw, need)
	if err != nil {
		return frames, "unreadable: " + err.Error(), store.PyUnreadable
	}
	return frames, ps.Status, store.PyStatus(ps.Status)
}

// CodeAt returns the copy of a code object that stood at time t: the
// latest copied at or before it. A code object no capture copied gets an
// empty one, which names the frame as unknown.
func CodeAt(codes []store.PyCode, addr uint64, t int64, codeType uint64) *pystack.RawCode {
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

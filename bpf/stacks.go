package bpf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/retrivium/forensic/pystack"
)

// The stack capture's records (stacks.h), under readable Go names.

// Kinds of the stack capture's records, each after the call record of
// the call it belongs to.
const (
	KindUStack   = uint8(forensicFxKindFX_KIND_USTACK)
	KindPyStack  = uint8(forensicFxKindFX_KIND_PYSTACK)
	KindPyCode   = uint8(forensicFxKindFX_KIND_PYCODE)
	KindStackRef = uint8(forensicFxKindFX_KIND_STACK_REF)
	KindVMAs     = uint8(forensicFxKindFX_KIND_VMAS)
)

// Flags of a capture's mapping list (enum fx_vmas_flags).
const (
	// VMAsCut: the process had more executable mappings than were listed.
	VMAsCut = uint8(forensicFxVmasFlagsFX_VMAS_CUT)
	// VMAsBusy: its address space was being changed: none are listed.
	VMAsBusy = uint8(forensicFxVmasFlagsFX_VMAS_BUSY)
)

// VMA is one executable file mapping of a process at a capture.
type VMA struct {
	Start, End uint64 // [Start, End)
	Offset     uint64 // file offset mapped at Start
	Ino        uint64
	Dev        uint32 // the kernel's dev_t (major << 20 | minor)
	Name       string // the file's name (last component), possibly cut
}

// VMAs are a process's executable file mappings at a capture.
type VMAs struct {
	Flags  uint8
	Pid    uint32
	Tid    uint32
	TsExit uint64
	List   []VMA
}

// Flags of a stack capture (enum fx_ustack_flags).
const (
	// UStackFault: the copy stopped at an unreadable page before the
	// limit, the top of the thread's stack.
	UStackFault = uint8(forensicFxUstackFlagsFX_USTACK_FAULT)
	// UStackFailed: the capture is of a failed call (else of an
	// allocation under --stacks).
	UStackFailed = uint8(forensicFxUstackFlagsFX_USTACK_FAILED)
)

// What a Python walk found (enum fx_py_status).
const (
	PyOK        = uint8(forensicFxPyStatusFX_PY_OK)
	PyNoThread  = uint8(forensicFxPyStatusFX_PY_NO_THREAD)
	PyFault     = uint8(forensicFxPyStatusFX_PY_FAULT)
	PyTruncated = uint8(forensicFxPyStatusFX_PY_TRUNCATED)
	PyNoLayout  = uint8(forensicFxPyStatusFX_PY_NO_LAYOUT)
)

// PyCodeFault (enum fx_pycode_flags): a string or the line table of a
// code object could not be read.
const PyCodeFault = uint8(forensicFxPycodeFlagsFX_PYCODE_FAULT)

// Limits of a capture (enum fx_const).
const (
	// UStackMax is the most stack bytes a capture copies.
	UStackMax = int(forensicFxConstFX_USTACK_MAX)
	// PyFrames is the most Python frames a capture reads.
	PyFrames     = int(forensicFxConstFX_PY_FRAMES)
	pyLayoutRows = int(forensicFxConstFX_PY_LAYOUTS)
)

// PyOwnerEntry is the bit of a Python frame's owner byte that carries
// 3.11's is_entry.
const PyOwnerEntry = 0x80

// StackRef is a call whose call site was captured before: its stack is
// the capture of thread RefTid at RefTs.
type StackRef = forensicFxStackRef

// PyStack is the failing thread's Python frames at a captured call.
type PyStack = forensicFxPystack

// Regs are the registers a capture keeps.
type Regs struct {
	IP, SP, BP, BX, R12, R13, R14, R15, FSBase uint64
}

// UStack is a stack capture: the registers at the call's return and the
// bytes of the user stack from Regs.SP up.
type UStack struct {
	Flags  uint8
	Symbol uint16
	Pid    uint32
	Tid    uint32
	TsExit uint64
	Regs   Regs
	// Stack aliases the ring record: copy it to keep it.
	Stack []byte
}

// PyCode is a code object as a capture copied it. The byte slices alias
// the ring record: copy them to keep them.
type PyCode struct {
	Flags          uint8
	Minor          uint8
	Pid            uint32
	Code           uint64
	Ts             uint64
	Type           uint64
	FirstLine      int32
	FirstTraceable int32
	// State and Length of the file name, name and qualified name.
	State  [3]uint32
	Length [3]uint32
	// Data of the three strings, as copied (length x kind bytes, or fewer
	// when cut).
	Data          [3][]byte
	LineTable     []byte
	LineTableSize uint32
}

// Record layouts, from the generated structs.
const (
	ustackHeader = int(unsafe.Offsetof(forensicFxUstack{}.Stack))
	pycodeHeader = int(unsafe.Offsetof(forensicFxPycode{}.Linetable))
	pystackSize  = int(unsafe.Sizeof(forensicFxPystack{}))
	stackRefSize = int(unsafe.Sizeof(forensicFxStackRef{}))
	vmasHeader   = int(unsafe.Offsetof(forensicFxVmas{}.Vmas))
	vmaSize      = int(unsafe.Sizeof(forensicFxVma{}))
	maxVMAs      = int(forensicFxConstFX_MAX_VMAS)
)

// IsStackRecord reports whether a ring record is one of the stack
// capture's (DecodeUStack, DecodePyStack, DecodePyCode, DecodeStackRef).
func IsStackRecord(rec []byte) bool {
	if len(rec) == 0 {
		return false
	}
	switch rec[0] {
	case KindUStack, KindPyStack, KindPyCode, KindStackRef, KindVMAs:
		return true
	}
	return false
}

// DecodeUStack interprets a stack capture record. It accepts any bytes: a
// record too short for its header or its stated length is an error.
func DecodeUStack(rec []byte, u *UStack) error {
	if len(rec) < ustackHeader || rec[0] != KindUStack {
		return fmt.Errorf("%w: stack record of %d bytes", ErrShortRecord, len(rec))
	}
	var h forensicFxUstack
	le := binary.LittleEndian
	n := int(le.Uint32(rec[unsafe.Offsetof(h.StackLen):]))
	if n > UStackMax || len(rec) < ustackHeader+n {
		return fmt.Errorf("%w: stack record of %d bytes says %d stack bytes", ErrShortRecord, len(rec), n)
	}
	r := unsafe.Offsetof(h.Regs)
	reg := func(i uintptr) uint64 { return le.Uint64(rec[r+8*i:]) }
	*u = UStack{Flags: rec[unsafe.Offsetof(h.Flags)], Symbol: le.Uint16(rec[unsafe.Offsetof(h.Symbol):]),
		Pid: le.Uint32(rec[unsafe.Offsetof(h.Pid):]), Tid: le.Uint32(rec[unsafe.Offsetof(h.Tid):]),
		TsExit: le.Uint64(rec[unsafe.Offsetof(h.TsExit):]),
		Regs: Regs{IP: reg(0), SP: reg(1), BP: reg(2), BX: reg(3), R12: reg(4), R13: reg(5), R14: reg(6), R15: reg(7),
			FSBase: reg(8)},
		Stack: rec[ustackHeader : ustackHeader+n]}
	return nil
}

// DecodePyStack interprets a Python frames record.
func DecodePyStack(rec []byte, p *PyStack) error {
	if len(rec) < pystackSize || rec[0] != KindPyStack {
		return fmt.Errorf("%w: Python stack record of %d bytes", ErrShortRecord, len(rec))
	}
	*p = *(*PyStack)(unsafe.Pointer(&rec[0]))
	if int(p.Nframes) > PyFrames {
		return fmt.Errorf("Python stack record of %d frames, at most %d", p.Nframes, PyFrames)
	}
	return nil
}

// DecodeStackRef interprets a reference to an earlier capture.
func DecodeStackRef(rec []byte, r *StackRef) error {
	if len(rec) < stackRefSize || rec[0] != KindStackRef {
		return fmt.Errorf("%w: stack reference of %d bytes", ErrShortRecord, len(rec))
	}
	*r = *(*StackRef)(unsafe.Pointer(&rec[0]))
	return nil
}

// DecodeVMAs interprets a capture's mapping list.
func DecodeVMAs(rec []byte, v *VMAs) error {
	if len(rec) < vmasHeader || rec[0] != KindVMAs {
		return fmt.Errorf("%w: mappings record of %d bytes", ErrShortRecord, len(rec))
	}
	var h forensicFxVmas // for its offsets only
	le := binary.LittleEndian
	n := int(le.Uint16(rec[unsafe.Offsetof(h.N):]))
	if n > maxVMAs || len(rec) < vmasHeader+n*vmaSize {
		return fmt.Errorf("%w: mappings record of %d bytes says %d mappings", ErrShortRecord, len(rec), n)
	}
	*v = VMAs{Flags: rec[unsafe.Offsetof(h.Flags)], Pid: le.Uint32(rec[unsafe.Offsetof(h.Pid):]),
		Tid: le.Uint32(rec[unsafe.Offsetof(h.Tid):]), TsExit: le.Uint64(rec[unsafe.Offsetof(h.TsExit):]),
		List: make([]VMA, n)}
	var e forensicFxVma
	for i := range v.List {
		b := rec[vmasHeader+i*vmaSize:]
		name := b[unsafe.Offsetof(e.Name) : int(unsafe.Offsetof(e.Name))+len(e.Name)]
		if j := bytes.IndexByte(name, 0); j >= 0 {
			name = name[:j]
		}
		v.List[i] = VMA{Start: le.Uint64(b[unsafe.Offsetof(e.Start):]), End: le.Uint64(b[unsafe.Offsetof(e.End):]),
			Offset: le.Uint64(b[unsafe.Offsetof(e.Pgoff):]), Ino: le.Uint64(b[unsafe.Offsetof(e.Ino):]),
			Dev: le.Uint32(b[unsafe.Offsetof(e.Dev):]), Name: string(name)}
	}
	return nil
}

// DecodePyCode interprets a code object record.
func DecodePyCode(rec []byte, c *PyCode) error {
	if len(rec) < pycodeHeader || rec[0] != KindPyCode {
		return fmt.Errorf("%w: code object record of %d bytes", ErrShortRecord, len(rec))
	}
	var h forensicFxPycode // for its offsets only
	le := binary.LittleEndian
	u32 := func(off uintptr) uint32 { return le.Uint32(rec[off:]) }
	n := int(u32(unsafe.Offsetof(h.LinetableLen)))
	if n > len(h.Linetable) || len(rec) < pycodeHeader+n {
		return fmt.Errorf("%w: code object record of %d bytes says %d line table bytes", ErrShortRecord, len(rec), n)
	}
	*c = PyCode{Flags: rec[unsafe.Offsetof(h.Flags)], Minor: rec[unsafe.Offsetof(h.Minor)],
		Pid: u32(unsafe.Offsetof(h.Pid)), Code: le.Uint64(rec[unsafe.Offsetof(h.Code):]),
		Ts: le.Uint64(rec[unsafe.Offsetof(h.Ts):]), Type: le.Uint64(rec[unsafe.Offsetof(h.Type):]),
		FirstLine: int32(u32(unsafe.Offsetof(h.Firstlineno))), FirstTraceable: int32(u32(unsafe.Offsetof(h.Firsttraceable))),
		LineTable: rec[pycodeHeader : pycodeHeader+n], LineTableSize: u32(unsafe.Offsetof(h.LinetableSize))}
	offs := [3]uintptr{unsafe.Offsetof(h.Filename), unsafe.Offsetof(h.Name), unsafe.Offsetof(h.Qualname)}
	sizes := [3]int{len(h.Filename), len(h.Name), len(h.Qualname)}
	for i := range 3 {
		c.State[i] = u32(unsafe.Offsetof(h.State) + 4*uintptr(i))
		c.Length[i] = u32(unsafe.Offsetof(h.Length) + 4*uintptr(i))
		n := 0
		if c.State[i]&(1<<5) != 0 { // compact: its data was copied
			n = min(int(c.Length[i])*int(c.State[i]>>2&7), sizes[i])
		}
		c.Data[i] = rec[offs[i] : int(offs[i])+n]
	}
	return nil
}

// ErrNoLayout: the probes have no layout row for a CPython version.
var ErrNoLayout = errors.New("no CPython layout row for this version")

// pyLayouts converts pystack's offset table into the probes' rows.
func pyLayouts() []forensicFxPylayout {
	var rows []forensicFxPylayout
	for _, l := range pystack.Layouts() {
		r := forensicFxPylayout{Minor: uint32(l.Minor),
			RuntimeInterpretersHead: int32(l.RuntimeInterpretersHead),
			InterpNext:              int32(l.InterpNext), InterpThreadsHead: int32(l.InterpThreadsHead),
			ThreadNext: int32(l.ThreadNext), ThreadId: int32(l.ThreadID), ThreadNativeId: int32(l.ThreadNativeID),
			ThreadFrame: int32(l.ThreadFrame), CframeCurrentFrame: int32(l.CFrameCurrentFrame),
			FrameCode: int32(l.FrameCode), FramePrevious: int32(l.FramePrevious), FrameInstr: int32(l.FrameInstr),
			FrameIsEntry: int32(l.FrameIsEntry), FrameOwner: int32(l.FrameOwner), FrameSize: int32(l.FrameSize),
			CodeType: int32(l.CodeType), CodeFilename: int32(l.CodeFilename), CodeName: int32(l.CodeName),
			CodeQualname: int32(l.CodeQualname), CodeFirstlineno: int32(l.CodeFirstLine),
			CodeLinetable: int32(l.CodeLineTable), CodeFirsttraceable: int32(l.CodeFirstTraceable),
			CodeSize: int32(l.CodeSize), UnicodeLength: int32(l.UnicodeLength), UnicodeState: int32(l.UnicodeState),
			AsciiSize: int32(l.ASCIISize), CompactSize: int32(l.CompactSize),
			BytesSize: int32(l.BytesSize), BytesData: int32(l.BytesData)}
		if l.IntInstr() {
			r.InstrInt = 1
		}
		rows = append(rows, r)
	}
	return rows
}

// fillPyLayouts writes the CPython layout table into the probes' map.
func (o *Objects) fillPyLayouts() error {
	rows := pyLayouts()
	if len(rows) > pyLayoutRows {
		return fmt.Errorf("%d CPython layouts, the probes take %d", len(rows), pyLayoutRows)
	}
	for i, r := range rows {
		if err := o.objs.PyLayouts.Put(uint32(i), r); err != nil {
			return fmt.Errorf("CPython %d.%d layout: %w", 3, r.Minor, err)
		}
	}
	return nil
}

// SetPython tells the probes that process pid runs CPython 3.minor with
// _PyRuntime at runtime, so that a capture reads its Python frames.
func (o *Objects) SetPython(pid uint32, minor int, runtime uint64) error {
	for i, r := range pyLayouts() {
		if int(r.Minor) == minor {
			return o.objs.PyProcs.Put(pid, forensicFxPyproc{Runtime: runtime, Layout: uint32(i)})
		}
	}
	return fmt.Errorf("CPython 3.%d: %w", minor, ErrNoLayout)
}

// sizeScratch gives the code record's scratch one entry per CPU.
func sizeScratch(spec *ebpf.CollectionSpec) error {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("possible CPUs: %w", err)
	}
	spec.Maps[forensicMapBigScratch].MaxEntries = uint32(n)
	return nil
}

package pystack

import (
	"fmt"
	"slices"
)

// lineFormat is the encoding of a code object's co_linetable.
type lineFormat uint8

const (
	// lines310 is 3.10's table of (bytecode delta, line delta) byte pairs
	// (Objects/lnotab_notes.txt of 3.10).
	lines310 lineFormat = iota + 1
	// lines311 is the location table of 3.11 and later
	// (Objects/locations.md).
	lines311
)

// Layout holds the structure offsets, in bytes, of one CPython minor
// version on x86-64. A field the version does not have is -1. The names
// are the C names: Runtime* of _PyRuntimeState, Interp* of
// PyInterpreterState (struct _is), Thread* of PyThreadState (struct _ts),
// Frame* of 3.10's PyFrameObject or 3.11+'s _PyInterpreterFrame, Code* of
// PyCodeObject, Unicode* of PyASCIIObject/PyCompactUnicodeObject, Bytes*
// of PyBytesObject.
type Layout struct {
	Major, Minor int

	RuntimeInterpretersHead int64 // interpreters.head

	InterpNext        int64 // next
	InterpThreadsHead int64 // threads.head (3.10: tstate_head)

	ThreadNext     int64 // next
	ThreadID       int64 // thread_id: pthread_self() of the thread
	ThreadNativeID int64 // native_thread_id: the kernel's tid (3.11+)
	// ThreadFrame is 3.10's frame (PyFrameObject *), 3.11/3.12's cframe
	// (_PyCFrame *), 3.13's current_frame (_PyInterpreterFrame *).
	ThreadFrame int64
	// CFrameCurrentFrame is _PyCFrame.current_frame (3.11, 3.12).
	CFrameCurrentFrame int64

	FrameCode     int64 // f_code (3.13: f_executable)
	FramePrevious int64 // previous (3.10: f_back)
	// FrameInstr is 3.10's f_lasti (an int, in code units), 3.11/3.12's
	// prev_instr, 3.13's instr_ptr (pointers into co_code_adaptive).
	FrameInstr   int64
	FrameIsEntry int64 // is_entry (3.11)
	FrameOwner   int64 // owner (3.11+)
	// FrameSize is how many bytes of a frame a reader copies: every field
	// above lies within it.
	FrameSize int64

	CodeType           int64 // ob_type, of every object
	CodeFilename       int64 // co_filename
	CodeName           int64 // co_name
	CodeQualname       int64 // co_qualname (3.11+)
	CodeFirstLine      int64 // co_firstlineno (an int)
	CodeLineTable      int64 // co_linetable (a bytes object)
	CodeFirstTraceable int64 // _co_firsttraceable (an int, 3.11+)
	CodeAdaptive       int64 // co_code_adaptive: the bytecode, inline (3.11+)
	CodeSize           int64 // bytes a reader copies of a code object

	UnicodeLength int64 // length, in code points
	UnicodeState  int64 // state: kind in bits 2-4, compact bit 5, ascii bit 6
	ASCIISize     int64 // sizeof(PyASCIIObject): where compact ASCII data starts
	CompactSize   int64 // sizeof(PyCompactUnicodeObject): where other compact data starts

	BytesSize int64 // ob_size
	BytesData int64 // ob_sval

	Lines lineFormat
	// DebugOffsets says _PyRuntime starts with _Py_DebugOffsets (3.13+),
	// which the walk compares with this table.
	DebugOffsets bool
}

// Frame owners (enum _frameowner, Include/internal/pycore_frame.h).
const (
	ownedByThread    = 0
	ownedByGenerator = 1
	ownedByCStack    = 3 // 3.12+: the C-stack shim frame of an evaluation loop call
)

// layouts is the one table of offsets. Sources: the headers of each
// version (Include/internal/pycore_runtime.h, pycore_interp.h,
// pycore_frame.h, Include/cpython/pystate.h, code.h, unicodeobject.h,
// bytesobject.h, and 3.10's Include/cpython/frameobject.h), as installed
// with 3.10.13, 3.11.7, 3.12.1 and 3.13.0; every value is checked against
// those builds' DWARF, and Debian's 3.11.2 (python3.11-dbg), by
// TestLayoutsMatchDWARF.
var layouts = [...]Layout{
	{
		Major: 3, Minor: 10,
		RuntimeInterpretersHead: 32,
		InterpNext:              0, InterpThreadsHead: 8,
		ThreadNext: 8, ThreadID: 176, ThreadNativeID: -1, ThreadFrame: 24, CFrameCurrentFrame: -1,
		FrameCode: 32, FramePrevious: 24, FrameInstr: 96, FrameIsEntry: -1, FrameOwner: -1, FrameSize: 100,
		CodeType: 8, CodeFilename: 104, CodeName: 112, CodeQualname: -1, CodeFirstLine: 40,
		CodeLineTable: 120, CodeFirstTraceable: -1, CodeAdaptive: -1, CodeSize: 128,
		UnicodeLength: 16, UnicodeState: 32, ASCIISize: 48, CompactSize: 72,
		BytesSize: 16, BytesData: 32,
		Lines: lines310,
	},
	{
		Major: 3, Minor: 11,
		RuntimeInterpretersHead: 40,
		InterpNext:              0, InterpThreadsHead: 16,
		ThreadNext: 8, ThreadID: 152, ThreadNativeID: 160, ThreadFrame: 56, CFrameCurrentFrame: 8,
		FrameCode: 32, FramePrevious: 48, FrameInstr: 56, FrameIsEntry: 68, FrameOwner: 69, FrameSize: 72,
		CodeType: 8, CodeFilename: 112, CodeName: 120, CodeQualname: 128, CodeFirstLine: 72,
		CodeLineTable: 136, CodeFirstTraceable: 168, CodeAdaptive: 184, CodeSize: 184,
		UnicodeLength: 16, UnicodeState: 32, ASCIISize: 48, CompactSize: 72,
		BytesSize: 16, BytesData: 32,
		Lines: lines311,
	},
	{
		Major: 3, Minor: 12,
		RuntimeInterpretersHead: 40,
		InterpNext:              0, InterpThreadsHead: 72,
		ThreadNext: 8, ThreadID: 136, ThreadNativeID: 144, ThreadFrame: 56, CFrameCurrentFrame: 0,
		FrameCode: 0, FramePrevious: 8, FrameInstr: 56, FrameIsEntry: -1, FrameOwner: 70, FrameSize: 72,
		CodeType: 8, CodeFilename: 112, CodeName: 120, CodeQualname: 128, CodeFirstLine: 68,
		CodeLineTable: 136, CodeFirstTraceable: 176, CodeAdaptive: 192, CodeSize: 192,
		UnicodeLength: 16, UnicodeState: 32, ASCIISize: 40, CompactSize: 56,
		BytesSize: 16, BytesData: 32,
		Lines: lines311,
	},
	{
		Major: 3, Minor: 13,
		RuntimeInterpretersHead: 632,
		InterpNext:              7264, InterpThreadsHead: 7344,
		ThreadNext: 8, ThreadID: 152, ThreadNativeID: 160, ThreadFrame: 72, CFrameCurrentFrame: -1,
		FrameCode: 0, FramePrevious: 8, FrameInstr: 56, FrameIsEntry: -1, FrameOwner: 70, FrameSize: 72,
		CodeType: 8, CodeFilename: 112, CodeName: 120, CodeQualname: 128, CodeFirstLine: 68,
		CodeLineTable: 136, CodeFirstTraceable: 184, CodeAdaptive: 200, CodeSize: 200,
		UnicodeLength: 16, UnicodeState: 32, ASCIISize: 40, CompactSize: 56,
		BytesSize: 16, BytesData: 32,
		Lines: lines311, DebugOffsets: true,
	},
}

// IntInstr reports whether a frame's instruction is an int index (3.10's
// f_lasti, in code units) rather than a pointer into the bytecode.
func (l Layout) IntInstr() bool { return l.Lines == lines310 }

// Layouts returns a copy of the offset table, one row per supported
// version: what a BPF program's offsets map is filled from.
func Layouts() []Layout { return slices.Clone(layouts[:]) }

// layoutFor returns the layout of a minor version.
func layoutFor(major, minor int) (*Layout, error) {
	for i := range layouts {
		if layouts[i].Major == major && layouts[i].Minor == minor {
			return &layouts[i], nil
		}
	}
	return nil, fmt.Errorf("CPython %d.%d: %w (supported: %s)", major, minor, ErrUnsupported, supported())
}

func supported() string {
	s := ""
	for i, l := range layouts {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%d.%d", l.Major, l.Minor)
	}
	return s
}

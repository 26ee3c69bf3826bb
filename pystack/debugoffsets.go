package pystack

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// _Py_DebugOffsets (3.13, Include/internal/pycore_runtime.h) opens
// _PyRuntime: a cookie, the version, a free-threading flag, then groups of
// uint64 offsets, each group starting with its structure's size. These are
// the positions, in uint64 words from the start, of the values the table
// is compared with, and their member paths in the C struct
// (TestDebugWordsMatchDWARF checks each word against the DWARF of 3.13).
var debugWords = []struct {
	word  int
	name  string
	field func(*Layout) int64
}{
	{5, "runtime_state.interpreters_head", func(l *Layout) int64 { return l.RuntimeInterpretersHead }},
	{8, "interpreter_state.next", func(l *Layout) int64 { return l.InterpNext }},
	{9, "interpreter_state.threads_head", func(l *Layout) int64 { return l.InterpThreadsHead }},
	{21, "thread_state.next", func(l *Layout) int64 { return l.ThreadNext }},
	{23, "thread_state.current_frame", func(l *Layout) int64 { return l.ThreadFrame }},
	{24, "thread_state.thread_id", func(l *Layout) int64 { return l.ThreadID }},
	{25, "thread_state.native_thread_id", func(l *Layout) int64 { return l.ThreadNativeID }},
	{29, "interpreter_frame.previous", func(l *Layout) int64 { return l.FramePrevious }},
	{30, "interpreter_frame.executable", func(l *Layout) int64 { return l.FrameCode }},
	{31, "interpreter_frame.instr_ptr", func(l *Layout) int64 { return l.FrameInstr }},
	{33, "interpreter_frame.owner", func(l *Layout) int64 { return l.FrameOwner }},
	{35, "code_object.filename", func(l *Layout) int64 { return l.CodeFilename }},
	{36, "code_object.name", func(l *Layout) int64 { return l.CodeName }},
	{37, "code_object.qualname", func(l *Layout) int64 { return l.CodeQualname }},
	{38, "code_object.linetable", func(l *Layout) int64 { return l.CodeLineTable }},
	{39, "code_object.firstlineno", func(l *Layout) int64 { return l.CodeFirstLine }},
	{43, "code_object.co_code_adaptive", func(l *Layout) int64 { return l.CodeAdaptive }},
	{45, "pyobject.ob_type", func(l *Layout) int64 { return l.CodeType }},
	{65, "bytes_object.ob_size", func(l *Layout) int64 { return l.BytesSize }},
	{66, "bytes_object.ob_sval", func(l *Layout) int64 { return l.BytesData }},
	{68, "unicode_object.state", func(l *Layout) int64 { return l.UnicodeState }},
	{69, "unicode_object.length", func(l *Layout) int64 { return l.UnicodeLength }},
	{70, "unicode_object.asciiobject_size", func(l *Layout) int64 { return l.ASCIISize }},
}

// debugWordsRead is how many words of _Py_DebugOffsets the check reads.
const debugWordsRead = 71

// CheckDebugOffsets compares the process's _Py_DebugOffsets with the
// table, for layouts that have them; a free-threaded build, another
// version or any differing offset is an error.
func (t *Target) CheckDebugOffsets(mem Memory) error {
	if !t.Layout.DebugOffsets {
		return nil
	}
	r := &reader{mem: mem}
	b, err := r.read(t.Runtime, 8*debugWordsRead)
	if err != nil {
		return fmt.Errorf("_Py_DebugOffsets: %w", err)
	}
	if !bytes.Equal(b[:8], []byte("xdebugpy")) {
		return fmt.Errorf("_PyRuntime does not start with the _Py_DebugOffsets cookie: %w", ErrLayout)
	}
	word := func(i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }
	if v := word(1); int(v>>24) != t.Layout.Major || int(v>>16&0xff) != t.Layout.Minor {
		return fmt.Errorf("_Py_DebugOffsets says version %#x: %w", v, ErrLayout)
	}
	if word(2) != 0 {
		return fmt.Errorf("a free-threaded build: %w", ErrUnsupported)
	}
	for _, d := range debugWords {
		if got, want := word(d.word), d.field(t.Layout); int64(got) != want {
			return fmt.Errorf("_Py_DebugOffsets %s = %d, the table says %d: %w", d.name, got, want, ErrLayout)
		}
	}
	return nil
}

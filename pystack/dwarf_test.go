package pystack

import (
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/retrivium/forensic/internal/elfnote"
	"github.com/retrivium/forensic/unwind"
)

// dwarfTypes indexes the named struct types and typedefs of a file's DWARF.
type dwarfTypes struct {
	d     *dwarf.Data
	types map[string]dwarf.Offset
}

func loadDWARF(t *testing.T, path string) *dwarfTypes {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := f.DWARF()
	if err != nil || f.Section(".debug_info") == nil {
		// A stripped file: its separate debug file, by build id.
		r, err := unwind.LocalFiles{}.OpenDebug(elfnote.BuildID(path))
		if err != nil {
			t.Skipf("%s has no DWARF and no debug file", path)
		}
		defer r.Close()
		df, err := elf.NewFile(r)
		if err != nil {
			t.Fatal(err)
		}
		if d, err = df.DWARF(); err != nil {
			t.Skipf("%s: debug file without DWARF: %v", path, err)
		}
	}
	dt := &dwarfTypes{d: d, types: map[string]dwarf.Offset{}}
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		if e.Tag != dwarf.TagStructType && e.Tag != dwarf.TagTypedef {
			continue
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		if decl, _ := e.Val(dwarf.AttrDeclaration).(bool); name == "" || decl {
			continue
		}
		if _, ok := dt.types[name]; !ok {
			dt.types[name] = e.Offset
		}
	}
	return dt
}

// offset returns the byte offset of a member path ("interpreters.head") in
// a struct, or its size when path is "sizeof". bit is the member's bit
// offset for bit fields, else -1.
func (dt *dwarfTypes) offset(structName, path string) (off, bit int64, err error) {
	o, ok := dt.types[structName]
	if !ok {
		return 0, 0, fmt.Errorf("no type %s", structName)
	}
	typ, err := dt.d.Type(o)
	if err != nil {
		return 0, 0, err
	}
	if path == "sizeof" {
		return typ.Size(), -1, nil
	}
	bit = -1
	for _, name := range strings.Split(path, ".") {
		for td, ok := typ.(*dwarf.TypedefType); ok; td, ok = typ.(*dwarf.TypedefType) {
			typ = td.Type
		}
		st, ok := typ.(*dwarf.StructType)
		if !ok {
			return 0, 0, fmt.Errorf("%s: %s is not a struct", path, typ)
		}
		found := false
		for _, f := range st.Field {
			if f.Name == name {
				off += f.ByteOffset
				typ = f.Type
				if f.BitSize != 0 {
					bit = f.DataBitOffset
				}
				found = true
				break
			}
		}
		if !found {
			return 0, 0, fmt.Errorf("%s has no member %s", structName, name)
		}
	}
	return off, bit, nil
}

// layoutFields maps each Layout field to the C member it holds, per minor
// version ("" where the version has no such member and the table says -1).
var layoutFields = []struct {
	name string
	get  func(*Layout) int64
	c    func(minor int) string
}{
	{"RuntimeInterpretersHead", func(l *Layout) int64 { return l.RuntimeInterpretersHead }, always("_PyRuntimeState:interpreters.head")},
	{"InterpNext", func(l *Layout) int64 { return l.InterpNext }, always("_is:next")},
	{"InterpThreadsHead", func(l *Layout) int64 { return l.InterpThreadsHead }, byMinor("_is:tstate_head", "_is:threads.head", "_is:threads.head", "_is:threads.head")},
	{"ThreadNext", func(l *Layout) int64 { return l.ThreadNext }, always("_ts:next")},
	{"ThreadID", func(l *Layout) int64 { return l.ThreadID }, always("_ts:thread_id")},
	{"ThreadNativeID", func(l *Layout) int64 { return l.ThreadNativeID }, byMinor("", "_ts:native_thread_id", "_ts:native_thread_id", "_ts:native_thread_id")},
	{"ThreadFrame", func(l *Layout) int64 { return l.ThreadFrame }, byMinor("_ts:frame", "_ts:cframe", "_ts:cframe", "_ts:current_frame")},
	{"CFrameCurrentFrame", func(l *Layout) int64 { return l.CFrameCurrentFrame }, byMinor("", "_PyCFrame:current_frame", "_PyCFrame:current_frame", "")},
	{"FrameCode", func(l *Layout) int64 { return l.FrameCode }, byMinor("_frame:f_code", "_PyInterpreterFrame:f_code", "_PyInterpreterFrame:f_code", "_PyInterpreterFrame:f_executable")},
	{"FramePrevious", func(l *Layout) int64 { return l.FramePrevious }, byMinor("_frame:f_back", "_PyInterpreterFrame:previous", "_PyInterpreterFrame:previous", "_PyInterpreterFrame:previous")},
	{"FrameInstr", func(l *Layout) int64 { return l.FrameInstr }, byMinor("_frame:f_lasti", "_PyInterpreterFrame:prev_instr", "_PyInterpreterFrame:prev_instr", "_PyInterpreterFrame:instr_ptr")},
	{"FrameIsEntry", func(l *Layout) int64 { return l.FrameIsEntry }, byMinor("", "_PyInterpreterFrame:is_entry", "", "")},
	{"FrameOwner", func(l *Layout) int64 { return l.FrameOwner }, byMinor("", "_PyInterpreterFrame:owner", "_PyInterpreterFrame:owner", "_PyInterpreterFrame:owner")},
	{"CodeType", func(l *Layout) int64 { return l.CodeType }, always("PyObject:ob_type")},
	{"CodeFilename", func(l *Layout) int64 { return l.CodeFilename }, always("PyCodeObject:co_filename")},
	{"CodeName", func(l *Layout) int64 { return l.CodeName }, always("PyCodeObject:co_name")},
	{"CodeQualname", func(l *Layout) int64 { return l.CodeQualname }, byMinor("", "PyCodeObject:co_qualname", "PyCodeObject:co_qualname", "PyCodeObject:co_qualname")},
	{"CodeFirstLine", func(l *Layout) int64 { return l.CodeFirstLine }, always("PyCodeObject:co_firstlineno")},
	{"CodeLineTable", func(l *Layout) int64 { return l.CodeLineTable }, always("PyCodeObject:co_linetable")},
	{"CodeFirstTraceable", func(l *Layout) int64 { return l.CodeFirstTraceable }, byMinor("", "PyCodeObject:_co_firsttraceable", "PyCodeObject:_co_firsttraceable", "PyCodeObject:_co_firsttraceable")},
	{"CodeAdaptive", func(l *Layout) int64 { return l.CodeAdaptive }, byMinor("", "PyCodeObject:co_code_adaptive", "PyCodeObject:co_code_adaptive", "PyCodeObject:co_code_adaptive")},
	{"UnicodeLength", func(l *Layout) int64 { return l.UnicodeLength }, always("PyASCIIObject:length")},
	{"UnicodeState", func(l *Layout) int64 { return l.UnicodeState }, always("PyASCIIObject:state")},
	{"ASCIISize", func(l *Layout) int64 { return l.ASCIISize }, always("PyASCIIObject:sizeof")},
	{"CompactSize", func(l *Layout) int64 { return l.CompactSize }, always("PyCompactUnicodeObject:sizeof")},
	{"BytesSize", func(l *Layout) int64 { return l.BytesSize }, always("PyBytesObject:ob_base.ob_size")},
	{"BytesData", func(l *Layout) int64 { return l.BytesData }, always("PyBytesObject:ob_sval")},
}

func always(c string) func(int) string { return func(int) string { return c } }

func byMinor(m10, m11, m12, m13 string) func(int) string {
	return func(minor int) string { return []string{m10, m11, m12, m13}[minor-10] }
}

// interpreterFile asks an interpreter which file holds it: libpython for a
// shared build, the executable otherwise.
func interpreterFile(t *testing.T, in interpreter) string {
	t.Helper()
	b, err := exec.Command(in.path, "-c", `import os, sys, sysconfig
v = sysconfig.get_config_var
print(os.path.join(v("LIBDIR"), v("INSTSONAME")) if v("Py_ENABLE_SHARED") else sys.executable)`).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestLayoutsMatchDWARF checks every offset of the table against the
// DWARF of each interpreter found that has it (its own or a debug file's),
// the bit positions of the str state, and that the copied frame and code
// sizes cover every field read from them.
func TestLayoutsMatchDWARF(t *testing.T) {
	checked := 0
	for _, in := range pythons(t) {
		l, err := layoutFor(in.major, in.minor)
		if err != nil {
			continue
		}
		t.Run(in.String(), func(t *testing.T) {
			dt := loadDWARF(t, interpreterFile(t, in))
			for _, f := range layoutFields {
				c := f.c(in.minor)
				if c == "" {
					if f.get(l) != -1 {
						t.Errorf("%s = %d, but %d.%d has no such member", f.name, f.get(l), in.major, in.minor)
					}
					continue
				}
				s, path, _ := strings.Cut(c, ":")
				off, _, err := dt.offset(s, path)
				if err != nil || off != f.get(l) {
					t.Errorf("%s = %d; DWARF %s: %d, %v", f.name, f.get(l), c, off, err)
				}
			}
			for member, bit := range map[string]int64{"kind": stateKindShift, "compact": 5, "ascii": 6} {
				if _, got, err := dt.offset("PyASCIIObject", "state."+member); err != nil || got != bit {
					t.Errorf("state.%s at bit %d, %v; want %d", member, got, err, bit)
				}
			}
			checkDebugWords(t, dt, l)
			checked++
		})
	}
	for _, l := range layouts {
		frame := []int64{l.FrameCode + 8, l.FramePrevious + 8, l.FrameInstr + 4, l.FrameIsEntry + 1, l.FrameOwner + 1}
		code := []int64{l.CodeType + 8, l.CodeFilename + 8, l.CodeName + 8, l.CodeQualname + 8, l.CodeFirstLine + 4, l.CodeLineTable + 8, l.CodeFirstTraceable + 4}
		if max(frame[0], frame[1], frame[2], frame[3], frame[4]) > l.FrameSize || max(code[0], code[1], code[2], code[3], code[4], code[5], code[6]) > l.CodeSize {
			t.Errorf("%d.%d: FrameSize %d or CodeSize %d does not cover the fields read", l.Major, l.Minor, l.FrameSize, l.CodeSize)
		}
	}
	if checked == 0 {
		t.Skip("no supported interpreter with DWARF found")
	}
}

// checkDebugWords checks the word positions CheckDebugOffsets reads
// against the DWARF of _Py_DebugOffsets.
func checkDebugWords(t *testing.T, dt *dwarfTypes, l *Layout) {
	if !l.DebugOffsets {
		return
	}
	for _, d := range debugWords {
		off, _, err := dt.offset("_Py_DebugOffsets", d.name)
		if err != nil || off != int64(8*d.word) {
			t.Errorf("_Py_DebugOffsets.%s at %d, %v; the check reads word %d", d.name, off, err, d.word)
		}
	}
	if size, _, _ := dt.offset("_Py_DebugOffsets", "sizeof"); size < 8*debugWordsRead {
		t.Errorf("_Py_DebugOffsets is %d bytes, the check reads %d", size, 8*debugWordsRead)
	}
}

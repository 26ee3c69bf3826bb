package bpf

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/retrivium/forensic/pystack"
)

// bytesOf is the memory of a generated record, as the probes send it.
func bytesOf[T any](v *T) []byte {
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))...)
}

// The stack records decode as the header lays them out, sent for their
// filled length only; a record shorter than it says is an error.
func TestDecodeStackRecords(t *testing.T) {
	var u forensicFxUstack
	u.Kind, u.Flags, u.Symbol, u.Pid, u.Tid, u.StackLen, u.TsExit = KindUStack, UStackFault|UStackFailed, 9, 10, 11, 100, 12345
	u.Regs.Ip, u.Regs.Sp, u.Regs.R15, u.Regs.FsBase = 0x401000, 0x7ffd0000, 15, 0x7f0000
	u.Stack[0], u.Stack[99], u.Stack[100] = 1, 2, 3
	rec := bytesOf(&u)[:ustackHeader+100]
	var got UStack
	if err := DecodeUStack(rec, &got); err != nil {
		t.Fatal(err)
	}
	want := Regs{IP: 0x401000, SP: 0x7ffd0000, R15: 15, FSBase: 0x7f0000}
	if got.Regs != want || got.Pid != 10 || got.Tid != 11 || got.TsExit != 12345 || got.Symbol != 9 ||
		got.Flags != UStackFault|UStackFailed || len(got.Stack) != 100 || got.Stack[0] != 1 || got.Stack[99] != 2 {
		t.Errorf("decoded %+v (%d stack bytes)", got, len(got.Stack))
	}
	if DecodeUStack(rec[:len(rec)-1], &got) == nil {
		t.Error("a stack record shorter than its length decoded")
	}
	u.StackLen = uint32(UStackMax + 1)
	if DecodeUStack(bytesOf(&u), &got) == nil {
		t.Error("a stack record longer than the limit decoded")
	}

	var c forensicFxPycode
	c.Kind, c.Pid, c.Code, c.Ts, c.Firstlineno, c.Minor = KindPyCode, 10, 0x7f01, 77, 12, 11
	c.State = [3]uint32{0x64, 0x64 &^ 0x20, 0x68} // compact ASCII; not compact; compact kind 2
	c.Length = [3]uint32{4, 9, 1000}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&c.Filename[0])), 4), "a.py")
	c.LinetableLen, c.LinetableSize = 3, 70000
	c.Linetable[2] = 0x55
	rec = bytesOf(&c)[:pycodeHeader+3]
	var pc PyCode
	if err := DecodePyCode(rec, &pc); err != nil {
		t.Fatal(err)
	}
	if string(pc.Data[0]) != "a.py" || len(pc.Data[1]) != 0 || len(pc.Data[2]) != len(c.Qualname) ||
		!bytes.Equal(pc.LineTable, []byte{0, 0, 0x55}) || pc.LineTableSize != 70000 || pc.Code != 0x7f01 || pc.Ts != 77 ||
		pc.FirstLine != 12 || pc.Minor != 11 {
		t.Errorf("decoded %+v", pc)
	}
	if DecodePyCode(rec[:len(rec)-1], &pc) == nil {
		t.Error("a code record shorter than its line table decoded")
	}

	var v forensicFxVmas
	v.Kind, v.N, v.Pid, v.TsExit, v.Flags = KindVMAs, 2, 10, 5, VMAsCut
	v.Vmas[1] = forensicFxVma{Start: 0x1000, End: 0x2000, Pgoff: 0x3000, Ino: 4, Dev: 5}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&v.Vmas[1].Name[0])), 8), "libc.so\x00")
	rec = bytesOf(&v)[:vmasHeader+2*vmaSize]
	var vs VMAs
	if err := DecodeVMAs(rec, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs.List) != 2 || vs.List[1] != (VMA{Start: 0x1000, End: 0x2000, Offset: 0x3000, Ino: 4, Dev: 5, Name: "libc.so"}) ||
		vs.Flags != VMAsCut || vs.Pid != 10 || vs.TsExit != 5 {
		t.Errorf("decoded %+v", vs)
	}
	if DecodeVMAs(rec[:len(rec)-1], &vs) == nil {
		t.Error("a mappings record shorter than its count decoded")
	}

	var p PyStack
	p.Kind, p.Nframes = KindPyStack, uint8(PyFrames+1)
	if DecodePyStack(bytesOf(&p), &p) == nil {
		t.Error("a Python stack of more frames than the record holds decoded")
	}
	r := StackRef{Kind: KindStackRef, Pid: 1, Tid: 2, RefTid: 3, TsExit: 4, RefTs: 5}
	var rr StackRef
	if err := DecodeStackRef(bytesOf(&r), &rr); err != nil || rr != r {
		t.Errorf("reference %+v, %v", rr, err)
	}
	for _, k := range []uint8{KindUStack, KindPyStack, KindPyCode, KindStackRef, KindVMAs} {
		if !IsStackRecord([]byte{k}) {
			t.Errorf("kind %d is not taken for a stack record", k)
		}
	}
	if IsStackRecord([]byte{KindCall}) || IsStackRecord(nil) {
		t.Error("a call record taken for a stack record")
	}
}

// The probes' CPython layout rows are pystack's table, field for field
// where a walk reads them.
func TestPyLayoutRows(t *testing.T) {
	rows, ls := pyLayouts(), pystack.Layouts()
	if len(rows) != len(ls) || len(rows) > pyLayoutRows {
		t.Fatalf("%d rows for %d layouts; the probes hold %d", len(rows), len(ls), pyLayoutRows)
	}
	for i, l := range ls {
		r := rows[i]
		if int(r.Minor) != l.Minor || int64(r.ThreadNativeId) != l.ThreadNativeID || int64(r.FrameSize) != l.FrameSize ||
			int64(r.CodeLinetable) != l.CodeLineTable || int64(r.CframeCurrentFrame) != l.CFrameCurrentFrame ||
			int64(r.AsciiSize) != l.ASCIISize || (r.InstrInt == 1) != l.IntInstr() {
			t.Errorf("3.%d: row %+v", l.Minor, r)
		}
		// Every read of a frame or code object stays within what the
		// probe copies at once.
		if l.FrameSize > 256 || l.CodeSize > 256 {
			t.Errorf("3.%d: frame %d or code object %d bytes, more than the probe reads at once", l.Minor, l.FrameSize, l.CodeSize)
		}
	}
}

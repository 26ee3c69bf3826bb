package bpf

import (
	"encoding/binary"
	"reflect"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf/btf"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/internal/e2eenv"
	"github.com/retrivium/forensic/store"
)

// The verifier is the real test of the C program: load it into this kernel.
func TestLoadVerifies(t *testing.T) {
	e2eenv.NeedRoot(t)
	for _, opts := range []Options{{}, {TraceAll: true, FreezeOnFailure: true, StackAll: true, RingBytes: 1 << 16}} {
		o, err := Load(opts)
		if err != nil {
			t.Fatalf("Load(%+v): %v", opts, err)
		}
		var got forensicFxSymcfg
		id := func() int { _, i, _ := cuda.Lookup("cuMemAlloc_v2"); return i }()
		if err := o.objs.Symcfg.Lookup(uint32(id), &got); err != nil {
			t.Fatal(err)
		}
		if got.OutaArg != 0 || got.OutaLen != 8 || got.ArrLen != 0 {
			t.Errorf("cuMemAlloc_v2 capture config = %+v, want out pointer arg 0, 8 bytes, no array", got)
		}
		if want := boolByte(opts.StackAll); got.Stack != want {
			t.Errorf("stack flag = %d, want %d", got.Stack, want)
		}
		_, sa, _ := cuda.Lookup("cuMemSetAccess")
		if err := o.objs.Symcfg.Lookup(uint32(sa), &got); err != nil {
			t.Fatal(err)
		}
		if got.ArrArg != 2 || got.ArrLen != 12 || got.ArrCountArg != 3 || got.ArrCountWidth != 8 || got.ArrMax != 8 {
			t.Errorf("cuMemSetAccess capture config = %+v, want 8 descriptors of 12 bytes at arg 2, count in arg 3", got)
		}
		links, err := o.AttachLifecycle()
		if err != nil {
			t.Fatalf("AttachLifecycle: %v", err)
		}
		hook, err := o.AttachMapHook()
		if err != nil {
			t.Fatalf("AttachMapHook: %v", err)
		}
		hook.Close()
		for _, l := range links {
			l.Close()
		}
		o.Close()
	}
}

func TestDecodeRejectsBadRecords(t *testing.T) {
	var c Call
	var p Proc
	for _, rec := range [][]byte{nil, {KindCall}, {KindProc, 0, 0}, {9, 1, 2, 3}, make([]byte, 8),
		append([]byte{KindCallArray}, make([]byte, callSize)...)} {
		if _, err := Decode(rec, &c, &p); err == nil {
			t.Errorf("Decode(%v) = nil error", rec)
		}
	}
	rec := make([]byte, callSize)
	rec[0] = KindCall
	rec[2] = 7 // symbol, little-endian
	kind, err := Decode(rec, &c, &p)
	if err != nil || kind != KindCall || c.Symbol != 7 || c.ArrayN != 0 {
		t.Fatalf("Decode = %d, %v, symbol %d, %d array elements", kind, err, c.Symbol, c.ArrayN)
	}
	// A symbol the table does not have, and a record shorter than its
	// row's tail (cuMemAlloc_v2 captures an 8-byte out parameter).
	binary.LittleEndian.PutUint16(rec[2:], uint16(len(cuda.Symbols)))
	if _, err := Decode(rec, &c, &p); err == nil {
		t.Error("a call of a symbol outside the table decoded")
	}
	_, alloc, _ := cuda.Lookup("cuMemAlloc_v2")
	binary.LittleEndian.PutUint16(rec[2:], uint16(alloc))
	if _, err := Decode(rec[:callFixed+4], &c, &p); err == nil {
		t.Error("a cuMemAlloc_v2 record without its out parameter decoded")
	}
}

// A call record carries only the tail its row captures, packed: for
// cuMemCreate the returned handle (8 bytes at 0) and the 16-byte
// allocation properties read at entry (at 8); the decoder finds each.
func TestDecodePackedTail(t *testing.T) {
	_, id, _ := cuda.Lookup("cuMemCreate")
	s := &cuda.Symbols[id]
	if s.OutA.Len != 8 || s.In.Len != 16 || s.OutB.Len != 0 {
		t.Fatalf("cuMemCreate captures %+v %+v %+v; the test expects 8 out, 16 in", s.OutA, s.In, s.OutB)
	}
	rec := make([]byte, callFixed+24)
	rec[0] = KindCall
	binary.LittleEndian.PutUint16(rec[2:], uint16(id))
	binary.LittleEndian.PutUint64(rec[callFixed:], 0xcafe)
	binary.LittleEndian.PutUint32(rec[callFixed+8+12:], 3) // location.id: device 3
	var c Call
	var p Proc
	if _, err := Decode(rec, &c, &p); err != nil {
		t.Fatal(err)
	}
	raw := c.Raw()
	f := s.Decode(&raw)
	if f.Ptr != 0xcafe || f.Device != 3 {
		t.Errorf("decoded handle %#x device %d, want 0xcafe on device 3", f.Ptr, f.Device)
	}
	for name, want := range map[string]int{"cuMemFree_v2": 96, "cuMemAlloc_v2": 104, "cuMemCreate": 168, "cuMemSetAccess": 272} {
		_, i, _ := cuda.Lookup(name)
		if got := RingBytes(&cuda.Symbols[i]); got != want {
			t.Errorf("%s takes %d bytes of the ring, want %d", name, got, want)
		}
	}
	cfg, err := SymCfg(s, false)
	if err != nil || cfg.TailOutb != 8 || cfg.TailIn != 8 || cfg.TailLen != 24 {
		t.Errorf("probes' tail layout %d/%d/%d (%v), want the second out parameter and the struct at 8, 24 bytes",
			cfg.TailOutb, cfg.TailIn, cfg.TailLen, err)
	}
}

// A call of a symbol with an array argument comes as an fx_call_array
// record; it decodes into the same Call, and its elements reach the
// decoder: [owner GPU 0, peer GPU 1] becomes two grants.
func TestDecodeArrayRecord(t *testing.T) {
	_, id, _ := cuda.Lookup("cuMemSetAccess")
	var a forensicFxCallArray
	a.Call.Kind, a.Call.Symbol, a.Call.Result = KindCallArray, uint16(id), 205
	a.Call.Args = [6]uint64{0x7f0000000000, 64 << 20, 0x1000, 2}
	a.N = 2
	for i, d := range [][3]uint32{{1, 0, 3}, {1, 1, 3}} {
		for j, v := range d {
			binary.LittleEndian.PutUint32(a.Data[i*12+j*4:], v)
		}
	}
	rec := unsafe.Slice((*byte)(unsafe.Pointer(&a)), callArraySize)
	var c Call
	var p Proc
	kind, err := Decode(rec, &c, &p)
	if err != nil || kind != KindCall || c.ArrayN != 2 || c.Result != 205 {
		t.Fatalf("Decode = %d, %v, %d elements, result %d", kind, err, c.ArrayN, c.Result)
	}
	raw := c.Raw()
	f := cuda.Symbols[id].Decode(&raw)
	want := []cuda.Grant{{Type: 1, Device: 0, Flags: 3}, {Type: 1, Device: 1, Flags: 3}}
	if f.Items != 2 || !reflect.DeepEqual(f.Grants, want) || f.Count != 2 {
		t.Fatalf("decoded %d items, grants %+v, count %d", f.Items, f.Grants, f.Count)
	}
	// A read that faulted leaves the elements out rather than guessing.
	c.Flags |= CallArrayFault
	raw = c.Raw()
	if f := cuda.Symbols[id].Decode(&raw); f.Has&cuda.FieldItems != 0 || f.Grants != nil {
		t.Fatalf("elements decoded from a faulted read: %+v", f)
	}
}

func TestSymCfgFollowsTable(t *testing.T) {
	for i := range cuda.Symbols {
		s := &cuda.Symbols[i]
		c, err := SymCfg(s, true)
		if err != nil {
			t.Errorf("%s: %v", s.Name, err)
			continue
		}
		if s.In.FromStack && c.InArg != inStack {
			t.Errorf("%s: stack-passed struct not read from the stack", s.Name)
		}
		if s.OutA.Len > 0 && (c.OutaArg < 0 || c.OutaArg > 5) {
			t.Errorf("%s: out pointer argument %d", s.Name, c.OutaArg)
		}
		if a := s.Array; a.Len > 0 && (c.ArrArg != a.Arg || c.ArrLen != a.Len || c.ArrMax != a.Max ||
			c.ArrCountArg != int8(a.Count.Index) || c.ArrCountWidth != a.Count.Width) {
			t.Errorf("%s: array capture %+v, probes configured %+v", s.Name, a, c)
		}
		if s.Array.Len == 0 && c.ArrLen != 0 {
			t.Errorf("%s: array capture configured for a row without one", s.Name)
		}
	}
	// A row asking for more than the probes hold is refused, not cut.
	for _, bad := range []cuda.Symbol{
		{Name: "in", In: cuda.Capture{Arg: 1, Len: uint8(inLen + 1)}},
		{Name: "array", Array: cuda.ArrayCapture{Arg: 1, Len: 16, Max: uint8(arrayMax), Count: cuda.Loc{Src: cuda.SrcArg, Index: 2, Width: 4}}},
		{Name: "count", Array: cuda.ArrayCapture{Arg: 1, Len: 8, Max: 1, Count: cuda.Loc{Src: cuda.SrcIn, Index: 2, Width: 4}}},
	} {
		if _, err := SymCfg(&bad, false); err == nil {
			t.Errorf("SymCfg(%+v) accepted", bad)
		}
	}
}

// FuzzDecodeRecord: any bytes from the ring buffer decode or fail cleanly,
// and a decoded call converts to the decoder's input without panicking.
func FuzzDecodeRecord(f *testing.F) {
	call := make([]byte, callSize)
	call[0] = KindCall
	f.Add(call)
	array := make([]byte, callArraySize)
	array[0] = KindCallArray
	array[callSize] = 200 // more elements than the buffer holds
	f.Add(array)
	proc := make([]byte, procSize)
	proc[0] = KindProc
	f.Add(proc)
	f.Add([]byte{})
	hold := make([]byte, unsafe.Sizeof(Hold{}))
	hold[0] = KindHold
	f.Add(hold)
	for _, k := range []uint8{KindUStack, KindPyStack, KindPyCode, KindStackRef, KindVMAs} {
		f.Add([]byte{k, 0, 0, 0, 0, 0, 0, 0})
	}
	f.Fuzz(func(t *testing.T, rec []byte) {
		var h Hold
		if DecodeHold(rec, &h) == nil {
			_ = CString(h.Name[:])
		}
		if IsStackRecord(rec) {
			var u UStack
			var ps PyStack
			var pc PyCode
			var r StackRef
			var v VMAs
			DecodeUStack(rec, &u)
			DecodePyStack(rec, &ps)
			DecodePyCode(rec, &pc)
			DecodeStackRef(rec, &r)
			DecodeVMAs(rec, &v)
			return
		}
		var c Call
		var p Proc
		kind, err := Decode(rec, &c, &p)
		switch {
		case err != nil:
			return
		case kind == KindCall:
			raw := c.Raw()
			if int(c.Symbol) < len(cuda.Symbols) {
				cuda.Symbols[c.Symbol].Decode(&raw)
			}
		case kind == KindProc:
			_ = CString(p.Comm[:])
			_, _ = p.Argv(), p.Exe()
		}
	})
}

// What the generated Go types cannot carry by themselves: the array
// lengths in the structs are the header's constants, and the common call
// record (every successful cuMemAlloc pays for each byte) stays at its
// size.
func TestABILengths(t *testing.T) {
	var c forensicFxCall
	var a forensicFxCallArray
	var p forensicFxProc
	var th forensicThread
	tests := []struct {
		what      string
		got, want int
	}{
		{"fx_call.tail", len(c.Tail), inLen + outALen + outBLen},
		{"fx_call's fixed part", int(unsafe.Offsetof(c.Tail)), callFixed},
		{"fx_call_array.data", len(a.Data), arrayLen},
		{"fx_proc.comm", len(p.Comm), commLen},
		{"fx_proc.filename", len(p.Filename), fileLen},
		{"fx_proc.args", len(p.Args), argsLen},
		{"thread frames", len(th.F), maxDepth},
		{"frame array buffer", len(th.F[0].Arr), arrayLen},
		{"fx_stats counters", len(forensicFxStats{}.C), counterMax},
		{"largest record without an array in the ring", recordBytes, 168},
		{"record of a call with nothing to read in the ring", (callFixed + ringHeader + 7) &^ 7, 96},
		{"a stack frame", int(unsafe.Sizeof(StackFrame{})), 32}, // struct bpf_stack_build_id
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %d, want %d", tt.what, tt.got, tt.want)
		}
	}
	if arrayMax*12 > arrayLen {
		t.Errorf("%d access descriptors do not fit the %d-byte array buffer", arrayMax, arrayLen)
	}
	spec, err := loadForensic()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := spec.Maps[forensicMapStacks].ValueSize, uint32(stackDepth)*uint32(unsafe.Sizeof(StackFrame{})); got != want {
		t.Errorf("stacks map values are %d bytes, Stack reads %d", got, want)
	}
	if got := spec.Maps[forensicMapSymcfg].MaxEntries; got != uint32(maxSymbols) {
		t.Errorf("symcfg map holds %d symbols, Load checks against %d", got, maxSymbols)
	}
}

// run.db stores the probes' call flags bit for bit: every enumerator of
// enum fx_call_flags (read from the BTF of the compiled object, so a new
// one cannot be missed) has its store.Event flag with the same value.
func TestCallFlagsAreStoredFlags(t *testing.T) {
	stored := map[string]uint32{
		"FX_CALL_FROZEN": store.EventFrozen, "FX_CALL_IN_FAULT": store.EventInFault,
		"FX_CALL_OUTA_FAULT": store.EventOutFault, "FX_CALL_OUTB_FAULT": store.EventOutBFault,
		"FX_CALL_REORDERED": store.EventReordered, "FX_CALL_ARRAY_CUT": store.EventArrayCut,
		"FX_CALL_ARRAY_FAULT": store.EventArrayFault, "FX_CALL_LATE_ATTACH": store.EventLateAttach,
	}
	spec, err := loadForensic()
	if err != nil {
		t.Fatal(err)
	}
	var e *btf.Enum
	if err := spec.Types.TypeByName("fx_call_flags", &e); err != nil {
		t.Fatal(err)
	}
	if len(e.Values) != len(stored) {
		t.Errorf("the header has %d call flags, store names %d", len(e.Values), len(stored))
	}
	for _, v := range e.Values {
		bit, ok := stored[v.Name]
		switch {
		case !ok:
			t.Errorf("%s (%#x) has no store.Event flag", v.Name, v.Value)
		case uint64(bit) != v.Value:
			t.Errorf("%s = %#x in the header, %#x in store", v.Name, v.Value, bit)
		case v.Name != "FX_CALL_LATE_ATTACH" && v.Value > 0xff:
			t.Errorf("%s (%#x): the probes' flags are bits 0-7", v.Name, v.Value)
		}
	}
}

// A process record's argv is exactly the bytes the probe copied: the ring
// memory after them (left from earlier records) is not an argument, empty
// arguments stay, and a cut list keeps its cut last argument. Its path is
// the last bytes of the file name buffer the probe says it wrote.
func TestProcArgvAndExe(t *testing.T) {
	junk := "d\x00\x01\x00\x01\x00\xff\xfe\x00"
	tests := []struct {
		name    string
		flags   uint8
		args    string // copied bytes
		path    string // at the end of the file name buffer
		want    []string
		wantExe string
	}{
		{"argv then old ring bytes", 0, "/bin/simwork\x00init; exit 0\x00", "/bin/simwork",
			[]string{"/bin/simwork", "init; exit 0"}, "/bin/simwork"},
		{"empty arguments", 0, "prog\x00\x00x\x00\x00", "/usr/bin/prog",
			[]string{"prog", "", "x", ""}, "/usr/bin/prog"},
		{"one empty argument", 0, "\x00", "/bin/true", []string{""}, "/bin/true"},
		{"cut list", ProcArgsCut, "prog\x00a very long argu", "/p",
			[]string{"prog", "a very long argu"}, "/p"},
		{"nothing copied", ProcArgsFault, "", "/p", nil, "/p"},
		{"path cut", ProcFilenameCut, "prog\x00", "/bin/prog", []string{"prog"}, ".../bin/prog"},
		{"no path", 0, "prog\x00", "", []string{"prog"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Proc{Kind: KindProc, What: ProcExec, Flags: tt.flags,
				ArgsLen: uint16(len(tt.args)), FilenameLen: uint16(len(tt.path))}
			full := tt.args + junk
			for i := range p.Args {
				p.Args[i] = int8(full[i%len(full)])
			}
			name := unsafe.Slice((*byte)(unsafe.Pointer(&p.Filename[0])), len(p.Filename))
			for i := range name {
				name[i] = 'z'
			}
			copy(name[len(name)-len(tt.path):], tt.path)
			var rec Proc
			if _, err := Decode(unsafe.Slice((*byte)(unsafe.Pointer(&p)), procSize), nil, &rec); err != nil {
				t.Fatal(err)
			}
			if got := rec.Argv(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Argv() = %q, want %q", got, tt.want)
			}
			if got := rec.Exe(); got != tt.wantExe {
				t.Errorf("Exe() = %q, want %q", got, tt.wantExe)
			}
		})
	}
}

// /proc/PID/cmdline and a probe's copy split the same way.
func TestArgsSplitsLikeCmdline(t *testing.T) {
	for in, want := range map[string][]string{
		"":               nil,
		"a\x00":          {"a"},
		"a\x00\x00":      {"a", ""},
		"a\x00\x00b\x00": {"a", "", "b"},
		"a\x00bc":        {"a", "bc"},
	} {
		if got := Args([]byte(in)); !reflect.DeepEqual(got, want) {
			t.Errorf("Args(%q) = %q, want %q", in, got, want)
		}
	}
}

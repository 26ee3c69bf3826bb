package bpf

import (
	"testing"
	"unsafe"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/internal/e2eenv"
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
		if got.OutaArg != 0 || got.OutaLen != 8 {
			t.Errorf("cuMemAlloc_v2 capture config = %+v, want out pointer arg 0, 8 bytes", got)
		}
		if want := uint8(0); opts.StackAll {
			want = 1
			if got.Stack != want {
				t.Errorf("stack flag = %d, want %d", got.Stack, want)
			}
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
	for _, rec := range [][]byte{nil, {KindCall}, {KindProc, 0, 0}, {9, 1, 2, 3}, make([]byte, 8)} {
		if _, err := Decode(rec, &c, &p); err == nil {
			t.Errorf("Decode(%v) = nil error", rec)
		}
	}
	rec := make([]byte, unsafe.Sizeof(Call{}))
	rec[0] = KindCall
	rec[2] = 7 // symbol, little-endian
	kind, err := Decode(rec, &c, &p)
	if err != nil || kind != KindCall || c.Symbol != 7 {
		t.Fatalf("Decode = %d, %v, symbol %d", kind, err, c.Symbol)
	}
}

func TestSymCfgFollowsTable(t *testing.T) {
	for i := range cuda.Symbols {
		s := &cuda.Symbols[i]
		c := SymCfg(s, true)
		if s.In.FromStack && c.InArg != inStack {
			t.Errorf("%s: stack-passed struct not read from the stack", s.Name)
		}
		if c.InLen > 32 || c.OutaLen > 32 || c.OutbLen > 8 {
			t.Errorf("%s: capture longer than the record's buffers: %+v", s.Name, c)
		}
		if s.OutA.Len > 0 && (c.OutaArg < 0 || c.OutaArg > 5) {
			t.Errorf("%s: out pointer argument %d", s.Name, c.OutaArg)
		}
	}
}

// FuzzDecodeRecord: any bytes from the ring buffer decode or fail cleanly,
// and a decoded call converts to the decoder's input without panicking.
func FuzzDecodeRecord(f *testing.F) {
	call := make([]byte, unsafe.Sizeof(Call{}))
	call[0] = KindCall
	f.Add(call)
	proc := make([]byte, unsafe.Sizeof(Proc{}))
	proc[0] = KindProc
	f.Add(proc)
	f.Add([]byte{})
	hold := make([]byte, unsafe.Sizeof(Hold{}))
	hold[0] = KindHold
	f.Add(hold)
	f.Fuzz(func(t *testing.T, rec []byte) {
		var h Hold
		if DecodeHold(rec, &h) == nil {
			_ = CString(h.Name[:])
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
			_ = Args(p.Args[:])
		}
	})
}

// recordBytes sizes the wake-up threshold: a call record plus the ring
// buffer's 8-byte header.
func TestRecordBytes(t *testing.T) {
	if callSize+8 != recordBytes {
		t.Fatalf("a call record takes %d bytes in the ring, recordBytes says %d", callSize+8, recordBytes)
	}
}

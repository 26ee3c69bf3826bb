package store

import (
	"bytes"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
)

func sampleCapture() Capture {
	stack := bytes.Repeat([]byte{0, 0, 0, 0, 0x10, 0x20, 0x40, 0x7f}, 1200) // 9600 bytes, compressible
	stack[17] = 0xaa
	return Capture{PID: 41, TID: 43, Time: 123456789, Symbol: 7, Failed: true, Fault: true,
		Regs:  Regs{IP: 0x401234, SP: 0x7ffd0000, BP: 1, BX: 2, R12: 3, R13: 4, R14: 5, R15: 6, FSBase: 0x7f0000001000},
		Stack: stack,
		Maps: []Mapping{{Start: 0x400000, End: 0x402000, Offset: 0x1000, Path: "/bin/x", BuildID: "ab12", Dev: 0xfd00001, Inode: 99},
			{Start: 0x7f0000000000, End: 0x7f0000010000, Name: "libgone.so"}}}
}

// A batch's captures, Python frames, code objects and references read
// back as written, each under its own key.
func TestStackCapturesRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.db")
	w, err := Create(path, CreateOptions{}, testRun(), []string{"cuMemAlloc_v2"})
	if err != nil {
		t.Fatal(err)
	}
	c := sampleCapture()
	other := c
	other.TID, other.Time, other.Failed, other.Stack, other.Maps = 44, 5, false, nil, nil
	ps := PyStack{PID: 41, TID: 43, Time: 123456789, Status: "truncated", Minor: 11, Thread: 0xabc,
		Frames: []PyFrame{{Code: 0x10, Instr: 0x18, Entry: true}, {Code: 0x20, Instr: 0x30, Owner: 3}}}
	codes := []PyCode{
		{PID: 41, Code: 0x20, Time: 9, Minor: 11, FirstLine: 3, Filename: PyString{State: 0x64, Length: 4, Data: []byte("a.py")},
			LineTable: []byte{1, 2, 3}, LineTableSize: 3},
		{PID: 41, Code: 0x10, Time: 8, Minor: 11, QualName: PyString{State: 0x64, Length: 1, Data: []byte("f")}},
		{PID: 41, Code: 0x10, Time: 2, Minor: 11, Fault: true},
		{PID: 42, Code: 0x10, Time: 1},
	}
	refs := []StackRef{{PID: 41, TID: 43, Time: 200, RefTID: 43, RefTime: 123456789},
		{PID: 41, TID: 50, Time: 150, RefTID: 43, RefTime: 100}, // an earlier time than the one before
		{PID: 7, TID: 7, Time: 1 << 40, RefTID: 9, RefTime: 1 << 39}}
	b := &Batch{Captures: []Capture{c, other}, PyStacks: []PyStack{ps}, PyCodes: codes, StackRefs: refs[:2]}
	if err := w.Commit(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(&Batch{StackRefs: refs[2:]}); err != nil {
		t.Fatal(err)
	}
	w.Close()

	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, want := range []Capture{c, other} {
		got, err := r.Capture(want.PID, want.TID, want.Time)
		if err != nil || got == nil {
			t.Fatalf("capture %d/%d/%d: %v, %v", want.PID, want.TID, want.Time, got, err)
		}
		if got.Stack == nil {
			got.Stack = []byte(nil)
		}
		if len(want.Stack) == 0 {
			want.Stack = got.Stack[:0:0]
			got.Stack = want.Stack
		}
		if !reflect.DeepEqual(*got, want) {
			t.Errorf("capture read back\n%+v\nwant\n%+v", *got, want)
		}
	}
	if got, err := r.Capture(41, 43, 1); got != nil || err != nil {
		t.Errorf("capture of another call: %+v, %v", got, err)
	}
	if got, err := r.PyStack(41, 43, 123456789); err != nil || !reflect.DeepEqual(*got, ps) {
		t.Errorf("Python stack %+v, %v", got, err)
	}
	if got, _ := r.PyStack(41, 44, 5); got != nil {
		t.Errorf("Python stack of a call without one: %+v", got)
	}
	got, err := r.PyCodes(41)
	if err != nil || len(got) != 3 {
		t.Fatalf("code objects of pid 41: %d, %v", len(got), err)
	}
	// Ordered by address, then time.
	if got[0].Time != 2 || got[1].Time != 8 || got[2].Code != 0x20 || !reflect.DeepEqual(got[2], codes[0]) {
		t.Errorf("code objects %+v", got)
	}
	var back []StackRef
	if err := r.StackRefs(func(s *StackRef) error { back = append(back, *s); return nil }); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, refs) {
		t.Errorf("references\n%+v\nwant\n%+v", back, refs)
	}
}

// A file written before stack captures existed has none: every reader
// answers with nothing, not an error.
func TestStackCapturesAbsentInOlderFiles(t *testing.T) {
	r := openFixture(t, "schema1.db.gz")
	defer r.Close()
	c, err1 := r.Capture(1, 1, 1)
	p, err2 := r.PyStack(1, 1, 1)
	codes, err3 := r.PyCodes(1)
	n := 0
	err4 := r.StackRefs(func(*StackRef) error { n++; return nil })
	if c != nil || p != nil || codes != nil || n != 0 || errors.Join(err1, err2, err3, err4) != nil {
		t.Errorf("capture %v, Python stack %v, codes %v, %d references, errors %v", c, p, codes, n, errors.Join(err1, err2, err3, err4))
	}
}

// Corrupt capture values and reference chunks are ErrCorrupt, never a
// panic or a huge allocation.
func TestStackCapturesCorrupt(t *testing.T) {
	good, err := encodeCapture(&Capture{Stack: []byte{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	key := CaptureKey(1, 2, 3)
	for name, v := range map[string][]byte{
		"empty":          nil,
		"short header":   good[:captureHeader-1],
		"wrong format":   append([]byte{9}, good[1:]...),
		"cut stream":     good[:len(good)-3],
		"not deflate":    append(append([]byte(nil), good[:captureHeader]...), 0xff, 0xff, 0xff),
		"maps too long":  mustCapture(t, captureBody(1<<30, nil)),
		"maps not json":  mustCapture(t, captureBody(3, []byte("{{{"))),
		"stack too long": mustCapture(t, captureBody(0, make([]byte, maxCaptureStack+1))),
	} {
		if _, err := decodeCapture(key, v); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	if _, err := decodeCapture(key[:8], good); !errors.Is(err, ErrCorrupt) {
		t.Errorf("short key: %v", err)
	}
	chunk := encodeStackRefs([]StackRef{{PID: 1, TID: 2, Time: 3, RefTID: 2, RefTime: 1}})
	for name, v := range map[string][]byte{
		"empty":     nil,
		"format":    {9, 1},
		"cut":       chunk[:len(chunk)-1],
		"big count": {stackRefFormat, 0xff, 0xff, 0xff, 0x7f},
	} {
		if err := decodeStackRefs(v, func(*StackRef) error { return nil }); !errors.Is(err, ErrCorrupt) {
			t.Errorf("references %s: %v, want ErrCorrupt", name, err)
		}
	}
}

// captureBody is a deflated capture body: the mappings' length, then data.
func captureBody(mapsLen uint64, data []byte) []byte {
	var b bytes.Buffer
	b.Write(appendUvarint(nil, mapsLen))
	b.Write(data)
	return b.Bytes()
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// mustCapture is a capture value whose deflated body is body.
func mustCapture(t *testing.T, body []byte) []byte {
	t.Helper()
	hdr := make([]byte, captureHeader)
	hdr[0] = captureFormat
	v, err := deflated(hdr, body)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

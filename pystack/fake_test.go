package pystack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf16"
)

// fakeMem is a process memory of separately allocated objects.
type fakeMem struct {
	objs map[uint64][]byte
	next uint64
}

func newFakeMem() *fakeMem { return &fakeMem{objs: map[uint64][]byte{}, next: 0x10000} }

func (m *fakeMem) ReadAt(p []byte, off int64) (int, error) {
	a := uint64(off)
	for base, b := range m.objs {
		if base <= a && a+uint64(len(p)) <= base+uint64(len(b)) {
			return copy(p, b[a-base:]), nil
		}
	}
	return 0, fmt.Errorf("unmapped %#x", a)
}

// alloc returns the address of a new zeroed object of n bytes.
func (m *fakeMem) alloc(n int64) uint64 {
	a := m.next
	m.objs[a] = make([]byte, n)
	m.next += uint64(n+15)&^15 + 64
	return a
}

func (m *fakeMem) put64(addr uint64, off int64, v uint64) {
	for base, b := range m.objs {
		if base <= addr && addr < base+uint64(len(b)) {
			binary.LittleEndian.PutUint64(b[addr-base+uint64(off):], v)
			return
		}
	}
	panic("put64 outside every object")
}

func (m *fakeMem) put32(addr uint64, off int64, v int32) {
	b := m.objs[addr]
	binary.LittleEndian.PutUint32(b[off:], uint32(v))
}

func (m *fakeMem) put8(addr uint64, off int64, v byte) { m.objs[addr][off] = v }

// str allocates a compact str object holding s, in the narrowest kind.
func (m *fakeMem) str(l *Layout, s string) uint64 {
	rs := []rune(s)
	kind, ascii := 1, true
	for _, r := range rs {
		if r > 0x7f {
			ascii = false
		}
		if r > 0xff && kind < 2 {
			kind = 2
		}
		if r > 0xffff {
			kind = 4
		}
	}
	head := l.CompactSize
	if ascii {
		head = l.ASCIISize
	}
	a := m.alloc(head + int64(len(rs)*kind) + 4)
	state := uint64(kind<<stateKindShift | stateCompact)
	if ascii {
		state |= stateASCII
	}
	m.put64(a, l.UnicodeLength, uint64(len(rs)))
	m.put32(a, l.UnicodeState, int32(state))
	b := m.objs[a][head:]
	for i, r := range rs {
		switch kind {
		case 1:
			b[i] = byte(r)
		case 2:
			binary.LittleEndian.PutUint16(b[2*i:], uint16(r))
		case 4:
			binary.LittleEndian.PutUint32(b[4*i:], uint32(r))
		}
	}
	return a
}

func (m *fakeMem) bytesObj(l *Layout, data []byte) uint64 {
	a := m.alloc(l.BytesData + int64(len(data)) + 1)
	m.put64(a, l.BytesSize, uint64(len(data)))
	copy(m.objs[a][l.BytesData:], data)
	return a
}

// fakeProc is a fake 3.12 process: one interpreter with threads, each a
// list of frames.
type fakeProc struct {
	mem      *fakeMem
	l        *Layout
	target   *Target
	codeType uint64
}

func newFakeProc(t *testing.T, minor int) *fakeProc {
	l, err := layoutFor(3, minor)
	if err != nil {
		t.Fatal(err)
	}
	m := newFakeMem()
	p := &fakeProc{mem: m, l: l, codeType: m.alloc(64)}
	rt := m.alloc(l.RuntimeInterpretersHead + 64)
	interp := m.alloc(l.InterpThreadsHead + 64)
	m.put64(rt, l.RuntimeInterpretersHead, interp)
	p.target = &Target{Version: Version{3, minor, 0}, Layout: l, Runtime: rt, CodeType: p.codeType}
	return p
}

func (p *fakeProc) interp() uint64 {
	return binary.LittleEndian.Uint64(p.mem.objs[p.target.Runtime][p.l.RuntimeInterpretersHead:])
}

// code allocates a code object; lines maps its bytecode to lines with one
// 3.11 location entry per code unit (line delta 0 or +1).
func (p *fakeProc) code(name, qual, file string, first int32, units int) uint64 {
	l := p.l
	c := p.mem.alloc(l.CodeAdaptive + int64(2*units))
	p.mem.put64(c, l.CodeType, p.codeType)
	p.mem.put64(c, l.CodeFilename, p.mem.str(l, file))
	p.mem.put64(c, l.CodeName, p.mem.str(l, name))
	p.mem.put64(c, l.CodeQualname, p.mem.str(l, qual))
	p.mem.put32(c, l.CodeFirstLine, first)
	p.mem.put32(c, l.CodeFirstTraceable, 1)
	table := make([]byte, units)
	for i := range table {
		table[i] = 0x80 | 11<<3 // one unit, next line
	}
	p.mem.put64(c, l.CodeLineTable, p.mem.bytesObj(l, table))
	return c
}

type fakeFrame struct {
	code  uint64
	unit  int // instruction index
	owner byte
}

// thread adds a thread state with the given native id and frames
// (innermost first) to the interpreter, at the head of its list.
func (p *fakeProc) thread(tid uint64, frames []fakeFrame) uint64 {
	l, m := p.l, p.mem
	ts := m.alloc(l.ThreadNativeID + 64)
	m.put64(ts, l.ThreadNativeID, tid)
	interp := p.interp()
	m.put64(ts, l.ThreadNext, binary.LittleEndian.Uint64(m.objs[interp][l.InterpThreadsHead:]))
	m.put64(interp, l.InterpThreadsHead, ts)
	var prev uint64
	for i := len(frames) - 1; i >= 0; i-- {
		f := m.alloc(l.FrameSize)
		m.put64(f, l.FrameCode, frames[i].code)
		m.put64(f, l.FramePrevious, prev)
		m.put64(f, l.FrameInstr, frames[i].code+uint64(l.CodeAdaptive)+uint64(2*frames[i].unit))
		m.put8(f, l.FrameOwner, frames[i].owner)
		prev = f
	}
	cf := m.alloc(16)
	m.put64(cf, l.CFrameCurrentFrame, prev)
	m.put64(ts, l.ThreadFrame, cf)
	return ts
}

func TestFakeWalk(t *testing.T) {
	p := newFakeProc(t, 12)
	f1 := p.code("f", "Outer.f", "/src/été.py", 10, 8)
	g := p.code("g", "g", "/src/€.py", 20, 8)
	gen := p.code("gen", "gen", "/src/😀.py", 30, 8)
	shim := p.code("<shim>", "<shim>", "<shim>", 0, 2)
	p.thread(7, []fakeFrame{{code: f1, unit: 3}})
	p.thread(42, []fakeFrame{
		{code: g, unit: 0},                            // incomplete: before _co_firsttraceable
		{code: f1, unit: 5},                           // line 10+5+1
		{code: shim, owner: ownedByCStack},            // marks f1 as an entry
		{code: gen, unit: 0, owner: ownedByGenerator}, // generators are never incomplete
		{code: g, unit: 2},
	})
	frames, st, err := p.target.Walk(p.mem, ThreadKey{TID: 42})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range frames {
		got = append(got, fmt.Sprintf("%s %s:%d entry=%v", f.Function, f.File, f.Line, f.Entry))
	}
	want := []string{"Outer.f /src/été.py:16 entry=true", "gen /src/😀.py:31 entry=false", "g /src/€.py:23 entry=false"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("frames\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(st.Frames) != 5 || st.Truncated {
		t.Errorf("%d raw frames (truncated %v), want 5", len(st.Frames), st.Truncated)
	}
	if _, err := p.target.FindThread(p.mem, ThreadKey{TID: 8}); !errors.Is(err, ErrNoThread) {
		t.Errorf("unknown thread: %v", err)
	}
	st, err = p.target.Capture(p.mem, ThreadKey{TID: 42}, 3)
	if err != nil || !st.Truncated || len(st.Frames) != 3 {
		t.Errorf("bounded capture: %d frames, truncated %v, %v", len(st.Frames), st != nil && st.Truncated, err)
	}
	if _, err := p.target.Resolve(st, nil); err == nil {
		t.Error("resolving without the code objects succeeded")
	}
}

func TestFakeWalkBounds(t *testing.T) {
	p := newFakeProc(t, 12)
	c := p.code("f", "f", "f.py", 1, 4)
	ts := p.thread(1, []fakeFrame{{code: c, unit: 2}})
	// A thread list that loops on itself, and a frame that is its own
	// caller: the walk must end, not hang.
	p.mem.put64(ts, p.l.ThreadNext, ts)
	if _, err := p.target.FindThread(p.mem, ThreadKey{TID: 2}); !errors.Is(err, ErrNoThread) {
		t.Errorf("looping thread list: %v", err)
	}
	cf := binary.LittleEndian.Uint64(p.mem.objs[ts][p.l.ThreadFrame:])
	frame := binary.LittleEndian.Uint64(p.mem.objs[cf][p.l.CFrameCurrentFrame:])
	p.mem.put64(frame, p.l.FramePrevious, frame)
	st, err := p.target.Capture(p.mem, ThreadKey{TID: 1}, 0)
	if err != nil || !st.Truncated || len(st.Frames) != MaxFrames {
		t.Errorf("looping frames: %v", err)
	}
	// A frame pointing into unmapped memory is an error, not a panic.
	p.mem.put64(frame, p.l.FramePrevious, 0xdead0000)
	if _, err := p.target.Capture(p.mem, ThreadKey{TID: 1}, 0); err == nil {
		t.Error("a frame in unmapped memory was read")
	}
}

func TestFake310NeedsPthreadID(t *testing.T) {
	l, _ := layoutFor(3, 10)
	m := newFakeMem()
	rt := m.alloc(l.RuntimeInterpretersHead + 8)
	interp := m.alloc(64)
	ts := m.alloc(l.ThreadID + 8)
	m.put64(rt, l.RuntimeInterpretersHead, interp)
	m.put64(interp, l.InterpThreadsHead, ts)
	m.put64(ts, l.ThreadID, 0x7f0012345640)
	target := &Target{Version: Version{3, 10, 13}, Layout: l, Runtime: rt}
	if _, err := target.FindThread(m, ThreadKey{TID: 5}); !errors.Is(err, ErrNoThread) || !strings.Contains(err.Error(), "pthread id") {
		t.Errorf("3.10 by tid alone: %v", err)
	}
	if got, err := target.FindThread(m, ThreadKey{TID: 5, PthreadID: 0x7f0012345640}); err != nil || got != ts {
		t.Errorf("3.10 by pthread id: %#x, %v", got, err)
	}
}

func TestRawString(t *testing.T) {
	utf16le := func(s string) []byte {
		var b []byte
		for _, u := range utf16.Encode([]rune(s)) {
			b = binary.LittleEndian.AppendUint16(b, u)
		}
		return b
	}
	for _, tc := range []struct {
		s    RawString
		want string
	}{
		{RawString{State: 1<<2 | stateCompact | stateASCII, Length: 5, Data: []byte("hello")}, "hello"},
		{RawString{State: 1<<2 | stateCompact, Length: 3, Data: []byte{'d', 0xe9, 'j'}}, "déj"},
		{RawString{State: 2<<2 | stateCompact, Length: 2, Data: utf16le("€$")}, "€$"},
		{RawString{State: 4<<2 | stateCompact, Length: 1, Data: []byte{0x00, 0xf6, 0x01, 0x00}}, "😀"},
		{RawString{State: 1<<2 | stateCompact | stateASCII, Length: 2000, Data: []byte("abc")}, "abc…"},
		{RawString{State: 3<<2 | stateCompact, Length: 1, Data: []byte{1, 2, 3}}, ""},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.s, got, tc.want)
		}
	}
}

func TestCheckDebugOffsets(t *testing.T) {
	l, _ := layoutFor(3, 13)
	build := func(edit func(b []byte)) (*Target, *fakeMem) {
		m := newFakeMem()
		rt := m.alloc(8 * debugWordsRead)
		b := m.objs[rt]
		copy(b, "xdebugpy")
		binary.LittleEndian.PutUint64(b[8:], 0x030d00f0)
		for _, d := range debugWords {
			binary.LittleEndian.PutUint64(b[8*d.word:], uint64(d.field(l)))
		}
		if edit != nil {
			edit(b)
		}
		return &Target{Version: Version{3, 13, 0}, Layout: l, Runtime: rt}, m
	}
	for _, tc := range []struct {
		name string
		edit func(b []byte)
		want error
	}{
		{"matching", nil, nil},
		{"no cookie", func(b []byte) { copy(b, "xxxxxxxx") }, ErrLayout},
		{"another version", func(b []byte) { binary.LittleEndian.PutUint64(b[8:], 0x030e00a0) }, ErrLayout},
		{"free-threaded", func(b []byte) { binary.LittleEndian.PutUint64(b[16:], 1) }, ErrUnsupported},
		{"moved field", func(b []byte) { binary.LittleEndian.PutUint64(b[8*debugWords[5].word:], 999) }, ErrLayout},
	} {
		target, m := build(tc.edit)
		if err := target.CheckDebugOffsets(m); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

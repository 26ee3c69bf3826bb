package pystack

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Bounds of a walk: a probe must bound every loop, and so does this
// reference implementation of what it reads.
const (
	MaxInterpreters = 8   // interpreters searched for the thread
	MaxThreads      = 256 // thread states searched per interpreter
	// MaxFrames is the default number of frames Capture reads.
	MaxFrames = 128
)

// Memory reads the target process's memory: a /proc/PID/mem file, or the
// bytes a probe copied. ReadAt's offset is the address.
type Memory = io.ReaderAt

// ThreadKey identifies the failing thread: its kernel thread id (matched
// against native_thread_id, 3.11+) and its pthread id, which on glibc is
// the thread's fs base (matched against thread_id; needed for 3.10).
type ThreadKey struct {
	TID       uint32
	PthreadID uint64
}

// RawFrame is what a probe reads per Python frame: one copy of the first
// Layout.FrameSize bytes of the frame, of which these fields are kept.
type RawFrame struct {
	Addr  uint64 // the frame
	Code  uint64 // its code object (3.13: f_executable)
	Instr uint64 // 3.11+: the instruction pointer; 3.10: f_lasti
	Owner uint8  // 3.11+
	Entry bool   // 3.11: is_entry
}

// Stack is a thread's captured Python frames, innermost first.
type Stack struct {
	Thread    uint64 // the PyThreadState
	Frames    []RawFrame
	Truncated bool // more frames than the bound
	Reads     int  // memory reads it took, for cost accounting
}

// reader counts reads and decodes little-endian fields.
type reader struct {
	mem   Memory
	reads int
}

func (r *reader) read(addr uint64, n int64) ([]byte, error) {
	if addr == 0 {
		return nil, fmt.Errorf("null pointer: %w", ErrLayout)
	}
	b := make([]byte, n)
	r.reads++
	if _, err := r.mem.ReadAt(b, int64(addr)); err != nil {
		return nil, fmt.Errorf("reading %d bytes at %#x: %w", n, addr, err)
	}
	return b, nil
}

func (r *reader) ptr(addr uint64) (uint64, error) {
	b, err := r.read(addr, 8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func u64(b []byte, off int64) uint64 { return binary.LittleEndian.Uint64(b[off:]) }

func i32(b []byte, off int64) int32 { return int32(binary.LittleEndian.Uint32(b[off:])) }

// FindThread returns the address of the thread's PyThreadState, searching
// every interpreter's thread list.
func (t *Target) FindThread(mem Memory, key ThreadKey) (uint64, error) {
	r := &reader{mem: mem}
	return t.findThread(r, key)
}

func (t *Target) findThread(r *reader, key ThreadKey) (uint64, error) {
	l := t.Layout
	if l.ThreadNativeID < 0 && key.PthreadID == 0 {
		return 0, fmt.Errorf("CPython %s records no native thread id: the pthread id (fs base) is needed: %w", t.Version, ErrNoThread)
	}
	interp, err := r.ptr(t.Runtime + uint64(l.RuntimeInterpretersHead))
	if err != nil {
		return 0, fmt.Errorf("interpreters: %w", err)
	}
	for i := 0; interp != 0 && i < MaxInterpreters; i++ {
		ts, err := r.ptr(interp + uint64(l.InterpThreadsHead))
		if err != nil {
			return 0, err
		}
		for j := 0; ts != 0 && j < MaxThreads; j++ {
			ok, err := t.matches(r, ts, key)
			if err != nil {
				return 0, err
			}
			if ok {
				return ts, nil
			}
			if ts, err = r.ptr(ts + uint64(l.ThreadNext)); err != nil {
				return 0, err
			}
		}
		if interp, err = r.ptr(interp + uint64(l.InterpNext)); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("thread %d: %w", key.TID, ErrNoThread)
}

func (t *Target) matches(r *reader, ts uint64, key ThreadKey) (bool, error) {
	l := t.Layout
	if l.ThreadNativeID >= 0 {
		id, err := r.ptr(ts + uint64(l.ThreadNativeID))
		return id == uint64(key.TID), err
	}
	id, err := r.ptr(ts + uint64(l.ThreadID))
	return id == key.PthreadID, err
}

// currentFrame reads the thread's innermost frame pointer.
func (t *Target) currentFrame(r *reader, ts uint64) (uint64, error) {
	l := t.Layout
	f, err := r.ptr(ts + uint64(l.ThreadFrame))
	if err != nil || l.CFrameCurrentFrame < 0 || f == 0 {
		return f, err
	}
	return r.ptr(f + uint64(l.CFrameCurrentFrame)) // through _PyCFrame
}

// Capture reads the Python frames of the thread, at most max (MaxFrames
// when 0): the reads a probe makes at the failed call.
func (t *Target) Capture(mem Memory, key ThreadKey, max int) (*Stack, error) {
	if max <= 0 {
		max = MaxFrames
	}
	r := &reader{mem: mem}
	ts, err := t.findThread(r, key)
	if err != nil {
		return nil, err
	}
	st := &Stack{Thread: ts}
	f, err := t.currentFrame(r, ts)
	if err != nil {
		return nil, fmt.Errorf("current frame: %w", err)
	}
	l := t.Layout
	for f != 0 {
		if len(st.Frames) == max {
			st.Truncated = true
			break
		}
		b, err := r.read(f, l.FrameSize)
		if err != nil {
			return nil, fmt.Errorf("frame %d: %w", len(st.Frames), err)
		}
		rf := RawFrame{Addr: f, Code: u64(b, l.FrameCode)}
		if l.Lines == lines310 {
			rf.Instr = uint64(i32(b, l.FrameInstr))
		} else {
			rf.Instr = u64(b, l.FrameInstr)
			rf.Owner = b[l.FrameOwner]
		}
		if l.FrameIsEntry >= 0 {
			rf.Entry = b[l.FrameIsEntry] != 0
		}
		st.Frames = append(st.Frames, rf)
		f = u64(b, l.FramePrevious)
	}
	st.Reads = r.reads
	return st, nil
}

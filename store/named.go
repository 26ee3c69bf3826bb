package store

import (
	"bytes"
	"compress/flate"
	"encoding/json"
	"fmt"
	"io"

	bolt "go.etcd.io/bbolt"
)

// Named stacks: a stack capture unwound and named by the recorder while
// the process and its files were there (schema 3). Only what a report
// shows is kept: addresses, how each frame was found, files and build
// ids, function names, Python files and lines, and why the walk stopped.
// No register value and no byte of the process's memory is in it.
//
//	named  CaptureKey -> the format byte (1), then the NamedStack's JSON,
//	       deflated (a deep stack repeats its files and functions)

var bucketNamed = []byte("named")

// namedFormat is the first byte of a named stack's value.
const namedFormat = 1

// maxNamedJSON bounds a named stack's inflated JSON, so a corrupt value
// cannot make a reader allocate much.
const maxNamedJSON = 4 << 20

// NamedValue encodes a named stack's JSON as the bucket stores it.
func NamedValue(js []byte) ([]byte, error) {
	return deflated([]byte{namedFormat}, js)
}

// NamedJSON decodes a stored named stack value to its JSON.
func NamedJSON(v []byte) ([]byte, error) {
	if len(v) == 0 || v[0] != namedFormat {
		return nil, fmt.Errorf("%w: named stack of %d bytes", ErrCorrupt, len(v))
	}
	js, err := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(v[1:])), maxNamedJSON+1))
	if err != nil || len(js) > maxNamedJSON {
		return nil, fmt.Errorf("%w: named stack: %v", ErrCorrupt, err)
	}
	return js, nil
}

// NamedStack is the stack of one captured call, innermost first, named
// when it was recorded.
type NamedStack struct {
	PID uint32 `json:"pid"`
	TID uint32 `json:"tid"`
	// Time is the call's return (its event's End).
	Time int64 `json:"time_ns"`
	// Stop is why the native walk ended (unwind.Stop's name: outermost,
	// stack-end, no-cfi, no-file, outside-mappings, bad-cfi,
	// depth-limit); Detail says where, in words.
	Stop   string       `json:"stop"`
	Detail string       `json:"detail,omitempty"`
	Frames []NamedFrame `json:"frames"`
	// Python says what became of the process's Python frames: "" for a
	// process that is no CPython, ok, truncated, no-thread, fault,
	// not-captured, or "not read: ..." / "unreadable: ..." with the reason.
	Python string `json:"python,omitempty"`
	// PythonStatus is Python as a value a reader decides from: "" for a
	// process that is no CPython, else one of the PyStatus values. Named
	// stacks written before it existed get it from Python when read (see
	// compat.go).
	PythonStatus PyStatus       `json:"python_status,omitempty"`
	PyFrames     []NamedPyFrame `json:"py_frames,omitempty"`
}

// PyStatus is what became of a named stack's Python frames.
type PyStatus string

// PyStatus values.
const (
	// PyOK: the Python frames were read, all of them.
	PyOK PyStatus = "ok"
	// PyTruncated: the outermost frames were beyond what the probe reads.
	PyTruncated PyStatus = "truncated"
	// PyNoThread: the interpreter had no thread state for the thread.
	PyNoThread PyStatus = "no-thread"
	// PyFault: a read of the interpreter's memory failed.
	PyFault PyStatus = "fault"
	// PyNotCaptured: the probe read no Python frames with the capture
	// (the interpreter was not located yet).
	PyNotCaptured PyStatus = "not-captured"
	// PyNotLocated: the interpreter was never located while the process
	// lived, so no probe could read its frames.
	PyNotLocated PyStatus = "not-located"
	// PyNotRead: the interpreter was located, but its frames are not read
	// (a version or build with no known layout, or the probes could not
	// be told where it is).
	PyNotRead PyStatus = "not-read"
	// PyUnreadable: the frames were captured but could not be decoded.
	PyUnreadable PyStatus = "unreadable"
)

// NamedFrame is one native frame of a NamedStack.
type NamedFrame struct {
	// Addr is the instruction pointer (first frame) or return address.
	Addr uint64 `json:"addr"`
	// Via is how the frame was found: registers, cfi, frame-pointer.
	Via string `json:"via"`
	// Path is the file as the process saw it ("" when no file was found:
	// Name then has the name the probe read, if any); BuildID its build id.
	Path    string `json:"path,omitempty"`
	Name    string `json:"name,omitempty"`
	BuildID string `json:"build_id,omitempty"`
	// Function and Offset: the symbol holding Addr and Addr's offset in
	// it; empty when no symbol table named it.
	Function string `json:"function,omitempty"`
	Offset   uint64 `json:"offset,omitempty"`
}

// NamedPyFrame is one Python frame of a NamedStack, innermost first.
type NamedPyFrame struct {
	Function string `json:"function"`
	File     string `json:"file"`
	Line     int    `json:"line,omitempty"`
	// Entry marks the first frame run by one call of the evaluation loop
	// (it replaces one _PyEval_EvalFrameDefault native frame).
	Entry bool `json:"entry,omitempty"`
}

// putNamed writes a batch's named stacks.
func putNamed(b *bolt.Bucket, batch *Batch) error {
	for i := range batch.Named {
		n := &batch.Named[i]
		js, err := json.Marshal(n)
		if err != nil {
			return err
		}
		v, err := NamedValue(js)
		if err != nil {
			return err
		}
		if err := b.Put(CaptureKey(n.PID, n.TID, n.Time), v); err != nil {
			return err
		}
	}
	return nil
}

// NamedStack returns the named stack of a call (nil when there is none:
// no capture, or a file written before stacks were named when recorded).
func (r *Reader) NamedStack(pid, tid uint32, t int64) (n *NamedStack, err error) {
	err = r.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketNamed)
		if b == nil {
			return nil
		}
		v := b.Get(CaptureKey(pid, tid, t))
		if v == nil {
			return nil
		}
		js, err := NamedJSON(v)
		if err != nil {
			return err
		}
		n = &NamedStack{}
		if err := json.Unmarshal(js, n); err != nil {
			return fmt.Errorf("%w: named stack: %v", ErrCorrupt, err)
		}
		upgradeNamed(n)
		return nil
	})
	return n, err
}

// NamedStack returns the named stack of a call from the segment that has
// it (nil when none has).
func (s *Set) NamedStack(pid, tid uint32, t int64) (*NamedStack, error) {
	for i := len(s.segs) - 1; i >= 0; i-- {
		n, err := s.segs[i].r.NamedStack(pid, tid, t)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.segs[i].r.path, err)
		}
		if n != nil {
			return n, nil
		}
	}
	return nil, nil
}

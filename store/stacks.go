package store

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	bolt "go.etcd.io/bbolt"
)

// Stack captures: what the probes copied at a call's return so that its
// stack can be unwound offline (docs/stacks.md). Four buckets, absent in
// files written before they existed (readers find nothing, not an error):
//
//	captures   CaptureKey -> binary Capture (below)
//	pystacks   CaptureKey -> JSON PyStack: the Python frames of the same call
//	pycode     uint32 BE pid + uint64 BE code address + uint64 BE time ->
//	           JSON PyCode: a code object as copied at that time
//	stackrefs  uint64 BE sequence -> a chunk of StackRefs (binary, below)

// Bucket names of the stack captures.
var (
	bucketCaptures  = []byte("captures")
	bucketPyStacks  = []byte("pystacks")
	bucketPyCode    = []byte("pycode")
	bucketStackRefs = []byte("stackrefs")
)

// Regs are the registers a capture keeps: the user registers at the
// call's return (the caller's, at the instruction after its call) and the
// thread's fs base.
type Regs struct {
	IP, SP, BP, BX, R12, R13, R14, R15, FSBase uint64
}

// Capture is one stack capture: the registers and a copy of the user
// stack from Regs.SP up, at the return of the call of thread TID of
// process PID that returned at Time (its event's End).
type Capture struct {
	PID, TID uint32
	Time     int64
	Symbol   uint16
	// Failed: the capture is of a failed call (else of a device
	// allocation under --stacks). Fault: the copy ended at an unreadable
	// page, the top of the thread's stack, before the copy's limit.
	Failed, Fault bool
	Regs          Regs
	Stack         []byte
	// Maps are the process's executable file mappings at the call's
	// return, as the probes listed them, resolved to files by the recorder.
	Maps []Mapping
}

// PyStack is the Python frames of the captured thread, innermost first,
// read at the same return as the Capture with the same key.
type PyStack struct {
	PID uint32 `json:"pid"`
	TID uint32 `json:"tid"`
	// Time is the call's return.
	Time int64 `json:"time_ns"`
	// Status is ok, no-thread (the interpreter has no thread state for the
	// thread), fault (a read of its memory failed), truncated (more frames
	// than were read: the outermost are missing) or no-layout.
	Status string `json:"status"`
	// Minor is the CPython minor version the frames were read as (3.Minor).
	Minor  int       `json:"minor"`
	Thread uint64    `json:"thread_state"`
	Frames []PyFrame `json:"frames"`
}

// PyFrame is one Python frame as read: its code object, its instruction
// (3.11+: a pointer into the code's bytecode; 3.10: f_lasti), its owner
// (3.11+) and whether it is the first frame of an evaluation loop call
// (3.11's is_entry).
type PyFrame struct {
	Code  uint64 `json:"code"`
	Instr uint64 `json:"instr"`
	Owner uint8  `json:"owner,omitempty"`
	Entry bool   `json:"entry,omitempty"`
}

// PyString is a str object as copied: its state word, its length in code
// points and its data (length x kind bytes, fewer when cut).
type PyString struct {
	State  uint32 `json:"state"`
	Length uint64 `json:"length"`
	Data   []byte `json:"data,omitempty"`
}

// PyCode is a code object of process PID as a capture copied it at Time;
// it names the frames whose code is Code until a newer copy of the same
// address.
type PyCode struct {
	PID            uint32   `json:"pid"`
	Code           uint64   `json:"code"`
	Time           int64    `json:"time_ns"`
	Minor          int      `json:"minor"`
	Type           uint64   `json:"type"`
	FirstLine      int32    `json:"first_line"`
	FirstTraceable int32    `json:"first_traceable,omitempty"`
	Filename       PyString `json:"filename"`
	Name           PyString `json:"name"`
	QualName       PyString `json:"qualname"`
	// LineTable is co_linetable as copied; LineTableSize its full size
	// (larger when the copy was cut).
	LineTable     []byte `json:"line_table,omitempty"`
	LineTableSize uint64 `json:"line_table_size"`
	// Fault: a string or the line table could not be read.
	Fault bool `json:"fault,omitempty"`
}

// StackRef says that the call of thread TID of process PID returning at
// Time was made at a call site captured before: its stack is the capture
// of thread RefTID at RefTime (same process).
type StackRef struct {
	PID     uint32
	TID     uint32
	Time    int64
	RefTID  uint32
	RefTime int64
}

// CaptureKey is the key of a capture and of its Python frames.
func CaptureKey(pid, tid uint32, t int64) []byte {
	k := binary.BigEndian.AppendUint32(nil, pid)
	k = binary.BigEndian.AppendUint32(k, tid)
	return binary.BigEndian.AppendUint64(k, uint64(t))
}

// pyCodeKey is the key of a code object's copy.
func pyCodeKey(c *PyCode) []byte {
	k := binary.BigEndian.AppendUint32(nil, c.PID)
	k = binary.BigEndian.AppendUint64(k, c.Code)
	return binary.BigEndian.AppendUint64(k, uint64(c.Time))
}

// captureFormat is the first byte of a capture value.
const captureFormat = 1

// Capture flags in the value.
const (
	captureFailed = 1 << 0
	captureFault  = 1 << 1
)

// maxCaptureStack bounds a decoded capture's stack, so a corrupt value
// cannot make a reader allocate much.
const maxCaptureStack = 1 << 20

// encodeCapture encodes a capture's value: the format byte, flags, the
// symbol (uint16 LE), the nine registers (uint64 LE), then deflated: the
// length of the mappings' JSON (uvarint), that JSON and the stack bytes.
func encodeCapture(c *Capture) ([]byte, error) {
	var flags byte
	if c.Failed {
		flags |= captureFailed
	}
	if c.Fault {
		flags |= captureFault
	}
	hdr := []byte{captureFormat, flags}
	hdr = binary.LittleEndian.AppendUint16(hdr, c.Symbol)
	r := c.Regs
	for _, v := range []uint64{r.IP, r.SP, r.BP, r.BX, r.R12, r.R13, r.R14, r.R15, r.FSBase} {
		hdr = binary.LittleEndian.AppendUint64(hdr, v)
	}
	maps, err := json.Marshal(c.Maps)
	if err != nil {
		return nil, err
	}
	body := binary.AppendUvarint(nil, uint64(len(maps)))
	body = append(append(body, maps...), c.Stack...)
	return deflated(hdr, body)
}

// deflated appends body, deflated, to hdr.
func deflated(hdr, body []byte) ([]byte, error) {
	b := bytes.NewBuffer(hdr)
	w, err := flate.NewWriter(b, flate.BestSpeed)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(body); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// captureHeader is the encoded size before the deflated stack.
const captureHeader = 4 + 9*8

// decodeCapture decodes a capture value under its key.
func decodeCapture(key, v []byte) (*Capture, error) {
	if len(key) != 16 || len(v) < captureHeader || v[0] != captureFormat {
		return nil, fmt.Errorf("%w: capture record of %d bytes", ErrCorrupt, len(v))
	}
	le := binary.LittleEndian
	c := &Capture{PID: binary.BigEndian.Uint32(key), TID: binary.BigEndian.Uint32(key[4:]),
		Time: int64(binary.BigEndian.Uint64(key[8:])), Failed: v[1]&captureFailed != 0, Fault: v[1]&captureFault != 0,
		Symbol: le.Uint16(v[2:])}
	reg := func(i int) uint64 { return le.Uint64(v[4+8*i:]) }
	c.Regs = Regs{IP: reg(0), SP: reg(1), BP: reg(2), BX: reg(3), R12: reg(4), R13: reg(5), R14: reg(6), R15: reg(7), FSBase: reg(8)}
	body, err := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(v[captureHeader:])), 2*maxCaptureStack+1))
	if err != nil || len(body) > 2*maxCaptureStack {
		return nil, fmt.Errorf("%w: capture: %v", ErrCorrupt, err)
	}
	n, k := binary.Uvarint(body)
	if k <= 0 || n > uint64(len(body)-k) || uint64(len(body)-k)-n > maxCaptureStack {
		return nil, fmt.Errorf("%w: capture: bad mappings length", ErrCorrupt)
	}
	if err := json.Unmarshal(body[k:k+int(n)], &c.Maps); err != nil {
		return nil, fmt.Errorf("%w: capture mappings: %v", ErrCorrupt, err)
	}
	c.Stack = body[k+int(n):]
	return c, nil
}

// stackRefFormat is the first byte of a chunk of stack references.
const stackRefFormat = 1

// encodeStackRefs encodes references as one chunk: the format byte, the
// count, then per reference the pid, tid-pid, the time as a delta from the
// previous one's, ref_tid-tid and time-ref_time (varints).
func encodeStackRefs(refs []StackRef) []byte {
	buf := []byte{stackRefFormat}
	buf = binary.AppendUvarint(buf, uint64(len(refs)))
	prev := int64(0)
	for _, r := range refs {
		buf = binary.AppendUvarint(buf, uint64(r.PID))
		buf = binary.AppendVarint(buf, int64(r.TID)-int64(r.PID))
		buf = binary.AppendVarint(buf, r.Time-prev)
		buf = binary.AppendVarint(buf, int64(r.RefTID)-int64(r.TID))
		buf = binary.AppendVarint(buf, r.Time-r.RefTime)
		prev = r.Time
	}
	return buf
}

// errStackRefs: a chunk of stack references that does not decode.
var errStackRefs = errors.New("stack reference chunk")

// decodeStackRefs calls fn for each reference of a chunk.
func decodeStackRefs(chunk []byte, fn func(*StackRef) error) error {
	if len(chunk) == 0 || chunk[0] != stackRefFormat {
		return fmt.Errorf("%w: %w: bad format", ErrCorrupt, errStackRefs)
	}
	d := bytes.NewReader(chunk[1:])
	n, err := binary.ReadUvarint(d)
	if err != nil || n > uint64(len(chunk)) {
		return fmt.Errorf("%w: %w: count", ErrCorrupt, errStackRefs)
	}
	prev := int64(0)
	for i := uint64(0); i < n; i++ {
		pid, e1 := binary.ReadUvarint(d)
		tid, e2 := binary.ReadVarint(d)
		dt, e3 := binary.ReadVarint(d)
		rtid, e4 := binary.ReadVarint(d)
		back, e5 := binary.ReadVarint(d)
		if err := errors.Join(e1, e2, e3, e4, e5); err != nil || pid > 1<<32-1 {
			return fmt.Errorf("%w: %w: reference %d", ErrCorrupt, errStackRefs, i)
		}
		r := StackRef{PID: uint32(pid), TID: uint32(int64(pid) + tid), Time: prev + dt}
		r.RefTID = uint32(int64(r.TID) + rtid)
		r.RefTime = r.Time - back
		prev = r.Time
		if err := fn(&r); err != nil {
			return err
		}
	}
	return nil
}

// putCaptures writes a batch's stack captures, by call.
func putCaptures(cb *bolt.Bucket, b *Batch) error {
	for i := range b.Captures {
		c := &b.Captures[i]
		v, err := encodeCapture(c)
		if err != nil {
			return err
		}
		if err := cb.Put(CaptureKey(c.PID, c.TID, c.Time), v); err != nil {
			return err
		}
	}
	return nil
}

// putPyStacks writes a batch's Python frames, by call.
func putPyStacks(pb *bolt.Bucket, b *Batch) error {
	for i := range b.PyStacks {
		p := &b.PyStacks[i]
		if err := putJSON(pb, CaptureKey(p.PID, p.TID, p.Time), p); err != nil {
			return err
		}
	}
	return nil
}

// putPyCodes writes a batch's code objects.
func putPyCodes(codes *bolt.Bucket, b *Batch) error {
	for i := range b.PyCodes {
		if err := putJSON(codes, pyCodeKey(&b.PyCodes[i]), &b.PyCodes[i]); err != nil {
			return err
		}
	}
	return nil
}

// putStackRefs writes a batch's stack references as one chunk.
func putStackRefs(rb *bolt.Bucket, b *Batch) error {
	rb.FillPercent = 1
	seq, _ := rb.NextSequence()
	return rb.Put(u64key(seq), encodeStackRefs(b.StackRefs))
}

// Capture returns the stack capture of a call (nil when there is none).
func (r *Reader) Capture(pid, tid uint32, t int64) (c *Capture, err error) {
	err = r.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCaptures)
		if b == nil {
			return nil
		}
		k := CaptureKey(pid, tid, t)
		if v := b.Get(k); v != nil {
			c, err = decodeCapture(k, v)
		}
		return err
	})
	return c, err
}

// PyStack returns the Python frames captured with a call's stack (nil
// when there are none).
func (r *Reader) PyStack(pid, tid uint32, t int64) (p *PyStack, err error) {
	err = r.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPyStacks)
		if b == nil {
			return nil
		}
		v := b.Get(CaptureKey(pid, tid, t))
		if v == nil {
			return nil
		}
		p = &PyStack{}
		if err := json.Unmarshal(v, p); err != nil {
			return fmt.Errorf("%w: Python stack: %v", ErrCorrupt, err)
		}
		return nil
	})
	return p, err
}

// PyCodes returns every code object copied for a process, ordered by
// address then time.
func (r *Reader) PyCodes(pid uint32) (codes []PyCode, err error) {
	err = r.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPyCode)
		if b == nil {
			return nil
		}
		prefix := binary.BigEndian.AppendUint32(nil, pid)
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var pc PyCode
			if err := json.Unmarshal(v, &pc); err != nil {
				return fmt.Errorf("%w: code object: %v", ErrCorrupt, err)
			}
			codes = append(codes, pc)
		}
		return nil
	})
	return codes, err
}

// StackRefs calls fn for every stack reference, in the order recorded.
func (r *Reader) StackRefs(fn func(*StackRef) error) error {
	return r.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketStackRefs)
		if b == nil {
			return nil
		}
		return b.ForEach(func(_, v []byte) error { return decodeStackRefs(v, fn) })
	})
}

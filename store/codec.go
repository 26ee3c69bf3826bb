package store

import (
	"encoding/binary"
	"fmt"

	"github.com/retrivium/forensic/cuda"
)

// chunkFormat is the first byte of every event chunk.
const chunkFormat = 1

// maxKey bounds a decoded key so corrupt input cannot allocate much.
const maxKey = 64

// maxGrants bounds the decoded access descriptors of one event, likewise.
const maxGrants = 64

// Presence bits: 0..11 are cuda.Field's (the call's fields), 12..14 the
// event's own optional fields.
const (
	presFields = 0xfff
	presCtx    = 1 << 12
	presStack  = 1 << 13
	presDev    = 1 << 14
	// presKnown are the bits this package writes; any other is corrupt.
	presKnown = uint64(cuda.FieldSize|cuda.FieldFlags|cuda.FieldPtr|cuda.FieldTarget|cuda.FieldDevice|
		cuda.FieldPeer|cuda.FieldCount|cuda.FieldKey|cuda.FieldItems) | presCtx | presStack | presDev
)

// appendEvent appends e to buf; prevEnd is the previous event's End in the
// chunk (0 for the first).
func appendEvent(buf []byte, e *Event, prevEnd int64) []byte {
	buf = binary.AppendUvarint(buf, uint64(e.Symbol))
	buf = binary.AppendUvarint(buf, uint64(e.PID))
	buf = binary.AppendVarint(buf, int64(e.TID)-int64(e.PID))
	buf = binary.AppendVarint(buf, e.End-prevEnd)
	buf = binary.AppendVarint(buf, e.End-e.Start)
	buf = binary.AppendVarint(buf, int64(e.Result))
	buf = binary.AppendUvarint(buf, uint64(e.Depth))
	buf = binary.AppendUvarint(buf, uint64(e.Flags))
	pres := uint64(e.Has)
	if e.Ctx != 0 {
		pres |= presCtx
	}
	if e.Stack >= 0 {
		pres |= presStack
	}
	if e.Dev >= 0 {
		pres |= presDev
	}
	buf = binary.AppendUvarint(buf, pres)
	if e.Has&cuda.FieldSize != 0 {
		buf = binary.AppendUvarint(buf, e.Size)
	}
	if e.Has&cuda.FieldFlags != 0 {
		buf = binary.AppendUvarint(buf, e.Fields.Flags)
	}
	if e.Has&cuda.FieldPtr != 0 {
		buf = binary.AppendUvarint(buf, e.Ptr)
	}
	if e.Has&cuda.FieldTarget != 0 {
		buf = binary.AppendUvarint(buf, e.Target)
	}
	if e.Has&cuda.FieldDevice != 0 {
		buf = binary.AppendVarint(buf, int64(e.Device))
	}
	if e.Has&cuda.FieldPeer != 0 {
		buf = binary.AppendUvarint(buf, e.Peer)
	}
	if e.Has&cuda.FieldCount != 0 {
		buf = binary.AppendUvarint(buf, e.Count)
	}
	if e.Has&cuda.FieldKey != 0 {
		k := e.Key
		if len(k) > maxKey {
			k = k[:maxKey]
		}
		buf = binary.AppendUvarint(buf, uint64(len(k)))
		buf = append(buf, k...)
	}
	if e.Has&cuda.FieldItems != 0 {
		buf = appendArray(buf, &e.Fields)
	}
	if pres&presCtx != 0 {
		buf = binary.AppendUvarint(buf, uint64(e.Ctx))
	}
	if pres&presStack != 0 {
		buf = binary.AppendUvarint(buf, uint64(e.Stack))
	}
	if pres&presDev != 0 {
		buf = binary.AppendUvarint(buf, uint64(e.Dev))
	}
	return buf
}

// appendArray encodes what was read of an array argument: the number of
// elements, then the access descriptors among them (type, device, flags).
func appendArray(buf []byte, f *cuda.Fields) []byte {
	g := f.Grants
	if len(g) > maxGrants {
		g = g[:maxGrants]
	}
	buf = binary.AppendUvarint(buf, uint64(f.Items))
	buf = binary.AppendUvarint(buf, uint64(len(g)))
	for _, x := range g {
		buf = binary.AppendUvarint(buf, uint64(x.Type))
		buf = binary.AppendVarint(buf, int64(x.Device))
		buf = binary.AppendUvarint(buf, uint64(x.Flags))
	}
	return buf
}

// chunkBytes is the size a chunk is cut at. bbolt never splits a leaf of
// four keys or fewer, so chunks of many kilobytes each would make every
// commit rewrite the last few of them (4-6x the payload written); chunks of
// about a kilobyte let leaves split, so a commit rewrites one small leaf.
const chunkBytes = 1024

// chunkEvents caps the events in a chunk so that its count is a one-byte
// varint, written in place once the chunk is cut. An event takes at least
// nine bytes, so a chunk cut at chunkBytes holds fewer anyway.
const chunkEvents = 127

// EncodeChunks encodes events as chunks of about chunkBytes each.
func EncodeChunks(events []Event) [][]byte {
	var out [][]byte
	for len(events) > 0 {
		buf := make([]byte, 0, chunkBytes+256)
		buf = append(buf, chunkFormat, 0) // the count, set below
		var prev int64
		n := 0
		for n < len(events) && n < chunkEvents && (len(buf) < chunkBytes || n == 0) {
			buf = appendEvent(buf, &events[n], prev)
			prev = events[n].End
			n++
		}
		buf[1] = byte(n) // a varint below 128 is the number itself
		out = append(out, buf)
		events = events[n:]
	}
	return out
}

// EncodeChunk encodes events as one chunk.
func EncodeChunk(events []Event) []byte {
	buf := make([]byte, 0, 16+32*len(events))
	buf = append(buf, chunkFormat)
	buf = binary.AppendUvarint(buf, uint64(len(events)))
	var prev int64
	for i := range events {
		buf = appendEvent(buf, &events[i], prev)
		prev = events[i].End
	}
	return buf
}

// chunkDecoder reads a chunk without trusting it: every read is bounds
// checked and a failure sets bad, never a panic. It is the analyzer's
// innermost loop (ten million events are two passes of it), so the common
// one-byte varint takes a fast path.
type chunkDecoder struct {
	b   []byte
	i   int
	bad bool
}

func (d *chunkDecoder) uvarint() (v uint64) {
	if d.i < len(d.b) {
		if v = uint64(d.b[d.i]); v < 0x80 {
			d.i++
			return
		}
	}
	return d.uvarintSlow()
}

// uvarintSlow is the multi-byte case, apart so that uvarint inlines.
func (d *chunkDecoder) uvarintSlow() uint64 {
	if d.i >= len(d.b) {
		d.bad = true
		return 0
	}
	v, n := binary.Uvarint(d.b[d.i:])
	if n <= 0 {
		d.bad, d.i = true, len(d.b)
		return 0
	}
	d.i += n
	return v
}

// varint reads a zigzag-encoded signed varint (binary.AppendVarint).
func (d *chunkDecoder) varint() int64 {
	u := d.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

func (d *chunkDecoder) i32() int32 {
	v := d.varint()
	if v != int64(int32(v)) {
		d.bad = true
	}
	return int32(v)
}

func (d *chunkDecoder) u32() uint32 {
	v := d.uvarint()
	if v > 0xffffffff {
		d.bad = true
	}
	return uint32(v)
}

// DecodeChunk calls fn for each event of a chunk. The Event passed to fn is
// reused; fn must copy what it keeps (Key included; Grants are allocated
// for each event and may be kept).
func DecodeChunk(chunk []byte, fn func(*Event) error) error {
	if len(chunk) == 0 || chunk[0] != chunkFormat {
		return fmt.Errorf("%w: unknown event chunk format", ErrCorrupt)
	}
	d := &chunkDecoder{b: chunk, i: 1}
	n := d.uvarint()
	if d.bad {
		return fmt.Errorf("%w: truncated event chunk", ErrCorrupt)
	}
	// A count beyond the chunk's length is corrupt on its face (an event
	// takes at least 9 bytes; decoding catches a count between the two).
	if n > uint64(len(chunk)) {
		return fmt.Errorf("%w: event count %d exceeds chunk size", ErrCorrupt, n)
	}
	var e Event
	var prev int64
	keyBuf := make([]byte, 0, maxKey)
	for i := uint64(0); i < n; i++ {
		e = Event{Dev: -1, Stack: -1}
		sym := d.uvarint()
		e.Symbol = uint16(sym)
		e.PID = d.u32()
		e.TID = uint32(int64(e.PID) + d.varint())
		e.End = prev + d.varint()
		e.Start = e.End - d.varint()
		e.Result = int32(d.varint())
		e.Depth = uint8(d.uvarint())
		e.Flags = d.u32()
		pres := d.uvarint()
		if pres&^presKnown != 0 {
			return fmt.Errorf("%w: unknown presence bits %#x in event", ErrCorrupt, pres&^presKnown)
		}
		e.Has = cuda.Field(pres & presFields)
		if e.Has != 0 {
			if err := d.fields(&e.Fields, &keyBuf); err != nil {
				return err
			}
		}
		if pres&presCtx != 0 {
			e.Ctx = d.u32()
		}
		if pres&presStack != 0 {
			e.Stack = int32(d.u32())
		}
		if pres&presDev != 0 {
			e.Dev = int32(d.u32())
		}
		if d.bad || sym > 0xffff {
			return fmt.Errorf("%w: truncated or out-of-range event in chunk", ErrCorrupt)
		}
		prev = e.End
		if err := fn(&e); err != nil {
			return err
		}
	}
	if d.i != len(d.b) {
		return fmt.Errorf("%w: %d trailing bytes in event chunk", ErrCorrupt, len(d.b)-d.i)
	}
	return nil
}

// fields reads the call fields f.Has says are present. The key is read
// into keyBuf, reused from event to event.
func (d *chunkDecoder) fields(f *cuda.Fields, keyBuf *[]byte) error {
	if f.Has&cuda.FieldSize != 0 {
		f.Size = d.uvarint()
	}
	if f.Has&cuda.FieldFlags != 0 {
		f.Flags = d.uvarint()
	}
	if f.Has&cuda.FieldPtr != 0 {
		f.Ptr = d.uvarint()
	}
	if f.Has&cuda.FieldTarget != 0 {
		f.Target = d.uvarint()
	}
	if f.Has&cuda.FieldDevice != 0 {
		f.Device = int32(d.varint())
	}
	if f.Has&cuda.FieldPeer != 0 {
		f.Peer = d.uvarint()
	}
	if f.Has&cuda.FieldCount != 0 {
		f.Count = d.uvarint()
	}
	if f.Has&cuda.FieldKey != 0 {
		l := d.uvarint()
		if l > maxKey || l > uint64(len(d.b)-d.i) {
			return fmt.Errorf("%w: key length %d", ErrCorrupt, l)
		}
		*keyBuf = append((*keyBuf)[:0], d.b[d.i:d.i+int(l)]...)
		f.Key = *keyBuf
		d.i += int(l)
	}
	if f.Has&cuda.FieldItems != 0 {
		return d.array(f)
	}
	return nil
}

// array reads what appendArray wrote.
func (d *chunkDecoder) array(f *cuda.Fields) error {
	f.Items = d.u32()
	n := d.uvarint()
	// Each grant takes at least three bytes.
	if n > maxGrants || n > uint64(len(d.b)-d.i)/3 {
		return fmt.Errorf("%w: %d access descriptors", ErrCorrupt, n)
	}
	if n == 0 {
		return nil
	}
	f.Grants = make([]cuda.Grant, n)
	for i := range f.Grants {
		g := &f.Grants[i]
		g.Type = d.u32()
		g.Device = d.i32()
		g.Flags = d.u32()
	}
	return nil
}

package unwind

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// errShort is returned by a reader that ran past its bytes.
var errShort = errors.New("truncated")

// reader decodes the little-endian DWARF encodings of a byte slice. The
// first decoding error sticks: later reads return zero values, and callers
// check err once after a group of reads.
type reader struct {
	b   []byte
	pos int
	err error
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *reader) left() int { return len(r.b) - r.pos }

func (r *reader) bytes(n int) []byte {
	if r.err != nil || n < 0 || n > r.left() {
		r.fail(errShort)
		return nil
	}
	b := r.b[r.pos : r.pos+n]
	r.pos += n
	return b
}

func (r *reader) u8() uint8 {
	b := r.bytes(1)
	if b == nil {
		return 0
	}
	return b[0]
}

func (r *reader) u16() uint16 {
	b := r.bytes(2)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint16(b)
}

func (r *reader) u32() uint32 {
	b := r.bytes(4)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

func (r *reader) u64() uint64 {
	b := r.bytes(8)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

func (r *reader) uleb() uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c := r.u8()
		if r.err != nil {
			return 0
		}
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		if c&0x80 == 0 {
			return v
		}
	}
}

func (r *reader) sleb() int64 {
	var v int64
	shift := uint(0)
	for {
		c := r.u8()
		if r.err != nil {
			return 0
		}
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
}

// cstring reads a NUL-terminated string.
func (r *reader) cstring() string {
	for i := r.pos; i < len(r.b); i++ {
		if r.b[i] == 0 {
			s := string(r.b[r.pos:i])
			r.pos = i + 1
			return s
		}
	}
	r.fail(errShort)
	return ""
}

// Pointer encodings of .eh_frame and .eh_frame_hdr (DW_EH_PE_*, LSB 4.0).
const (
	peAbsptr  = 0x00
	peULEB128 = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSLEB128 = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c

	pePCRel   = 0x10
	peTextRel = 0x20
	peDataRel = 0x30
	peFuncRel = 0x40
	peAligned = 0x50

	peIndirect = 0x80
	peOmit     = 0xff
)

// bases are the addresses the relative pointer encodings are relative to.
// pc is the virtual address of the section the reader reads; the address
// of an encoded value is pc plus its position.
type bases struct {
	pc, text, data, fn uint64
}

// pointer decodes one encoded pointer. Indirect pointers (personality
// routines) are returned undereferenced: nothing here needs their target.
func (r *reader) pointer(enc uint8, b bases) uint64 {
	if enc == peOmit {
		return 0
	}
	at := b.pc + uint64(r.pos)
	var base uint64
	switch enc & 0x70 {
	case 0:
	case pePCRel:
		base = at
	case peTextRel:
		base = b.text
	case peDataRel:
		base = b.data
	case peFuncRel:
		base = b.fn
	case peAligned:
		if pad := int((8 - at%8) % 8); pad > 0 {
			r.bytes(pad)
		}
	default:
		r.fail(fmt.Errorf("pointer encoding %#x: unknown application", enc))
		return 0
	}
	return base + r.value(enc&0x0f)
}

// value decodes the format part of a pointer encoding.
func (r *reader) value(format uint8) uint64 {
	switch format {
	case peAbsptr, peUdata8:
		return r.u64()
	case peULEB128:
		return r.uleb()
	case peUdata2:
		return uint64(r.u16())
	case peUdata4:
		return uint64(r.u32())
	case peSLEB128:
		return uint64(r.sleb())
	case peSdata2:
		return uint64(int64(int16(r.u16())))
	case peSdata4:
		return uint64(int64(int32(r.u32())))
	case peSdata8:
		return r.u64()
	}
	r.fail(fmt.Errorf("pointer encoding format %#x unknown", format))
	return 0
}

// fixedSize is the size of a pointer encoding's format, or 0 when it is
// variable (LEB128) or unknown.
func fixedSize(enc uint8) int {
	switch enc & 0x0f {
	case peAbsptr, peUdata8, peSdata8:
		return 8
	case peUdata2, peSdata2:
		return 2
	case peUdata4, peSdata4:
		return 4
	}
	return 0
}

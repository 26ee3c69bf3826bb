package pystack

import (
	"encoding/binary"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Bounds of what is copied per code object.
const (
	// MaxString bounds the bytes copied of a name or file name.
	MaxString = 1024
	// MaxLineTable bounds the bytes copied of a line table; lines past a
	// truncated table are unknown.
	MaxLineTable = 64 << 10
)

// RawString is a str object as copied: its state word, its length in code
// points, and its character data (length × kind bytes, possibly cut).
type RawString struct {
	State  uint32
	Length uint64
	Data   []byte
}

// RawCode is what a probe copies once per code object: the header fields
// and the three strings and the line table they point to.
type RawCode struct {
	Addr           uint64
	Type           uint64 // ob_type
	FirstLine      int32
	FirstTraceable int32 // 3.11+
	Filename       RawString
	Name           RawString
	QualName       RawString // 3.11+
	LineTable      []byte
	LineTableLen   uint64 // the table's full length, more than len(LineTable) when cut
}

// ReadCode copies a code object's header, strings and line table.
func (t *Target) ReadCode(mem Memory, code uint64) (*RawCode, int, error) {
	r := &reader{mem: mem}
	l := t.Layout
	b, err := r.read(code, l.CodeSize)
	if err != nil {
		return nil, r.reads, err
	}
	c := &RawCode{Addr: code, Type: u64(b, l.CodeType), FirstLine: i32(b, l.CodeFirstLine)}
	if l.CodeFirstTraceable >= 0 {
		c.FirstTraceable = i32(b, l.CodeFirstTraceable)
	}
	if c.Filename, err = t.readString(r, u64(b, l.CodeFilename)); err != nil {
		return nil, r.reads, fmt.Errorf("co_filename: %w", err)
	}
	if c.Name, err = t.readString(r, u64(b, l.CodeName)); err != nil {
		return nil, r.reads, fmt.Errorf("co_name: %w", err)
	}
	if l.CodeQualname >= 0 {
		if c.QualName, err = t.readString(r, u64(b, l.CodeQualname)); err != nil {
			return nil, r.reads, fmt.Errorf("co_qualname: %w", err)
		}
	}
	if c.LineTable, c.LineTableLen, err = t.readBytes(r, u64(b, l.CodeLineTable)); err != nil {
		return nil, r.reads, fmt.Errorf("co_linetable: %w", err)
	}
	return c, r.reads, nil
}

// Unicode state bits (PyASCIIObject.state, 3.10 to 3.13).
const (
	stateKindShift = 2
	stateCompact   = 1 << 5
	stateASCII     = 1 << 6
)

// readString copies a compact str object: header, then data.
func (t *Target) readString(r *reader, obj uint64) (RawString, error) {
	l := t.Layout
	h, err := r.read(obj, l.ASCIISize) // length and state; ASCII data follows
	if err != nil {
		return RawString{}, err
	}
	s := RawString{State: binary.LittleEndian.Uint32(h[l.UnicodeState:]), Length: u64(h, l.UnicodeLength)}
	if s.State&stateCompact == 0 {
		return s, fmt.Errorf("not a compact string (state %#x): %w", s.State, ErrLayout)
	}
	kind := uint64(s.State >> stateKindShift & 7)
	data := obj + uint64(l.CompactSize)
	if s.State&stateASCII != 0 {
		data = obj + uint64(l.ASCIISize)
	}
	n := min(s.Length*kind, MaxString)
	if n > 0 {
		if s.Data, err = r.read(data, int64(n)); err != nil {
			return s, err
		}
	}
	return s, nil
}

// readBytes copies a bytes object's data, at most MaxLineTable bytes.
func (t *Target) readBytes(r *reader, obj uint64) ([]byte, uint64, error) {
	l := t.Layout
	h, err := r.read(obj, l.BytesData)
	if err != nil {
		return nil, 0, err
	}
	size := u64(h, l.BytesSize)
	if size > 1<<30 {
		return nil, 0, fmt.Errorf("bytes object of %d bytes: %w", size, ErrLayout)
	}
	if size == 0 {
		return nil, 0, nil
	}
	b, err := r.read(obj+uint64(l.BytesData), int64(min(size, MaxLineTable)))
	return b, size, err
}

// String decodes a copied str; a cut string ends with "…".
func (s RawString) String() string {
	kind := int(s.State >> stateKindShift & 7)
	if kind != 1 && kind != 2 && kind != 4 {
		return ""
	}
	var sb strings.Builder
	d := s.Data
	for i := 0; i+kind <= len(d); i += kind {
		var c rune
		switch kind {
		case 1:
			c = rune(d[i]) // ASCII or Latin-1
		case 2:
			c = rune(binary.LittleEndian.Uint16(d[i:]))
		case 4:
			c = rune(binary.LittleEndian.Uint32(d[i:]))
		}
		if !utf8.ValidRune(c) {
			c = utf8.RuneError
		}
		sb.WriteRune(c)
	}
	if uint64(len(d)) < s.Length*uint64(kind) {
		sb.WriteString("…")
	}
	return sb.String()
}

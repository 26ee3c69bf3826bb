package cuda

import (
	"encoding/binary"
	"math/bits"
)

// Raw is what the probes captured for one call, before decoding. The
// buffer sizes are the probes' (bpf/forensic.h); the bpf package's
// conversion into Raw fails to compile if they differ.
type Raw struct {
	Args [6]uint64
	In   [32]byte
	OutA [32]byte
	OutB [8]byte
	// Arr holds the first ArrN elements of the row's array argument.
	Arr  [96]byte
	ArrN uint8
	// InOK, OutAOK, OutBOK and ArrOK say the buffers were read (a failed
	// call writes no out parameters, so its out buffers are never OK).
	InOK, OutAOK, OutBOK, ArrOK bool
}

// Field names one decoded field; Fields.Has is a set of them.
type Field uint16

const (
	FieldSize Field = 1 << iota
	FieldFlags
	FieldPtr
	FieldTarget
	FieldDevice
	FieldPeer
	FieldCount
	FieldKey
	// FieldItems: the row's array argument was read (Items elements, and
	// Grants for access descriptors).
	FieldItems
)

// Fields are the arguments that matter, decoded through a Symbol row.
type Fields struct {
	Has    Field
	Size   uint64 // bytes requested (or mapped, or released)
	Flags  uint64
	Ptr    uint64 // what the call created: pointer, handle, context
	Target uint64 // what the call acted on: freed pointer, context, pool
	Device int32  // CUDA device ordinal named by the call
	Peer   uint64 // peer context or device granted access
	Count  uint64
	Key    []byte // identity bytes: UUID, PCI bus id, IPC or pool export data
	// Items is how many elements of the array argument the probes read:
	// at most the row's maximum, so fewer than Count when the list was
	// cut (the event's array-cut flag says so).
	Items uint32
	// Grants are the access descriptors read (cuMemSetAccess), in the
	// caller's order: the owner of the memory usually comes first.
	Grants []Grant
}

// Grant is one CUmemAccessDesc: a location granted access to a range, and
// how.
type Grant struct {
	// Type is the CUmemLocationType (1: a device).
	Type uint32 `json:"location_type"`
	// Device is the location's id: a CUDA device ordinal for type 1.
	Device int32 `json:"device"`
	// Flags are the CUmemAccess_flags (0 none, 1 read, 3 read and write).
	Flags uint32 `json:"flags"`
}

// LocationDevice is CU_MEM_LOCATION_TYPE_DEVICE.
const LocationDevice = 1

// accessDescBytes is the size of a CUmemAccessDesc: location {type@0,
// id@4}, flags@8.
const accessDescBytes = 12

// Decode extracts the row's fields from a raw capture. A field whose
// source was not captured (a fault, or an out pointer of a failed call) is
// left out rather than guessed.
func (s *Symbol) Decode(r *Raw) Fields {
	var f Fields
	get := func(l Loc) (uint64, bool) { return r.value(l) }
	if s.SizeFrom != nil {
		if v, ok := s.SizeFrom(r); ok {
			f.Size, f.Has = v, f.Has|FieldSize
		}
	} else if v, ok := get(s.Size); ok {
		f.Size, f.Has = v, f.Has|FieldSize
	}
	if v, ok := get(s.Flags); ok {
		f.Flags, f.Has = v, f.Has|FieldFlags
	}
	if v, ok := get(s.Ptr); ok {
		f.Ptr, f.Has = v, f.Has|FieldPtr
	}
	if v, ok := get(s.Target); ok {
		f.Target, f.Has = v, f.Has|FieldTarget
	}
	if v, ok := get(s.Device); ok {
		f.Device, f.Has = int32(uint32(v)), f.Has|FieldDevice
	}
	if v, ok := get(s.Peer); ok {
		f.Peer, f.Has = v, f.Has|FieldPeer
	}
	if v, ok := get(s.Count); ok {
		f.Count, f.Has = v, f.Has|FieldCount
	}
	if b, ok := r.bytes(s.Key); ok {
		f.Key, f.Has = b, f.Has|FieldKey
	}
	s.decodeArray(r, &f)
	return f
}

// decodeArray takes the elements of the row's array argument: their number,
// and the grants they name when they are access descriptors.
func (s *Symbol) decodeArray(r *Raw, f *Fields) {
	a := &s.Array
	if a.Len == 0 || !r.ArrOK {
		return
	}
	n := min(int(r.ArrN), int(a.Max), len(r.Arr)/int(a.Len))
	f.Items, f.Has = uint32(n), f.Has|FieldItems
	if a.Elem != ElemAccessDesc || a.Len < accessDescBytes || n == 0 {
		return
	}
	f.Grants = make([]Grant, n)
	for i := range f.Grants {
		b := r.Arr[i*int(a.Len):]
		f.Grants[i] = Grant{Type: binary.LittleEndian.Uint32(b), Device: int32(binary.LittleEndian.Uint32(b[4:])),
			Flags: binary.LittleEndian.Uint32(b[8:])}
	}
}

func (r *Raw) buf(src Src) ([]byte, bool) {
	switch src {
	case SrcIn:
		return r.In[:], r.InOK
	case SrcOutA:
		return r.OutA[:], r.OutAOK
	case SrcOutB:
		return r.OutB[:], r.OutBOK
	case SrcArray:
		return r.Arr[:], r.ArrOK && r.ArrN > 0
	}
	return nil, false
}

func (r *Raw) value(l Loc) (uint64, bool) {
	switch l.Src {
	case SrcNone:
		return 0, false
	case SrcArg:
		if l.Index >= 6 {
			return 0, false
		}
		v := r.Args[l.Index]
		if l.Width < 8 {
			v &= 1<<(8*uint(l.Width)) - 1
		}
		return v, true
	}
	b, ok := r.buf(l.Src)
	if !ok || int(l.Index)+int(l.Width) > len(b) || l.Width > 8 {
		return 0, false
	}
	var tmp [8]byte
	copy(tmp[:], b[l.Index:int(l.Index)+int(l.Width)])
	return binary.LittleEndian.Uint64(tmp[:]), true
}

func (r *Raw) bytes(l Loc) ([]byte, bool) {
	if l.Src == SrcNone || l.Src == SrcArg {
		return nil, false
	}
	b, ok := r.buf(l.Src)
	if !ok || int(l.Index)+int(l.Width) > len(b) {
		return nil, false
	}
	out := make([]byte, l.Width)
	copy(out, b[l.Index:])
	return out, true
}

// mul multiplies, refusing to wrap: a garbage descriptor must not turn into
// a plausible size.
func mul(a, b uint64) (uint64, bool) {
	hi, lo := bits.Mul64(a, b)
	return lo, hi == 0
}

// pitchSize is pitch (read back at return) × height (argument 3).
func pitchSize(r *Raw, w uint8) (uint64, bool) {
	pitch, ok := r.value(Loc{SrcOutB, 0, w})
	if !ok {
		return 0, false
	}
	h, _ := r.value(Loc{SrcArg, 3, w})
	return mul(pitch, h)
}

// arrayElemSize is the bytes per channel of a CUarray_format.
func arrayElemSize(format uint64) uint64 {
	switch format {
	case 0x01, 0x08: // UNSIGNED_INT8, SIGNED_INT8
		return 1
	case 0x02, 0x09, 0x10: // (UN)SIGNED_INT16, HALF
		return 2
	case 0x03, 0x0a, 0x20: // (UN)SIGNED_INT32, FLOAT
		return 4
	}
	return 0
}

// arraySize reads CUDA_ARRAY_DESCRIPTOR / CUDA_ARRAY3D_DESCRIPTOR: width,
// height (and depth) of width w bytes, then Format and NumChannels (uint32).
func arraySize(r *Raw, w uint8, threeD bool) (uint64, bool) {
	if !r.InOK {
		return 0, false
	}
	n := uint8(2)
	if threeD {
		n = 3
	}
	size := uint64(1)
	for i := uint8(0); i < n; i++ {
		d, _ := r.value(Loc{SrcIn, i * w, w})
		if d == 0 {
			d = 1 // a 1D array has height 0
		}
		var ok bool
		if size, ok = mul(size, d); !ok {
			return 0, false
		}
	}
	format, _ := r.value(Loc{SrcIn, n * w, 4})
	channels, _ := r.value(Loc{SrcIn, n*w + 4, 4})
	elem := arrayElemSize(format)
	if elem == 0 || channels == 0 {
		return 0, false
	}
	size, ok := mul(size, elem*channels)
	return size, ok
}

// mipmapSize sums the levels of a mipmapped array (each level halves every
// dimension, never below 1).
func mipmapSize(r *Raw) (uint64, bool) {
	if !r.InOK {
		return 0, false
	}
	var dims [3]uint64
	for i := range dims {
		dims[i], _ = r.value(Loc{SrcIn, uint8(i * 8), 8})
	}
	format, _ := r.value(Loc{SrcIn, 24, 4})
	channels, _ := r.value(Loc{SrcIn, 28, 4})
	levels := r.Args[2] & 0xffffffff
	elem := arrayElemSize(format)
	if elem == 0 || channels == 0 || levels == 0 || levels > 64 {
		return 0, false
	}
	var total uint64
	for l := uint64(0); l < levels; l++ {
		lvl := elem * channels
		for _, d := range dims {
			d >>= l
			if d == 0 {
				d = 1
			}
			var ok bool
			if lvl, ok = mul(lvl, d); !ok {
				return 0, false
			}
		}
		total += lvl
	}
	return total, true
}

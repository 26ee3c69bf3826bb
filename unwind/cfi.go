package unwind

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// ErrNoCFI says a file has no call-frame information for an address.
var ErrNoCFI = errors.New("no CFI for this address")

// cie is a Common Information Entry: what every FDE that points to it
// shares.
type cie struct {
	version    uint8
	aug        string
	codeAlign  uint64
	dataAlign  int64
	raReg      uint64
	fdeEnc     uint8 // 'R': encoding of the FDE's addresses
	lsdaEnc    uint8 // 'L'
	hasAugData bool  // 'z': FDEs carry an augmentation length
	signal     bool  // 'S': a signal frame, its pc is not a return address
	addrSize   int
	initial    []byte // initial instructions
}

// fde is a Frame Description Entry: the CFA program of one address range.
type fde struct {
	cie        *cie
	start, end uint64 // virtual addresses [start, end)
	program    []byte
}

// section is one CFI section of a file: .eh_frame or .debug_frame.
type section struct {
	data  []byte
	addr  uint64   // virtual address of data[0] (.eh_frame; 0 for .debug_frame)
	debug bool     // .debug_frame conventions (CIE id, absolute addresses)
	text  uint64   // .text address, for DW_EH_PE_textrel
	got   uint64   // .got address, for DW_EH_PE_datarel in .eh_frame
	index []fdeRef // sorted by start

	mu   sync.Mutex // guards cies: walks may share the section
	cies map[int]*cie
}

// fdeRef locates one FDE: its first address and its offset in the section.
type fdeRef struct {
	start uint64
	off   int
}

// entry reads the header of the entry at off: its id, where the id field
// starts, and where the body (after the id) starts and the entry ends. A
// zero-length terminator has end == body.
func (s *section) entry(off int) (id uint64, idPos, body, end int, err error) {
	r := &reader{b: s.data, pos: off}
	length := uint64(r.u32())
	idSize := 4
	if length == 0xffffffff {
		length = r.u64()
		idSize = 8
	}
	if r.err != nil {
		return 0, 0, 0, 0, r.err
	}
	if length == 0 {
		return 0, r.pos, r.pos, r.pos, nil
	}
	if length > uint64(r.left()) || length < uint64(idSize) {
		return 0, 0, 0, 0, fmt.Errorf("CFI entry at %#x: length %d past the section", off, length)
	}
	idPos = r.pos
	if idSize == 8 {
		id = r.u64()
	} else {
		id = uint64(r.u32())
		if s.debug && id == 0xffffffff {
			id = ^uint64(0)
		}
	}
	return id, idPos, r.pos, idPos + int(length), nil
}

// isCIE reports whether an entry id marks a CIE.
func (s *section) isCIE(id uint64) bool {
	if s.debug {
		return id == ^uint64(0)
	}
	return id == 0
}

// cieAt parses (or returns the cached) CIE at off.
func (s *section) cieAt(off int) (*cie, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.cies[off]; ok {
		return c, nil
	}
	id, _, body, end, err := s.entry(off)
	if err != nil {
		return nil, err
	}
	if body == end || !s.isCIE(id) {
		return nil, fmt.Errorf("CFI entry at %#x is not a CIE", off)
	}
	c, err := parseCIE(s.data[body:end], s.debug)
	if err != nil {
		return nil, fmt.Errorf("CIE at %#x: %w", off, err)
	}
	if s.cies == nil {
		s.cies = map[int]*cie{}
	}
	s.cies[off] = c
	return c, nil
}

// parseCIE decodes a CIE body (after its id).
func parseCIE(body []byte, debug bool) (*cie, error) {
	r := &reader{b: body}
	c := &cie{version: r.u8(), addrSize: 8, fdeEnc: peAbsptr, lsdaEnc: peOmit}
	switch c.version {
	case 1, 3:
	case 4:
		if !debug {
			return nil, fmt.Errorf("version 4 in .eh_frame")
		}
	default:
		return nil, fmt.Errorf("version %d unknown", c.version)
	}
	c.aug = r.cstring()
	if c.version == 4 {
		c.addrSize = int(r.u8())
		if seg := r.u8(); seg != 0 {
			return nil, fmt.Errorf("segment selectors are not supported")
		}
		if c.addrSize != 8 && c.addrSize != 4 {
			return nil, fmt.Errorf("address size %d", c.addrSize)
		}
	}
	if strings.HasPrefix(c.aug, "eh") {
		r.u64() // an old GCC's exception table pointer
	}
	c.codeAlign = r.uleb()
	c.dataAlign = r.sleb()
	if c.version == 1 {
		c.raReg = uint64(r.u8())
	} else {
		c.raReg = r.uleb()
	}
	if r.err != nil {
		return nil, r.err
	}
	if err := c.parseAugmentation(r); err != nil {
		return nil, err
	}
	c.initial = r.b[r.pos:]
	return c, nil
}

// parseAugmentation reads the augmentation data that 'z' announces: the
// encodings of the FDE's addresses ('R') and LSDA ('L'), the personality
// routine ('P', skipped), and the signal-frame mark ('S').
func (c *cie) parseAugmentation(r *reader) error {
	if !strings.HasPrefix(c.aug, "z") {
		for _, ch := range c.aug {
			if ch == 'S' {
				c.signal = true
			}
		}
		return nil
	}
	c.hasAugData = true
	n := r.uleb()
	if r.err != nil || n > uint64(r.left()) {
		return fmt.Errorf("augmentation data past the entry")
	}
	end := r.pos + int(n)
	aug := &reader{b: r.b[:end], pos: r.pos}
	for _, ch := range c.aug[1:] {
		switch ch {
		case 'R':
			c.fdeEnc = aug.u8()
		case 'L':
			c.lsdaEnc = aug.u8()
		case 'P':
			enc := aug.u8()
			aug.pointer(enc&^peIndirect, bases{})
		case 'S':
			c.signal = true
		case 'B', 'G':
			// AArch64 BTI and MTE marks: no data.
		default:
			// An augmentation this reader does not know: its data is
			// covered by the length, and the CFA program does not depend
			// on it.
			r.pos = end
			return nil
		}
	}
	if aug.err != nil {
		return fmt.Errorf("augmentation %q: %w", c.aug, aug.err)
	}
	r.pos = end
	return nil
}

// bases returns the pointer bases for a value read from this section.
func (s *section) bases() bases {
	return bases{pc: s.addr, text: s.text, data: s.got}
}

// fdeAt parses the FDE at off.
func (s *section) fdeAt(off int) (*fde, error) {
	id, idPos, body, end, err := s.entry(off)
	if err != nil {
		return nil, err
	}
	if body == end || s.isCIE(id) {
		return nil, fmt.Errorf("CFI entry at %#x is not an FDE", off)
	}
	cieOff := int64(id) // .debug_frame: an offset from the section start
	if !s.debug {
		cieOff = int64(idPos) - int64(id) // .eh_frame: back from the id field
	}
	if cieOff < 0 || cieOff >= int64(len(s.data)) {
		return nil, fmt.Errorf("FDE at %#x: CIE pointer out of the section", off)
	}
	c, err := s.cieAt(int(cieOff))
	if err != nil {
		return nil, err
	}
	// The reader spans the section up to the entry's end, so that
	// positions (and pc-relative pointers) are section offsets.
	r := &reader{b: s.data[:end], pos: body}
	f := &fde{cie: c}
	if s.debug {
		if c.addrSize == 4 {
			f.start = uint64(r.u32())
			f.end = f.start + uint64(r.u32())
		} else {
			f.start = r.u64()
			f.end = f.start + r.u64()
		}
	} else {
		f.start = r.pointer(c.fdeEnc, s.bases())
		f.end = f.start + r.value(c.fdeEnc&0x0f)
	}
	if c.hasAugData {
		r.bytes(int(r.uleb()))
	}
	if r.err != nil {
		return nil, fmt.Errorf("FDE at %#x: %w", off, r.err)
	}
	f.program = r.b[r.pos:end]
	return f, nil
}

// scan indexes every FDE of the section by its first address: the lookup
// for .debug_frame, and for .eh_frame without a usable .eh_frame_hdr.
func (s *section) scan() error {
	var idx []fdeRef
	for off := 0; off < len(s.data); {
		id, _, body, end, err := s.entry(off)
		if err != nil {
			return err
		}
		if body != end && !s.isCIE(id) {
			f, err := s.fdeAt(off)
			if err != nil {
				return err
			}
			if f.end > f.start {
				idx = append(idx, fdeRef{start: f.start, off: off})
			}
		}
		if end == body && !s.debug && body-off == 4 {
			break // .eh_frame's zero terminator
		}
		off = end
	}
	sort.Slice(idx, func(i, j int) bool { return idx[i].start < idx[j].start })
	s.index = idx
	return nil
}

// find returns the FDE whose range holds the virtual address pc.
func (s *section) find(pc uint64) (*fde, error) {
	i := sort.Search(len(s.index), func(i int) bool { return s.index[i].start > pc }) - 1
	// Ranges do not overlap in sane files, but zero-length and duplicate
	// entries exist: look back a few entries.
	for j := i; j >= 0 && j > i-4; j-- {
		f, err := s.fdeAt(s.index[j].off)
		if err != nil {
			return nil, err
		}
		if f.start <= pc && pc < f.end {
			return f, nil
		}
	}
	return nil, ErrNoCFI
}

// parseHdr decodes .eh_frame_hdr's binary-search table into an FDE index
// for the .eh_frame at ehAddr. A header without a table yields nil, and the
// caller scans .eh_frame instead.
func parseHdr(hdr []byte, hdrAddr, ehAddr uint64, ehLen int) ([]fdeRef, error) {
	r := &reader{b: hdr}
	if v := r.u8(); v != 1 {
		return nil, fmt.Errorf(".eh_frame_hdr version %d", v)
	}
	ptrEnc, countEnc, tableEnc := r.u8(), r.u8(), r.u8()
	b := bases{pc: hdrAddr, data: hdrAddr}
	r.pointer(ptrEnc, b)
	if countEnc == peOmit || tableEnc == peOmit || r.err != nil {
		return nil, r.err
	}
	count := r.pointer(countEnc, b)
	size := fixedSize(tableEnc)
	if size == 0 {
		return nil, nil
	}
	if r.err != nil || count > uint64(r.left()/(2*size)) {
		return nil, fmt.Errorf(".eh_frame_hdr: %d entries past the section", count)
	}
	idx := make([]fdeRef, 0, count)
	for i := uint64(0); i < count; i++ {
		start := r.pointer(tableEnc, b)
		at := r.pointer(tableEnc, b)
		off := at - ehAddr
		if at < ehAddr || off >= uint64(ehLen) {
			return nil, fmt.Errorf(".eh_frame_hdr entry %d points outside .eh_frame", i)
		}
		idx = append(idx, fdeRef{start: start, off: int(off)})
	}
	if r.err != nil {
		return nil, r.err
	}
	if !sort.SliceIsSorted(idx, func(i, j int) bool { return idx[i].start < idx[j].start }) {
		sort.Slice(idx, func(i, j int) bool { return idx[i].start < idx[j].start })
	}
	return idx, nil
}

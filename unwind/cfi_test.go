package unwind

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

func uleb(v uint64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			c |= 0x80
		}
		b = append(b, c)
		if v == 0 {
			return b
		}
	}
}

func sleb(v int64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		done := (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0)
		if !done {
			c |= 0x80
		}
		b = append(b, c)
		if done {
			return b
		}
	}
}

func signed(v int64) uint64 { return uint64(v) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// ehBuilder builds an .eh_frame section at a virtual address, the way a
// linker lays it out: length, id, body; FDE addresses pc-relative sdata4.
type ehBuilder struct {
	addr uint64
	buf  []byte
}

func (e *ehBuilder) entry(id uint32, body []byte) int {
	off := len(e.buf)
	for (len(body)+4)%8 != 0 {
		body = append(body, cfaNop) // pad to the pointer size, as linkers do
	}
	e.buf = append(e.buf, le32(uint32(4+len(body)))...)
	e.buf = append(e.buf, le32(id)...)
	e.buf = append(e.buf, body...)
	return off
}

// cie adds a CIE with augmentation "zR" (FDE addresses pcrel|sdata4),
// code alignment 1, data alignment -8, return address column 16.
func (e *ehBuilder) cie(initial []byte) int {
	body := cat([]byte{1}, []byte("zR\x00"), uleb(1), sleb(-8), []byte{16}, uleb(1), []byte{pePCRel | peSdata4}, initial)
	return e.entry(0, body)
}

// fde adds an FDE for [start, start+size) under the CIE at cieOff.
func (e *ehBuilder) fde(cieOff int, start uint64, size uint32, program []byte) int {
	off := len(e.buf)
	idPos := off + 4
	field := e.addr + uint64(idPos+4) // where initial_location lies
	body := cat(le32(uint32(int32(int64(start)-int64(field)))), le32(size), uleb(0), program)
	return e.entry(uint32(idPos-cieOff), body)
}

func (e *ehBuilder) section() *section {
	return &section{data: append(e.buf, 0, 0, 0, 0), addr: e.addr}
}

// The standard x86-64 CIE program: CFA = rsp+8, return address at CFA-8.
var x86CIE = []byte{cfaDefCFA, RegRSP, 8, cfaOffset | RegRIP, 1}

// x86cie parses the CIE the builder writes.
func x86cie(t *testing.T) *cie {
	t.Helper()
	e := &ehBuilder{addr: 0x2000}
	e.cie(x86CIE)
	s := e.section()
	c, err := s.cieAt(0)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRowAt(t *testing.T) {
	pushRBP := []byte{ // push %rbp; mov %rsp,%rbp; ... leave; ret
		cfaAdvanceLoc | 1, cfaDefCFAOffset, 16, cfaOffset | RegRBP, 2,
		cfaAdvanceLoc | 3, cfaDefCFARegister, RegRBP,
		cfaAdvanceLoc1, 0x20, cfaDefCFA, RegRSP, 8,
	}
	epilogue := []byte{ // an early return in the middle of the body
		cfaAdvanceLoc | 4, cfaDefCFAOffset, 32, cfaOffset | RegRBX, 2,
		cfaAdvanceLoc | 4, cfaRememberState, cfaDefCFAOffset, 8, cfaRestore | RegRBX,
		cfaAdvanceLoc | 2, cfaRestoreState,
	}
	tests := []struct {
		name    string
		program []byte
		pc      uint64 // offset in the function
		cfaReg  uint64
		cfaOff  int64
		expr    bool
		want    map[int]rule
		err     string
	}{
		{name: "entry", program: pushRBP, pc: 0, cfaReg: RegRSP, cfaOff: 8,
			want: map[int]rule{RegRIP: {kind: ruleOffset, n: -8}, RegRBP: {}}},
		{name: "after push", program: pushRBP, pc: 1, cfaReg: RegRSP, cfaOff: 16,
			want: map[int]rule{RegRBP: {kind: ruleOffset, n: -16}}},
		{name: "frame pointer set", program: pushRBP, pc: 10, cfaReg: RegRBP, cfaOff: 16,
			want: map[int]rule{RegRBP: {kind: ruleOffset, n: -16}, RegRIP: {kind: ruleOffset, n: -8}}},
		{name: "after leave", program: pushRBP, pc: 0x24, cfaReg: RegRSP, cfaOff: 8},
		{name: "before early return", program: epilogue, pc: 7, cfaReg: RegRSP, cfaOff: 32,
			want: map[int]rule{RegRBX: {kind: ruleOffset, n: -16}}},
		{name: "in early return", program: epilogue, pc: 9, cfaReg: RegRSP, cfaOff: 8,
			want: map[int]rule{RegRBX: {}}},
		{name: "after restore_state", program: epilogue, pc: 10, cfaReg: RegRSP, cfaOff: 32,
			want: map[int]rule{RegRBX: {kind: ruleOffset, n: -16}}},
		{name: "advance_loc2 and 4", program: []byte{cfaAdvanceLoc2, 0x00, 0x01, cfaDefCFAOffset, 16, cfaAdvanceLoc4, 0, 0, 1, 0, cfaDefCFAOffset, 24},
			pc: 0x100, cfaReg: RegRSP, cfaOff: 16},
		{name: "undefined return address", program: []byte{cfaUndefined, RegRIP}, cfaReg: RegRSP, cfaOff: 8,
			want: map[int]rule{RegRIP: {kind: ruleUndefined}}},
		{name: "register rules", program: []byte{
			cfaSameValue, RegRBX, cfaRegister, RegR12, RegR13, cfaValOffset, RegR14, 2,
			cfaOffsetExtendedSF, RegR15, 0x7e, cfaOffsetExtended, RegRBP, 3, cfaGNUArgsSize, 16, cfaNop},
			cfaReg: RegRSP, cfaOff: 8,
			want: map[int]rule{RegRBX: {kind: ruleSameValue}, RegR12: {kind: ruleRegister, reg: RegR13},
				RegR14: {kind: ruleValOffset, n: -16}, RegR15: {kind: ruleOffset, n: 16}, RegRBP: {kind: ruleOffset, n: -24}}},
		{name: "restore_extended", program: []byte{cfaOffset | RegRIP, 3, cfaRestoreExtended, RegRIP}, cfaReg: RegRSP, cfaOff: 8,
			want: map[int]rule{RegRIP: {kind: ruleOffset, n: -8}}},
		{name: "GNU negative offset", program: []byte{cfaGNUNegOffsetExt, RegRBX, 2}, cfaReg: RegRSP, cfaOff: 8,
			want: map[int]rule{RegRBX: {kind: ruleOffset, n: 16}}},
		{name: "def_cfa_sf", program: []byte{cfaDefCFASF, RegRBP, 0x7e}, cfaReg: RegRBP, cfaOff: 16},
		{name: "def_cfa_offset_sf", program: []byte{cfaDefCFAOffsetSF, 0x7c}, cfaReg: RegRSP, cfaOff: 32},
		{name: "def_cfa_expression", program: []byte{cfaDefCFAExpression, 2, opBreg0 + RegRSP, 8}, expr: true},
		{name: "expression rules", program: []byte{cfaExpression, RegRBX, 2, opBreg0 + RegRSP, 16, cfaValExpression, RegRBP, 1, opLit0},
			cfaReg: RegRSP, cfaOff: 8,
			want: map[int]rule{RegRBX: {kind: ruleExpression, expr: []byte{opBreg0 + RegRSP, 16}}, RegRBP: {kind: ruleValExpression, expr: []byte{opLit0}}}},
		{name: "vector registers ignored", program: []byte{cfaOffsetExtended, 17, 2}, cfaReg: RegRSP, cfaOff: 8},
		{name: "unknown opcode", program: []byte{0x3f}, err: "opcode 0x3f"},
		{name: "restore_state alone", program: []byte{cfaRestoreState}, err: "restore_state without remember_state"},
		{name: "truncated operand", program: []byte{cfaDefCFA, RegRSP}, err: "truncated"},
		{name: "truncated expression", program: []byte{cfaDefCFAExpression, 9, opLit0}, err: "truncated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The FDE is built directly: a section would pad the
			// program with DW_CFA_nop, hiding truncation.
			f := &fde{cie: x86cie(t), start: 0x1000, end: 0x2000, program: tc.program}
			r, err := rowAt(f, 0x1000+tc.pc)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.expr {
				if r.cfa.expr == nil {
					t.Fatalf("CFA rule %+v, want an expression", r.cfa)
				}
			} else if r.cfa.reg != tc.cfaReg || r.cfa.offset != tc.cfaOff || r.cfa.expr != nil {
				t.Errorf("CFA = r%d%+d (expr %v), want r%d%+d", r.cfa.reg, r.cfa.offset, r.cfa.expr, tc.cfaReg, tc.cfaOff)
			}
			for reg, want := range tc.want {
				got := r.regs[reg]
				if got.kind != want.kind || got.n != want.n || got.reg != want.reg || !bytes.Equal(got.expr, want.expr) {
					t.Errorf("r%d rule %+v, want %+v", reg, got, want)
				}
			}
		})
	}
}

func TestFindFDE(t *testing.T) {
	e := &ehBuilder{addr: 0x4000}
	c := e.cie(x86CIE)
	e.fde(c, 0x1000, 0x10, nil)
	e.fde(c, 0x1010, 0x30, []byte{cfaAdvanceLoc | 1, cfaDefCFAOffset, 16})
	e.fde(c, 0x2000, 0x8, nil)
	s := e.section()
	if err := s.scan(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pc    uint64
		start uint64
		err   error
	}{
		{0x1000, 0x1000, nil}, {0x100f, 0x1000, nil}, {0x1010, 0x1010, nil}, {0x103f, 0x1010, nil},
		{0x1040, 0, ErrNoCFI}, {0xfff, 0, ErrNoCFI}, {0x2007, 0x2000, nil}, {0x2008, 0, ErrNoCFI},
	} {
		f, err := s.find(tc.pc)
		if !errors.Is(err, tc.err) || (err == nil && f.start != tc.start) {
			t.Errorf("find(%#x) = %v, %v; want start %#x, %v", tc.pc, f, err, tc.start, tc.err)
		}
	}
}

func TestParseCIE(t *testing.T) {
	tests := []struct {
		name    string
		body    []byte
		debug   bool
		fdeEnc  uint8
		lsdaEnc uint8
		signal  bool
		ra      uint64
		err     string
	}{
		{name: "zR", body: cat([]byte{1}, []byte("zR\x00"), uleb(1), sleb(-8), []byte{16}, uleb(1), []byte{0x1b}),
			fdeEnc: 0x1b, lsdaEnc: peOmit, ra: 16},
		{name: "zPLR C++", body: cat([]byte{1}, []byte("zPLR\x00"), uleb(1), sleb(-8), []byte{16}, uleb(7),
			[]byte{0x9b}, le32(0x1234), []byte{0x1b, 0x1b}), fdeEnc: 0x1b, lsdaEnc: 0x1b, ra: 16},
		{name: "zPLR uleb personality", body: cat([]byte{1}, []byte("zPLR\x00"), uleb(1), sleb(-8), []byte{16}, uleb(5),
			[]byte{peULEB128}, uleb(300), []byte{0x1b, 0x03}), fdeEnc: 0x03, lsdaEnc: 0x1b, ra: 16},
		{name: "signal frame zRS", body: cat([]byte{1}, []byte("zRS\x00"), uleb(1), sleb(-8), []byte{16}, uleb(1), []byte{0x1b}),
			fdeEnc: 0x1b, lsdaEnc: peOmit, signal: true, ra: 16},
		{name: "version 3 uleb column", body: cat([]byte{3}, []byte("zR\x00"), uleb(1), sleb(-8), uleb(16), uleb(1), []byte{0x1b}),
			fdeEnc: 0x1b, lsdaEnc: peOmit, ra: 16},
		{name: "unknown augmentation after z", body: cat([]byte{1}, []byte("zRX\x00"), uleb(1), sleb(-8), []byte{16}, uleb(3), []byte{0x1b, 9, 9}),
			fdeEnc: 0x1b, lsdaEnc: peOmit, ra: 16},
		{name: "debug_frame v4", debug: true, body: cat([]byte{4}, []byte("\x00"), []byte{8, 0}, uleb(1), sleb(-8), uleb(16)),
			fdeEnc: peAbsptr, lsdaEnc: peOmit, ra: 16},
		{name: "v4 in eh_frame", body: cat([]byte{4}, []byte("\x00"), []byte{8, 0}, uleb(1), sleb(-8), uleb(16)), err: "version 4"},
		{name: "version 2", body: cat([]byte{2}, []byte("\x00")), err: "version 2"},
		{name: "segment selector", debug: true, body: cat([]byte{4}, []byte("\x00"), []byte{8, 2}), err: "segment"},
		{name: "truncated augmentation", body: cat([]byte{1}, []byte("zR\x00"), uleb(1), sleb(-8), []byte{16}, uleb(9), []byte{0x1b}), err: "augmentation data"},
		{name: "no NUL", body: []byte{1, 'z', 'R'}, err: "truncated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseCIE(tc.body, tc.debug)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.fdeEnc != tc.fdeEnc || c.lsdaEnc != tc.lsdaEnc || c.signal != tc.signal || c.raReg != tc.ra || c.codeAlign != 1 || c.dataAlign != -8 {
				t.Errorf("CIE %+v", c)
			}
		})
	}
}

func TestPointerEncodings(t *testing.T) {
	b := bases{pc: 0x1000, text: 0x400000, data: 0x600000}
	tests := []struct {
		enc  uint8
		data []byte
		want uint64
		size int
	}{
		{peAbsptr, le64(0x123456789), 0x123456789, 8},
		{peUdata2, []byte{0x34, 0x12}, 0x1234, 2},
		{peSdata2, []byte{0xfe, 0xff}, ^uint64(1), 2},
		{peUdata4, le32(0x80000000), 0x80000000, 4},
		{peSdata4, le32(0xfffffff0), ^uint64(15), 4},
		{peULEB128, uleb(624485), 624485, 3},
		{peSLEB128, sleb(-123456), signed(-123456), 3},
		{pePCRel | peSdata4, le32(0xfffffff0), 0x1000 + 2 - 16, 4}, // the value sits at pc+2
		{peDataRel | peSdata4, le32(0x10), 0x600010, 4},
		{peTextRel | peUdata4, le32(0x10), 0x400010, 4},
		{pePCRel | peUdata8, le64(8), 0x1000 + 2 + 8, 8},
	}
	for _, tc := range tests {
		r := &reader{b: append([]byte{0xaa, 0xbb}, tc.data...), pos: 2}
		got := r.pointer(tc.enc, b)
		if r.err != nil || got != tc.want || r.pos-2 != tc.size {
			t.Errorf("encoding %#x: %#x (read %d bytes, err %v), want %#x (%d bytes)", tc.enc, got, r.pos-2, r.err, tc.want, tc.size)
		}
	}
	for _, enc := range []uint8{0x07, 0x70 | peUdata4} {
		r := &reader{b: le64(0)}
		r.pointer(enc, b)
		if r.err == nil {
			t.Errorf("encoding %#x accepted", enc)
		}
	}
}

func TestEhFrameHdr(t *testing.T) {
	const hdrAddr, ehAddr = 0x3000, 0x3100
	e := &ehBuilder{addr: ehAddr}
	c := e.cie(x86CIE)
	f1 := e.fde(c, 0x1000, 0x20, nil)
	f2 := e.fde(c, 0x1020, 0x20, []byte{cfaAdvanceLoc | 4, cfaDefCFAOffset, 48})
	rel := func(v uint64) []byte { return le32(uint32(int32(int64(v) - hdrAddr))) }
	hdr := cat([]byte{1, pePCRel | peSdata4, peUdata4, peDataRel | peSdata4},
		le32(uint32(ehAddr-(hdrAddr+4))), le32(2),
		rel(0x1000), rel(ehAddr+uint64(f1)), rel(0x1020), rel(ehAddr+uint64(f2)))
	idx, err := parseHdr(hdr, hdrAddr, ehAddr, len(e.buf))
	if err != nil {
		t.Fatal(err)
	}
	if len(idx) != 2 || idx[0] != (fdeRef{0x1000, f1}) || idx[1] != (fdeRef{0x1020, f2}) {
		t.Fatalf("index %+v", idx)
	}
	s := e.section()
	s.index = idx
	f, err := s.find(0x1030)
	if err != nil {
		t.Fatal(err)
	}
	r, err := rowAt(f, 0x1030)
	if err != nil || r.cfa.offset != 48 {
		t.Fatalf("row %+v, %v", r, err)
	}
	bad := append([]byte(nil), hdr...)
	copy(bad[len(bad)-4:], rel(ehAddr+0x10000))
	if _, err := parseHdr(bad, hdrAddr, ehAddr, len(e.buf)); err == nil {
		t.Error("an entry outside .eh_frame was accepted")
	}
	if _, err := parseHdr(hdr[:20], hdrAddr, ehAddr, len(e.buf)); err == nil {
		t.Error("a truncated table was accepted")
	}
}

func TestDebugFrame(t *testing.T) {
	for _, tc := range []struct {
		name string
		cie  []byte
	}{
		{"version 1", cat([]byte{1, 0}, uleb(1), sleb(-8), []byte{16}, x86CIE)},
		{"version 4", cat([]byte{4, 0, 8, 0}, uleb(1), sleb(-8), uleb(16), x86CIE)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf []byte
			buf = append(buf, le32(uint32(4+len(tc.cie)))...)
			buf = append(buf, le32(0xffffffff)...)
			buf = append(buf, tc.cie...)
			fde := cat(le32(0), le64(0x401000), le64(0x40), []byte{cfaAdvanceLoc | 1, cfaDefCFAOffset, 16})
			buf = append(buf, le32(uint32(len(fde)))...)
			buf = append(buf, fde...)
			s := &section{data: buf, debug: true}
			if err := s.scan(); err != nil {
				t.Fatal(err)
			}
			f, err := s.find(0x401001)
			if err != nil {
				t.Fatal(err)
			}
			r, err := rowAt(f, 0x401001)
			if err != nil || r.cfa.reg != RegRSP || r.cfa.offset != 16 || r.regs[RegRIP].kind != ruleOffset {
				t.Fatalf("row %+v, %v", r, err)
			}
			if _, err := s.find(0x401040); !errors.Is(err, ErrNoCFI) {
				t.Errorf("past the FDE: %v", err)
			}
		})
	}
}

func TestMalformedSections(t *testing.T) {
	e := &ehBuilder{addr: 0x2000}
	c := e.cie(x86CIE)
	f := e.fde(c, 0x1000, 0x10, nil)
	good := e.section().data
	for _, tc := range []struct {
		name string
		edit func([]byte) []byte
	}{
		{"length past the end", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[0:], 1<<20); return b }},
		{"CIE pointer before the section", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[f+4:], 1<<20); return b }},
		{"CIE pointer to an FDE", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[f+4:], 4); return b }},
		{"truncated", func(b []byte) []byte { return b[:10] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &section{data: tc.edit(append([]byte(nil), good...)), addr: 0x2000}
			if err := s.scan(); err == nil {
				if _, err := s.find(0x1000); err == nil {
					t.Error("malformed section gave an FDE")
				}
			}
		})
	}
}

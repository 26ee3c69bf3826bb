package unwind

import (
	"errors"
	"fmt"
)

// x86-64 DWARF register numbers (System V psABI, figure 3.36).
const (
	RegRAX = 0
	RegRDX = 1
	RegRCX = 2
	RegRBX = 3
	RegRSI = 4
	RegRDI = 5
	RegRBP = 6
	RegRSP = 7
	RegR8  = 8
	RegR12 = 12
	RegR13 = 13
	RegR14 = 14
	RegR15 = 15
	// RegRIP is the return-address column: the caller's instruction
	// pointer.
	RegRIP = 16
	// NumRegs is the number of registers a walk tracks.
	NumRegs = 17
)

// ruleKind says how a register of the caller is recovered.
type ruleKind uint8

const (
	ruleUnspecified   ruleKind = iota // no rule: the ABI decides
	ruleUndefined                     // not recoverable; for the return address, the outermost frame
	ruleSameValue                     // unchanged
	ruleOffset                        // saved at CFA+n
	ruleValOffset                     // the value CFA+n
	ruleRegister                      // in register reg
	ruleExpression                    // saved at the address the expression computes
	ruleValExpression                 // the value the expression computes
)

type rule struct {
	kind ruleKind
	reg  uint64
	n    int64
	expr []byte
}

// cfaRule computes the canonical frame address: reg+offset, or an
// expression (PLT entries, realigned stacks).
type cfaRule struct {
	reg    uint64
	offset int64
	expr   []byte
}

// row is the unwind rule set in effect at one address.
type row struct {
	cfa  cfaRule
	regs [NumRegs]rule
}

// DW_CFA_* opcodes (DWARF 5, section 6.4.2, and GNU extensions).
const (
	cfaAdvanceLoc        = 0x40 // high two bits
	cfaOffset            = 0x80
	cfaRestore           = 0xc0
	cfaNop               = 0x00
	cfaSetLoc            = 0x01
	cfaAdvanceLoc1       = 0x02
	cfaAdvanceLoc2       = 0x03
	cfaAdvanceLoc4       = 0x04
	cfaOffsetExtended    = 0x05
	cfaRestoreExtended   = 0x06
	cfaUndefined         = 0x07
	cfaSameValue         = 0x08
	cfaRegister          = 0x09
	cfaRememberState     = 0x0a
	cfaRestoreState      = 0x0b
	cfaDefCFA            = 0x0c
	cfaDefCFARegister    = 0x0d
	cfaDefCFAOffset      = 0x0e
	cfaDefCFAExpression  = 0x0f
	cfaExpression        = 0x10
	cfaOffsetExtendedSF  = 0x11
	cfaDefCFASF          = 0x12
	cfaDefCFAOffsetSF    = 0x13
	cfaValOffset         = 0x14
	cfaValOffsetSF       = 0x15
	cfaValExpression     = 0x16
	cfaMIPSAdvanceLoc8   = 0x1d
	cfaGNUWindowSave     = 0x2d
	cfaGNUArgsSize       = 0x2e
	cfaGNUNegOffsetExt   = 0x2f
	maxRememberedStates  = 64
	maxProgramSteps      = 1 << 16
	errUnsupportedPrefix = "CFA program: "
)

var errCFAPastTarget = errors.New("past target") // internal: stop executing

// machine executes CFA programs for one target address.
type machine struct {
	c       *cie
	loc     uint64 // address the current row starts at
	target  uint64
	row     row
	initial row // the row after the CIE's initial instructions
	stack   []row
}

// rowAt computes the rule row in effect at pc inside f.
func rowAt(f *fde, pc uint64) (row, error) {
	m := &machine{c: f.cie, loc: f.start, target: pc}
	if err := m.run(f.cie.initial, false); err != nil {
		return row{}, fmt.Errorf("CIE initial instructions: %w", err)
	}
	m.initial = m.row
	if err := m.run(f.program, true); err != nil {
		return row{}, err
	}
	return m.row, nil
}

// run executes a program until its end or until the location passes the
// target address.
func (m *machine) run(prog []byte, advance bool) error {
	r := &reader{b: prog}
	for steps := 0; r.left() > 0; steps++ {
		if steps > maxProgramSteps {
			return errors.New(errUnsupportedPrefix + "too many instructions")
		}
		err := m.step(r, advance)
		if err == errCFAPastTarget {
			return nil
		}
		if err != nil {
			return err
		}
		if r.err != nil {
			return fmt.Errorf(errUnsupportedPrefix+"%w", r.err)
		}
	}
	return nil
}

// advanceTo moves the row's location; it stops the program when the new
// row would start past the target.
func (m *machine) advanceTo(loc uint64, allowed bool) error {
	if !allowed {
		return errors.New(errUnsupportedPrefix + "location advance in CIE initial instructions")
	}
	if loc > m.target {
		return errCFAPastTarget
	}
	m.loc = loc
	return nil
}

func (m *machine) set(reg uint64, ru rule) {
	if reg < NumRegs {
		m.row.regs[reg] = ru
	}
	// Other registers (vector registers) never matter for a walk.
}

// step executes one instruction.
func (m *machine) step(r *reader, advance bool) error {
	op := r.u8()
	switch op & 0xc0 {
	case cfaAdvanceLoc:
		return m.advanceTo(m.loc+uint64(op&0x3f)*m.c.codeAlign, advance)
	case cfaOffset:
		m.set(uint64(op&0x3f), rule{kind: ruleOffset, n: int64(r.uleb()) * m.c.dataAlign})
		return nil
	case cfaRestore:
		m.restore(uint64(op & 0x3f))
		return nil
	}
	switch op {
	case cfaNop:
	case cfaSetLoc:
		if m.c.fdeEnc&0x70 != 0 {
			// Relative to the operand's own address, which a program
			// slice no longer knows; compilers do not emit it.
			return errors.New(errUnsupportedPrefix + "relative DW_CFA_set_loc")
		}
		return m.advanceTo(r.value(m.c.fdeEnc&0x0f), advance)
	case cfaAdvanceLoc1:
		return m.advanceTo(m.loc+uint64(r.u8())*m.c.codeAlign, advance)
	case cfaAdvanceLoc2:
		return m.advanceTo(m.loc+uint64(r.u16())*m.c.codeAlign, advance)
	case cfaAdvanceLoc4:
		return m.advanceTo(m.loc+uint64(r.u32())*m.c.codeAlign, advance)
	case cfaMIPSAdvanceLoc8:
		return m.advanceTo(m.loc+r.u64()*m.c.codeAlign, advance)
	case cfaRememberState:
		if len(m.stack) >= maxRememberedStates {
			return errors.New(errUnsupportedPrefix + "remember_state nested too deep")
		}
		m.stack = append(m.stack, m.row)
	case cfaRestoreState:
		if len(m.stack) == 0 {
			return errors.New(errUnsupportedPrefix + "restore_state without remember_state")
		}
		// The whole row, CFA rule included, as GCC's and LLVM's
		// unwinders do: compilers rely on it around epilogues.
		m.row = m.stack[len(m.stack)-1]
		m.stack = m.stack[:len(m.stack)-1]
	default:
		return m.stepRegister(op, r)
	}
	return nil
}

// stepRegister executes the instructions that define the CFA or a
// register rule.
func (m *machine) stepRegister(op uint8, r *reader) error {
	da := m.c.dataAlign
	switch op {
	case cfaOffsetExtended:
		reg := r.uleb()
		m.set(reg, rule{kind: ruleOffset, n: int64(r.uleb()) * da})
	case cfaOffsetExtendedSF:
		reg := r.uleb()
		m.set(reg, rule{kind: ruleOffset, n: r.sleb() * da})
	case cfaGNUNegOffsetExt:
		reg := r.uleb()
		m.set(reg, rule{kind: ruleOffset, n: -int64(r.uleb()) * da})
	case cfaValOffset:
		reg := r.uleb()
		m.set(reg, rule{kind: ruleValOffset, n: int64(r.uleb()) * da})
	case cfaValOffsetSF:
		reg := r.uleb()
		m.set(reg, rule{kind: ruleValOffset, n: r.sleb() * da})
	case cfaRestoreExtended:
		m.restore(r.uleb())
	case cfaUndefined:
		m.set(r.uleb(), rule{kind: ruleUndefined})
	case cfaSameValue:
		m.set(r.uleb(), rule{kind: ruleSameValue})
	case cfaRegister:
		reg := r.uleb()
		m.set(reg, rule{kind: ruleRegister, reg: r.uleb()})
	case cfaExpression, cfaValExpression:
		reg := r.uleb()
		kind := ruleExpression
		if op == cfaValExpression {
			kind = ruleValExpression
		}
		m.set(reg, rule{kind: kind, expr: r.bytes(int(r.uleb()))})
	case cfaDefCFA:
		reg := r.uleb()
		m.row.cfa = cfaRule{reg: reg, offset: int64(r.uleb())}
	case cfaDefCFASF:
		reg := r.uleb()
		m.row.cfa = cfaRule{reg: reg, offset: r.sleb() * da}
	case cfaDefCFARegister:
		m.row.cfa.reg = r.uleb()
		m.row.cfa.expr = nil
	case cfaDefCFAOffset:
		m.row.cfa.offset = int64(r.uleb())
		m.row.cfa.expr = nil
	case cfaDefCFAOffsetSF:
		m.row.cfa.offset = r.sleb() * da
		m.row.cfa.expr = nil
	case cfaDefCFAExpression:
		m.row.cfa = cfaRule{expr: r.bytes(int(r.uleb()))}
	case cfaGNUArgsSize:
		r.uleb() // outgoing argument size: only for landing pads
	default:
		return fmt.Errorf(errUnsupportedPrefix+"opcode %#x unknown", op)
	}
	return nil
}

// restore resets a register to its rule after the CIE's initial
// instructions.
func (m *machine) restore(reg uint64) {
	if reg < NumRegs {
		m.row.regs[reg] = m.initial.regs[reg]
	}
}

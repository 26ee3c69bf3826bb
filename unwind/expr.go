package unwind

import (
	"errors"
	"fmt"
)

// DWARF expression opcodes a CFI expression uses in practice (DWARF 5,
// section 2.5). Location-only operations (DW_OP_reg*, DW_OP_piece) and
// operations that need debug information (DW_OP_fbreg, DW_OP_call*) are not
// valid in CFI and are refused.
const (
	opAddr       = 0x03
	opDeref      = 0x06
	opConst1u    = 0x08
	opConst1s    = 0x09
	opConst2u    = 0x0a
	opConst2s    = 0x0b
	opConst4u    = 0x0c
	opConst4s    = 0x0d
	opConst8u    = 0x0e
	opConst8s    = 0x0f
	opConstu     = 0x10
	opConsts     = 0x11
	opDup        = 0x12
	opDrop       = 0x13
	opOver       = 0x14
	opPick       = 0x15
	opSwap       = 0x16
	opRot        = 0x17
	opAbs        = 0x19
	opAnd        = 0x1a
	opDiv        = 0x1b
	opMinus      = 0x1c
	opMod        = 0x1d
	opMul        = 0x1e
	opNeg        = 0x1f
	opNot        = 0x20
	opOr         = 0x21
	opPlus       = 0x22
	opPlusUconst = 0x23
	opShl        = 0x24
	opShr        = 0x25
	opShra       = 0x26
	opXor        = 0x27
	opBra        = 0x28
	opEq         = 0x29
	opGe         = 0x2a
	opGt         = 0x2b
	opLe         = 0x2c
	opLt         = 0x2d
	opNe         = 0x2e
	opSkip       = 0x2f
	opLit0       = 0x30
	opLit31      = 0x4f
	opBreg0      = 0x70
	opBreg31     = 0x8f
	opBregx      = 0x92
	opDerefSize  = 0x94
	opNop        = 0x96

	maxExprSteps = 4096
	maxExprStack = 64
)

// exprEnv is what an expression can read: the registers of the frame being
// unwound and memory (the copied stack).
type exprEnv interface {
	reg(n uint64) (uint64, error)
	mem(addr uint64, size int) (uint64, error)
}

// errExpr wraps errors of malformed or unsupported expressions.
var errExpr = errors.New("DWARF expression")

// evalExpr runs a DWARF expression with initial values on its stack and
// returns the value on top at the end.
func evalExpr(expr []byte, env exprEnv, initial ...uint64) (uint64, error) {
	e := &evaluator{r: reader{b: expr}, env: env, stack: append(make([]uint64, 0, 8), initial...)}
	for steps := 0; e.r.left() > 0; steps++ {
		if steps > maxExprSteps {
			return 0, fmt.Errorf("%w: too many steps (a loop?)", errExpr)
		}
		if err := e.step(); err != nil {
			return 0, err
		}
		if e.r.err != nil {
			return 0, fmt.Errorf("%w: %w", errExpr, e.r.err)
		}
		if len(e.stack) > maxExprStack {
			return 0, fmt.Errorf("%w: stack deeper than %d", errExpr, maxExprStack)
		}
	}
	if len(e.stack) == 0 {
		return 0, fmt.Errorf("%w: empty stack at the end", errExpr)
	}
	return e.stack[len(e.stack)-1], nil
}

type evaluator struct {
	r     reader
	env   exprEnv
	stack []uint64
	err   error
}

func (e *evaluator) push(v uint64) { e.stack = append(e.stack, v) }

// pop returns the top value; on an empty stack it records an error and
// returns 0.
func (e *evaluator) pop() uint64 {
	if len(e.stack) == 0 {
		if e.err == nil {
			e.err = fmt.Errorf("%w: stack underflow", errExpr)
		}
		return 0
	}
	v := e.stack[len(e.stack)-1]
	e.stack = e.stack[:len(e.stack)-1]
	return v
}

func (e *evaluator) step() error {
	op := e.r.u8()
	switch {
	case op >= opLit0 && op <= opLit31:
		e.push(uint64(op - opLit0))
	case op >= opBreg0 && op <= opBreg31:
		return e.breg(uint64(op-opBreg0), e.r.sleb())
	case op == opBregx:
		reg := e.r.uleb()
		return e.breg(reg, e.r.sleb())
	case op == opDeref:
		return e.deref(8)
	case op == opDerefSize:
		return e.deref(int(e.r.u8()))
	case op == opBra || op == opSkip:
		return e.jump(op)
	default:
		if !e.constant(op) && !e.stackOp(op) && !e.arith(op) {
			return fmt.Errorf("%w: operation %#x not supported in CFI", errExpr, op)
		}
	}
	return e.err
}

func (e *evaluator) breg(reg uint64, off int64) error {
	v, err := e.env.reg(reg)
	if err != nil {
		return err
	}
	e.push(v + uint64(off))
	return nil
}

func (e *evaluator) deref(size int) error {
	if size != 1 && size != 2 && size != 4 && size != 8 {
		return fmt.Errorf("%w: deref of %d bytes", errExpr, size)
	}
	addr := e.pop()
	if e.err != nil {
		return e.err
	}
	v, err := e.env.mem(addr, size)
	if err != nil {
		return err
	}
	e.push(v)
	return nil
}

func (e *evaluator) jump(op uint8) error {
	off := int(int16(e.r.u16()))
	if op == opBra && e.pop() == 0 {
		return e.err
	}
	to := e.r.pos + off
	if to < 0 || to > len(e.r.b) {
		return fmt.Errorf("%w: branch outside the expression", errExpr)
	}
	e.r.pos = to
	return e.err
}

// constant pushes the operand of a constant operation.
func (e *evaluator) constant(op uint8) bool {
	r := &e.r
	switch op {
	case opAddr, opConst8u, opConst8s:
		e.push(r.u64())
	case opConst1u:
		e.push(uint64(r.u8()))
	case opConst1s:
		e.push(uint64(int64(int8(r.u8()))))
	case opConst2u:
		e.push(uint64(r.u16()))
	case opConst2s:
		e.push(uint64(int64(int16(r.u16()))))
	case opConst4u:
		e.push(uint64(r.u32()))
	case opConst4s:
		e.push(uint64(int64(int32(r.u32()))))
	case opConstu:
		e.push(r.uleb())
	case opConsts:
		e.push(uint64(r.sleb()))
	case opNop:
	default:
		return false
	}
	return true
}

// stackOp executes the stack manipulation operations.
func (e *evaluator) stackOp(op uint8) bool {
	var need int
	switch op {
	case opDup, opDrop:
		need = 1
	case opOver, opSwap:
		need = 2
	case opRot:
		need = 3
	case opPick:
		need = int(e.r.u8()) + 1
	default:
		return false
	}
	n := len(e.stack)
	if n < need {
		e.err = fmt.Errorf("%w: stack underflow", errExpr)
		return true
	}
	s := e.stack
	switch op {
	case opDup:
		e.push(s[n-1])
	case opDrop:
		e.stack = s[:n-1]
	case opOver:
		e.push(s[n-2])
	case opPick:
		e.push(s[n-need])
	case opSwap:
		s[n-1], s[n-2] = s[n-2], s[n-1]
	case opRot:
		s[n-1], s[n-2], s[n-3] = s[n-2], s[n-3], s[n-1]
	}
	return true
}

// arith executes the arithmetic, logic and comparison operations.
func (e *evaluator) arith(op uint8) bool {
	switch op {
	case opAbs, opNeg, opNot, opPlusUconst:
		a := e.pop()
		switch op {
		case opAbs:
			if int64(a) < 0 {
				a = -a
			}
		case opNeg:
			a = -a
		case opNot:
			a = ^a
		case opPlusUconst:
			a += e.r.uleb()
		}
		e.push(a)
		return true
	}
	if !isBinary(op) {
		return false
	}
	b, a := e.pop(), e.pop()
	v, err := binop(op, a, b)
	if err != nil && e.err == nil {
		e.err = err
	}
	e.push(v)
	return true
}

func isBinary(op uint8) bool {
	return (op >= opAnd && op <= opXor && op != opNeg && op != opNot && op != opPlusUconst) ||
		(op >= opEq && op <= opNe)
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// binop applies a two-operand operation; a was pushed first.
func binop(op uint8, a, b uint64) (uint64, error) {
	sa, sb := int64(a), int64(b)
	switch op {
	case opAnd:
		return a & b, nil
	case opOr:
		return a | b, nil
	case opXor:
		return a ^ b, nil
	case opPlus:
		return a + b, nil
	case opMinus:
		return a - b, nil
	case opMul:
		return a * b, nil
	case opDiv, opMod:
		if b == 0 {
			return 0, fmt.Errorf("%w: division by zero", errExpr)
		}
		if op == opDiv {
			return uint64(sa / sb), nil
		}
		return a % b, nil
	case opShl:
		return a << min(b, 64), nil
	case opShr:
		return a >> min(b, 64), nil
	case opShra:
		return uint64(sa >> min(b, 63)), nil
	case opEq:
		return b2u(sa == sb), nil
	case opGe:
		return b2u(sa >= sb), nil
	case opGt:
		return b2u(sa > sb), nil
	case opLe:
		return b2u(sa <= sb), nil
	case opLt:
		return b2u(sa < sb), nil
	case opNe:
		return b2u(sa != sb), nil
	}
	return 0, fmt.Errorf("%w: operation %#x", errExpr, op)
}

package unwind

import (
	"errors"
	"fmt"
)

// calleeSaved are the registers a function must preserve (System V
// x86-64): with no CFI rule they keep their value in the caller. The
// others are clobbered by calls and unknown in every caller.
const calleeSaved = 1<<RegRBX | 1<<RegRBP | 1<<RegR12 | 1<<RegR13 | 1<<RegR14 | 1<<RegR15

// maxStackSpan is how far above the stack pointer a frame pointer may
// point and still be taken for one beyond the copied stack (the default
// 8 MiB stack limit).
const maxStackSpan = 8 << 20

// frameState is the register state of one frame.
type frameState struct {
	regs Registers
	// past marks registers unknown because their save slot lay beyond
	// the copied stack: a rule that needs one ran past the copy.
	past uint32
	// exact: the instruction pointer is the interrupted instruction (the
	// first frame, the frame under a signal frame), not a return address.
	exact bool
}

func (st *frameState) pc() uint64 { return st.regs.Value[RegRIP] }
func (st *frameState) sp() uint64 { return st.regs.Value[RegRSP] }

// step is one frame's move to its caller: the caller's state, how its
// address was found, and from which stack slot.
type step struct {
	next frameState
	via  Via
	slot uint64
}

// Unwind walks the captured stack from the captured registers.
func (u *Unwinder) Unwind(c Capture) Result {
	if !c.Regs.Has(RegRIP) || !c.Regs.Has(RegRSP) {
		return Result{Stop: StopBadCFI, Detail: "the instruction and stack pointers were not captured"}
	}
	st := frameState{regs: c.Regs, exact: true}
	var res Result
	via, slot := ViaRegisters, uint64(0)
	for {
		if len(res.Frames) >= u.maxDepth {
			res.Stop, res.Detail = StopDepth, fmt.Sprintf("%d frames", u.maxDepth)
			return res
		}
		pc := st.pc()
		look := pc
		if !st.exact {
			look-- // a return address: the call is the byte before
		}
		fr := Frame{Addr: pc, Via: via, Slot: slot}
		m, ok := mappingOf(c.Mappings, look)
		if !ok {
			res.Frames = append(res.Frames, fr)
			res.Stop, res.Detail = StopOutsideMappings, fmt.Sprintf("%#x", pc)
			return res
		}
		fr.Mapped, fr.Path, fr.BuildID, fr.FileOffset = true, m.Path, m.BuildID, pc-m.Start+m.Offset
		if sym, ok := u.Symbolize(m, fr.FileOffset, !st.exact); ok {
			fr.Symbol = sym
		}
		res.Frames = append(res.Frames, fr)
		s, stop, detail := u.step(c.Stack, m, look, st)
		if stop != 0 {
			res.Stop, res.Detail = stop, detail
			return res
		}
		st, via, slot = s.next, s.via, s.slot
	}
}

// step recovers the caller of the frame at look: by its CFI, else by its
// frame pointer.
func (u *Unwinder) step(stack Stack, m Mapping, look uint64, st frameState) (step, Stop, string) {
	mod := u.module(m)
	off := look - m.Start + m.Offset
	where := fmt.Sprintf("%s+%#x", base(m.Path), off)
	if mod.err == nil {
		if v, ok := mod.vaddr(off); ok {
			f, _, err := mod.fde(v)
			if err == nil {
				return applyCFI(stack, f, v, st, where)
			}
			if !errors.Is(err, ErrNoCFI) {
				return step{}, StopBadCFI, fmt.Sprintf("%s: %v", where, err)
			}
		}
	}
	s, err := framePointer(stack, st)
	switch {
	case err == nil:
		return s, 0, ""
	case errors.Is(err, errPastStack):
		return step{}, StopStackEnd, fmt.Sprintf("%s: frame pointer %#x", where, st.regs.Value[RegRBP])
	case mod.err != nil:
		return step{}, StopNoFile, mod.err.Error()
	}
	return step{}, StopNoCFI, fmt.Sprintf("%s: %v", where, err)
}

// stopFor classifies an error met while applying CFI.
func stopFor(err error, where string) (step, Stop, string) {
	if errors.Is(err, errPastStack) {
		return step{}, StopStackEnd, fmt.Sprintf("%s: %v", where, err)
	}
	return step{}, StopBadCFI, fmt.Sprintf("%s: %v", where, err)
}

// frameEnv gives expressions and rules the frame's registers and the
// copied stack.
type frameEnv struct {
	st    *frameState
	stack Stack
}

func (e frameEnv) reg(n uint64) (uint64, error) {
	if n >= NumRegs {
		return 0, fmt.Errorf("register %d is not tracked", n)
	}
	if e.st.regs.Has(int(n)) {
		return e.st.regs.Value[n], nil
	}
	if e.st.past&(1<<n) != 0 {
		return 0, fmt.Errorf("register %d was saved %w", n, errPastStack)
	}
	return 0, fmt.Errorf("register %d is not known in this frame", n)
}

func (e frameEnv) mem(addr uint64, size int) (uint64, error) {
	v, err := e.stack.read(addr, size)
	if err != nil {
		return 0, fmt.Errorf("%#x: %w", addr, err)
	}
	return v, nil
}

// cfa computes the canonical frame address.
func (e frameEnv) cfa(r cfaRule) (uint64, error) {
	if r.expr != nil {
		return evalExpr(r.expr, e)
	}
	v, err := e.reg(r.reg)
	if err != nil {
		return 0, fmt.Errorf("CFA: %w", err)
	}
	return v + uint64(r.offset), nil
}

// applyCFI computes the caller's registers from the rule row at v.
func applyCFI(stack Stack, f *fde, v uint64, st frameState, where string) (step, Stop, string) {
	if f.cie.raReg != RegRIP {
		return step{}, StopBadCFI, fmt.Sprintf("%s: return address in column %d", where, f.cie.raReg)
	}
	r, err := rowAt(f, v)
	if err != nil {
		return step{}, StopBadCFI, fmt.Sprintf("%s: %v", where, err)
	}
	if r.regs[RegRIP].kind == ruleUndefined {
		return step{}, StopOutermost, ""
	}
	env := frameEnv{st: &st, stack: stack}
	cfa, err := env.cfa(r.cfa)
	if err != nil {
		return stopFor(err, where)
	}
	s := step{via: ViaCFI, next: frameState{exact: f.cie.signal}}
	for reg := 0; reg < NumRegs; reg++ {
		val, slot, err := env.recover(reg, r.regs[reg], cfa)
		switch {
		case err == nil:
			s.next.regs.Set(reg, val)
		case errors.Is(err, errPastStack):
			s.next.past |= 1 << reg
		}
		if reg == RegRIP {
			if err != nil {
				return stopFor(fmt.Errorf("return address: %w", err), where)
			}
			s.slot = slot
		}
	}
	if !s.next.regs.Has(RegRSP) {
		return step{}, StopBadCFI, where + ": the caller's stack pointer is not known"
	}
	if s.next.sp() <= st.sp() {
		return step{}, StopBadCFI, fmt.Sprintf("%s: the caller's frame (%#x) is not above this one (%#x)", where, s.next.sp(), st.sp())
	}
	return s, 0, ""
}

// recover computes one register of the caller. slot is where it was read
// from, for rules that read memory.
func (e frameEnv) recover(reg int, ru rule, cfa uint64) (val, slot uint64, err error) {
	switch ru.kind {
	case ruleUnspecified:
		switch {
		case reg == RegRSP:
			return cfa, 0, nil
		case calleeSaved&(1<<reg) != 0:
			v, err := e.reg(uint64(reg))
			return v, 0, err
		case reg == RegRIP:
			return 0, 0, errors.New("no rule for the return address")
		}
		return 0, 0, errors.New("clobbered by the call")
	case ruleUndefined:
		return 0, 0, errors.New("undefined")
	case ruleSameValue:
		v, err := e.reg(uint64(reg))
		return v, 0, err
	case ruleOffset:
		slot = cfa + uint64(ru.n)
		v, err := e.mem(slot, 8)
		return v, slot, err
	case ruleValOffset:
		return cfa + uint64(ru.n), 0, nil
	case ruleRegister:
		v, err := e.reg(ru.reg)
		return v, 0, err
	case ruleExpression:
		slot, err := evalExpr(ru.expr, e, cfa)
		if err != nil {
			return 0, 0, err
		}
		v, err := e.mem(slot, 8)
		return v, slot, err
	case ruleValExpression:
		v, err := evalExpr(ru.expr, e, cfa)
		return v, 0, err
	}
	return 0, 0, fmt.Errorf("rule kind %d", ru.kind)
}

// errNoFramePointer says rbp does not point into the stack.
var errNoFramePointer = errors.New("no CFI, and rbp does not point into the stack")

// framePointer recovers the caller as a frame-pointer chain does: the
// saved rbp at [rbp], the return address at [rbp+8]. Only the three
// registers it recovers are known in the caller.
func framePointer(stack Stack, st frameState) (step, error) {
	if !st.regs.Has(RegRBP) {
		return step{}, errNoFramePointer
	}
	bp, sp := st.regs.Value[RegRBP], st.sp()
	end := stack.Addr + uint64(len(stack.Data))
	if bp < sp || bp%8 != 0 || bp-sp > maxStackSpan {
		return step{}, errNoFramePointer
	}
	if bp+16 > end {
		return step{}, errPastStack
	}
	ra, _ := stack.read(bp+8, 8)
	saved, _ := stack.read(bp, 8)
	if ra == 0 {
		return step{}, errors.New("the frame-pointer chain ends with a zero return address (no CFI says it is the outermost frame)")
	}
	var next frameState
	next.regs.Set(RegRIP, ra)
	next.regs.Set(RegRSP, bp+16)
	next.regs.Set(RegRBP, saved)
	return step{next: next, via: ViaFramePointer, slot: bp + 8}, nil
}

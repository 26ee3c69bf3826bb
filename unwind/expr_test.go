package unwind

import (
	"errors"
	"strings"
	"testing"
)

// fakeEnv is an expression environment of fixed registers and memory.
type fakeEnv struct {
	regs  map[uint64]uint64
	words map[uint64]uint64
}

func (f fakeEnv) reg(n uint64) (uint64, error) {
	if v, ok := f.regs[n]; ok {
		return v, nil
	}
	return 0, errors.New("register not known")
}

func (f fakeEnv) mem(addr uint64, size int) (uint64, error) {
	if v, ok := f.words[addr]; ok {
		if size < 8 {
			v &= 1<<(8*size) - 1
		}
		return v, nil
	}
	return 0, errPastStack
}

// The .plt CFA expression GCC and binutils emit for x86-64 lazy-binding
// PLT entries: rsp+8, plus 8 once the entry's push (at offset 6, 5 bytes)
// has run: rsp + 8 + ((rip&15) >= 11) << 3.
var pltExpr = []byte{opBreg0 + RegRSP, 8, opBreg0 + RegRIP, 0, opLit0 + 15, opAnd, opLit0 + 11, opGe, opLit0 + 3, opShl, opPlus}

func TestEvalExpr(t *testing.T) {
	env := fakeEnv{
		regs:  map[uint64]uint64{RegRSP: 0x7ffc1000, RegRBP: 0x7ffc1100, 20: 5},
		words: map[uint64]uint64{0x7ffc10f8: 0x7ffc1234, 0x7ffc1000: 0xdeadbeef11223344},
	}
	tests := []struct {
		name    string
		expr    []byte
		initial []uint64
		rip     uint64
		want    uint64
		err     string
	}{
		{name: "plt before push", expr: pltExpr, rip: 0x1036, want: 0x7ffc1008},
		{name: "plt at push", expr: pltExpr, rip: 0x103a, want: 0x7ffc1008},
		{name: "plt after push", expr: pltExpr, rip: 0x103b, want: 0x7ffc1010},
		{name: "plt last byte", expr: pltExpr, rip: 0x103f, want: 0x7ffc1010},
		{name: "realigned stack: rbp-8 deref", expr: []byte{opBreg0 + RegRBP, 0x78, opDeref}, want: 0x7ffc1234},
		{name: "deref_size 4", expr: []byte{opBreg0 + RegRSP, 0, opDerefSize, 4}, want: 0x11223344},
		{name: "initial value (DW_CFA_expression pushes the CFA)", expr: []byte{opLit0 + 16, opMinus}, initial: []uint64{0x100}, want: 0xf0},
		{name: "bregx", expr: []byte{opBregx, 20, 3}, want: 8},
		{name: "constants", expr: []byte{opConst1s, 0xff, opConst2u, 0x00, 0x01, opPlus, opConst4s, 0xfe, 0xff, 0xff, 0xff, opPlus, opConstu, 0x80, 0x01, opPlus}, want: 256 - 1 - 2 + 128},
		{name: "stack ops", expr: []byte{opLit0 + 1, opLit0 + 2, opLit0 + 3, opRot, opSwap, opOver, opPick, 1, opDrop, opDrop, opMinus}, want: 1},
		{name: "arithmetic", expr: []byte{opLit0 + 7, opNeg, opAbs, opLit0 + 2, opMul, opLit0 + 3, opDiv, opLit0 + 3, opMod, opLit0 + 1, opShl, opNot, opNot, opPlusUconst, 10}, want: (7*2/3%3)<<1 + 10},
		{name: "signed compare", expr: []byte{opConst1s, 0xff, opLit0, opLt}, want: 1},
		{name: "shra", expr: []byte{opConst1s, 0xf0, opLit0 + 2, opShra}, want: signed(-4)},
		{name: "branch taken", expr: []byte{opLit0 + 1, opBra, 2, 0, opLit0 + 9, opLit0 + 9, opLit0 + 5}, want: 5},
		{name: "branch not taken", expr: []byte{opLit0, opBra, 1, 0, opLit0 + 9, opLit0 + 5}, want: 5},
		{name: "skip", expr: []byte{opSkip, 1, 0, opLit0 + 9, opLit0 + 4}, want: 4},
		{name: "endless loop", expr: []byte{opSkip, 0xfd, 0xff}, err: "too many steps"},
		{name: "branch outside", expr: []byte{opSkip, 0x10, 0}, err: "outside"},
		{name: "underflow", expr: []byte{opPlus}, err: "underflow"},
		{name: "empty result", expr: []byte{opNop}, err: "empty stack"},
		{name: "division by zero", expr: []byte{opLit0 + 1, opLit0, opDiv}, err: "division by zero"},
		{name: "DW_OP_reg0 is a location", expr: []byte{0x50}, err: "not supported"},
		{name: "unknown register", expr: []byte{opBreg0 + RegRBX, 0}, err: "not known"},
		{name: "memory past the copy", expr: []byte{opBreg0 + RegRSP, 8, opDeref}, err: "past the copied stack"},
		{name: "bad deref size", expr: []byte{opLit0, opDerefSize, 3}, err: "deref of 3"},
		{name: "truncated operand", expr: []byte{opConst4u, 1, 2}, err: "truncated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env.regs[RegRIP] = tc.rip
			got, err := evalExpr(tc.expr, env, tc.initial...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("= %#x, %v; want error %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("= %#x, %v; want %#x", got, err, tc.want)
			}
		})
	}
}

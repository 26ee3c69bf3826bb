package unwind

import "testing"

// FuzzCFI feeds arbitrary bytes to the CFI parsers, the CFA interpreter
// and the expression evaluator: a corrupt or hostile file must give errors,
// never a panic or a hang.
func FuzzCFI(f *testing.F) {
	e := &ehBuilder{addr: 0x2000}
	c := e.cie(x86CIE)
	e.fde(c, 0x1000, 0x40, []byte{cfaAdvanceLoc | 1, cfaDefCFAOffset, 16, cfaOffset | RegRBP, 2, cfaRememberState, cfaRestoreState})
	e.fde(c, 0x1040, 0x10, append([]byte{cfaDefCFAExpression, byte(len(pltExpr))}, pltExpr...))
	f.Add(e.section().data, false)
	f.Add(e.section().data, true)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x10, 0, 0, 0, 0, 0, 0, 0}, false)
	f.Fuzz(func(t *testing.T, data []byte, debug bool) {
		s := &section{data: data, addr: 0x2000, debug: debug}
		_ = s.scan()
		for i, ref := range s.index {
			if i > 64 {
				break
			}
			fd, err := s.fdeAt(ref.off)
			if err != nil {
				continue
			}
			for _, pc := range []uint64{fd.start, fd.start + 1, fd.end - 1} {
				r, err := rowAt(fd, pc)
				if err != nil {
					continue
				}
				env := fakeEnv{regs: map[uint64]uint64{RegRSP: 0x7000, RegRIP: pc}, words: map[uint64]uint64{}}
				if r.cfa.expr != nil {
					evalExpr(r.cfa.expr, env)
				}
				for _, ru := range r.regs {
					if ru.expr != nil {
						evalExpr(ru.expr, env, 0x7000)
					}
				}
			}
		}
		parseHdr(data, 0x1000, 0x2000, len(data))
		evalExpr(data, fakeEnv{regs: map[uint64]uint64{RegRSP: 1}, words: map[uint64]uint64{}})
	})
}

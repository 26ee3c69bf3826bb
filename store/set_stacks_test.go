package store

import (
	"testing"
)

// A flight recording's captures are read across segments: a capture in
// the first segment (referred to from the second), its symbol in the
// set's ids, code objects of both segments merged without repeats.
func TestSetStackCaptures(t *testing.T) {
	dir := t.TempDir()
	code := func(addr uint64, at int64) PyCode { return PyCode{PID: 100, Code: addr, Time: at} }
	specs := []segSpec{
		{seq: 1, symbols: []string{"cuInit", "cuMemAlloc_v2"}, stop: StopRotated, batch: Batch{
			Events:   []Event{call(1, 100, 1.2e9, 2)},
			Captures: []Capture{{PID: 100, TID: 100, Time: 1.2e9, Symbol: 1, Failed: true, Stack: []byte{1}}},
			PyStacks: []PyStack{{PID: 100, TID: 100, Time: 1.2e9, Status: "ok"}},
			PyCodes:  []PyCode{code(0x20, 1e9), code(0x10, 1e9)}}},
		{seq: 2, symbols: []string{"cuMemAlloc_v2", "cuInit"}, stop: "signal", batch: Batch{
			Events:    []Event{call(0, 100, 2.2e9, 2)},
			PyCodes:   []PyCode{code(0x10, 1e9), code(0x10, 2e9)},
			StackRefs: []StackRef{{PID: 100, TID: 100, Time: 2.2e9, RefTID: 100, RefTime: 1.2e9}}}},
	}
	var paths []string
	for _, sp := range specs {
		p, _ := writeSegment(t, dir, sp, false)
		paths = append(paths, p)
	}
	s := openSet(t, paths)

	var refs []StackRef
	if err := s.StackRefs(func(r *StackRef) error { refs = append(refs, *r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(refs) != 1 || refs[0].RefTime != 1.2e9 {
		t.Fatalf("refs = %+v", refs)
	}
	c, err := s.Capture(100, 100, refs[0].RefTime)
	if err != nil || c == nil {
		t.Fatalf("capture = %v, %v", c, err)
	}
	if got := s.SymbolNames()[c.Symbol]; got != "cuMemAlloc_v2" || !c.Failed {
		t.Errorf("capture symbol %q failed %v, want cuMemAlloc_v2 true", got, c.Failed)
	}
	if ps, err := s.PyStack(100, 100, 1.2e9); err != nil || ps == nil || ps.Status != "ok" {
		t.Errorf("PyStack = %+v, %v", ps, err)
	}
	if c, err := s.Capture(100, 100, 2.2e9); c != nil || err != nil {
		t.Errorf("capture of a referring call = %+v, %v, want none", c, err)
	}
	codes, err := s.PyCodes(100)
	if err != nil {
		t.Fatal(err)
	}
	want := []PyCode{code(0x10, 1e9), code(0x10, 2e9), code(0x20, 1e9)}
	if len(codes) != len(want) {
		t.Fatalf("codes = %+v, want %+v", codes, want)
	}
	for i := range want {
		if codes[i].Code != want[i].Code || codes[i].Time != want[i].Time {
			t.Errorf("code %d = %#x@%d, want %#x@%d", i, codes[i].Code, codes[i].Time, want[i].Code, want[i].Time)
		}
	}
}

package store

import (
	"cmp"
	"fmt"
	"slices"
)

// The stack captures of a flight recording. The probes capture a call
// site once and refer later calls from the same site to that capture
// (StackRef), so a capture may live in an older segment than the calls
// that refer to it; it is found as long as retention kept that segment.

// Capture returns the stack capture of a call (nil when no segment has
// it), with the set's symbol id.
func (s *Set) Capture(pid, tid uint32, t int64) (*Capture, error) {
	for i := len(s.segs) - 1; i >= 0; i-- {
		seg := s.segs[i]
		c, err := seg.r.Capture(pid, tid, t)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", seg.r.path, err)
		}
		if c != nil {
			c.Symbol = seg.setSymbol(c.Symbol)
			return c, nil
		}
	}
	return nil, nil
}

// PyStack returns the Python frames captured with a call's stack (nil
// when no segment has them).
func (s *Set) PyStack(pid, tid uint32, t int64) (*PyStack, error) {
	for i := len(s.segs) - 1; i >= 0; i-- {
		p, err := s.segs[i].r.PyStack(pid, tid, t)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.segs[i].r.path, err)
		}
		if p != nil {
			return p, nil
		}
	}
	return nil, nil
}

// PyCodes returns every code object copied for a process in any segment,
// ordered by address then time, as Reader.PyCodes. A code object is
// copied once per process, so later segments rely on earlier ones.
func (s *Set) PyCodes(pid uint32) ([]PyCode, error) {
	var all []PyCode
	for _, seg := range s.segs {
		codes, err := seg.r.PyCodes(pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", seg.r.path, err)
		}
		all = append(all, codes...)
	}
	slices.SortStableFunc(all, func(a, b PyCode) int {
		return cmp.Or(cmp.Compare(a.Code, b.Code), cmp.Compare(a.Time, b.Time))
	})
	return slices.CompactFunc(all, func(a, b PyCode) bool { return a.Code == b.Code && a.Time == b.Time }), nil
}

// StackRefs calls fn for every stack reference, segment after segment.
func (s *Set) StackRefs(fn func(*StackRef) error) error {
	var fnErr error
	return s.eachSegment(&fnErr, func(seg *segment) error {
		return seg.r.StackRefs(func(r *StackRef) error {
			fnErr = fn(r)
			return fnErr
		})
	})
}

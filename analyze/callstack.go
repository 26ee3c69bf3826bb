package analyze

import (
	"errors"

	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// CallStack returns the user stack of one recorded call, named by its
// process and return time: its capture unwound when the recorder
// took one (with its Python frames), else the kernel's frame-pointer walk
// symbolized, the way a failure's stack is. Nil when the call is not in
// the record or has no stack (successful calls get one under --stacks).
func CallStack(r Source, opts Options, pid uint32, endNS int64) (*report.Stack, error) {
	s, err := newState(r, opts)
	if err != nil {
		return nil, err
	}
	if s.libs, err = r.Libraries(); err != nil {
		return nil, err
	}
	var found *failed
	err = r.Events(func(e *store.Event) error {
		if e.PID == pid && e.End == endNS && e.Depth == 0 {
			found = &failed{sym: s.syms.row(e.Symbol), name: s.syms.name(e.Symbol), e: *e}
			found.e.Key = append([]byte(nil), e.Key...)
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, err
	}
	if found == nil {
		return nil, nil
	}
	// The call stands where the capture loader looks for the calls that
	// get a stack.
	s.first, s.failures = found, []*failed{found}
	if err := s.loadCaptures(); err != nil {
		return nil, err
	}
	return s.stack(found), nil
}

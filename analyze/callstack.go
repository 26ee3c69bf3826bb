package analyze

import (
	"errors"
	"math"

	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// CallRef names one recorded call of the application: its process and
// return time.
type CallRef struct {
	PID   uint32
	EndNS int64
}

// CallStack returns the user stack of one recorded call, named by its
// process and return time: its capture unwound when the recorder
// took one (with its Python frames), else the kernel's frame-pointer walk
// symbolized, the way a failure's stack is. Nil when the call is not in
// the record or has no stack (successful calls get one under --stacks).
func CallStack(r Source, opts Options, pid uint32, endNS int64) (*report.Stack, error) {
	st, err := CallStacks(r, opts, []CallRef{{pid, endNS}})
	if err != nil {
		return nil, err
	}
	return st[0], nil
}

// CallStacks is CallStack of several calls, in one pass over the events
// that stops at the last of them: forensic diff names the stacks of every
// departing call of a long run at the cost of one reading.
func CallStacks(r Source, opts Options, calls []CallRef) ([]*report.Stack, error) {
	out := make([]*report.Stack, len(calls))
	if len(calls) == 0 {
		return out, nil
	}
	s, err := newState(r, opts)
	if err != nil {
		return nil, err
	}
	if s.libs, err = r.Libraries(); err != nil {
		return nil, err
	}
	found, err := findCalls(r, s, calls)
	if err != nil {
		return nil, err
	}
	var all []*failed
	for _, f := range found {
		if f != nil {
			all = append(all, f)
		}
	}
	if len(all) == 0 {
		return out, nil
	}
	// The calls stand where the capture loader looks for the calls that
	// get a stack.
	s.first, s.failures = all[0], all
	s.opts.MaxStacks = max(s.opts.MaxStacks, len(all))
	if err := s.loadCaptures(); err != nil {
		return nil, err
	}
	for i, f := range found {
		if f != nil {
			out[i] = s.stack(f)
		}
	}
	return out, nil
}

// findCalls reads the events up to the last of calls and copies each
// (nil for one not in the record).
func findCalls(r Source, s *state, calls []CallRef) ([]*failed, error) {
	want := map[CallRef]int{}
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for i, c := range calls {
		want[c] = i
		lo, hi = min(lo, c.EndNS), max(hi, c.EndNS)
	}
	found := make([]*failed, len(calls))
	left := len(want)
	err := r.Events(func(e *store.Event) error {
		if e.End < lo || e.End > hi || e.Depth != 0 {
			return nil
		}
		i, ok := want[CallRef{e.PID, e.End}]
		if !ok || found[i] != nil {
			return nil
		}
		f := &failed{sym: s.syms.row(e.Symbol), name: s.syms.name(e.Symbol), e: *e}
		f.e.Key = append([]byte(nil), e.Key...)
		found[i] = f
		if left--; left == 0 {
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, err
	}
	for i, c := range calls { // the same call named twice
		if found[i] == nil {
			found[i] = found[want[c]]
		}
	}
	return found, nil
}

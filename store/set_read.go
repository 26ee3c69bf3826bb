package store

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// eachSegment calls read for every segment in order. An error the
// caller's fn returned (recorded in *fnErr) is passed on as it is; any
// other is the segment's and is prefixed with its path.
func (s *Set) eachSegment(fnErr *error, read func(*segment) error) error {
	for _, seg := range s.segs {
		if err := read(seg); err != nil {
			if *fnErr != nil && errors.Is(err, *fnErr) {
				return *fnErr
			}
			return fmt.Errorf("%s: %w", seg.r.path, err)
		}
	}
	return nil
}

// remap gives an event of seg the set's symbol id.
func (seg *segment) remap(e *Event) { e.Symbol = seg.setSymbol(e.Symbol) }

// setSymbol is the set's id of seg's symbol id.
func (seg *segment) setSymbol(id uint16) uint16 {
	if int(id) < len(seg.symbols) {
		return seg.symbols[id]
	}
	return unknownSymbol
}

// Events calls fn for every call event, segment after segment, each in
// storage order; streaming, as Reader.Events. The Event is reused.
func (s *Set) Events(fn func(*Event) error) error {
	var fnErr error
	return s.eachSegment(&fnErr, func(seg *segment) error {
		return seg.r.Events(func(e *Event) error {
			seg.remap(e)
			fnErr = fn(e)
			return fnErr
		})
	})
}

// Failures calls fn for every failed call, segment after segment: from
// each segment's failures index, or from its events where it has none.
func (s *Set) Failures(fn func(*Event) error) error {
	var fnErr error
	return s.eachSegment(&fnErr, func(seg *segment) error {
		each := func(e *Event) error {
			seg.remap(e)
			fnErr = fn(e)
			return fnErr
		}
		err := seg.r.Failures(each)
		if errors.Is(err, ErrNoFailureIndex) {
			err = seg.r.Events(func(e *Event) error {
				if e.Result == 0 {
					return nil
				}
				return each(e)
			})
		}
		return err
	})
}

// Samples calls fn for every NVML sample, segment after segment. A
// segment numbers its samples from 1; the set adds the highest number of
// the segments before it, so that Seq stays unique.
func (s *Set) Samples(fn func(*Sample) error) error {
	var fnErr error
	var base, high uint64
	return s.eachSegment(&fnErr, func(seg *segment) error {
		base = high
		return seg.r.Samples(func(smp *Sample) error {
			smp.Seq += base
			high = max(high, smp.Seq)
			fnErr = fn(smp)
			return fnErr
		})
	})
}

// Readings calls fn for every NVML sample's reading, segment after
// segment.
func (s *Set) Readings(fn func(*Reading) error) error {
	var fnErr error
	return s.eachSegment(&fnErr, func(seg *segment) error {
		return seg.r.Readings(func(rd *Reading) error {
			fnErr = fn(rd)
			return fnErr
		})
	})
}

// LastEventEnd returns where the recording's events end: the latest
// return time in the last event chunk of the last segment holding events.
func (s *Set) LastEventEnd() (int64, error) {
	for i := len(s.segs) - 1; i >= 0; i-- {
		end, err := s.segs[i].r.LastEventEnd()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", s.segs[i].r.path, err)
		}
		if end != 0 {
			return end, nil
		}
	}
	return 0, nil
}

// LastRecordEnd returns the latest time anything of the recording was
// recorded at (Reader.LastRecordEnd), over every segment.
func (s *Set) LastRecordEnd() (int64, error) {
	var end int64
	for _, seg := range s.segs {
		t, err := seg.r.LastRecordEnd()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", seg.r.path, err)
		}
		end = max(end, t)
	}
	return end, nil
}

// Stack returns the frames of a stack id. Stack ids are the recording's
// (one stack map for all segments), so any segment that stored the stack
// answers; the latest is asked first.
func (s *Set) Stack(id int32) ([]Frame, error) {
	for i := len(s.segs) - 1; i >= 0; i-- {
		frames, err := s.segs[i].r.Stack(id)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.segs[i].r.path, err)
		}
		if frames != nil {
			return frames, nil
		}
	}
	return nil, nil
}

// Processes returns every recorded process, ordered by pid then start. A
// process recorded in several segments (each segment starts with the live
// processes' records) is the latest segment's record.
func (s *Set) Processes() ([]Process, error) {
	type key struct {
		pid   uint32
		start int64
	}
	latest := map[key]Process{}
	for _, seg := range s.segs {
		ps, err := seg.r.Processes()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", seg.r.path, err)
		}
		for _, p := range ps {
			latest[key{p.PID, p.Start}] = p
		}
	}
	out := make([]Process, 0, len(latest))
	for _, p := range latest {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Process) int {
		return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.Start, b.Start))
	})
	return out, nil
}

// union collects the records of every segment in order, keeping the first
// of those with equal keys.
func union[T any, K comparable](s *Set, read func(*Reader) ([]T, error), key func(*T) K) ([]T, error) {
	var out []T
	seen := map[K]bool{}
	for _, seg := range s.segs {
		recs, err := read(seg.r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", seg.r.path, err)
		}
		for i := range recs {
			if k := key(&recs[i]); !seen[k] {
				seen[k] = true
				out = append(out, recs[i])
			}
		}
	}
	return out, nil
}

// libraryKey identifies an attachment: a segment repeats the libraries
// attached before it started.
type libraryKey struct {
	path, host, buildID, err string
	dev, inode               uint64
}

// Libraries returns the libcuda files attached, each once, in the order
// they were first recorded.
func (s *Set) Libraries() ([]Library, error) {
	return union(s, (*Reader).Libraries, func(l *Library) libraryKey {
		return libraryKey{l.Path, l.HostPath, l.BuildID, l.Error, l.Device, l.Inode}
	})
}

// kmsgKey identifies a kernel log line.
type kmsgKey struct {
	seq    uint64
	printk int64
	text   string
}

// KernelLog returns the kernel log lines recorded, each once.
func (s *Set) KernelLog() ([]KernelLog, error) {
	return union(s, (*Reader).KernelLog, func(k *KernelLog) kmsgKey { return kmsgKey{k.Seq, k.Printk, k.Text} })
}

// Markers returns the markers, in the order they were added.
func (s *Set) Markers() ([]Marker, error) {
	return union(s, (*Reader).Markers, func(m *Marker) Marker { return *m })
}

// Drops returns the readings of the loss counters (they count from the
// recording's start, across segments), in the order they were taken.
func (s *Set) Drops() ([]Drops, error) {
	return union(s, (*Reader).Drops, func(d *Drops) Drops { return *d })
}

// Files returns the files the segments resolved stack build ids to, one
// per build id.
func (s *Set) Files() ([]File, error) {
	return union(s, (*Reader).Files, func(f *File) string { return f.BuildID })
}

// neighbourKey identifies a neighbour's reading: a later segment names a
// neighbour still listed again, at its own time.
type neighbourKey struct {
	pid uint32
	t   int64
}

// Neighbours returns the processes NVML listed that the recording did not
// follow, as each segment named them, in segment order.
func (s *Set) Neighbours() ([]Neighbour, error) {
	return union(s, (*Reader).Neighbours, func(n *Neighbour) neighbourKey { return neighbourKey{n.PID, n.Time} })
}

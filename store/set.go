package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"
)

// Set reads the segments of one flight-mode recording as one recording:
// the methods of Reader, over every segment that could be opened, in the
// recording's order. Segments that could not be opened (the live one,
// locked by the recorder; a truncated one) are not read but reported by
// Skipped; stretches whose segments the recorder deleted are reported by
// Gaps. Its methods may be called from one goroutine at a time.
//
// Merging: Events, Failures and Samples stream segment after segment;
// Processes keeps the latest record of each pid and start; Libraries,
// KernelLog, Markers and Drops are the union of the segments' (a record
// repeated in several segments counted once); Run is the first readable
// segment's; Stop the last segment's, nil while the recording is open (see
// Stop). Symbol ids are mapped to one id space (SymbolNames) and sample
// sequence numbers are made unique across the segments.
type Set struct {
	path    string
	segs    []*segment
	skipped []Skipped
	gaps    []Gap
	// lastSkipped: the recording's last segment could not be read (the
	// live one, while the recorder writes it).
	lastSkipped bool
	symbols     []string
	live        *LiveCopy
}

// LiveCopy says that the live segment of a recording still being written
// was read from a consistent copy of it (SetOptions.Live).
type LiveCopy struct {
	// Segment is the live segment's path; Copy the copy read in its place.
	Segment string
	Copy    string
	// From says where the copy came from: LiveFromRecorder (the recorder
	// wrote it when asked, just now) or LiveFromSnapshot (the newest
	// snapshot of the segment in the recording's directory).
	From string
	// Taken is when the copy was made.
	Taken time.Time
}

// Where a live segment's copy came from.
const (
	LiveFromRecorder = "recorder"
	LiveFromSnapshot = "snapshot"
)

// segment is one readable segment and how its ids map to the set's.
type segment struct {
	r      *Reader
	flight *FlightInfo
	// symbols maps the segment's symbol ids to the set's.
	symbols []uint16
}

// Skipped is a segment a Set could not read, and why (an error that names
// the path and wraps one of the sentinels of errors.go: ErrLocked for the
// live segment, ErrNotFound for a segment whose file is gone).
type Skipped struct {
	Path string
	Err  error
	// Segment is what the recording's index says the segment held; nil
	// when the set was opened without it.
	Segment *SegmentInfo
}

// Lost reports whether the skipped segment is a closed one whose file is
// gone: its records are lost (the live segment, locked or torn, is not).
func (sk *Skipped) Lost() bool {
	return sk.Segment != nil && !sk.Segment.Live && errors.Is(sk.Err, ErrNotFound)
}

// SegmentInfo is what a flight recording's index says of one segment.
type SegmentInfo struct {
	Seq uint64
	// From and To bound what it holds, on the run clock (To of the live
	// segment is its last update).
	From, To int64
	// Calls and Failures are its call events and failed calls.
	Calls, Failures uint64
	// Live: the recorder was writing it when the index was written.
	Live bool
}

// Gap is a stretch of a recording whose segments were deleted to hold the
// recording's size bound: the calls in it are not in the files, so a
// reader must not take it for a stretch where nothing happened.
type Gap struct {
	// From and To bound the stretch on the run clock: from the start of
	// the first deleted segment to the end of the last.
	From int64 `json:"from_ns"`
	To   int64 `json:"to_ns"`
	// Calls and Failures are the events and failed calls the deleted
	// segments held; Bytes their size.
	Calls    uint64 `json:"calls"`
	Failures uint64 `json:"failures"`
	Bytes    int64  `json:"bytes"`
	// Reason is GapRetention or GapWindowCut.
	Reason string `json:"reason"`
}

// Reasons a stretch was deleted.
const (
	// GapRetention: routine history, no failure window overlapped it.
	GapRetention = "retention"
	// GapWindowCut: the failure windows alone exceeded the size bound, so
	// part of a window had to go.
	GapWindowCut = "window-cut"
)

// unknownSymbol is the set id of a symbol id a segment does not name.
const unknownSymbol = 0xffff

// SetOptions adjust OpenSet.
type SetOptions struct {
	// Path is what Set.Path reports (the recording's directory); default
	// the directory of the first segment.
	Path string
	// Gaps are the stretches deleted from the recording (from its index).
	Gaps []Gap
	// Live, when set, says that the last path is a copy of the live
	// segment read in its place (reported by Set.Live).
	Live *LiveCopy
	// Segments, when set, is what the index says of each path, in the
	// same order: a segment that cannot be read is reported with it.
	Segments []SegmentInfo
}

// OpenSet opens the segments at paths, given in the recording's order, as
// one recording. A segment that cannot be opened, belongs to another
// recording or repeats an earlier sequence number is reported by Skipped;
// OpenSet fails only when no segment can be read (wrapping the first
// segment's reason, so errors.Is finds ErrLocked for a recording whose
// only segment is live).
func OpenSet(paths []string, opts SetOptions) (*Set, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("%s: %w", opts.Path, ErrNoSegments)
	}
	s := &Set{path: opts.Path, gaps: slices.Clone(opts.Gaps), live: opts.Live}
	if s.path == "" {
		s.path = filepath.Dir(paths[0])
	}
	for i, p := range paths {
		err := s.add(p)
		if err != nil {
			sk := Skipped{Path: p, Err: err}
			if i < len(opts.Segments) {
				info := opts.Segments[i]
				sk.Segment = &info
			}
			s.skipped = append(s.skipped, sk)
		}
		s.lastSkipped = err != nil && i == len(paths)-1
	}
	if len(s.segs) == 0 {
		return nil, fmt.Errorf("%s: %w: %w", s.path, ErrNoSegments, s.skipped[0].Err)
	}
	return s, nil
}

// add opens one segment and joins it to the set.
func (s *Set) add(path string) error {
	r, err := Open(path)
	if err != nil {
		return err
	}
	seg := &segment{r: r}
	if err = s.check(seg); err != nil {
		r.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	seg.symbols = s.mapSymbols(r.symbols)
	s.segs = append(s.segs, seg)
	return nil
}

// check reads a segment's flight record and checks that it continues the
// set: the same recording, a later sequence number.
func (s *Set) check(seg *segment) (err error) {
	if seg.flight, err = seg.r.Flight(); err != nil {
		return err
	}
	if len(s.segs) == 0 {
		return nil
	}
	prev := s.segs[len(s.segs)-1]
	if id := seg.r.run.ID; id != prev.r.run.ID {
		return fmt.Errorf("%w (recording %q, the set's is %q)", ErrOtherRecording, id, prev.r.run.ID)
	}
	if seg.flight != nil && prev.flight != nil && seg.flight.Seq <= prev.flight.Seq {
		return fmt.Errorf("%w (segment %d after %d)", ErrSegmentOrder, seg.flight.Seq, prev.flight.Seq)
	}
	return nil
}

// mapSymbols adds a segment's symbol names to the set's and returns the
// map from the segment's ids to the set's. The first segment's ids are
// kept as they are.
func (s *Set) mapSymbols(names []string) []uint16 {
	ids := make([]uint16, len(names))
	for i, name := range names {
		ids[i] = unknownSymbol
		if name == "" {
			continue
		}
		j := slices.Index(s.symbols, name)
		if j < 0 && len(s.symbols) < unknownSymbol {
			if len(s.segs) == 0 {
				// The first segment's ids stay as they are.
				for len(s.symbols) < i {
					s.symbols = append(s.symbols, "")
				}
			}
			j = len(s.symbols)
			s.symbols = append(s.symbols, name)
		}
		if j >= 0 {
			ids[i] = uint16(j)
		}
	}
	return ids
}

// Close closes every segment.
func (s *Set) Close() error {
	var errs []error
	for _, seg := range s.segs {
		errs = append(errs, seg.r.Close())
	}
	return errors.Join(errs...)
}

// Path returns the set's path (the recording's directory).
func (s *Set) Path() string { return s.path }

// Segments returns the paths of the segments read, in order.
func (s *Set) Segments() []string {
	out := make([]string, len(s.segs))
	for i, seg := range s.segs {
		out[i] = seg.r.path
	}
	return out
}

// Skipped returns the segments that could not be read, and why.
func (s *Set) Skipped() []Skipped { return slices.Clone(s.skipped) }

// Live returns how the live segment was read: nil when the recording had
// no live segment or it could not be read (Skipped says so).
func (s *Set) Live() *LiveCopy {
	if s.live == nil || s.lastSkipped {
		return nil
	}
	c := *s.live
	return &c
}

// Gaps returns the stretches deleted from the recording, oldest first.
func (s *Set) Gaps() []Gap { return slices.Clone(s.gaps) }

// Schema returns the first segment's schema version.
func (s *Set) Schema() uint32 { return s.segs[0].r.schema }

// Run returns the first segment's run record.
func (s *Set) Run() RunInfo { return s.segs[0].r.run }

// SymbolNames returns the set's symbol names, indexed by the symbol ids
// its events carry.
func (s *Set) SymbolNames() []string { return slices.Clone(s.symbols) }

// EndLost reports whether the recording's last segment, closed by its
// recorder, is a file that is gone: the recording ended (the index says
// so), but its end and its stop record are lost with that segment.
func (s *Set) EndLost() bool {
	n := len(s.skipped)
	return s.lastSkipped && n > 0 && s.skipped[n-1].Lost()
}

// Stop returns the recording's stop record: the last segment's, or nil
// while the recording is open (its last segment could not be read, or
// ends with a rotation, so the recording went on past these files) or
// when its last segment is lost (EndLost).
func (s *Set) Stop() (*StopInfo, error) {
	if s.lastSkipped {
		return nil, nil
	}
	st, err := s.segs[len(s.segs)-1].r.Stop()
	if err != nil || st == nil || st.Reason == StopRotated {
		return nil, err
	}
	return st, nil
}

// Inventory returns the first inventory of the segments, in order: the
// platform as the recording found it.
func (s *Set) Inventory() (*Inventory, error) {
	for _, seg := range s.segs {
		inv, err := seg.r.Inventory()
		if inv != nil || err != nil {
			return inv, err
		}
	}
	return nil, nil
}

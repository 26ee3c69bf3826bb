package analyze

import (
	"errors"
	"fmt"
	"time"

	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// flightSource is a flight recording read as one (store.Set): its
// segments, and how the live one was read.
type flightSource interface {
	segmented
	Segments() []string
	Live() *store.LiveCopy
	Committed() (*store.Stats, error)
	EndLost() bool
}

// Values of report.FlightRead.Live.
const (
	liveNone     = "none"
	liveCopy     = "copy"
	liveSnapshot = "snapshot"
	liveNotRead  = "not-read"
)

// flightRead fills what the report says of how a flight recording was
// read, once the event pass has counted the events read: the segments,
// the live one, the deleted stretches, and whether the events reconcile
// with the recorder's own count. A recording still being written ends
// "recording", not "abrupt".
func (s *state) flightRead() {
	fs, ok := s.r.(flightSource)
	if !ok {
		return
	}
	fr := &report.FlightRead{SegmentsRead: len(fs.Segments()), NotRead: []string{}, Live: liveNone, EventsRead: s.rep.Run.Events,
		SegmentsLost: []uint64{}}
	for _, sk := range fs.Skipped() {
		fr.NotRead = append(fr.NotRead, oneLine(sk.Err)) // the error names the path
		if errors.Is(sk.Err, store.ErrLocked) {
			fr.Live = liveNotRead
		}
		if sk.Lost() {
			fr.SegmentsLost = append(fr.SegmentsLost, sk.Segment.Seq)
			fr.LostCalls += sk.Segment.Calls
		}
	}
	if lc := fs.Live(); lc != nil {
		fr.Live, fr.LiveTaken = liveSnapshot, lc.Taken.UTC().Format(time.RFC3339Nano)
		if lc.From == store.LiveFromRecorder {
			fr.Live = liveCopy
		}
	}
	for _, g := range fs.Gaps() {
		fr.DroppedRanges++
		fr.DroppedCalls += g.Calls
		if g.Reason == store.GapWindowCut {
			fr.DroppedWindowCut++
		}
	}
	fr.EventsRecorded = s.recordedEvents(fs)
	s.rep.Run.Flight = fr
	switch {
	case s.stop == nil && fs.EndLost():
		// The index says the recorder closed its last segment: it
		// stopped; what the stop record said is lost with that segment.
		s.rep.Run.Ended = "clean"
	case s.stop == nil && fr.Live != liveNone:
		s.rep.Run.Ended = "recording"
	}
}

// recordedEvents is the recorder's count of events at the end of what was
// read: the stop record's; else the count the last segment read stored
// with its last commit (for a live recording, the copy's: taken with the
// data it counts); else, in a file from before commits stored it, the
// last counter reading's, which can run behind the events committed
// after it.
func (s *state) recordedEvents(fs flightSource) uint64 {
	if s.stop != nil {
		return s.stop.Stats.Events
	}
	if c, err := fs.Committed(); err == nil && c != nil {
		return c.Events
	}
	if drops, err := s.r.Drops(); err == nil && len(drops) > 0 {
		return drops[len(drops)-1].Stats.Events
	}
	return 0
}

// flightUnaccounted says when the recorder counted events that are in no
// segment read and no deleted stretch: a segment lost or unreadable.
func (s *state) flightUnaccounted() []report.Missing {
	fr := s.rep.Run.Flight
	if fr == nil {
		return nil
	}
	acc := fr.EventsRead + fr.DroppedCalls + s.lostBefore()
	if fr.EventsRecorded <= acc {
		return nil
	}
	return []report.Missing{{Decisive: true,
		What: fmt.Sprintf("the recorder counted %s, but the segments read and the deleted stretches hold %d: %d are in no file read",
			report.Plural(int(fr.EventsRecorded), "call event"), acc, fr.EventsRecorded-acc),
		Fix: "look for segments that could not be read or were removed by hand"}}
}

// flightGoesOn says that a recording still being written goes on past
// what was read.
func (s *state) flightGoesOn() []report.Missing {
	fr := s.rep.Run.Flight
	if fr == nil || (fr.Live != liveCopy && fr.Live != liveSnapshot) {
		return nil
	}
	return []report.Missing{{
		What: fmt.Sprintf("the recording goes on: what was read ends with a copy of the live segment taken at %s", fr.LiveTaken),
		Fix:  "analyze the directory again for what came since (forensic snapshot DIR keeps a copy)"}}
}

// lostBefore counts the call events of the lost segments (closed, their
// files gone) that come before the end of what was read: the recorder's
// count includes them, and the segment gaps name them already.
func (s *state) lostBefore() uint64 {
	seg, ok := s.r.(segmented)
	if !ok {
		return 0
	}
	var n uint64
	for _, sk := range seg.Skipped() {
		if sk.Lost() && sk.Segment.From < s.lastTime {
			n += sk.Segment.Calls
		}
	}
	return n
}

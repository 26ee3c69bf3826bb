package store

import (
	"fmt"
	"io"
	"time"

	bolt "go.etcd.io/bbolt"
)

// keyFlight is the meta key of the flight record; keyCommitted the
// recorder's counters as of the last commit.
var (
	keyFlight    = []byte("flight")
	keyCommitted = []byte("committed")
)

// StopRotated is the stop reason of a flight-mode segment the recorder
// closed to start the next one: the recording went on in the next segment.
const StopRotated = "rotated"

// FlightInfo is the flight record (meta/flight) of one segment of a
// flight-mode recording: a run.db that is one of a sequence of files of the
// same recording (same RunInfo.ID). Files of ordinary recordings have none.
type FlightInfo struct {
	// Seq is the segment's sequence number in its recording, from 1; the
	// segments are read in this order.
	Seq uint64 `json:"seq"`
	// Start is when the segment was started, on the run clock.
	Start int64 `json:"start_ns"`
	// The recording's retention: the bound on all segments' bytes
	// together, the size and age at which a segment is closed, and the
	// time kept before and after each failure.
	MaxBytes     int64         `json:"max_bytes"`
	SegmentBytes int64         `json:"segment_bytes"`
	SegmentAge   time.Duration `json:"segment_age_ns"`
	KeepBefore   time.Duration `json:"keep_before_ns"`
	KeepAfter    time.Duration `json:"keep_after_ns"`
}

// SetFlight writes the flight record, marking the file as a segment of a
// flight-mode recording. The recorder writes it once, right after Create.
func (w *Writer) SetFlight(f FlightInfo) error {
	err := w.db.Update(func(tx *bolt.Tx) error {
		return putJSON(tx.Bucket(bucketMeta), keyFlight, f)
	})
	return diskErr(err)
}

// Flight returns the flight record, or nil for a file that is not a
// segment of a flight-mode recording.
func (r *Reader) Flight() (f *FlightInfo, err error) {
	err = r.view(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		if m.Get(keyFlight) == nil {
			return nil
		}
		f = new(FlightInfo)
		return getJSON(m, keyFlight, f)
	})
	return f, err
}

// Snapshot writes a consistent copy of the file as it is now, while commits
// go on (bbolt's Tx.WriteTo in a read transaction): begin is told the
// copy's size and returns where to write it. Snapshot may be called from
// another goroutine than the one that commits, but not after Close. A
// commit that has to grow the file waits until the copy is written.
func (w *Writer) Snapshot(begin func(size int64) (io.Writer, error)) (int64, error) {
	var n int64
	err := w.db.View(func(tx *bolt.Tx) error {
		out, err := begin(tx.Size())
		if err != nil {
			return err
		}
		n, err = tx.WriteTo(out)
		return err
	})
	return n, err
}

// putCounts stores the counters a batch carries (Batch.Counts) in the
// batch's own transaction, replacing the last commit's: whoever reads the
// file, or a consistent copy of it, finds the count that matches the
// events it holds, not a reading taken before or after them.
func putCounts(meta *bolt.Bucket, b *Batch) error {
	return putJSON(meta, keyCommitted, b.Counts)
}

// Committed returns the recorder's counters as of the file's last commit
// (meta/committed), or nil for a file whose recorder did not store them
// (an ordinary recording, or one written before they were). In a flight
// recording they count from the recording's start: their Events are the
// call events of this segment and of every one before it.
func (r *Reader) Committed() (c *Stats, err error) {
	err = r.view(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		if m.Get(keyCommitted) == nil {
			return nil
		}
		c = new(Stats)
		return getJSON(m, keyCommitted, c)
	})
	return c, err
}

// Committed returns the counters as of the last commit of the last
// segment read (Reader.Committed): for a recording still being written,
// those of the copy of its live segment, taken with the copy's data.
func (s *Set) Committed() (*Stats, error) {
	last := s.segs[len(s.segs)-1]
	c, err := last.r.Committed()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", last.r.path, err)
	}
	return c, nil
}

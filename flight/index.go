package flight

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/retrivium/forensic/store"
)

// Names in a flight recording's directory.
const (
	// IndexFile is the index's name in the directory (runpaths.Expand takes
	// a directory holding it for one recording).
	IndexFile = store.FlightIndex
	// SegmentDir holds the segments, NNNNNNNN.db by sequence number.
	SegmentDir = "segments"
	// IndexFormat is the index's "format" value.
	IndexFormat = "forensic-flight"
	// IndexVersion is the index layout this package writes and reads.
	IndexVersion = 1
)

// Index is index.json: the recording's segments and what was deleted.
type Index struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// ID is the recording's run id (every segment's RunInfo.ID).
	ID string `json:"id"`
	// The retention in force (Policy).
	MaxBytes     int64 `json:"max_bytes"`
	SegmentBytes int64 `json:"segment_bytes"`
	SegmentAgeNS int64 `json:"segment_age_ns"`
	KeepBeforeNS int64 `json:"keep_before_ns"`
	KeepAfterNS  int64 `json:"keep_after_ns"`
	// DiskBound is the bound in force when the filesystem filled before
	// MaxBytes (0: it did not): all segments together stay within it for
	// the rest of the recording, and SegmentBytes was lowered with it so
	// that a closed segment and the live one still fit.
	DiskBound int64 `json:"disk_bound_bytes,omitempty"`
	// DiskFull counts the times the filesystem refused a write before
	// the bound was reached (Dir.Pressure), each answered by deleting.
	DiskFull int `json:"disk_full,omitempty"`
	// Segments are the segments on disk, by sequence number.
	Segments []Segment `json:"segments"`
	// Dropped are the stretches whose segments were deleted, by sequence
	// number; adjacent ones deleted for the same reason are one range.
	Dropped []Dropped `json:"dropped"`
}

// Segment is one segment of the recording.
type Segment struct {
	// File is the segment's path relative to the directory.
	File string `json:"file"`
	Seq  uint64 `json:"seq"`
	// Start and End bound what it holds, on the run clock; End of the live
	// segment is its last update.
	Start int64 `json:"start_ns"`
	End   int64 `json:"end_ns"`
	// Live: the recorder is writing it (it is locked; readers skip it).
	Live bool `json:"live,omitempty"`
	// Calls are its call events; Bytes its size on disk (allocated
	// blocks: bbolt extends its file sparsely).
	Calls uint64 `json:"calls"`
	Bytes int64  `json:"bytes"`
	// Failures counts its failed calls; FirstFailure and LastFailure are
	// the earliest and latest (0 when none). The window of every failure
	// in between lies within [FirstFailure-KeepBefore,
	// LastFailure+KeepAfter], and another segment can overlap that span
	// only where it overlaps one failure's window, so the two are all
	// retention needs.
	Failures     uint64 `json:"failures"`
	FirstFailure int64  `json:"first_failure_ns,omitempty"`
	LastFailure  int64  `json:"last_failure_ns,omitempty"`
	// Protected: a failure window overlaps it (recomputed at each update).
	Protected bool `json:"protected"`
}

// Dropped is a stretch whose segments were deleted: the Gap the analysis
// reads, and which segments and failures it held.
type Dropped struct {
	store.Gap
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	// FirstFailure and LastFailure of the deleted segments, 0 when none:
	// their windows still protect the segments around them.
	FirstFailure int64 `json:"first_failure_ns,omitempty"`
	LastFailure  int64 `json:"last_failure_ns,omitempty"`
}

// ErrIndex: index.json is missing, unreadable or not a flight index.
var ErrIndex = errors.New("not a readable flight recording index")

// NewIndex returns the index of a new recording with no segments.
func NewIndex(id string, p Policy) *Index {
	return &Index{Format: IndexFormat, Version: IndexVersion, ID: id, MaxBytes: p.MaxBytes,
		SegmentBytes: p.SegmentBytes, SegmentAgeNS: int64(p.SegmentAge),
		KeepBeforeNS: int64(p.KeepBefore), KeepAfterNS: int64(p.KeepAfter),
		Segments: []Segment{}, Dropped: []Dropped{}}
}

// ReadIndex reads dir/index.json.
func ReadIndex(dir string) (*Index, error) {
	path := filepath.Join(dir, IndexFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIndex, err)
	}
	x := new(Index)
	if err := json.Unmarshal(data, x); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", path, ErrIndex, err)
	}
	switch {
	case x.Format != IndexFormat:
		return nil, fmt.Errorf("%s: %w (format %q)", path, ErrIndex, x.Format)
	case x.Version > IndexVersion:
		return nil, fmt.Errorf("%s: %w (version %d; this forensic reads up to %d)", path, ErrIndex, x.Version, IndexVersion)
	}
	if err := x.check(); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", path, ErrIndex, err)
	}
	return x, nil
}

// check refuses an index that names files outside the segments directory
// or lists segments out of order: a reader opens what the index names.
func (x *Index) check() error {
	var prev uint64
	for i, s := range x.Segments {
		switch {
		case s.File != SegmentName(s.Seq):
			return fmt.Errorf("segment %d is %q, not %s", s.Seq, s.File, SegmentName(s.Seq))
		case s.Seq <= prev:
			return fmt.Errorf("segment %d listed after %d", s.Seq, prev)
		case s.Live && i != len(x.Segments)-1:
			return fmt.Errorf("segment %d is live but not the last", s.Seq)
		}
		prev = s.Seq
	}
	return nil
}

// WriteIndex replaces dir/index.json atomically: the index is written to a
// temporary file, synced, renamed over the old one, and the directory is
// synced, so a crash leaves the old index or the new one, never a mix.
func WriteIndex(dir string, x *Index) error {
	data, err := json.MarshalIndent(x, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, IndexFile+".tmp*")
	if err != nil {
		return fmt.Errorf("write index: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename, there is nothing to remove
	_, err = tmp.Write(append(data, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, IndexFile))
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("write index in %s: %w", dir, err)
	}
	return nil
}

// syncDir makes a rename or a removal in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Policy returns the retention the index records.
func (x *Index) Policy() Policy {
	return Policy{MaxBytes: x.MaxBytes, SegmentBytes: x.SegmentBytes, SegmentAge: time.Duration(x.SegmentAgeNS),
		KeepBefore: time.Duration(x.KeepBeforeNS), KeepAfter: time.Duration(x.KeepAfterNS)}
}

// Bound is the bound in force: MaxBytes, or DiskBound once the
// filesystem filled first.
func (x *Index) Bound() int64 {
	if x.DiskBound > 0 && x.DiskBound < x.MaxBytes {
		return x.DiskBound
	}
	return x.MaxBytes
}

// Gaps returns the dropped ranges as the store reads them.
func (x *Index) Gaps() []store.Gap {
	out := make([]store.Gap, len(x.Dropped))
	for i, d := range x.Dropped {
		out[i] = d.Gap
	}
	return out
}

// Bytes is the size of all segments together, the live one included.
func (x *Index) Bytes() int64 {
	var n int64
	for _, s := range x.Segments {
		n += s.Bytes
	}
	return n
}

// SegmentName is the file name of segment seq, relative to the directory.
func SegmentName(seq uint64) string {
	return filepath.Join(SegmentDir, fmt.Sprintf("%08d.db", seq))
}

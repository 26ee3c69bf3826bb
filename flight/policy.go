package flight

import (
	"errors"
	"fmt"
	"time"
)

// Limits of the segment size and the smallest bound on a recording.
const (
	// MinSegmentBytes and MaxSegmentBytes clamp the segment size, an
	// eighth of the bound: segments small enough that deleting one frees
	// little of the window, large enough that a busy recorder does not
	// rotate many times a second.
	MinSegmentBytes = 8 << 20
	MaxSegmentBytes = 128 << 20
	// MinMaxBytes is the smallest bound: the live segment and one closed
	// segment of the smallest size.
	MinMaxBytes = 2 * MinSegmentBytes
	// DefaultSegmentAge is the age at which a segment is closed, so that
	// retention can delete a quiet stretch in pieces of at most this long.
	DefaultSegmentAge = 60 * time.Second
)

// Policy is a flight recording's retention: how large all its segments
// may be together, when a segment is closed, and what is kept around each
// failure.
type Policy struct {
	// MaxBytes bounds the bytes of all segments together, the one being
	// written included (--max-size).
	MaxBytes int64
	// SegmentBytes and SegmentAge: a segment is closed when it reaches
	// either.
	SegmentBytes int64
	SegmentAge   time.Duration
	// KeepBefore and KeepAfter make the window kept around each failure
	// (--keep-before, --keep-after).
	KeepBefore time.Duration
	KeepAfter  time.Duration
}

// ErrPolicy: the retention asked for is impossible.
var ErrPolicy = errors.New("impossible retention")

// NewPolicy returns the policy of a bound and a failure window, with the
// segment size an eighth of the bound, clamped to [MinSegmentBytes,
// MaxSegmentBytes], and segments closed at DefaultSegmentAge.
func NewPolicy(maxBytes int64, keepBefore, keepAfter time.Duration) (Policy, error) {
	switch {
	case maxBytes < MinMaxBytes:
		return Policy{}, fmt.Errorf("%w: --max-size %d bytes is below %d MiB (two segments of %d MiB)",
			ErrPolicy, maxBytes, MinMaxBytes>>20, MinSegmentBytes>>20)
	case keepBefore < 0 || keepAfter < 0:
		return Policy{}, fmt.Errorf("%w: --keep-before and --keep-after cannot be negative", ErrPolicy)
	}
	seg := min(max(maxBytes/8, MinSegmentBytes), MaxSegmentBytes)
	return Policy{MaxBytes: maxBytes, SegmentBytes: seg, SegmentAge: DefaultSegmentAge,
		KeepBefore: keepBefore, KeepAfter: keepAfter}, nil
}

// Rotate reports whether a segment of this many bytes, started this long
// ago, is to be closed and the next one started.
func (p Policy) Rotate(bytes int64, age time.Duration) bool {
	return bytes >= p.SegmentBytes || (p.SegmentAge > 0 && age >= p.SegmentAge)
}

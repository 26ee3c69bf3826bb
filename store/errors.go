package store

import "errors"

// Errors returned when a file cannot be read as a run. Callers test them
// with errors.Is; each carries a sentence a CLI can print as it is.
var (
	// ErrNotFound: the file does not exist.
	ErrNotFound = errors.New("no such file")
	// ErrEmpty: the file has no bytes (a recorder that never started).
	ErrEmpty = errors.New("file is empty, not a forensic run")
	// ErrNotRunDB: the file is not a bbolt database, or is truncated or
	// corrupt beyond what bbolt can open.
	ErrNotRunDB = errors.New("not a forensic run database (not bbolt, truncated or corrupt)")
	// ErrForeign: a valid bbolt file written by another program.
	ErrForeign = errors.New("a bbolt database of another program, not a forensic run")
	// ErrNewerSchema: written by a newer forensic with a schema this one
	// does not know.
	ErrNewerSchema = errors.New("written by a newer forensic (schema version unknown to this one)")
	// ErrLocked: a live recorder holds the file.
	ErrLocked = errors.New("locked by a running recorder; it can be read once the recording stops")
	// ErrCorrupt: a record inside an otherwise valid file could not be
	// decoded.
	ErrCorrupt = errors.New("a record in the file is corrupt")
	// ErrExists: Create refuses to overwrite a file.
	ErrExists = errors.New("file exists (use --force to overwrite)")
	// ErrNotReplaced: Create with Force found something it must not
	// remove (a recording in progress, a directory, a file that is not a
	// forensic run); the error says what.
	ErrNotReplaced = errors.New("not replaced (--force replaces only a finished forensic run)")
	// ErrDiskFull: the filesystem has no room left for more records.
	ErrDiskFull = errors.New("disk full")
	// ErrNoSegments: none of the segments of a flight-mode recording
	// could be read (OpenSet); the error also wraps the first one's reason.
	ErrNoSegments = errors.New("no readable segment of the recording")
	// ErrOtherRecording: a segment given to OpenSet belongs to another
	// recording (another run id).
	ErrOtherRecording = errors.New("a segment of another recording")
	// ErrSegmentOrder: a segment given to OpenSet repeats or precedes the
	// sequence number of the one before it (a copy, or out of order).
	ErrSegmentOrder = errors.New("a segment out of order or repeated")
)

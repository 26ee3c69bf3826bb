package flight

import (
	"path/filepath"

	"github.com/retrivium/forensic/store"
)

// OpenOptions adjust OpenWith.
type OpenOptions struct {
	// Live is a consistent copy of the live segment, read in its place
	// (the recorder wrote it when asked: forensic analyze on a recording
	// in progress).
	Live *store.LiveCopy
}

// Open reads a flight recording's directory as one recording: the
// segments its index names, in sequence order, with its dropped ranges as
// the set's gaps (OpenWith without options).
func Open(dir string) (*store.Set, error) { return OpenWith(dir, OpenOptions{}) }

// OpenWith reads a flight recording's directory as one recording. The live
// segment, locked by its recorder, is read from opts.Live when given, else
// from its newest snapshot in DIR/snapshots when there is one (a crashed
// recorder's live segment is read as it is), else reported by the set's
// Skipped; so is a segment deleted between reading the index and opening
// it.
func OpenWith(dir string, opts OpenOptions) (*store.Set, error) {
	x, err := ReadIndex(dir)
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(x.Segments))
	infos := make([]store.SegmentInfo, len(x.Segments))
	for i, s := range x.Segments {
		paths[i] = filepath.Join(dir, s.File)
		infos[i] = store.SegmentInfo{Seq: s.Seq, From: s.Start, To: s.End, Calls: s.Calls, Failures: s.Failures, Live: s.Live}
	}
	so := store.SetOptions{Path: dir, Gaps: x.Gaps(), Segments: infos}
	if n := len(x.Segments); n > 0 && x.Segments[n-1].Live {
		so.Live = liveCopy(dir, paths[n-1], x.Segments[n-1].Seq, opts.Live)
		if so.Live != nil {
			paths[n-1] = so.Live.Copy
		}
	}
	return store.OpenSet(paths, so)
}

// liveCopy chooses what to read for the live segment: the copy given;
// else the segment itself when it reads whole (its recorder is gone: what
// it committed last is there); else its newest snapshot (the recorder
// holds it, or the directory was copied while it wrote and the copy of
// the segment is torn or missing); nil: the segment, reported as skipped
// when it cannot be read.
func liveCopy(dir, path string, seq uint64, given *store.LiveCopy) *store.LiveCopy {
	if given != nil {
		c := *given
		c.Segment = path
		return &c
	}
	if readsWhole(path) {
		return nil
	}
	if s, ok := latestSnapshot(dir, seq); ok {
		return &store.LiveCopy{Segment: path, Copy: s.Path, From: store.LiveFromSnapshot, Taken: s.Taken}
	}
	return nil
}

// readsWhole reports whether a segment opens and its events decode.
func readsWhole(path string) bool {
	r, err := store.Open(path)
	if err != nil {
		return false
	}
	defer r.Close()
	if _, err := r.Processes(); err != nil {
		return false
	}
	return r.Events(func(*store.Event) error { return nil }) == nil
}

// IsRecording reports whether path is a flight recording's directory (it
// holds an index).
func IsRecording(path string) bool { return store.IsFlightDir(path) }

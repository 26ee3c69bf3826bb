package flight

import (
	"os"
	"path/filepath"

	"github.com/retrivium/forensic/store"
)

// Open reads a flight recording's directory as one recording: the
// segments its index names, in sequence order, with its dropped ranges as
// the set's gaps. The live segment, locked by the recorder, is reported
// by the set's Skipped; so is a segment deleted between reading the index
// and opening it.
func Open(dir string) (*store.Set, error) {
	x, err := ReadIndex(dir)
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(x.Segments))
	for i, s := range x.Segments {
		paths[i] = filepath.Join(dir, s.File)
	}
	return store.OpenSet(paths, store.SetOptions{Path: dir, Gaps: x.Gaps()})
}

// IsRecording reports whether path is a flight recording's directory (it
// holds an index).
func IsRecording(path string) bool {
	st, err := os.Stat(filepath.Join(path, IndexFile))
	return err == nil && st.Mode().IsRegular()
}

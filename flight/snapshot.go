package flight

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Snapshots of the live segment.
const (
	// SnapshotDir holds consistent copies of the live segment, taken on
	// demand (forensic snapshot, SIGUSR1) while the recorder writes it.
	SnapshotDir = "snapshots"
	// MaxSnapshots bounds the snapshots kept: taking one more deletes the
	// oldest. They are outside Policy.MaxBytes, which bounds the segments:
	// together they take at most MaxSnapshots segments' size more.
	MaxSnapshots = 4
	// snapshotTime is the wall-clock time in a snapshot's name: it sorts
	// as it reads.
	snapshotTime = "20060102T150405.000000000Z"
)

// SnapshotName is the path, relative to the directory, of a snapshot of
// segment seq taken at wall time t: snapshots/SEQ-TIME.db.
func SnapshotName(seq uint64, t time.Time) string {
	return filepath.Join(SnapshotDir, fmt.Sprintf("%08d-%s.db", seq, t.UTC().Format(snapshotTime)))
}

// Snapshot is one snapshot file of a recording.
type Snapshot struct {
	// Path is the file's path (the directory joined with its name).
	Path string
	// Seq is the segment it copies; Taken when.
	Seq   uint64
	Taken time.Time
}

// parseSnapshot reads a snapshot's file name (SEQ-TIME.db).
func parseSnapshot(name string) (Snapshot, bool) {
	base, ok := strings.CutSuffix(name, ".db")
	seqText, stamp, ok2 := strings.Cut(base, "-")
	if !ok || !ok2 || len(seqText) != 8 {
		return Snapshot{}, false
	}
	var seq uint64
	if _, err := fmt.Sscanf(seqText, "%d", &seq); err != nil || seq == 0 {
		return Snapshot{}, false
	}
	t, err := time.Parse(snapshotTime, stamp)
	if err != nil {
		return Snapshot{}, false
	}
	return Snapshot{Seq: seq, Taken: t}, true
}

// Snapshots lists the snapshots in dir, oldest first. Files that are not
// snapshots (a copy in progress) are left out.
func Snapshots(dir string) ([]Snapshot, error) {
	ents, err := os.ReadDir(filepath.Join(dir, SnapshotDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Snapshot
	for _, e := range ents {
		if s, ok := parseSnapshot(e.Name()); ok && e.Type().IsRegular() {
			s.Path = filepath.Join(dir, SnapshotDir, e.Name())
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Taken.Before(out[j].Taken) })
	return out, nil
}

// PruneSnapshots deletes the oldest snapshots in dir beyond keep.
func PruneSnapshots(dir string, keep int) error {
	snaps, err := Snapshots(dir)
	if err != nil {
		return err
	}
	var errs []error
	for len(snaps) > keep {
		if err := os.Remove(snaps[0].Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		snaps = snaps[1:]
	}
	return errors.Join(errs...)
}

// latestSnapshot returns the newest snapshot of segment seq, if any.
func latestSnapshot(dir string, seq uint64) (Snapshot, bool) {
	snaps, _ := Snapshots(dir)
	for i := len(snaps) - 1; i >= 0; i-- {
		if snaps[i].Seq == seq {
			return snaps[i], true
		}
	}
	return Snapshot{}, false
}

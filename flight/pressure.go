package flight

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// ErrNoRoom: the filesystem filled and nothing is left to delete but the
// live segment: not even it fits.
var ErrNoRoom = errors.New("not even the live segment fits on the filesystem")

// Relief is what one step of Dir.Pressure deleted to make room.
type Relief struct {
	// Snapshots deleted (copies of segments, the first to go).
	Snapshots int
	// Previous is the earlier recording deleted (its directory), if any.
	Previous string
	// Plan lists the segments of this recording deleted; Lowered says
	// the bound was lowered to Bound first.
	Plan    Plan
	Lowered bool
	Bound   int64
}

// Pressure makes room when the filesystem refused to write need more
// bytes into the live segment (whose progress is pr), with free bytes
// left on it of which keep are to stay free. Each call deletes one tier,
// the cheapest first, and the caller tries the write again:
//
//  1. every snapshot (copies of the live segment, redundant while its
//     recorder runs);
//  2. the bound is lowered to what the filesystem holds (Index.Lower) and
//     this recording's segments that no failure window overlaps go,
//     oldest first;
//  3. the oldest earlier recording kept with KeepPrevious, whole;
//  4. this recording's segments inside failure windows, oldest first
//     (reason window-cut).
//
// Segments that hold or surround a failure are thus the last to go. When
// nothing is left but the live segment it returns ErrNoRoom.
func (d *Dir) Pressure(pr Progress, need, free, keep int64) (Relief, error) {
	var rl Relief
	d.idx.DiskFull++
	if n, err := d.dropSnapshots(); n > 0 || err != nil {
		rl.Snapshots = n
		return rl, err
	}
	l := d.live()
	if l == nil {
		return rl, errors.New("no live segment")
	}
	d.progress(l, pr)
	rl.Lowered = d.idx.Lower(free, keep)
	rl.Bound = d.idx.Bound()
	if rl.Plan = d.idx.PlanRoutine(l.Bytes + need); len(rl.Plan.Drop) > 0 {
		return rl, d.commit(d.idx.Apply(rl.Plan))
	}
	prev, err := d.dropOldestPrevious()
	if prev != "" || err != nil {
		rl.Previous = prev
		return rl, err
	}
	if rl.Plan = d.idx.Plan(l.Bytes + need); len(rl.Plan.Drop) > 0 {
		return rl, d.commit(d.idx.Apply(rl.Plan))
	}
	noRoom := fmt.Errorf("%s: %w (%d bytes free, %d kept free)", d.path, ErrNoRoom, free, keep)
	// The bound and the count on record. On a filesystem this full the
	// index itself may not fit: that is the same answer, not another.
	if err := d.commit(nil); errors.Is(err, syscall.ENOSPC) {
		return rl, fmt.Errorf("%w; the index kept its last version", noRoom)
	} else if err != nil {
		return rl, err
	}
	return rl, noRoom
}

// dropSnapshots deletes every snapshot and says how many there were.
func (d *Dir) dropSnapshots() (int, error) {
	snaps, err := Snapshots(d.path)
	if err != nil || len(snaps) == 0 {
		return 0, err
	}
	return len(snaps), PruneSnapshots(d.path, 0)
}

// dropOldestPrevious deletes the oldest earlier recording kept in the
// directory, if any, and returns its path.
func (d *Dir) dropOldestPrevious() (string, error) {
	prev := Previous(d.path)
	if len(prev) == 0 {
		return "", nil
	}
	oldest := prev[len(prev)-1]
	if err := os.RemoveAll(oldest); err != nil {
		return oldest, fmt.Errorf("delete %s: %w", oldest, err)
	}
	return oldest, syncDir(filepath.Dir(oldest))
}

package flight

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Earlier recordings: a restarted recorder (CreateOptions.KeepPrevious)
// moves the recording it finds to DIR/previous, the one there to
// DIR/previous.2, and so on, like rotated logs. At most KeepPrevious are
// kept, and together they take at most the new recording's bound
// (Policy.MaxBytes): beyond either, the oldest are deleted. So the
// directory holds at most twice --max-size, plus the snapshots. The
// newest earlier recording is always kept, whatever its size.

// previousNew is where movePrevious gathers the recording found.
const previousNew = PreviousDir + ".new"

// previousSlot is the directory of the k-th newest earlier recording
// (k from 1).
func previousSlot(dir string, k int) string {
	if k == 1 {
		return filepath.Join(dir, PreviousDir)
	}
	return filepath.Join(dir, PreviousDir+"."+strconv.Itoa(k))
}

// Previous returns the earlier recordings kept in dir, newest first.
func Previous(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	slots := map[int]bool{}
	maxK := 0
	for _, e := range ents {
		if k := slotNumber(e.Name()); k > 0 && e.IsDir() {
			slots[k] = true
			maxK = max(maxK, k)
		}
	}
	var out []string
	for k := 1; k <= maxK; k++ {
		if slots[k] {
			out = append(out, previousSlot(dir, k))
		}
	}
	return out
}

// slotNumber is k of a directory named like previousSlot, else 0.
func slotNumber(name string) int {
	if name == PreviousDir {
		return 1
	}
	rest, ok := strings.CutPrefix(name, PreviousDir+".")
	if !ok {
		return 0
	}
	k, err := strconv.Atoi(rest)
	if err != nil || k < 2 || strconv.Itoa(k) != rest {
		return 0
	}
	return k
}

// movePrevious moves the recording in the directory to PreviousDir in
// steps that can each be repeated, so that a crash part way is completed
// by the next start: gather the segments, snapshots and index in
// previous.new; shift the earlier recordings one slot older (deleting
// those beyond KeepPrevious); move previous.new to PreviousDir; delete
// the oldest beyond the size bound.
func (d *Dir) movePrevious(opts CreateOptions) error {
	note := opts.Note
	if note == nil {
		note = func(string) {}
	}
	next := filepath.Join(d.path, previousNew)
	if err := os.MkdirAll(next, 0o700); err != nil {
		return err
	}
	for _, name := range []string{SegmentDir, SnapshotDir, IndexFile} {
		if err := gather(filepath.Join(d.path, name), filepath.Join(next, name)); err != nil {
			return fmt.Errorf("keep the previous recording: %w", err)
		}
	}
	if err := d.shift(1, opts.KeepPrevious, note); err != nil {
		return fmt.Errorf("keep the previous recording: %w", err)
	}
	prev := previousSlot(d.path, 1)
	if err := os.Rename(next, prev); err != nil {
		return fmt.Errorf("keep the previous recording: %w", err)
	}
	note(fmt.Sprintf("%s: kept the recording found as %s (%s)", d.path, prev, sizeWords(treeBytes(prev))))
	if err := os.MkdirAll(filepath.Join(d.path, SegmentDir), 0o700); err != nil {
		return err
	}
	if err := d.trimPrevious(d.idx.MaxBytes, note); err != nil {
		return err
	}
	return syncDir(d.path)
}

// shift makes slot k free: the recording there moves to slot k+1 (made
// free first), or is deleted when k is the last slot kept. A slot already
// free (a crash after it was moved) leaves the older ones where they are.
func (d *Dir) shift(k, keep int, note func(string)) error {
	from := previousSlot(d.path, k)
	if _, err := os.Lstat(from); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if k >= keep {
		n := treeBytes(from)
		if err := os.RemoveAll(from); err != nil {
			return err
		}
		note(fmt.Sprintf("%s: deleted the earlier recording %s (%s): --keep-previous %d", d.path, from, sizeWords(n), keep))
		// Slots beyond keep, from a larger --keep-previous before.
		return d.dropBeyond(k+1, note)
	}
	if err := d.shift(k+1, keep, note); err != nil {
		return err
	}
	to := previousSlot(d.path, k+1)
	if err := os.Rename(from, to); err != nil {
		return err
	}
	note(fmt.Sprintf("%s: moved the earlier recording %s to %s", d.path, from, to))
	return nil
}

// dropBeyond deletes the earlier recordings in slot k and older.
func (d *Dir) dropBeyond(k int, note func(string)) error {
	for _, p := range Previous(d.path) {
		if slotNumber(filepath.Base(p)) < k {
			continue
		}
		n := treeBytes(p)
		if err := os.RemoveAll(p); err != nil {
			return err
		}
		note(fmt.Sprintf("%s: deleted the earlier recording %s (%s): beyond --keep-previous", d.path, p, sizeWords(n)))
	}
	return nil
}

// trimPrevious deletes the oldest earlier recordings while together they
// take more than bound; the newest is kept.
func (d *Dir) trimPrevious(bound int64, note func(string)) error {
	prev := Previous(d.path)
	sizes := make([]int64, len(prev))
	var total int64
	for i, p := range prev {
		sizes[i] = treeBytes(p)
		total += sizes[i]
	}
	for i := len(prev) - 1; i > 0 && total > bound; i-- {
		if err := os.RemoveAll(prev[i]); err != nil {
			return err
		}
		total -= sizes[i]
		note(fmt.Sprintf("%s: deleted the earlier recording %s (%s): the earlier recordings together exceeded %s",
			d.path, prev[i], sizeWords(sizes[i]), sizeWords(bound)))
	}
	return nil
}

// gather moves from to to, unless an interrupted move did already: then
// from is missing, or the empty segments directory Create made again.
func gather(from, to string) error {
	if _, err := os.Lstat(to); err == nil {
		st, err := os.Lstat(from)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err == nil && st.IsDir() {
			err = os.Remove(from) // fails unless empty
		} else if err == nil {
			err = errors.New("not the empty segments directory")
		}
		if err != nil {
			return fmt.Errorf("both %s and %s exist: %w", from, to, err)
		}
		return nil
	}
	err := os.Rename(from, to)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// treeBytes is what the files under dir take on disk.
func treeBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// sizeWords writes a byte count for a log line.
func sizeWords(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

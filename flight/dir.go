package flight

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// Dir is a flight recording's directory as its recorder keeps it: the
// index, the segments, and retention applied as segments start and grow.
// The recorder holds an exclusive lock on the directory while it records.
// One goroutine owns a Dir.
type Dir struct {
	path string
	lock *os.File // the directory, flocked
	idx  *Index
}

// Progress is what the live segment holds so far.
type Progress struct {
	// End is the latest time it covers, on the run clock.
	End int64
	// Calls are its call events; Bytes its size on disk (FileBytes).
	Calls uint64
	Bytes int64
	// Failures counts its failed calls; FirstFailure and LastFailure are
	// the earliest and latest.
	Failures     uint64
	FirstFailure int64
	LastFailure  int64
}

// CreateOptions adjust Create.
type CreateOptions struct {
	// KeepPrevious, when above 0, moves a recording already in the
	// directory (a recorder that was restarted) to PreviousDir instead of
	// refusing, and keeps at most this many earlier recordings
	// (KeepPrevious below).
	KeepPrevious int
	// Note, when set, is told each earlier recording moved or deleted,
	// in one line.
	Note func(line string)
}

// PreviousDir is where CreateOptions.KeepPrevious moves the recording
// found in the directory; older ones are PreviousDir.2, PreviousDir.3, ...
const PreviousDir = "previous"

// Errors of Create.
var (
	// ErrExists: the directory holds a recording already.
	ErrExists = errors.New("holds a flight recording already (analyze it or move it away, or keep it as the previous one)")
	// ErrBusy: another recorder is recording into the directory.
	ErrBusy = errors.New("another recorder is recording into it")
)

// Create makes dir (mode 0700: the segments name processes and their
// arguments) and its segments directory, locks it, and writes the empty
// index of recording id under policy p.
func Create(dir, id string, p Policy, opts CreateOptions) (*Dir, error) {
	if err := os.MkdirAll(filepath.Join(dir, SegmentDir), 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	d := &Dir{path: dir, lock: lock, idx: NewIndex(id, p)}
	if err = d.clear(opts); err == nil {
		err = WriteIndex(dir, d.idx)
	}
	if err != nil {
		lock.Close()
		return nil, err
	}
	return d, nil
}

// lockDir takes the recorder's lock on dir, without waiting.
func lockDir(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", dir, ErrBusy)
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return f, nil
}

// clear makes sure dir holds no recording: an earlier one is moved to
// PreviousDir with KeepPrevious, else refused. Snapshots go with it:
// their names are segment numbers, which the new recording starts again.
func (d *Dir) clear(opts CreateOptions) error {
	_, err := os.Stat(filepath.Join(d.path, IndexFile))
	_, perr := os.Stat(filepath.Join(d.path, previousNew))
	switch {
	case errors.Is(err, os.ErrNotExist) && errors.Is(perr, os.ErrNotExist):
		return d.emptySegments()
	case opts.KeepPrevious < 1:
		return fmt.Errorf("%s: %w", d.path, ErrExists)
	}
	return d.movePrevious(opts)
}

// emptySegments refuses segment files that no index names (a recording
// whose index was removed by hand).
func (d *Dir) emptySegments() error {
	names, err := filepath.Glob(filepath.Join(d.path, SegmentDir, "*.db"))
	if err == nil && len(names) > 0 {
		err = fmt.Errorf("%s: %w (%d segments without an index)", d.path, ErrExists, len(names))
	}
	return err
}

// Path returns the directory.
func (d *Dir) Path() string { return d.path }

// Index returns a copy of the index, with the live segment's figures of
// the last Update.
func (d *Dir) Index() *Index {
	x := *d.idx
	x.Segments, x.Dropped = slices.Clone(d.idx.Segments), slices.Clone(d.idx.Dropped)
	return &x
}

// live returns the live segment, or nil.
func (d *Dir) live() *Segment {
	if n := len(d.idx.Segments); n > 0 && d.idx.Segments[n-1].Live {
		return &d.idx.Segments[n-1]
	}
	return nil
}

// Start begins the next segment at run-clock time start. It first deletes
// what retention requires to make room for a whole segment
// (Policy.SegmentBytes), then names the new segment in the index, before
// the file exists: a crash never leaves a file the index does not name. It
// returns the path to create the segment at and its sequence number.
func (d *Dir) Start(start int64) (path string, seq uint64, pl Plan, err error) {
	if l := d.live(); l != nil {
		return "", 0, pl, fmt.Errorf("segment %d is still live: close it first", l.Seq)
	}
	return d.start(start)
}

// Next closes the live segment with its final progress pr (its file has
// its stop record and is closed) and begins the next one at start, as
// Start does, in one write of the index: a reader never finds the
// recording without a live segment between the two.
func (d *Dir) Next(pr Progress, start int64) (path string, seq uint64, pl Plan, err error) {
	l := d.live()
	if l == nil {
		return "", 0, pl, errors.New("no live segment")
	}
	d.progress(l, pr)
	l.Live = false
	return d.start(start)
}

// start names a new live segment at start after retention made room for
// it, and writes the index.
func (d *Dir) start(start int64) (path string, seq uint64, pl Plan, err error) {
	seq = 1
	if n := len(d.idx.Segments); n > 0 {
		seq = d.idx.Segments[n-1].Seq + 1
	}
	if n := len(d.idx.Dropped); n > 0 {
		seq = max(seq, d.idx.Dropped[n-1].LastSeq+1)
	}
	pl = d.idx.Plan(d.idx.SegmentBytes)
	gone := d.idx.Apply(pl)
	name := SegmentName(seq)
	d.idx.Segments = append(d.idx.Segments, Segment{File: name, Seq: seq, Start: start, End: start, Live: true})
	d.idx.Protect()
	if err := d.commit(gone); err != nil {
		return "", 0, pl, err
	}
	if err := d.removeOrphans(); err != nil {
		return "", 0, pl, err
	}
	return filepath.Join(d.path, name), seq, pl, nil
}

// Update records the live segment's progress and deletes what retention
// then requires. The index is rewritten when segments were deleted or the
// failures or protection changed; the live segment's other figures reach
// it at the next such change or at Close.
func (d *Dir) Update(pr Progress) (Plan, error) {
	l := d.live()
	if l == nil {
		return Plan{}, errors.New("no live segment")
	}
	changed := pr.Failures != l.Failures
	d.progress(l, pr)
	before := protection(d.idx)
	pl := d.idx.Plan(0)
	gone := d.idx.Apply(pl)
	if len(gone) == 0 && !changed && slices.Equal(before, protection(d.idx)) {
		return pl, nil
	}
	return pl, d.commit(gone)
}

// Close records the live segment's final progress and closes it in the
// index (the recorder has written its stop record and closed the file).
func (d *Dir) Close(pr Progress) error {
	l := d.live()
	if l == nil {
		return errors.New("no live segment")
	}
	d.progress(l, pr)
	l.Live = false
	d.idx.Protect()
	return d.commit(nil)
}

// Release gives up the directory's lock; the Dir is not used after.
func (d *Dir) Release() error { return d.lock.Close() }

func (d *Dir) progress(l *Segment, pr Progress) {
	l.End, l.Calls, l.Bytes = max(pr.End, l.Start), pr.Calls, pr.Bytes
	l.Failures, l.FirstFailure, l.LastFailure = pr.Failures, pr.FirstFailure, pr.LastFailure
}

func protection(x *Index) []bool {
	out := make([]bool, len(x.Segments))
	for i, s := range x.Segments {
		out[i] = s.Protected
	}
	return out
}

// commit writes the index, then deletes the files of the dropped
// segments: a crash between the two leaves files the index no longer
// names (removed when the next segment starts, see removeOrphans), never
// a gap the index does not describe.
func (d *Dir) commit(gone []Segment) error {
	if err := WriteIndex(d.path, d.idx); err != nil {
		return err
	}
	var errs []error
	for _, s := range gone {
		if err := os.Remove(filepath.Join(d.path, s.File)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if len(gone) > 0 {
		errs = append(errs, syncDir(filepath.Join(d.path, SegmentDir)))
	}
	return errors.Join(errs...)
}

// removeOrphans deletes segment files the index does not name: files of
// dropped segments whose deletion was interrupted.
func (d *Dir) removeOrphans() error {
	names, err := filepath.Glob(filepath.Join(d.path, SegmentDir, "*.db"))
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		rel, _ := filepath.Rel(d.path, n)
		named := slices.ContainsFunc(d.idx.Segments, func(s Segment) bool { return s.File == rel })
		if !named {
			if err := os.Remove(n); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// FileBytes is the size of a segment file on disk: its allocated blocks.
// bbolt extends its file sparsely (to the next power of two up to 16 MiB,
// then by 16 MiB), so the apparent size overstates what the disk holds.
func FileBytes(path string) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Blocks * 512, nil
	}
	return st.Size(), nil
}

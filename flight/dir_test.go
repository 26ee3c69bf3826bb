package flight

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// smallPolicy bounds a recording to 100 bytes in segments of 30 (the
// recorder reports the sizes; the files here hold a few bytes).
var smallPolicy = Policy{MaxBytes: 100, SegmentBytes: 30, KeepBefore: 12, KeepAfter: 12}

func mustCreate(t *testing.T, dir string, p Policy, opts CreateOptions) *Dir {
	t.Helper()
	d, err := Create(dir, "rec", p, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Release() })
	return d
}

// record runs segment i of a test recording: it covers [10i, 10i+10],
// holds 30 bytes and 100i calls, and fails at the given times.
func record(t *testing.T, d *Dir, i int64, fail ...int64) string {
	t.Helper()
	path, seq, _, err := d.Start(10 * i)
	if err != nil {
		t.Fatal(err)
	}
	if seq != uint64(i) || path != filepath.Join(d.Path(), SegmentName(seq)) {
		t.Fatalf("Start = %s, %d; want segment %d", path, seq, i)
	}
	if err := os.WriteFile(path, []byte("segment"), 0o600); err != nil {
		t.Fatal(err)
	}
	pr := Progress{End: 10*i + 10, Calls: uint64(100 * i), Bytes: 30}
	if len(fail) > 0 {
		pr.Failures, pr.FirstFailure, pr.LastFailure = uint64(len(fail)), slices.Min(fail), slices.Max(fail)
	}
	if _, err := d.Update(pr); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(pr); err != nil {
		t.Fatal(err)
	}
	return path
}

func onDisk(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, SegmentDir, "*.db"))
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		names[i] = filepath.Base(n)
	}
	return names
}

// Eight segments of 30 bytes; a new segment reserves 30. The failure at
// 45 protects segments 3 to 5 ([33, 57]): under a bound of 160, routine
// segment 6 goes before them although it is newer; under 100 the window
// alone exceeds the bound and its oldest segment is cut.
func TestDirRetention(t *testing.T) {
	type rng struct {
		first, last uint64
		reason      string
	}
	tests := []struct {
		max     int64
		kept    []uint64
		dropped []rng
	}{
		{160, []uint64{3, 4, 5, 7, 8}, []rng{{1, 2, "retention"}, {6, 6, "retention"}}},
		{100, []uint64{4, 5, 8}, []rng{{1, 2, "retention"}, {3, 3, "window-cut"}, {6, 7, "retention"}}},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		p := smallPolicy
		p.MaxBytes = tt.max
		d := mustCreate(t, dir, p, CreateOptions{})
		for i := int64(1); i <= 8; i++ {
			var fail []int64
			if i == 4 {
				fail = []int64{45}
			}
			record(t, d, i, fail...)
			if n := d.Index().Bytes(); n > tt.max {
				t.Fatalf("bound %d: %d bytes after segment %d", tt.max, n, i)
			}
		}
		x, err := ReadIndex(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(x, d.Index()) {
			t.Errorf("index on disk\n %+v\ndiffers from the Dir's\n %+v", x, d.Index())
		}
		var kept []uint64
		var files []string
		for _, s := range x.Segments {
			kept = append(kept, s.Seq)
			files = append(files, filepath.Base(s.File))
		}
		var dropped []rng
		for _, r := range x.Dropped {
			dropped = append(dropped, rng{r.FirstSeq, r.LastSeq, r.Reason})
		}
		if !slices.Equal(kept, tt.kept) || !slices.Equal(dropped, tt.dropped) {
			t.Errorf("bound %d: kept %v dropped %v, want %v and %v", tt.max, kept, dropped, tt.kept, tt.dropped)
		}
		if !slices.Equal(onDisk(t, dir), files) {
			t.Errorf("bound %d: files %v, want %v", tt.max, onDisk(t, dir), files)
		}
	}
}

func TestDirStartWhileLive(t *testing.T) {
	d := mustCreate(t, t.TempDir(), smallPolicy, CreateOptions{})
	if _, _, _, err := d.Start(0); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := d.Start(1); err == nil {
		t.Error("a second Start while a segment is live succeeded")
	}
}

// A segment file the index no longer names (its deletion was interrupted)
// is removed when the next segment starts.
func TestDirRemovesOrphans(t *testing.T) {
	dir := t.TempDir()
	d := mustCreate(t, dir, smallPolicy, CreateOptions{})
	record(t, d, 1)
	orphan := filepath.Join(dir, SegmentName(99))
	os.WriteFile(orphan, nil, 0o600)
	record(t, d, 2)
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("orphan %s still there (%v)", orphan, err)
	}
	if want := []string{"00000001.db", "00000002.db"}; !slices.Equal(onDisk(t, dir), want) {
		t.Errorf("files %v, want %v", onDisk(t, dir), want)
	}
}

func TestCreateRefuses(t *testing.T) {
	dir := t.TempDir()
	d := mustCreate(t, dir, smallPolicy, CreateOptions{})
	if _, err := Create(dir, "other", smallPolicy, CreateOptions{KeepPrevious: 1}); !errors.Is(err, ErrBusy) {
		t.Errorf("while recording: err = %v, want ErrBusy", err)
	}
	record(t, d, 1)
	d.Release()
	if _, err := Create(dir, "other", smallPolicy, CreateOptions{}); !errors.Is(err, ErrExists) {
		t.Errorf("over a recording: err = %v, want ErrExists", err)
	}
	stray := t.TempDir()
	os.MkdirAll(filepath.Join(stray, SegmentDir), 0o700)
	os.WriteFile(filepath.Join(stray, SegmentName(1)), nil, 0o600)
	if _, err := Create(stray, "other", smallPolicy, CreateOptions{}); !errors.Is(err, ErrExists) {
		t.Errorf("over segments without an index: err = %v, want ErrExists", err)
	}
}

// A restarted recorder keeps the recording it finds as the previous one,
// replacing an older previous one; a move interrupted part way (the
// segments gathered, the index not) is completed.
func TestCreateKeepsPrevious(t *testing.T) {
	dir := t.TempDir()
	for _, id := range []string{"first", "second"} {
		d, err := Create(dir, id, smallPolicy, CreateOptions{KeepPrevious: 1})
		if err != nil {
			t.Fatal(err)
		}
		record(t, d, 1)
		d.Release()
	}
	// Interrupt the third move after the segments were gathered.
	next := filepath.Join(dir, previousNew)
	os.MkdirAll(next, 0o700)
	if err := os.Rename(filepath.Join(dir, SegmentDir), filepath.Join(next, SegmentDir)); err != nil {
		t.Fatal(err)
	}
	d := mustCreate(t, dir, smallPolicy, CreateOptions{KeepPrevious: 1})
	prev, err := ReadIndex(filepath.Join(dir, PreviousDir))
	if err != nil || prev.ID != "second" {
		t.Fatalf("previous recording %+v %v, want the second", prev, err)
	}
	if _, err := os.Stat(filepath.Join(dir, PreviousDir, SegmentName(1))); err != nil {
		t.Errorf("previous recording's segment: %v", err)
	}
	if _, err := os.Stat(next); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind", next)
	}
	if x := d.Index(); len(x.Segments) != 0 || len(onDisk(t, dir)) != 0 {
		t.Errorf("new recording starts with %v and files %v", x.Segments, onDisk(t, dir))
	}
}

func TestFileBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	// A sparse file of 64 MiB holding one written page.
	f.WriteAt(make([]byte, 4096), 0)
	f.Truncate(64 << 20)
	f.Close()
	n, err := FileBytes(path)
	if err != nil || n < 4096 || n >= 1<<20 {
		t.Errorf("FileBytes = %d %v, want the allocated page(s), not the 64 MiB apparent size", n, err)
	}
}

// Next closes the live segment and names the next one in one write of the
// index: the index read right after it has the old segment closed with
// its final figures and exactly one live segment, the new one. (Close
// then Start leaves a moment with none, when a reader would find the
// recording without a live segment.)
func TestDirNextRotatesInOneIndexWrite(t *testing.T) {
	d := mustCreate(t, t.TempDir(), Policy{MaxBytes: 1000, SegmentBytes: 30}, CreateOptions{})
	path, _, _, err := d.Start(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("segment"), 0o600); err != nil {
		t.Fatal(err)
	}
	next, seq, _, err := d.Next(Progress{End: 10, Calls: 7, Bytes: 30}, 10)
	if err != nil {
		t.Fatal(err)
	}
	x, err := ReadIndex(d.Path())
	if err != nil {
		t.Fatal(err)
	}
	if len(x.Segments) != 2 || x.Segments[0].Live || x.Segments[0].Calls != 7 || x.Segments[0].End != 10 ||
		!x.Segments[1].Live || x.Segments[1].Seq != seq || filepath.Join(d.Path(), x.Segments[1].File) != next {
		t.Errorf("index after Next: %+v; want segment 1 closed with 7 calls to 10, segment %d live", x.Segments, seq)
	}
	if _, _, _, err := d.Start(20); err == nil {
		t.Error("Start with a live segment: no error")
	}
}

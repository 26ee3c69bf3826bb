package flight

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/retrivium/forensic/internal/runfixture"
	"github.com/retrivium/forensic/internal/segfixture"
	"github.com/retrivium/forensic/store"
)

// countEvents counts the call events of the segment files at paths.
func countEvents(t *testing.T, paths ...string) int {
	t.Helper()
	n := 0
	for _, p := range paths {
		r, err := store.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Events(func(*store.Event) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		r.Close()
	}
	return n
}

// A recording of four segments under a bound that holds three: the first
// (routine) was deleted, the last is live. Open reads the two closed ones,
// reports the live one and the deleted stretch; after the live segment is
// closed, the recording reads whole, with its stop record.
func TestOpenLiveRecording(t *testing.T) {
	tc := runfixture.TClock
	cuts := []int64{tc + 500e6, runfixture.TFail + 1, tc + 1_500e6}
	parts := segfixture.Split(t, runfixture.BuildRun(t, 200), t.TempDir(), cuts)
	dir := t.TempDir()
	d := mustCreate(t, dir, Policy{MaxBytes: 30, SegmentBytes: 10}, CreateOptions{})
	starts := append([]int64{tc}, cuts...)
	var paths []string
	var progress Progress
	for i, part := range parts {
		path, _, _, err := d.Start(starts[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(part, path); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path)
		progress = Progress{End: starts[i] + 1, Calls: 10, Bytes: 10}
		if i == 1 {
			progress.Failures, progress.FirstFailure, progress.LastFailure = 1, runfixture.TFail, runfixture.TFail
		}
		if i < len(parts)-1 {
			if err := d.Close(progress); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The recorder holds the live segment.
	db, err := bolt.Open(paths[3], 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	set, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	sk := set.Skipped()
	if len(sk) != 1 || sk[0].Path != paths[3] || !errors.Is(sk[0].Err, store.ErrLocked) {
		t.Errorf("skipped %v, want the live segment, locked", sk)
	}
	gaps := set.Gaps()
	if len(gaps) != 1 || gaps[0].From != tc || gaps[0].Reason != store.GapRetention || gaps[0].Calls != 10 {
		t.Errorf("gaps %+v, want the first segment's stretch, dropped for retention", gaps)
	}
	checkEvents(t, set, countEvents(t, paths[1:3]...))
	if st, err := set.Stop(); st != nil || err != nil {
		t.Errorf("Stop = %+v %v, want none while the last segment is live", st, err)
	}
	set.Close()
	checkLiveCopies(t, dir, paths)

	db.Close()
	if err := d.Close(progress); err != nil {
		t.Fatal(err)
	}
	set, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	checkEvents(t, set, countEvents(t, paths[1:]...))
	if st, err := set.Stop(); err != nil || st == nil || st.Reason != "workload-exited" || len(set.Skipped()) != 0 {
		t.Errorf("Stop = %+v %v, skipped %v: want the recording's own stop, nothing skipped", st, err, set.Skipped())
	}
	if set.Path() != dir || !IsRecording(dir) || IsRecording(filepath.Join(dir, SegmentDir)) {
		t.Errorf("Path %q, IsRecording wrong", set.Path())
	}
}

// checkLiveCopies reads the recording while its live segment is held:
// from a copy given (the recorder's), else from its newest snapshot, also
// when the segment is missing (a copy of the directory that lacks it).
func checkLiveCopies(t *testing.T, dir string, paths []string) {
	t.Helper()
	live := paths[3]
	copyOf := func(name string) string {
		data, err := os.ReadFile(live)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	given := copyOf("given.db")
	want := countEvents(t, paths[1:3]...) + countEvents(t, given)
	set, err := OpenWith(dir, OpenOptions{Live: &store.LiveCopy{Copy: given, From: store.LiveFromRecorder}})
	if err != nil {
		t.Fatal(err)
	}
	if lc := set.Live(); lc == nil || lc.Copy != given || lc.Segment != live || len(set.Skipped()) != 0 {
		t.Errorf("live %+v, skipped %v: want the copy given read in the segment's place", lc, set.Skipped())
	}
	checkEvents(t, set, want)
	set.Close()

	old := copyOf(SnapshotName(4, time.Unix(100, 0)))
	newest := copyOf(SnapshotName(4, time.Unix(200, 0)))
	copyOf(SnapshotName(3, time.Unix(300, 0))) // of another segment
	os.WriteFile(old, []byte("an older, torn snapshot"), 0o600)
	set, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if lc := set.Live(); lc == nil || lc.Copy != newest || lc.From != store.LiveFromSnapshot || !lc.Taken.Equal(time.Unix(200, 0)) {
		t.Errorf("live %+v: want the newest snapshot of segment 4", lc)
	}
	checkEvents(t, set, want)
	set.Close()
	if err := PruneSnapshots(dir, 1); err != nil {
		t.Fatal(err)
	}
	if snaps, _ := Snapshots(dir); len(snaps) != 1 || snaps[0].Seq != 3 {
		t.Errorf("after pruning to one: %+v, want the newest", snaps)
	}
}

func checkEvents(t *testing.T, set *store.Set, want int) {
	t.Helper()
	n := 0
	if err := set.Events(func(*store.Event) error { n++; return nil }); err != nil || n != want {
		t.Errorf("%d events (%v), want %d", n, err, want)
	}
}

func TestOpenWithoutIndex(t *testing.T) {
	if _, err := Open(t.TempDir()); !errors.Is(err, ErrIndex) {
		t.Errorf("err = %v, want ErrIndex", err)
	}
}

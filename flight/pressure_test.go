package flight

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/retrivium/forensic/store"
)

// Lower: the segments may take what they take plus the free space above
// what is kept free, never more than now, never more than before; the
// segment size follows to half the bound.
func TestLowerBound(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name            string
		bound, used     int64
		free, keep      int64
		want            int64
		lowered         bool
		wantSegmentSize int64
	}{
		{"the reserve reached: what fits above it", 64 * mib, 12 * mib, 7 * mib, 8 * mib, 11 * mib, true, 5*mib + mib/2},
		{"the write refused with room left: no more than now", 64 * mib, 12 * mib, 20 * mib, 0, 12 * mib, true, 6 * mib},
		{"already lower: not raised", 10 * mib, 12 * mib, 7 * mib, 0, 10 * mib, false, 8 * mib},
		{"a tiny filesystem: segments no smaller than the floor", 64 * mib, mib, 0, 0, mib, true, MinPressureSegmentBytes},
		{"less free than kept: never below a byte", 64 * mib, mib, 0, 2 * mib, 1, true, MinPressureSegmentBytes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := NewIndex("rec", Policy{MaxBytes: 64 * mib, SegmentBytes: 8 * mib})
			if tt.bound < x.MaxBytes {
				x.DiskBound = tt.bound
			}
			x.Segments = []Segment{{File: SegmentName(1), Seq: 1, Live: true, Bytes: tt.used}}
			lowered := x.Lower(tt.free, tt.keep)
			if lowered != tt.lowered || x.Bound() != tt.want || x.SegmentBytes != tt.wantSegmentSize {
				t.Errorf("Lower = %v, bound %d, segments %d; want %v, %d, %d", lowered, x.Bound(), x.SegmentBytes,
					tt.lowered, tt.want, tt.wantSegmentSize)
			}
		})
	}
}

// PlanRoutine never cuts into a failure window; Plan does when it must.
func TestPlanRoutineKeepsWindows(t *testing.T) {
	const ret, cut = store.GapRetention, store.GapWindowCut
	tests := []struct {
		name    string
		x       *Index
		routine []Drop
		fits    bool
		full    []Drop
	}{
		{"routine history is enough", index(100, 12, 12, seg(1, 30), seg(2, 30), seg(4, 30, 45), live(5, 20)), drops(ret, 1), true, drops(ret, 1)},
		{"only windows left", index(50, 12, 12, seg(3, 30), seg(4, 30, 45), live(5, 20)), nil, false, drops(cut, 3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.x.PlanRoutine(0)
			if !reflect.DeepEqual(r.Drop, tt.routine) || r.Fits != tt.fits {
				t.Errorf("PlanRoutine drops %v fits %v, want %v fits %v", r.Drop, r.Fits, tt.routine, tt.fits)
			}
			if f := tt.x.Plan(0); !reflect.DeepEqual(f.Drop, tt.full) {
				t.Errorf("Plan drops %v, want %v", f.Drop, tt.full)
			}
		})
	}
}

// Under disk pressure each call deletes the next thing in order:
// snapshots, segments no failure window overlaps (oldest first, the bound
// lowered), the earlier recordings (oldest first), segments inside
// failure windows (oldest first); then nothing is left but the live
// segment, and it says so.
func TestPressureDeletesLeastUsefulFirst(t *testing.T) {
	dir := t.TempDir()
	d := mustCreate(t, dir, Policy{MaxBytes: 1000, SegmentBytes: 30, KeepBefore: 12, KeepAfter: 12}, CreateOptions{})
	for i := int64(1); i <= 3; i++ {
		record(t, d, i)
	}
	record(t, d, 4, 45) // its window [33, 57]: segments 3, 4 and the live 5
	if _, _, _, err := d.Start(50); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, SnapshotDir), 0o700)
	os.WriteFile(filepath.Join(dir, SnapshotName(5, time.Now())), []byte("copy"), 0o600)
	for _, p := range []string{PreviousDir, PreviousDir + ".2"} {
		os.MkdirAll(filepath.Join(dir, p, SegmentDir), 0o700)
		os.WriteFile(filepath.Join(dir, p, IndexFile), []byte("{}"), 0o600)
	}
	pr := Progress{End: 55, Bytes: 10}
	steps := []struct {
		what   string
		snaps  int
		prev   string
		drops  []Drop
		bound  int64
		noRoom bool
	}{
		{what: "snapshots", snaps: 1, bound: 1000},
		{what: "routine history, the bound lowered to what fits", drops: drops(store.GapRetention, 1), bound: 130},
		{what: "more routine history", drops: drops(store.GapRetention, 2), bound: 100},
		{what: "the oldest earlier recording", prev: PreviousDir + ".2", bound: 70},
		{what: "the newer earlier recording", prev: PreviousDir, bound: 70},
		{what: "the oldest segment of a window", drops: drops(store.GapWindowCut, 3), bound: 70},
		{what: "the failure's own segment", drops: drops(store.GapWindowCut, 4), bound: 40},
		{what: "nothing but the live segment", bound: 10, noRoom: true},
	}
	for _, st := range steps {
		rl, err := d.Pressure(pr, 20, 0, 0)
		if st.noRoom {
			if !errors.Is(err, ErrNoRoom) {
				t.Fatalf("%s: err %v, want ErrNoRoom", st.what, err)
			}
			continue
		}
		prev := ""
		if rl.Previous != "" {
			prev = filepath.Base(rl.Previous)
		}
		if err != nil || rl.Snapshots != st.snaps || prev != st.prev || !reflect.DeepEqual(rl.Plan.Drop, st.drops) || d.Index().Bound() != st.bound {
			t.Fatalf("%s: got snapshots %d, previous %q, drops %v, bound %d, err %v", st.what, rl.Snapshots, prev,
				rl.Plan.Drop, d.Index().Bound(), err)
		}
	}
	x, err := ReadIndex(dir)
	if err != nil || x.DiskFull != len(steps) || x.Bound() != 10 || len(x.Segments) != 1 || !x.Segments[0].Live {
		t.Errorf("index on disk %+v (%v): want the lowered bound, %d disk-full events and the live segment alone", x, err, len(steps))
	}
	if files := onDisk(t, dir); len(files) != 0 {
		t.Errorf("segment files %v left, want every closed one deleted (the live one was never created here)", files)
	}
}

// roomyPolicy leaves the earlier recordings' size bound out of the way.
var roomyPolicy = Policy{MaxBytes: 1 << 30, SegmentBytes: 30}

// --keep-previous N keeps the N newest earlier recordings, newest in
// DIR/previous, and says what it moved and deleted.
func TestKeepPreviousRotates(t *testing.T) {
	tests := []struct {
		keep     int
		restarts int
		want     []string // the ids in previous, previous.2, ...
	}{
		{keep: 1, restarts: 3, want: []string{"r2"}},
		{keep: 2, restarts: 3, want: []string{"r2", "r1"}},
		{keep: 3, restarts: 5, want: []string{"r4", "r3", "r2"}},
		{keep: 3, restarts: 2, want: []string{"r1", "r0"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("keep %d after %d restarts", tt.keep, tt.restarts), func(t *testing.T) {
			dir := t.TempDir()
			var notes []string
			for i := 0; i <= tt.restarts; i++ {
				d, err := Create(dir, fmt.Sprintf("r%d", i), roomyPolicy, CreateOptions{KeepPrevious: tt.keep,
					Note: func(l string) { notes = append(notes, l) }})
				if err != nil {
					t.Fatal(err)
				}
				record(t, d, 1)
				d.Release()
			}
			var got []string
			for _, p := range Previous(dir) {
				x, err := ReadIndex(p)
				if err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				got = append(got, x.ID)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("earlier recordings %v, want %v", got, tt.want)
			}
			kept := 0
			for _, n := range notes {
				if strings.Contains(n, "kept the recording found") {
					kept++
				}
			}
			if kept != tt.restarts {
				t.Errorf("%d lines say a recording was kept, want %d:\n%s", kept, tt.restarts, strings.Join(notes, "\n"))
			}
			if deleted := tt.restarts - len(tt.want); deleted > 0 && !strings.Contains(strings.Join(notes, "\n"), "deleted the earlier recording") {
				t.Errorf("no line says an earlier recording was deleted:\n%s", strings.Join(notes, "\n"))
			}
		})
	}
}

// The earlier recordings together stay within the bound: the oldest go
// first, the newest is always kept.
func TestKeepPreviousWithinBound(t *testing.T) {
	dir := t.TempDir()
	big := make([]byte, 64<<10)
	for i := 0; i < 4; i++ {
		d, err := Create(dir, fmt.Sprintf("r%d", i), Policy{MaxBytes: 150 << 10, SegmentBytes: 30}, CreateOptions{KeepPrevious: 5})
		if err != nil {
			t.Fatal(err)
		}
		path := record(t, d, 1)
		os.WriteFile(path, big, 0o600) // each recording takes 64 KiB
		d.Release()
	}
	// Three earlier recordings of 64 KiB: two fit in 150 KiB.
	if got := len(Previous(dir)); got != 2 {
		t.Errorf("%d earlier recordings kept, want the 2 newest that fit in the bound", got)
	}
}

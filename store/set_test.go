package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/retrivium/forensic/cuda"
)

// segSpec is one segment a test writes.
type segSpec struct {
	seq     uint64
	id      string // run id; default "rec-1"
	symbols []string
	batch   Batch
	stop    string // stop reason; "" writes none
}

// writeSegment writes a segment of a flight-mode recording into dir and
// returns its path and its writer, still open (the live segment) when
// open is set.
func writeSegment(t *testing.T, dir string, sp segSpec, open bool) (string, *Writer) {
	t.Helper()
	if sp.id == "" {
		sp.id = "rec-1"
	}
	path := filepath.Join(dir, fmt.Sprintf("%08d.db", sp.seq))
	run := testRun()
	run.ID = sp.id
	w, err := Create(path, CreateOptions{}, run, sp.symbols)
	if err != nil {
		t.Fatal(err)
	}
	w.Reserve = 0
	if err := w.SetFlight(FlightInfo{Seq: sp.seq, Start: int64(sp.seq) * 1e9, MaxBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(&sp.batch); err != nil {
		t.Fatal(err)
	}
	if sp.stop != "" {
		if err := w.Stop(StopInfo{Time: int64(sp.seq+1) * 1e9, Reason: sp.stop}); err != nil {
			t.Fatal(err)
		}
	}
	if open {
		t.Cleanup(func() { w.Close() })
		return path, w
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path, nil
}

// call is a call event of a segment; a non-zero result makes it a failure.
func call(sym uint16, pid uint32, end int64, result int32) Event {
	return Event{Symbol: sym, PID: pid, TID: pid, Start: end - 1000, End: end, Result: result, Dev: 0, Stack: -1,
		Fields: cuda.Fields{Has: cuda.FieldSize, Size: 4096}}
}

func u64p(v uint64) *uint64 { return &v }

// threeSegments writes the segments of one recording whose symbol tables
// differ: the second reorders the first's, leaves an id unused and adds
// cuMemMap; the third is the first's again. Each has calls, a failure,
// samples, the live processes and the attached library (repeated).
func threeSegments(t *testing.T, dir string) []string {
	lib := Library{Path: "/usr/lib/libcuda.so.1", HostPath: "/usr/lib/libcuda.so.1", BuildID: "ab", Device: 1, Inode: 2,
		Attached: []string{"cuInit"}, Time: 1e9}
	train := Process{PID: 100, Start: 5e8, Comm: "train"}
	trainExited := train
	trainExited.Exit = &Exit{Time: 2.5e9}
	serve := Process{PID: 200, Start: 6e8, Comm: "serve"}
	smp := func(t int64) Sample { return Sample{Kind: "framebuffer", Start: t, End: t + 10, Used: u64p(1)} }
	first := []string{"cuInit", "cuMemAlloc_v2", "cuMemFree_v2"}
	specs := []segSpec{
		{seq: 1, symbols: first, stop: StopRotated, batch: Batch{
			Events:    []Event{call(0, 100, 1.1e9, 0), call(1, 100, 1.2e9, 0), call(1, 100, 1.3e9, 2)},
			Processes: []Process{train, serve}, Libraries: []Library{lib}, Samples: []Sample{smp(1.1e9), smp(1.2e9)},
			Stacks: map[int32][]Frame{7: {{BuildID: "ab", Offset: 0x10}}},
			Kmsg:   []KernelLog{{Time: 1.3e9, Seq: 9, Text: "NVRM: Xid 31"}}, Markers: []Marker{{Time: 1.05e9, Label: "go"}},
			Drops: []Drops{{Time: 1.5e9}}}},
		{seq: 2, symbols: []string{"cuMemFree_v2", "cuInit", "", "cuMemAlloc_v2", "cuMemMap"}, stop: StopRotated, batch: Batch{
			Events:    []Event{call(3, 200, 2.1e9, 0), call(4, 200, 2.2e9, 1), call(0, 200, 2.3e9, 0), call(7, 200, 2.4e9, 0)},
			Processes: []Process{trainExited, serve}, Libraries: []Library{lib}, Samples: []Sample{smp(2.1e9)},
			Kmsg: []KernelLog{{Time: 1.3e9, Seq: 9, Text: "NVRM: Xid 31"}}, Drops: []Drops{{Time: 2.5e9}}}},
		{seq: 3, symbols: first, stop: "signal", batch: Batch{
			Events:    []Event{call(2, 200, 3.1e9, 0)},
			Processes: []Process{serve}, Libraries: []Library{lib}, Samples: []Sample{smp(3.1e9), smp(3.2e9)},
			Markers: []Marker{{Time: 3.05e9, Label: "done"}}}},
	}
	var paths []string
	for _, sp := range specs {
		p, _ := writeSegment(t, dir, sp, false)
		paths = append(paths, p)
	}
	return paths
}

func openSet(t *testing.T, paths []string) *Set {
	t.Helper()
	s, err := OpenSet(paths, SetOptions{Path: "DIR"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSetReadsSegmentsAsOne(t *testing.T) {
	s := openSet(t, threeSegments(t, t.TempDir()))
	if len(s.Skipped()) != 0 {
		t.Fatalf("skipped %v", s.Skipped())
	}
	names := s.SymbolNames()
	var ends []int64
	var seen []string
	err := s.Events(func(e *Event) error {
		ends = append(ends, e.End)
		name := fmt.Sprintf("symbol#%d", e.Symbol)
		if int(e.Symbol) < len(names) {
			name = names[e.Symbol]
		}
		seen = append(seen, name+"/"+e.Name)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantEnds := []int64{1.1e9, 1.2e9, 1.3e9, 2.1e9, 2.2e9, 2.3e9, 2.4e9, 3.1e9}
	if !slices.Equal(ends, wantEnds) {
		t.Errorf("event order %v, want %v", ends, wantEnds)
	}
	// Each event's id names, in the set's table, the symbol its segment
	// recorded; an id the segment did not name stays unnamed.
	wantSeen := []string{"cuInit/cuInit", "cuMemAlloc_v2/cuMemAlloc_v2", "cuMemAlloc_v2/cuMemAlloc_v2",
		"cuMemAlloc_v2/cuMemAlloc_v2", "cuMemMap/cuMemMap", "cuMemFree_v2/cuMemFree_v2", "symbol#65535/symbol#7",
		"cuMemFree_v2/cuMemFree_v2"}
	if !slices.Equal(seen, wantSeen) {
		t.Errorf("symbols %v, want %v", seen, wantSeen)
	}
	if want := []string{"cuInit", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemMap"}; !slices.Equal(names, want) {
		t.Errorf("SymbolNames %v, want %v", names, want)
	}
}

func TestSetFailuresAndSamples(t *testing.T) {
	s := openSet(t, threeSegments(t, t.TempDir()))
	var fails []string
	err := s.Failures(func(e *Event) error {
		fails = append(fails, fmt.Sprintf("%s@%d", s.symbols[e.Symbol], e.End))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"cuMemAlloc_v2@1300000000", "cuMemMap@2200000000"}; !slices.Equal(fails, want) {
		t.Errorf("failures %v, want %v", fails, want)
	}
	var seqs []uint64
	var times []int64
	if err := s.Samples(func(smp *Sample) error {
		seqs, times = append(seqs, smp.Seq), append(times, smp.Start)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []uint64{1, 2, 3, 4, 5}; !slices.Equal(seqs, want) {
		t.Errorf("sample seqs %v, want %v (unique across segments)", seqs, want)
	}
	if want := []int64{1.1e9, 1.2e9, 2.1e9, 3.1e9, 3.2e9}; !slices.Equal(times, want) {
		t.Errorf("sample times %v, want %v", times, want)
	}
}

func TestSetMergesRecords(t *testing.T) {
	s := openSet(t, threeSegments(t, t.TempDir()))
	procs, err := s.Processes()
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 2 || procs[0].PID != 100 || procs[1].PID != 200 {
		t.Fatalf("processes %+v, want pids 100 and 200 once each", procs)
	}
	if procs[0].Exit == nil || procs[0].Exit.Time != 2.5e9 {
		t.Errorf("pid 100: %+v, want the later segment's record, with its exit", procs[0])
	}
	libs, err := s.Libraries()
	if err != nil || len(libs) != 1 {
		t.Errorf("libraries %v %v, want the one library once", libs, err)
	}
	kl, err := s.KernelLog()
	if err != nil || len(kl) != 1 {
		t.Errorf("kernel log %v %v, want the one line once", kl, err)
	}
	ms, err := s.Markers()
	if err != nil || len(ms) != 2 || ms[0].Label != "go" || ms[1].Label != "done" {
		t.Errorf("markers %v %v, want go, done", ms, err)
	}
	ds, err := s.Drops()
	if err != nil || len(ds) != 2 {
		t.Errorf("drops %v %v, want 2 readings", ds, err)
	}
	fr, err := s.Stack(7)
	if err != nil || len(fr) != 1 || fr[0].Offset != 0x10 {
		t.Errorf("stack 7 = %v %v, want the first segment's", fr, err)
	}
	if end, err := s.LastEventEnd(); err != nil || end != 3.1e9 {
		t.Errorf("LastEventEnd = %d %v, want 3.1e9", end, err)
	}
	st, err := s.Stop()
	if err != nil || st == nil || st.Reason != "signal" {
		t.Errorf("Stop = %+v %v, want the last segment's", st, err)
	}
	if s.Run().ID != "rec-1" || s.Path() != "DIR" || s.Schema() != SchemaVersion {
		t.Errorf("run %q path %q schema %d", s.Run().ID, s.Path(), s.Schema())
	}
}

func TestSetReportsUnreadableSegments(t *testing.T) {
	tests := []struct {
		name string
		// spoil makes the set's third segment unreadable.
		spoil    func(t *testing.T, dir string) string
		want     error
		wantStop bool
	}{
		{"live segment, locked by its writer", func(t *testing.T, dir string) string {
			p, _ := writeSegment(t, dir, segSpec{seq: 3, symbols: []string{"cuInit"}, batch: Batch{Events: []Event{call(0, 1, 3.5e9, 0)}}}, true)
			return p
		}, ErrLocked, false},
		{"truncated", func(t *testing.T, dir string) string {
			p, _ := writeSegment(t, dir, segSpec{seq: 3, symbols: []string{"cuInit"}, stop: "signal"}, false)
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, st.Size()/2); err != nil {
				t.Fatal(err)
			}
			return p
		}, ErrNotRunDB, false},
		{"another recording", func(t *testing.T, dir string) string {
			p, _ := writeSegment(t, dir, segSpec{seq: 3, id: "rec-2", symbols: []string{"cuInit"}, stop: "signal"}, false)
			return p
		}, ErrOtherRecording, false},
		{"a repeated sequence number", func(t *testing.T, dir string) string {
			p, _ := writeSegment(t, t.TempDir(), segSpec{seq: 2, symbols: []string{"cuInit"}, stop: "signal"}, false)
			return p
		}, ErrSegmentOrder, false},
		{"missing", func(t *testing.T, dir string) string { return filepath.Join(dir, "00000003.db") }, ErrNotFound, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			paths := threeSegments(t, dir)[:2]
			os.Remove(filepath.Join(dir, "00000003.db"))
			bad := tt.spoil(t, dir)
			s := openSet(t, append(paths, bad))
			sk := s.Skipped()
			if len(sk) != 1 || sk[0].Path != bad || !errors.Is(sk[0].Err, tt.want) {
				t.Fatalf("skipped %v, want %s with %v", sk, bad, tt.want)
			}
			if st, err := s.Stop(); err != nil || (st != nil) != tt.wantStop {
				t.Errorf("Stop = %+v %v: an unread last segment leaves the recording open", st, err)
			}
			n := 0
			if err := s.Events(func(*Event) error { n++; return nil }); err != nil || n != 7 {
				t.Errorf("%d events (%v), want the 7 of the readable segments", n, err)
			}
		})
	}
}

func TestSetStopOpenRecording(t *testing.T) {
	dir := t.TempDir()
	p1, _ := writeSegment(t, dir, segSpec{seq: 1, symbols: []string{"cuInit"}, stop: StopRotated}, false)
	s := openSet(t, []string{p1})
	if st, err := s.Stop(); st != nil || err != nil {
		t.Errorf("Stop = %+v %v; a set ending with a rotation is an open recording", st, err)
	}
}

func TestOpenSetNoReadableSegment(t *testing.T) {
	dir := t.TempDir()
	p, _ := writeSegment(t, dir, segSpec{seq: 1, symbols: []string{"cuInit"}}, true)
	_, err := OpenSet([]string{p}, SetOptions{})
	if !errors.Is(err, ErrNoSegments) || !errors.Is(err, ErrLocked) {
		t.Errorf("err = %v, want ErrNoSegments and ErrLocked", err)
	}
	if _, err := OpenSet(nil, SetOptions{Path: dir}); !errors.Is(err, ErrNoSegments) {
		t.Errorf("no paths: err = %v, want ErrNoSegments", err)
	}
}

// A segment without a failures index (written before it existed) has its
// failures found among its events.
func TestSetFailuresWithoutIndex(t *testing.T) {
	paths := threeSegments(t, t.TempDir())
	db, err := bolt.Open(paths[1], 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketFailures) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s := openSet(t, paths)
	var got []int64
	if err := s.Failures(func(e *Event) error { got = append(got, e.End); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := []int64{1.3e9, 2.2e9}; !slices.Equal(got, want) {
		t.Errorf("failures at %v, want %v", got, want)
	}
}

// An error the caller's function returns ends the pass and comes back as
// it is, not as the segment's.
func TestSetPassesCallerErrors(t *testing.T) {
	s := openSet(t, threeSegments(t, t.TempDir()))
	stop := errors.New("enough")
	n := 0
	err := s.Events(func(e *Event) error {
		if n++; e.End == 2.1e9 {
			return stop
		}
		return nil
	})
	if err != stop || n != 4 {
		t.Errorf("err = %v after %d events, want the caller's error after 4", err, n)
	}
}

func TestFlightRecord(t *testing.T) {
	dir := t.TempDir()
	p, _ := writeSegment(t, dir, segSpec{seq: 4, symbols: []string{"cuInit"}}, false)
	plain := filepath.Join(dir, "run.db")
	writeRun(t, plain)
	for path, want := range map[string]*FlightInfo{
		p:     {Seq: 4, Start: 4e9, MaxBytes: 1 << 30},
		plain: nil,
	} {
		r, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.Flight()
		r.Close()
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Flight = %+v %v, want %+v", filepath.Base(path), got, err, want)
		}
	}
}

// A segment the index lists as closed whose file is gone is lost: its
// records are, and when it was the last, so are the recording's end and
// stop record. A live one that cannot be read is not lost, and a segment
// that does not read for another reason is not either.
func TestSetLostSegments(t *testing.T) {
	info := func(seq uint64, live bool) SegmentInfo {
		return SegmentInfo{Seq: seq, From: int64(seq) * 1e9, To: int64(seq+1) * 1e9, Calls: 10 * seq, Failures: 1, Live: live}
	}
	tests := []struct {
		name    string
		missing []int // indexes of the paths whose files are removed
		infos   []SegmentInfo
		lost    []bool
		endLost bool
	}{
		{"the last, closed", []int{2}, []SegmentInfo{info(1, false), info(2, false), info(3, false)}, []bool{true}, true},
		{"the last, live", []int{2}, []SegmentInfo{info(1, false), info(2, false), info(3, true)}, []bool{false}, false},
		{"one in the middle", []int{1}, []SegmentInfo{info(1, false), info(2, false), info(3, false)}, []bool{true}, false},
		{"no index", []int{2}, nil, []bool{false}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			paths := threeSegments(t, t.TempDir())
			for _, i := range tt.missing {
				os.Remove(paths[i])
			}
			s, err := OpenSet(paths, SetOptions{Path: "DIR", Segments: tt.infos})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var lost []bool
			for _, sk := range s.Skipped() {
				lost = append(lost, sk.Lost())
				if sk.Err.Error() == "" || sk.Path == "" {
					t.Errorf("skipped %+v", sk)
				}
			}
			if !reflect.DeepEqual(lost, tt.lost) || s.EndLost() != tt.endLost {
				t.Errorf("lost %v, end lost %v; want %v, %v", lost, s.EndLost(), tt.lost, tt.endLost)
			}
			if st, _ := s.Stop(); tt.endLost && st != nil {
				t.Errorf("Stop = %+v: the stop record is lost with the last segment", st)
			}
		})
	}
}

// The counters a batch carries are stored in its own transaction: a copy
// of the file taken while commits go on holds the count of exactly the
// events in it, whatever the moment the copy was taken.
func TestCommittedCountsMatchTheCopy(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "live.db")
	w, err := Create(path, CreateOptions{}, testRun(), []string{"cuInit"})
	if err != nil {
		t.Fatal(err)
	}
	w.Reserve = 0
	defer w.Close()
	done := make(chan error)
	go func() {
		var total uint64
		for i := 0; i < 200; i++ {
			b := Batch{}
			for k := 0; k < 50; k++ {
				b.Events = append(b.Events, call(0, 1, int64(i*100+k+1)*1000, 0))
			}
			total += uint64(len(b.Events))
			b.Counts = &Stats{Events: total}
			if err := w.Commit(&b); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i := 0; i < 5; i++ {
		cp := filepath.Join(dir, fmt.Sprintf("copy%d.db", i))
		f, err := os.Create(cp)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Snapshot(func(int64) (io.Writer, error) { return f, nil }); err != nil {
			t.Fatal(err)
		}
		f.Close()
		r, err := Open(cp)
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		r.Events(func(*Event) error { n++; return nil })
		c, err := r.Committed()
		r.Close()
		if err != nil || (n > 0 && (c == nil || c.Events != n)) {
			t.Errorf("copy %d holds %d events, its count says %+v (%v)", i, n, c, err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "run.db")
	writeRun(t, plain)
	r, err := Open(plain)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if c, err := r.Committed(); c != nil || err != nil {
		t.Errorf("a file written without counts: Committed = %+v %v, want nil", c, err)
	}
}

package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/retrivium/forensic/cuda"
)

func sampleEvents() []Event {
	return []Event{
		{Symbol: 3, PID: 100, TID: 100, Start: 1_000_000, End: 1_000_900, Dev: 0, Stack: -1, Ctx: 1,
			Fields: cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: 1 << 30, Ptr: 0x7f0000000000}},
		{Symbol: 4, PID: 100, TID: 101, Start: 1_000_100, End: 1_000_800, Result: 2, Dev: 1, Stack: 7, Flags: EventFrozen,
			Fields: cuda.Fields{Has: cuda.FieldSize | cuda.FieldDevice | cuda.FieldKey, Size: 5, Device: -1, Key: []byte{1, 2, 3}}},
		{Symbol: 0, PID: 4294967295, TID: 1, Start: 0, End: 0, Result: -7, Dev: -1, Stack: -1, Depth: 2},
		{Symbol: 9, PID: 100, TID: 100, Start: 1_001_000, End: 1_002_000, Result: 205, Dev: 0, Stack: -1, Ctx: 1,
			Flags: EventArrayCut, Fields: cuda.Fields{Has: cuda.FieldSize | cuda.FieldCount | cuda.FieldItems, Size: 64 << 20,
				Count: 9, Items: 8, Grants: []cuda.Grant{{Type: 1, Device: 0, Flags: 3}, {Type: 1, Device: -1, Flags: 1}}}},
		{Symbol: 10, PID: 100, TID: 100, Start: 1_003_000, End: 1_004_000, Dev: 0, Stack: -1,
			Fields: cuda.Fields{Has: cuda.FieldItems | cuda.FieldCount, Count: 1, Items: 1}},
	}
}

func TestChunkRoundTrip(t *testing.T) {
	tests := []struct {
		name   string
		events []Event
	}{
		{"empty", nil},
		{"one", sampleEvents()[:1]},
		{"out of order and extreme values", sampleEvents()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chunk := EncodeChunk(tt.events)
			var got []Event
			err := DecodeChunk(chunk, func(e *Event) error {
				c := *e
				c.Key = append([]byte(nil), e.Key...)
				if len(c.Key) == 0 {
					c.Key = nil
				}
				got = append(got, c)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.events) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, tt.events)
			}
		})
	}
}

func TestChunkBytesPerEvent(t *testing.T) {
	// A typical allocation event must stay well under the 64-byte target.
	var evs []Event
	for i := 0; i < 1000; i++ {
		evs = append(evs, Event{Symbol: 5, PID: 31337, TID: 31340, Start: int64(1e12 + i*20000), End: int64(1e12 + i*20000 + 9000),
			Dev: 0, Stack: -1, Ctx: 1, Fields: cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: 4096, Ptr: 0x7f3a00000000 + uint64(i)*4096}})
	}
	per := float64(len(EncodeChunk(evs))) / float64(len(evs))
	if per > 40 {
		t.Fatalf("%.1f bytes per encoded event, want <= 40", per)
	}
}

func TestDecodeChunkRejectsCorruption(t *testing.T) {
	good := EncodeChunk(sampleEvents())
	tests := map[string][]byte{
		"empty":        {},
		"wrong format": append([]byte{9}, good[1:]...),
		"truncated":    good[:len(good)-3],
		"trailing":     append(append([]byte(nil), good...), 0),
		"huge count":   {chunkFormat, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"key too long": append([]byte{chunkFormat, 1, 1, 1, 0, 0, 0, 0, 0, 0, byte(cuda.FieldKey)}, 0x7f),
		"symbol range": {chunkFormat, 1, 0xff, 0xff, 0x7f},
		// presence bit 11 was never written
		"unknown presence bit": {chunkFormat, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0x80, 0x10},
		"too many grants":      {chunkFormat, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0x80, 0x02, 1, 0x7f, 1, 1, 1},
		"grant device range":   {chunkFormat, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0x80, 0x02, 1, 1, 1, 0xff, 0xff, 0xff, 0xff, 0x7f, 1},
	}
	for name, chunk := range tests {
		t.Run(name, func(t *testing.T) {
			err := DecodeChunk(chunk, func(*Event) error { return nil })
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("DecodeChunk = %v, want ErrCorrupt", err)
			}
		})
	}
}

func FuzzDecodeChunk(f *testing.F) {
	f.Add(EncodeChunk(sampleEvents()))
	f.Add(EncodeChunk(nil))
	f.Add([]byte{chunkFormat, 1})
	f.Fuzz(func(t *testing.T, chunk []byte) {
		n := 0
		err := DecodeChunk(chunk, func(e *Event) error { n++; return nil })
		if err == nil {
			// Whatever decodes must encode back to the same events.
			var evs []Event
			DecodeChunk(chunk, func(e *Event) error {
				c := *e
				c.Key = append([]byte(nil), e.Key...)
				evs = append(evs, c)
				return nil
			})
			if len(evs) != n {
				t.Fatalf("decoded %d then %d events", n, len(evs))
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error %v is not ErrCorrupt", err)
		}
	})
}

func testRun() RunInfo {
	return RunInfo{ID: "test", Clock: ClockName, ClockStart: 1000, WallStart: time.Unix(1700000000, 0).UTC(),
		Mode: "spawn", Command: []string{"true"}, Interval: 100 * time.Millisecond}
}

func writeRun(t testing.TB, path string) {
	t.Helper()
	w, err := Create(path, CreateOptions{}, testRun(), []string{"cuInit", "cuMemAlloc_v2"})
	if err != nil {
		t.Fatal(err)
	}
	b := &Batch{Stacks: map[int32][]Frame{7: {{BuildID: "ab", Offset: 0x1000}, {IP: 0x402000}}}}
	b.Events = append(b.Events, Event{Symbol: 1, PID: 5, TID: 5, Start: 10, End: 20, Result: 2, Dev: 0, Stack: 7,
		Fields: cuda.Fields{Has: cuda.FieldSize, Size: 42}})
	free := uint64(7)
	b.Samples = append(b.Samples, Sample{Kind: KindFramebuffer, API: "nvmlDeviceGetMemoryInfo_v2", Free: &free})
	b.Processes = append(b.Processes, Process{PID: 5, Start: 10, Exe: "/bin/x"})
	b.Markers = append(b.Markers, Marker{Time: 15, Label: "load"})
	if err := w.Commit(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(StopInfo{Time: 30, Reason: "workload-exited"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestWriteRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.db")
	writeRun(t, path)
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("run.db mode %v, want 0600", st.Mode().Perm())
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Run().ID != "test" || r.Schema() != SchemaVersion {
		t.Errorf("run = %+v, schema %d", r.Run(), r.Schema())
	}
	var names []string
	r.Events(func(e *Event) error { names = append(names, e.Name); return nil })
	if !reflect.DeepEqual(names, []string{"cuMemAlloc_v2"}) {
		t.Errorf("events = %v", names)
	}
	var samples int
	r.Samples(func(s *Sample) error {
		samples++
		if s.Seq != 1 || s.Free == nil || *s.Free != 7 {
			t.Errorf("sample = %+v", s)
		}
		return nil
	})
	stop, err := r.Stop()
	if err != nil || stop == nil || stop.Reason != "workload-exited" {
		t.Errorf("stop = %+v, %v", stop, err)
	}
	frames, err := r.Stack(7)
	if err != nil || !reflect.DeepEqual(frames, []Frame{{BuildID: "ab", Offset: 0x1000}, {IP: 0x402000}}) {
		t.Errorf("stack = %x, %v", frames, err)
	}
	ms, _ := r.Markers()
	ps, _ := r.Processes()
	if samples != 1 || len(ms) != 1 || len(ps) != 1 {
		t.Errorf("samples %d markers %d processes %d", samples, len(ms), len(ps))
	}
}

func TestCreateRefusesExisting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.db")
	os.WriteFile(path, []byte("keep me"), 0o600)
	if _, err := Create(path, CreateOptions{}, testRun(), nil); !errors.Is(err, ErrExists) {
		t.Fatalf("Create over a file = %v, want ErrExists", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "keep me" {
		t.Fatal("existing file was changed")
	}
	// --force replaces runs only (TestCreateForce): this file is kept.
	if _, err := Create(path, CreateOptions{Force: true}, testRun(), nil); !errors.Is(err, ErrNotReplaced) {
		t.Fatalf("Create --force over a text file = %v, want ErrNotReplaced", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "keep me" {
		t.Fatal("existing file was changed by --force")
	}
}

func TestOpenBadInput(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	writeRun(t, good)
	data, _ := os.ReadFile(good)

	foreign := filepath.Join(dir, "foreign.db")
	db, err := bolt.Open(foreign, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("widgets")); return err })
	db.Close()

	newer := filepath.Join(dir, "newer.db")
	writeRun(t, newer)
	db, _ = bolt.Open(newer, 0o600, nil)
	db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keySchema, []byte{0, 0, 0, SchemaVersion + 1})
	})
	db.Close()

	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o600)
		return p
	}
	random := make([]byte, 64<<10)
	for i := range random {
		random[i] = byte(i*7919 + i>>3)
	}
	tests := []struct {
		name string
		path string
		want error
	}{
		{"missing", filepath.Join(dir, "nope.db"), ErrNotFound},
		{"empty", write("empty.db", nil), ErrEmpty},
		{"random bytes", write("random.db", random), ErrNotRunDB},
		{"truncated", write("trunc.db", data[:len(data)/3]), ErrNotRunDB},
		{"text", write("text.db", []byte("hello, world\n")), ErrNotRunDB},
		{"foreign bbolt", foreign, ErrForeign},
		{"newer schema", newer, ErrNewerSchema},
		{"directory", dir, ErrNotRunDB},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Open(tt.path)
			if err == nil {
				r.Close()
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Open = %v, want %v", err, tt.want)
			}
			if bytes.ContainsRune([]byte(err.Error()), '\n') {
				t.Fatalf("error spans lines: %q", err)
			}
		})
	}
}

func TestOpenLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.db")
	w, err := Create(path, CreateOptions{}, testRun(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	start := time.Now()
	_, err = Open(path)
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("Open of a file being written = %v, want ErrLocked", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Open blocked %v", d)
	}
}

func TestDiskReserve(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.db")
	w, err := Create(path, CreateOptions{}, testRun(), nil)
	if err != nil {
		t.Fatal(err)
	}
	free := uint64(1 << 30)
	w.freeSpace = func() (uint64, error) { return free, nil }
	b := &Batch{Events: sampleEvents()[:1]}
	if err := w.Commit(b); err != nil {
		t.Fatal(err)
	}
	free = w.Reserve - 1
	if err := w.Commit(b); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("Commit below the reserve = %v, want ErrDiskFull", err)
	}
	if err := w.Stop(StopInfo{Reason: "disk-full"}); err != nil {
		t.Fatalf("Stop after disk full: %v", err)
	}
	w.Close()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n := 0
	r.Events(func(*Event) error { n++; return nil })
	st, _ := r.Stop()
	if n != 1 || st == nil || st.Reason != "disk-full" {
		t.Fatalf("after disk full: %d events, stop %+v", n, st)
	}
}

// readAll exercises every read path of a Reader.
func readAll(r *Reader) {
	r.Stop()
	r.Inventory()
	r.Events(func(*Event) error { return nil })
	r.Samples(func(*Sample) error { return nil })
	r.Readings(func(*Reading) error { return nil })
	r.Processes()
	r.Libraries()
	r.KernelLog()
	r.Markers()
	r.Drops()
	r.Stack(7)
	r.Files()
	r.Capture(5, 5, 20)
	r.PyStack(5, 5, 20)
	r.PyCodes(5)
	r.StackRefs(func(*StackRef) error { return nil })
}

// FuzzOpen feeds the reader files whose pages after bbolt's two meta
// pages are arbitrary: valid meta pages get the fuzzer past bbolt's
// checksums into the B+tree. Every outcome must be an error or a clean
// read, never a crash.
func FuzzOpen(f *testing.F) {
	path := filepath.Join(f.TempDir(), "seed.db")
	writeRun(f, path)
	seed, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	const metaPages = 2 * 4096
	f.Add(seed[metaPages:])
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 4096))
	f.Fuzz(func(t *testing.T, tail []byte) {
		data := append(append([]byte(nil), seed[:metaPages]...), tail...)
		p := filepath.Join(t.TempDir(), "run.db")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := Open(p)
		if err != nil {
			if bytes.ContainsRune([]byte(err.Error()), '\n') {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		defer r.Close()
		readAll(r)
	})
}

// Commits that grow the file past bbolt's mapping (bbolt extends the file
// ahead of it) must not release memory beyond the mapping: a past version
// zeroed whatever followed it, and the Go runtime crashed within a few
// dozen commits like these.
func TestManyCommitsKeepMemoryIntact(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.db")
	w, err := Create(path, CreateOptions{}, testRun(), []string{"cuMemAlloc_v2"})
	if err != nil {
		t.Fatal(err)
	}
	w.Reserve = 0
	var keep [][]byte
	for c := 0; c < 80; c++ {
		evs := make([]Event, 25000)
		for i := range evs {
			evs[i] = Event{PID: 7, TID: 7, Start: int64(c*1e9 + i*1000), End: int64(c*1e9 + i*1000 + 500), Dev: 0, Stack: -1,
				Fields: cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: uint64(i), Ptr: uint64(c)<<32 | uint64(i)}}
		}
		if err := w.Commit(&Batch{Events: evs}); err != nil {
			t.Fatal(err)
		}
		b := bytes.Repeat([]byte{byte(c)}, 1<<16)
		keep = append(keep, b)
	}
	for c, b := range keep {
		if bytes.Count(b, []byte{byte(c)}) != len(b) {
			t.Fatalf("heap memory written by commit %d changed", c)
		}
	}
	w.Close()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n := 0
	r.Events(func(*Event) error { n++; return nil })
	if n != 80*25000 {
		t.Fatalf("%d events read back, want %d", n, 80*25000)
	}
}

func TestEncodeChunksSplits(t *testing.T) {
	var evs []Event
	for i := 0; i < 5000; i++ {
		evs = append(evs, Event{Symbol: 1, PID: 9, TID: 9, Start: int64(i * 100), End: int64(i*100 + 50), Dev: 0, Stack: -1,
			Fields: cuda.Fields{Has: cuda.FieldSize, Size: uint64(i)}})
	}
	chunks := EncodeChunks(evs)
	if len(chunks) < 10 {
		t.Fatalf("%d chunks for 5000 events: not cut", len(chunks))
	}
	var got []Event
	for _, c := range chunks {
		if len(c) > chunkBytes+128 {
			t.Errorf("chunk of %d bytes", len(c))
		}
		if err := DecodeChunk(c, func(e *Event) error { got = append(got, *e); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(got, evs) {
		t.Fatal("events changed through EncodeChunks")
	}
	one := EncodeChunks(evs[:1])
	if len(one) != 1 {
		t.Fatalf("%d chunks for one event", len(one))
	}
}

// The presence bits stored with each event are cuda.Field's values: the
// file format depends on them, so reordering that list must fail here (and
// bump SchemaVersion), not silently change what old files mean.
func TestPresenceBitsPinned(t *testing.T) {
	for _, tc := range []struct {
		f    cuda.Field
		want uint16
	}{
		{cuda.FieldSize, 1}, {cuda.FieldFlags, 2}, {cuda.FieldPtr, 4}, {cuda.FieldTarget, 8},
		{cuda.FieldDevice, 16}, {cuda.FieldPeer, 32}, {cuda.FieldCount, 64}, {cuda.FieldKey, 128},
		{cuda.FieldItems, 256},
	} {
		if uint16(tc.f) != tc.want {
			t.Errorf("field bit %d, the file format says %d", tc.f, tc.want)
		}
	}
}

// Tiny events still make chunks whose count fits one varint byte.
func TestEncodeChunksCountFitsOneByte(t *testing.T) {
	evs := make([]Event, 1000)
	for i := range evs {
		evs[i] = Event{Symbol: 1, PID: 1, TID: 1, Dev: -1, Stack: -1}
	}
	n := 0
	for _, c := range EncodeChunks(evs) {
		if c[1] >= 0x80 {
			t.Fatalf("count byte %#x is not a one-byte varint", c[1])
		}
		DecodeChunk(c, func(*Event) error { n++; return nil })
	}
	if n != len(evs) {
		t.Fatalf("decoded %d of %d events", n, len(evs))
	}
}

// The files bucket: one record per build id (a later one replaces it);
// a file written before the bucket existed reads as having none.
func TestFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.db")
	w, err := Create(path, CreateOptions{}, testRun(), []string{"cuInit"})
	if err != nil {
		t.Fatal(err)
	}
	for _, fs := range [][]File{
		{{BuildID: "aa", Path: "/lib/libc.so.6", Source: "ldconfig"}, {BuildID: "bb", Path: "/app/x", Open: "/proc/9/root/app/x", Source: "maps"}},
		{{BuildID: "aa", Path: "/usr/lib/libc.so.6", Source: "seen"}},
	} {
		if err := w.Commit(&Batch{Files: fs}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Files()
	r.Close()
	want := []File{{BuildID: "aa", Path: "/usr/lib/libc.so.6", Source: "seen"}, {BuildID: "bb", Path: "/app/x", Open: "/proc/9/root/app/x", Source: "maps"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Files = %+v, %v; want %+v", got, err, want)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketFiles) })
	db.Close()
	r, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, err := r.Files(); got != nil || err != nil {
		t.Errorf("Files of a file without the bucket = %+v, %v; want none, no error", got, err)
	}
}

package store

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/retrivium/forensic/cuda"
)

// testdata/schema1.db.gz is a run.db written by the schema-1 writer
// (commit a4b7f83, before array arguments): six events covering every
// presence bit and event flag of that schema, a process, a drops reading
// and a stop record. A reader of any later schema must read it unchanged.
func openFixture(t *testing.T, name string) *Reader {
	t.Helper()
	gz, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "run.db")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path)
	if err != nil {
		t.Fatalf("Open(schema-1 fixture): %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestReadsSchema1(t *testing.T) {
	r := openFixture(t, "schema1.db.gz")
	if r.Schema() != 1 {
		t.Fatalf("fixture schema = %d, want 1", r.Schema())
	}
	want := []Event{
		{Name: "cuInit", PID: 100, TID: 100, Start: 2000, End: 2500, Dev: -1, Stack: -1, Flags: EventLateAttach,
			Fields: cuda.Fields{Has: cuda.FieldFlags}},
		{Symbol: 1, Name: "cuMemAlloc_v2", PID: 100, TID: 101, Start: 3000, End: 3900, Dev: 0, Ctx: 1, Stack: -1,
			Fields: cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: 1 << 30, Ptr: 0x7f0000000000}},
		{Symbol: 2, Name: "cuMemSetAccess", PID: 100, TID: 101, Start: 4000, End: 4700, Result: 205, Dev: 0, Ctx: 1, Stack: 3,
			Flags: EventFrozen, Fields: cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr | cuda.FieldPeer | cuda.FieldFlags | cuda.FieldCount,
				Size: 64 << 20, Ptr: 0x7e0000000000, Peer: 0, Flags: 3, Count: 2}},
		{Symbol: 3, Name: "cuMemAllocPitch_v2", PID: 100, TID: 101, Start: 5000, End: 5100, Dev: 0, Ctx: 1, Stack: -1,
			Flags: EventOutFault},
		{Symbol: 4, Name: "cuIpcOpenMemHandle_v2", PID: 100, TID: 102, Start: 6000, End: 6100, Result: 1, Dev: 0, Ctx: 1, Stack: -1,
			Depth: 1, Flags: EventInFault | EventReordered, Fields: cuda.Fields{Has: cuda.FieldKey | cuda.FieldFlags, Key: []byte{1, 2, 3, 4}, Flags: 1}},
		{Symbol: 5, Name: "cuMemFree_v2", PID: 100, TID: 100, Start: 7000, End: 7200, Dev: 0, Ctx: 1, Stack: -1,
			Fields: cuda.Fields{Has: cuda.FieldTarget, Target: 0x7f0000000000}},
	}
	var got []Event
	err := r.Events(func(e *Event) error {
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
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("schema-1 events:\n got %+v\nwant %+v", got, want)
	}
	var failed []string
	if err := r.Failures(func(e *Event) error { failed = append(failed, e.Name); return nil }); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(failed, []string{"cuMemSetAccess", "cuIpcOpenMemHandle_v2"}) {
		t.Errorf("failures index = %v", failed)
	}
	stop, err := r.Stop()
	if err != nil || stop == nil {
		t.Fatalf("stop = %+v, %v", stop, err)
	}
	// samples_thinned kept its JSON name through the Go field's rename.
	if stop.Stats.SamplesThinned != 2 || stop.Stats.Calls != 6 || stop.Stats.Untracked != 0 {
		t.Errorf("stop stats = %+v", stop.Stats)
	}
	frames, err := r.Stack(3)
	if err != nil || len(frames) != 2 {
		t.Errorf("stack 3 = %v, %v", frames, err)
	}
	ps, err := r.Processes()
	if err != nil || len(ps) != 1 || !ps[0].AttachedLate {
		t.Errorf("processes = %+v, %v", ps, err)
	}
}

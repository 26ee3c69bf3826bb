package store

import (
	"path/filepath"
	"reflect"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func sampleNamed() NamedStack {
	return NamedStack{PID: 41, TID: 43, Time: 123456789, Stop: "stack-end", Detail: "return address at 0x7ffd4000",
		Frames: []NamedFrame{
			{Addr: 0x401234, Via: "registers", Path: "/bin/x", BuildID: "ab12", Function: "alloc", Offset: 0x14},
			{Addr: 0x7f0000001000, Via: "cfi", Name: "libgone.so"}},
		Python: "ok", PythonStatus: PyOK, PyFrames: []NamedPyFrame{{Function: "Model.load", File: "/job/m.py", Line: 12, Entry: true}}}
}

// A named stack reads back as written, under its capture's key, from a
// run.db; another call has none, and a corrupt value is an error.
func TestNamedStacksRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.db")
	w, err := Create(path, CreateOptions{}, testRun(), []string{"cuMemAlloc_v2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(&Batch{Events: []Event{call(0, 41, 1, 2)}}); err != nil {
		t.Fatal(err)
	}
	want := sampleNamed()
	if err := w.Commit(&Batch{Named: []NamedStack{want}}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.NamedStack(41, 43, 123456789)
	if err != nil || !reflect.DeepEqual(got, &want) {
		t.Errorf("named stack %+v, %v; want %+v", got, err, want)
	}
	if n, err := r.NamedStack(41, 43, 1); n != nil || err != nil {
		t.Errorf("another call's named stack: %+v, %v", n, err)
	}
	r.Close()

	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error {
		bad, _ := NamedValue([]byte("{not json"))
		return tx.Bucket(bucketNamed).Put(CaptureKey(41, 43, 123456789), bad)
	})
	db.Close()
	r, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.NamedStack(41, 43, 123456789); err == nil {
		t.Error("a corrupt named stack read without an error")
	}
	for _, v := range [][]byte{nil, {2, 1, 2}, {namedFormat, 0xff, 0xff}} {
		if _, err := NamedJSON(v); err == nil {
			t.Errorf("named stack value %x decoded", v)
		}
	}
}

// In a flight recording a named stack is found in whichever segment holds
// it.
func TestSetNamedStacks(t *testing.T) {
	dir := t.TempDir()
	n := sampleNamed()
	specs := []segSpec{
		{seq: 1, symbols: []string{"cuMemAlloc_v2"}, stop: StopRotated, batch: Batch{
			Events: []Event{call(0, 41, 1.2e9, 2)}, Named: []NamedStack{n}}},
		{seq: 2, symbols: []string{"cuMemAlloc_v2"}, stop: "signal", batch: Batch{
			Events: []Event{call(0, 41, 2.2e9, 2)}}},
	}
	var paths []string
	for _, sp := range specs {
		p, _ := writeSegment(t, dir, sp, false)
		paths = append(paths, p)
	}
	s := openSet(t, paths)
	if got, err := s.NamedStack(n.PID, n.TID, n.Time); err != nil || got == nil || got.Frames[0].Function != "alloc" {
		t.Errorf("named stack from the first segment: %+v, %v", got, err)
	}
	if got, err := s.NamedStack(n.PID, n.TID, 5); got != nil || err != nil {
		t.Errorf("a call without a named stack: %+v, %v", got, err)
	}
}

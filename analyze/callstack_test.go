package analyze

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// namingSymbolizer names each frame by its offset, for tests.
type namingSymbolizer struct{}

func (namingSymbolizer) Symbolize(frames []store.Frame, _ []File, _ []store.Mapping) *report.Stack {
	st := &report.Stack{}
	for _, f := range frames {
		st.Frames = append(st.Frames, report.Frame{Function: "f", Offset: f.Offset})
	}
	return st
}

func TestCallStackFindsTheCallsStack(t *testing.T) {
	size := uint64(2 << 30)
	alloc := func(end int64, stack int32) store.Event {
		return store.Event{Symbol: 0, PID: 7, TID: 7, Start: end - 10, End: end, Dev: 0, Stack: stack,
			Fields: cuda.Fields{Has: cuda.FieldSize, Size: size}}
	}
	path := filepath.Join(t.TempDir(), "run.db")
	w, err := store.Create(path, store.CreateOptions{}, store.RunInfo{ID: "t", Clock: store.ClockName, ClockStart: tClock,
		Mode: "spawn", Interval: 100 * time.Millisecond}, []string{"cuMemAlloc_v2"})
	if err != nil {
		t.Fatal(err)
	}
	w.Reserve = 0
	b := &store.Batch{Events: []store.Event{alloc(tClock+ms, 3), alloc(tClock+2*ms, -1)},
		Processes: []store.Process{{PID: 7, Start: tClock, Exe: "/bin/app", Root: true}},
		Stacks:    map[int32][]store.Frame{3: {{BuildID: "ab", Offset: 0x10}, {BuildID: "ab", Offset: 0x20}}}}
	if err := w.Commit(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(store.StopInfo{Time: tClock + time.Second.Nanoseconds(), Stats: store.Stats{Calls: 2, Events: 2}}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	r, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cases := []struct {
		name   string
		pid    uint32
		end    int64
		frames int // -1: no stack
	}{
		{"a call with a stored stack", 7, tClock + ms, 2},
		{"a call with none", 7, tClock + 2*ms, -1},
		{"a call not in the record", 8, tClock + ms, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, err := CallStack(r, Options{Symbolizer: namingSymbolizer{}}, c.pid, c.end)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.frames < 0 && st != nil:
				t.Errorf("stack %+v, want none", st)
			case c.frames >= 0 && (st == nil || len(st.Frames) != c.frames || st.Frames[1].Offset != 0x20):
				t.Errorf("stack %+v, want %d frames ending at offset 0x20", st, c.frames)
			}
		})
	}
	t.Run("several calls in one pass, in the order asked", func(t *testing.T) {
		refs := make([]CallRef, len(cases)+1)
		for i, c := range cases {
			refs[len(cases)-1-i] = CallRef{c.pid, c.end}
		}
		refs[len(cases)] = refs[len(cases)-1] // the same call twice
		sts, err := CallStacks(r, Options{Symbolizer: namingSymbolizer{}}, refs)
		if err != nil {
			t.Fatal(err)
		}
		for i, ref := range refs {
			if has := sts[i] != nil; has != (ref == CallRef{7, tClock + ms}) {
				t.Errorf("call %d (%+v): stack %+v", i, ref, sts[i])
			}
		}
	})
}

// Package segfixture cuts a run.db into the segments a flight-mode
// recorder would have written, for tests that read segment sets: each
// segment a complete run.db of the same run id with a flight record, the
// inventory, libraries and live processes repeated at its start, its own
// symbol table (every other one reversed, so ids differ between segments),
// and a stop record "rotated" on all but the last.
package segfixture

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/retrivium/forensic/store"
)

// run is everything read from the source run.db.
type run struct {
	info    store.RunInfo
	symbols []string
	inv     *store.Inventory
	stop    *store.StopInfo
	procs   []store.Process
	libs    []store.Library
	events  []store.Event
	samples []store.Sample
	kmsg    []store.KernelLog
	markers []store.Marker
	drops   []store.Drops
	stacks  map[int32][]store.Frame
}

// Split writes the run at src as len(cuts)+1 segments in dir (named
// NNNNNNNN.db, from 1) and returns their paths in order. cuts are run-clock
// times, ascending: segment i holds what happened in [cuts[i-1], cuts[i]).
func Split(t testing.TB, src, dir string, cuts []int64) []string {
	t.Helper()
	r := read(t, src)
	var paths []string
	for i := 0; i <= len(cuts); i++ {
		from, to := int64(-1<<63), int64(1<<63-1)
		if i > 0 {
			from = cuts[i-1]
		}
		if i < len(cuts) {
			to = cuts[i]
		}
		path := filepath.Join(dir, fmt.Sprintf("%08d.db", i+1))
		writeSegment(t, path, r, uint64(i+1), from, to, i == len(cuts))
		paths = append(paths, path)
	}
	return paths
}

func read(t testing.TB, src string) *run {
	rd, err := store.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	r := &run{info: rd.Run(), symbols: rd.SymbolNames(), stacks: map[int32][]store.Frame{}}
	check := func(err error) {
		if err != nil {
			t.Helper()
			t.Fatal(err)
		}
	}
	r.inv, err = rd.Inventory()
	check(err)
	r.stop, err = rd.Stop()
	check(err)
	r.procs, err = rd.Processes()
	check(err)
	r.libs, err = rd.Libraries()
	check(err)
	r.kmsg, err = rd.KernelLog()
	check(err)
	r.markers, err = rd.Markers()
	check(err)
	r.drops, err = rd.Drops()
	check(err)
	check(rd.Events(func(e *store.Event) error {
		c := *e
		c.Key = slices.Clone(e.Key)
		r.events = append(r.events, c)
		if e.Stack >= 0 && r.stacks[e.Stack] == nil {
			fr, err := rd.Stack(e.Stack)
			r.stacks[e.Stack] = fr
			return err
		}
		return nil
	}))
	check(rd.Samples(func(s *store.Sample) error { r.samples = append(r.samples, *s); return nil }))
	return r
}

// in keeps the records whose time is in [from, to).
func in[T any](recs []T, from, to int64, at func(*T) int64) []T {
	var out []T
	for i := range recs {
		if t := at(&recs[i]); t >= from && t < to {
			out = append(out, recs[i])
		}
	}
	return out
}

// writeSegment writes segment seq: what happened in [from, to).
func writeSegment(t testing.TB, path string, r *run, seq uint64, from, to int64, last bool) {
	t.Helper()
	symbols, ids := r.symbols, identity(len(r.symbols))
	if seq%2 == 0 {
		symbols, ids = reversed(r.symbols)
	}
	w, err := store.Create(path, store.CreateOptions{}, r.info, symbols)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Reserve = 0
	if err := w.SetFlight(store.FlightInfo{Seq: seq, Start: max(from, r.info.ClockStart)}); err != nil {
		t.Fatal(err)
	}
	b := &store.Batch{Inventory: r.inv, Libraries: r.libs, Processes: liveProcesses(r.procs, from, to),
		Stacks: map[int32][]store.Frame{}}
	for _, e := range in(r.events, from, to, func(e *store.Event) int64 { return e.End }) {
		e.Symbol = ids[e.Symbol]
		b.Events = append(b.Events, e)
		if e.Stack >= 0 {
			b.Stacks[e.Stack] = r.stacks[e.Stack]
		}
	}
	b.Samples = in(r.samples, from, to, func(s *store.Sample) int64 { return s.Start })
	b.Kmsg = in(r.kmsg, from, to, func(k *store.KernelLog) int64 { return k.Time })
	b.Markers = in(r.markers, from, to, func(m *store.Marker) int64 { return m.Time })
	b.Drops = in(r.drops, from, to, func(d *store.Drops) int64 { return d.Time })
	if err := w.Commit(b); err != nil {
		t.Fatal(err)
	}
	stop := &store.StopInfo{Time: to, Reason: store.StopRotated}
	if last {
		stop = r.stop
	}
	if stop != nil {
		if err := w.Stop(*stop); err != nil {
			t.Fatal(err)
		}
	}
}

// liveProcesses are the records of the processes seen before to that had
// not exited by from, as they were known at to: an exit after to is not
// known yet.
func liveProcesses(procs []store.Process, from, to int64) []store.Process {
	var out []store.Process
	for _, p := range procs {
		if p.Start >= to || (p.Exit != nil && p.Exit.Time < from) {
			continue
		}
		if p.Exit != nil && p.Exit.Time >= to {
			p.Exit = nil
		}
		out = append(out, p)
	}
	return out
}

func identity(n int) []uint16 {
	ids := make([]uint16, n)
	for i := range ids {
		ids[i] = uint16(i)
	}
	return ids
}

// reversed returns the symbol table in reverse order and the map from the
// original ids to the reversed table's.
func reversed(symbols []string) ([]string, []uint16) {
	out := slices.Clone(symbols)
	slices.Reverse(out)
	ids := make([]uint16, len(symbols))
	for i := range ids {
		ids[i] = uint16(len(symbols) - 1 - i)
	}
	return out, ids
}

package rundiff

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrivium/forensic/analyze"
	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// long is a sequence of n 1 MiB allocations, with the calls at the
// given indices changed by edit.
func long(n int, edits map[int]func(*Call)) *Sequence {
	calls := make([]Call, n)
	for i := range calls {
		calls[i] = Call{HasSize: true, Size: 1 << 20, EndNS: int64(i), Site: 1}
		if e := edits[i]; e != nil {
			e(&calls[i])
		}
	}
	return whole(calls)
}

// summarize is a sequence's summary, its sites keyed by sites.
func summarize(s *Sequence, sites []string) *Summary {
	return memRun(&report.Report{}, []string{"cuMemAlloc_v2"}, sites, map[uint32]*Sequence{1: s}).Procs[1]
}

func larger(c *Call)    { c.Size = 2 << 20 }
func elsewhere(c *Call) { c.Site = 2 }
func unknown(c *Call)   { c.Site = 0 }

func TestPlanFindsTheBlockWhereCallsDepart(t *testing.T) {
	sites := []string{"", "main+10;", "cache+20;"}
	manySites := map[int]func(*Call){}
	for b := 0; b < maxSiteBlocks+2; b++ {
		manySites[b*blockLen+3] = elsewhere
	}
	unknownBlock := map[int]func(*Call){}
	for i := blockLen; i < 2*blockLen; i++ {
		unknownBlock[i] = unknown
	}
	cases := []struct {
		name       string
		bad, good  *Sequence
		same       bool
		from       int
		siteBlocks []int
		cut        bool
	}{
		{"the same calls", long(5000, nil), long(5000, nil), true, 0, nil, false},
		{"a larger call in the third block", long(5000, map[int]func(*Call){2100: larger}), long(5000, nil), false, 2 * blockLen, nil, false},
		{"the good run ends at a block's end", long(3*blockLen+5, nil), long(3*blockLen, nil), false, 3 * blockLen, nil, false},
		{"the failing run stops early", long(1500, nil), long(5000, nil), false, blockLen, nil, false},
		{"no calls in the good run", long(10, nil), nil, false, 0, nil, false},
		{"another site before the departure", long(5000, map[int]func(*Call){10: elsewhere, 4000: larger}), long(5000, nil),
			false, 3 * blockLen, []int{0}, false},
		{"another site after the departure is not looked for", long(5000, map[int]func(*Call){10: larger, 4000: elsewhere}), long(5000, nil),
			false, 0, nil, false},
		{"one call of unknown site: its block is read", long(2000, map[int]func(*Call){1500: unknown}), long(2000, nil),
			true, 0, []int{1}, false},
		{"a block of unknown sites cannot differ by site", long(2000, unknownBlock), long(2000, nil), true, 0, nil, false},
		{"sites differ in too many blocks", long(12*blockLen, manySites), long(12*blockLen, nil), true, 0,
			[]int{0, 1, 2, 3, 4, 5, 6, 7}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var sg *Summary
			if c.good != nil {
				sg = summarize(c.good, sites)
			}
			p := planPair(summarize(c.bad, sites), sg)
			if p.same != c.same || (!p.same && p.from != c.from) || !equalInts(p.siteBlocks, c.siteBlocks) || p.sitesCut != c.cut {
				t.Errorf("plan %+v, want same=%v from %d, site blocks %v (cut %v)", p, c.same, c.from, c.siteBlocks, c.cut)
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A departure deep in two long runs is found by reading back only the
// block it lies in (and the few calls after it), not the whole sequences.
func TestDiffReadsOnlyTheBlockWhereCallsDepart(t *testing.T) {
	const n = 20 * blockLen
	extra := map[int]func(*Call){}
	good, bad := long(n, nil), long(n+1, extra)
	at := 15*blockLen + 7
	for i := at; i <= n; i++ {
		bad.spans[0].calls[i] = good.At(min(i, n-1))
	}
	bad.spans[0].calls[at] = Call{HasSize: true, Size: 2 << 30, Site: 1, EndNS: int64(at)}
	mk := func(path string, s *Sequence, failed bool) *Run {
		rep := &report.Report{Run: report.RunInfo{Path: path}, Attribution: report.AttrNone,
			Processes: []report.ProcessInfo{recorded(1, "serve")}}
		if failed {
			rep.Attribution, rep.FirstFailure = report.AttrAllocation, &report.Failure{Symbol: "cuMemAlloc_v2"}
		}
		return memRun(rep, []string{"cuMemAlloc_v2"}, []string{"", "main+10;"}, map[uint32]*Sequence{1: s})
	}
	runs := []*Run{mk("good.db", good, false), mk("bad.db", bad, true)}
	read := 0
	for _, r := range runs {
		load := r.load
		r.load = func(want map[uint32][]window) (map[uint32]*Sequence, error) {
			for _, ws := range want {
				for _, w := range merge(ws) {
					read += w.to - w.from
				}
			}
			return load(want)
		}
	}
	d, err := Diff(runs)
	if err != nil {
		t.Fatal(err)
	}
	f := d.Differences[0]
	if f.Departure != report.DepartExtraCall || f.Call.Index != at || *f.Call.Size != 2<<30 {
		t.Errorf("first difference %s at #%d, want the extra 2 GiB call at #%d: %s", f.Departure, f.Call.Index, at, f.Summary)
	}
	if limit := 2 * (blockLen + lookahead + 1); read > limit {
		t.Errorf("read %d calls back to find it, want at most %d", read, limit)
	}
}

// writeLongRun writes a run.db of one process making n 1 MiB device
// allocations, each with a stack naming its call site (frame offset
// 0x10, or the offset site gives for its index), then the extra
// allocations extra gives (index: MiB; negative fails) in place.
func writeLongRun(t *testing.T, name string, n int, site map[int]uint64, extra map[int]int64) string {
	t.Helper()
	const clock = int64(1_000_000_000)
	path := filepath.Join(t.TempDir(), name+".db")
	w, err := store.Create(path, store.CreateOptions{}, store.RunInfo{ID: name, Clock: store.ClockName, ClockStart: clock,
		Mode: "spawn", Interval: 100 * time.Millisecond}, []string{"cuMemAlloc_v2", "cuMemFree_v2"})
	if err != nil {
		t.Fatal(err)
	}
	w.Reserve = 0
	b := &store.Batch{Stacks: map[int32][]store.Frame{}, Processes: []store.Process{{PID: 7, Start: clock, Exe: "/bin/serve",
		Args: []string{"serve"}, Root: true, Devices: []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}}}}
	for _, off := range []uint64{0x10, 0x20} {
		b.Stacks[int32(off)] = []store.Frame{{BuildID: "ab12", Offset: off}, {IP: 0x7f00 + off}}
	}
	tm := clock
	add := func(mib int64, stack int32) {
		tm += 1000
		e := store.Event{Symbol: 0, PID: 7, TID: 7, Start: tm, End: tm + 10, Stack: stack,
			Fields: cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: uint64(max(mib, -mib)) << 20, Ptr: uint64(tm) << 12}}
		if mib < 0 {
			e.Result, e.Fields.Has = 2, cuda.FieldSize
		}
		b.Events = append(b.Events, e)
	}
	for i := 0; i < n; i++ {
		if m, ok := extra[i]; ok {
			add(m, 0x10)
		}
		off := uint64(0x10)
		if s, ok := site[i]; ok {
			off = s
		}
		add(1, int32(off))
	}
	if err := w.Commit(b); err != nil {
		t.Fatal(err)
	}
	calls := uint64(len(b.Events))
	if err := w.Stop(store.StopInfo{Time: tm + int64(time.Second), Reason: "workload-exited", Stats: store.Stats{Calls: calls, Events: calls}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// From real run.db files: the second pass numbers the calls as the
// analysis did, reads their call sites back from the stacks, and finds a
// call from another site and, later, an extra allocation, thousands of
// calls in.
func TestDiffOfLongRunsFindsLateDepartures(t *testing.T) {
	const n = 6000
	good := writeLongRun(t, "good", n, nil, nil)
	bad := writeLongRun(t, "bad", n, map[int]uint64{1500: 0x20}, map[int]int64{4500: 2048, 5990: -4096})
	var srcs []analyze.Source
	for _, p := range []string{good, bad} {
		r, err := store.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		srcs = append(srcs, r)
	}
	runs, err := ReadAll(srcs, Options{Analyze: analyze.Options{Symbolizer: noSymbols{}}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := Diff(runs)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, f := range d.Differences {
		if f.Kind == report.DiffCallSequence {
			got[f.Departure] = f.Call.Index
			if f.Call.Stack == nil {
				t.Errorf("%s: the departing call's stack was not read", f.Departure)
			}
			if f.Departure == report.DepartExtraCall && *f.Call.Size != 2048<<20 {
				t.Errorf("extra call of %d bytes, want 2 GiB", *f.Call.Size)
			}
		}
	}
	want := map[string]int{report.DepartExtraCall: 4500, report.DepartOtherSite: 1500}
	for k, v := range want {
		if i, ok := got[k]; !ok || i != v {
			t.Errorf("%s at #%d (found %v), want #%d; differences %v", k, i, ok, v, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("call-sequence differences %v, want %v", got, want)
	}
	if !strings.HasPrefix(d.Headline, "The failing run differs from the good one in: an extra cuMemAlloc_v2 of 2.00 GiB") {
		t.Errorf("headline %q", d.Headline)
	}
}

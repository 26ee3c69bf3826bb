package rundiff

import (
	"strconv"
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

func u64(v uint64) *uint64 { return &v }

func recorded(pid uint32, exe string, args ...string) report.ProcessInfo {
	return report.ProcessInfo{PID: pid, Exe: "/usr/bin/" + exe, Args: append([]string{exe}, args...), Calls: 1}
}

func ranked(p report.ProcessInfo, rank string) report.ProcessInfo {
	p.Env = map[string]string{"RANK": rank}
	return p
}

// usedRow is NVML's per-process row for pid.
func usedRow(pid uint32, peak uint64) report.ViewRow {
	return report.ViewRow{Field: "process used", PID: pid, Peak: u64(peak)}
}

func TestAlignMatchesProcessesByRole(t *testing.T) {
	cases := []struct {
		name      string
		bad, good []report.ProcessInfo
		rows      []report.ViewRow // the failing run's
		want      []string         // "badPID=goodPID/by", "+badPID", "-goodPID"
	}{
		{"same command, other pids", []report.ProcessInfo{recorded(10, "python", "train.py")},
			[]report.ProcessInfo{recorded(20, "python", "train.py")}, nil, []string{"10=20/role"}},
		{"ranks kept apart", []report.ProcessInfo{ranked(recorded(11, "python", "t.py"), "1"), ranked(recorded(10, "python", "t.py"), "0")},
			[]report.ProcessInfo{ranked(recorded(20, "python", "t.py"), "0"), ranked(recorded(21, "python", "t.py"), "1")}, nil,
			[]string{"11=21/role", "10=20/role"}},
		{"arguments differ: matched by executable", []report.ProcessInfo{recorded(10, "python", "--batch", "64")},
			[]report.ProcessInfo{recorded(20, "python", "--batch", "32")}, nil, []string{"10=20/executable"}},
		{"an extra worker", []report.ProcessInfo{recorded(10, "python", "a.py"), recorded(11, "python", "a.py")},
			[]report.ProcessInfo{recorded(20, "python", "a.py")}, nil, []string{"10=20/role", "+11"}},
		{"a process the failing run lacks", []report.ProcessInfo{recorded(10, "python", "a.py")},
			[]report.ProcessInfo{recorded(20, "python", "a.py"), recorded(21, "nccl-helper")}, nil, []string{"10=20/role", "-21"}},
		{"an unrecorded neighbour NVML listed", []report.ProcessInfo{recorded(10, "python", "a.py")},
			[]report.ProcessInfo{recorded(20, "python", "a.py")}, []report.ViewRow{usedRow(99, 6<<30)},
			[]string{"10=20/role", "+99"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bad := &report.Report{Processes: c.bad, MemoryViews: c.rows}
			good := &report.Report{Processes: c.good}
			var got []string
			for _, p := range align(processes(bad), processes(good)) {
				switch {
				case p.good == nil:
					got = append(got, "+"+itoa(p.bad.info.PID))
				case p.bad == nil:
					got = append(got, "-"+itoa(p.good.info.PID))
				default:
					got = append(got, itoa(p.bad.info.PID)+"="+itoa(p.good.info.PID)+"/"+p.by)
				}
			}
			if strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Errorf("aligned %v, want %v", got, c.want)
			}
		})
	}
}

func itoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

// seq builds a sequence of cuMemAlloc_v2 calls of the given sizes in MiB;
// a negative size failed.
func seq(mib ...int64) *Sequence {
	var calls []Call
	for i, m := range mib {
		calls = append(calls, Call{Symbol: 0, HasSize: true, Size: uint64(max(m, -m)) << 20, Failed: m < 0, EndNS: int64(i)})
	}
	return whole(calls)
}

// memRun is a run whose calls are in memory: summarized as Read
// summarizes them, read back by window as the second pass reads them.
func memRun(rep *report.Report, symbols, sites []string, seqs map[uint32]*Sequence) *Run {
	r := &Run{Report: rep, Symbols: symbols, Sites: sites, Procs: map[uint32]*Summary{}}
	for pid, s := range seqs {
		sum := &Summary{}
		for i := 0; i < s.Len(); i++ {
			c := s.At(i)
			site := uint64(0)
			if sites != nil {
				site = textHash(sites[c.Site])
			}
			sum.add(stepHash(textHash(symbols[c.Symbol]), c), site)
		}
		r.Procs[pid] = sum
	}
	r.load = func(want map[uint32][]window) (map[uint32]*Sequence, error) {
		out := map[uint32]*Sequence{}
		for pid, ws := range want {
			all := seqs[pid]
			out[pid] = &Sequence{n: all.Len()}
			for _, w := range merge(ws) {
				sp := span{from: w.from}
				for i := w.from; i < w.to; i++ {
					sp.calls = append(sp.calls, all.At(i))
				}
				out[pid].spans = append(out[pid].spans, sp)
			}
		}
		return out, nil
	}
	return r
}

func TestDepartFindsTheFirstDifferingCall(t *testing.T) {
	names := []string{"cuMemAlloc_v2"}
	cases := []struct {
		name      string
		bad, good *Sequence
		kind      string // "" = none
		b, g      int
	}{
		{"identical", seq(100, 200), seq(100, 200), "", 0, 0},
		{"an extra allocation, then the same steps, the last failing", seq(100, 2048, 500), seq(100, 500), report.DepartExtraCall, 1, -1},
		{"a larger allocation in place", seq(100, 300, 50), seq(100, 200, 50), report.DepartLarger, 1, 1},
		{"a smaller allocation in place", seq(100, 100, 50), seq(100, 200, 60), report.DepartSmaller, 1, 1},
		{"a missing allocation", seq(100, 50, 60), seq(100, 200, 50, 60), report.DepartMissingCall, -1, 1},
		{"more calls at the end", seq(100, 200, 300), seq(100, 200), report.DepartExtraCall, 2, -1},
		{"stopped early", seq(100), seq(100, 200), report.DepartMissingCall, -1, 1},
		{"the same call failed", seq(100, -200, 7), seq(100, 200, 8), report.DepartFailed, 1, 1},
		// The last two steps failed where the good run's succeeded: the
		// one after the first lines up with it, yet nothing is extra.
		{"the same calls failed at the end", seq(100, -200, -200), seq(100, 200, 200), report.DepartFailed, 1, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, ok := depart(c.bad, c.good, 0, names, names)
			if c.kind == "" {
				if ok {
					t.Fatalf("departure %+v in identical sequences", d)
				}
				return
			}
			if !ok || d.kind != c.kind || d.bad != c.b || d.good != c.g {
				t.Errorf("departure %+v (found %v), want %s at %d/%d", d, ok, c.kind, c.b, c.g)
			}
		})
	}
}

func TestRankPutsWhatNoGoodRunHasFirst(t *testing.T) {
	cases := []struct {
		name     string
		explains string
		in       []report.Difference
		want     []string // kinds in order
	}{
		{"unique before shared, whatever the bytes", "framebuffer", []report.Difference{
			{Kind: report.DiffLeastFree, Bytes: 8 << 30, View: "framebuffer"},
			{Kind: report.DiffExtraProcess, Bytes: 1 << 30, View: "framebuffer", Unique: true},
		}, []string{report.DiffExtraProcess, report.DiffLeastFree}},
		{"the failure's view before the other view", "framebuffer", []report.Difference{
			{Kind: report.DiffTracedPeak, Bytes: 8 << 30, View: "bar1", Unique: true},
			{Kind: report.DiffCallSequence, Bytes: 2 << 30, View: "framebuffer", Unique: true},
		}, []string{report.DiffCallSequence, report.DiffTracedPeak}},
		{"more bytes first", "", []report.Difference{
			{Kind: report.DiffTracedPeak, Bytes: 1 << 30, Unique: true},
			{Kind: report.DiffPhaseGrowth, Bytes: 3 << 30, Unique: true},
		}, []string{report.DiffPhaseGrowth, report.DiffTracedPeak}},
		{"equal bytes: causes, then measures, then the rest", "", []report.Difference{
			{Kind: report.DiffLeastFree, Bytes: 2 << 30, Unique: true},
			{Kind: report.DiffCallSequence, Bytes: 2 << 30, Unique: true},
			{Kind: report.DiffPhaseDuration, Unique: true},
			{Kind: report.DiffInventory, Unique: true},
		}, []string{report.DiffCallSequence, report.DiffInventory, report.DiffLeastFree, report.DiffPhaseDuration}},
		{"a cause before a larger measure it shows in", "framebuffer", []report.Difference{
			{Kind: report.DiffLeastFree, Bytes: 7 << 30, View: "framebuffer", Unique: true},
			{Kind: report.DiffTracedPeak, Bytes: 3 << 30, View: "framebuffer", Unique: true},
			{Kind: report.DiffExtraProcess, Bytes: 1 << 30, View: "framebuffer", Unique: true},
		}, []string{report.DiffExtraProcess, report.DiffLeastFree, report.DiffTracedPeak}},
		{"a smaller framebuffer is a cause too", "framebuffer", []report.Difference{
			{Kind: report.DiffLeastFree, Bytes: 40 << 30, View: "framebuffer", Unique: true},
			{Kind: report.DiffInventory, Bytes: 40 << 30, View: "framebuffer", Unique: true},
		}, []string{report.DiffInventory, report.DiffLeastFree}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rank(c.in, c.explains)
			var got []string
			for _, d := range c.in {
				got = append(got, d.Kind)
			}
			if strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Errorf("ranked %v, want %v", got, c.want)
			}
		})
	}
}

// run builds a Run of one process with the given allocation sizes (MiB)
// and, when holding, a neighbour NVML listed.
func run(path string, failed bool, sizes []int64, neighbour uint64) *Run {
	rep := &report.Report{Run: report.RunInfo{Path: path}, Attribution: report.AttrNone,
		Processes: []report.ProcessInfo{recorded(10, "serve", "--port", "80")}}
	if failed {
		rep.Attribution = report.AttrAllocation
	}
	if neighbour > 0 {
		rep.MemoryViews = append(rep.MemoryViews, usedRow(77, neighbour))
	}
	return memRun(rep, []string{"cuMemAlloc_v2"}, nil, map[uint32]*Sequence{10: seq(sizes...)})
}

func TestDiffWithSeveralGoodRuns(t *testing.T) {
	cases := []struct {
		name       string
		runs       []*Run
		wantFirst  string
		wantUnique bool
		wantGood   int
		headline   string
	}{
		{"an extra allocation none of the good runs made", []*Run{
			run("g1", false, []int64{100, 50}, 0), run("g2", false, []int64{100, 50}, 0), run("bad", true, []int64{100, 2048, -50}, 0),
		}, report.DiffCallSequence, true, 2, "The failing run differs from the 2 good ones in: an extra cuMemAlloc_v2 of 2.00 GiB"},
		{"a neighbour one good run also had comes after the unique call", []*Run{
			run("g1", false, []int64{100}, 4<<30), run("g2", false, []int64{100}, 0), run("bad", true, []int64{100, 64}, 4<<30),
		}, report.DiffCallSequence, true, 2, "an extra cuMemAlloc_v2 of 64.0 MiB"},
		{"one good run: a neighbour not recorded", []*Run{
			run("g1", false, []int64{100}, 0), run("bad", true, []int64{-100}, 6<<30),
		}, report.DiffExtraProcess, true, 1, "The failing run differs from the good one in: an extra process 77 holding 6.00 GiB"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := Diff(c.runs)
			if err != nil {
				t.Fatal(err)
			}
			f := d.Differences[0]
			if f.Kind != c.wantFirst || f.Unique != c.wantUnique || f.GoodRuns != c.wantGood {
				t.Errorf("first difference %s unique=%v in %d good runs; want %s unique=%v in %d: %+v",
					f.Kind, f.Unique, f.GoodRuns, c.wantFirst, c.wantUnique, c.wantGood, d.Differences)
			}
			if !strings.Contains(d.Headline, c.headline) {
				t.Errorf("headline %q, want it to say %q", d.Headline, c.headline)
			}
		})
	}
}

func TestFailingPicksTheRunToExplain(t *testing.T) {
	rep := func(attr report.Attribution) *report.Report {
		r := &report.Report{Attribution: attr, Run: report.RunInfo{Path: string(attr) + ".db"}}
		if attr != report.AttrNone && attr != report.AttrMissingEvidence {
			r.FirstFailure = &report.Failure{Symbol: "cuMemAlloc_v2"}
		}
		return r
	}
	none, alloc, missing := report.AttrNone, report.AttrAllocation, report.AttrMissingEvidence
	cases := []struct {
		name   string
		attrs  []report.Attribution
		want   int
		chosen string
		err    string
	}{
		{"the last run, failing", []report.Attribution{none, alloc}, 1, "last", ""},
		{"the last run failing though another did too", []report.Attribution{alloc, none, alloc}, 2, "last", ""},
		{"the only failing run, not last", []report.Attribution{alloc, none, none}, 0, "only-failing", ""},
		{"none failing", []report.Attribution{none, none}, 0, "", "none of the runs"},
		{"several failing, none last", []report.Attribution{alloc, alloc, none}, 0, "", "give the failing run last"},
		{"one run", []report.Attribution{alloc}, 0, "", "at least two runs"},
		{"a failed call before a last run only missing evidence", []report.Attribution{alloc, missing}, 0, "only-failing", ""},
		{"missing evidence when no call failed", []report.Attribution{none, missing}, 1, "last", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var reps []*report.Report
			for _, a := range c.attrs {
				reps = append(reps, rep(a))
			}
			i, chosen, err := Failing(reps)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one saying %q", err, c.err)
				}
				return
			}
			if err != nil || i != c.want || chosen != c.chosen {
				t.Errorf("picked %d (%s, %v), want %d (%s)", i, chosen, err, c.want, c.chosen)
			}
		})
	}
}

// at sets the call sites of a sequence (0: unknown).
func at(calls *Sequence, sites ...int32) *Sequence {
	for i := 0; i < calls.Len(); i++ {
		calls.at(i).Site = sites[i]
	}
	return calls
}

func TestOtherSiteFindsACallFromElsewhere(t *testing.T) {
	// The two runs number their sites apart; the keys say where.
	st := sites{bad: []string{"", "main+10;", "cache+20;"}, good: []string{"", "cache+20;", "main+10;"}}
	cases := []struct {
		name      string
		bad, good *Sequence
		end       int
		want      int // -1: none
	}{
		{"same sites, numbered apart", at(seq(1, 2), 1, 2), at(seq(1, 2), 2, 1), 2, -1},
		{"second call from another site", at(seq(1, 2), 1, 1), at(seq(1, 2), 2, 1), 2, 1},
		{"after the calls depart: not looked at", at(seq(1, 2, 3), 1, 2, 1), at(seq(1, 2, 3), 2, 1, 2), 2, -1},
		{"an unknown site is not a difference", at(seq(1, 2), 1, 0), at(seq(1, 2), 2, 2), 2, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k, ok := otherSite(c.bad, c.good, st, c.end)
			if got := map[bool]int{true: k, false: -1}[ok]; got != c.want {
				t.Errorf("other site at %d, want %d", got, c.want)
			}
		})
	}
}

// traced is a traced framebuffer row with (last, peak) per phase, in GiB.
func traced(phases ...[3]any) report.ViewRow {
	r := report.ViewRow{Field: "traced device allocations", View: "framebuffer", Scope: "traced"}
	for _, p := range phases {
		r.Phases = append(r.Phases, report.PhaseValue{Phase: p[0].(string), Last: u64(uint64(p[1].(int)) << 30), Peak: u64(uint64(p[2].(int)) << 30)})
	}
	return r
}

func TestPhaseGrowthComparesWhatEachPhaseAdded(t *testing.T) {
	good := traced([3]any{"load", 6, 6}, [3]any{"serving", 9, 9})
	cases := []struct {
		name string
		bad  report.ViewRow
		want map[string]uint64 // phase -> extra growth in GiB
	}{
		{"the same growth", traced([3]any{"load", 6, 6}, [3]any{"serving", 9, 9}), map[string]uint64{}},
		{"2 GiB more while serving", traced([3]any{"load", 6, 6}, [3]any{"serving", 11, 11}), map[string]uint64{"serving": 2}},
		{"more weights, the same growth after", traced([3]any{"load", 8, 8}, [3]any{"serving", 11, 11}), map[string]uint64{"load": 2}},
		{"a transient peak counts", traced([3]any{"load", 6, 7}, [3]any{"serving", 9, 9}), map[string]uint64{"load": 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bad, g := c.bad, good
			got := map[string]uint64{}
			for _, cd := range growthDiffs(rowKey{0, bad.Field}, &bad, &g) {
				got[cd.d.Phase] = cd.d.Bytes >> 30
			}
			if len(got) != len(c.want) {
				t.Fatalf("growth differences %v, want %v", got, c.want)
			}
			for p, v := range c.want {
				if got[p] != v {
					t.Errorf("phase %s: %d GiB more, want %d", p, got[p], v)
				}
			}
		})
	}
}

package html

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// The chosen run of the test jobs: rank 1 on host b, recorded for 60 s
// from wall time w0 with a ±2 ms clock, its first failure 50 s in (wall
// time wF).
const (
	w0     = int64(1_800_000_000) * 1e9
	wF     = w0 + 50e9
	ms     = int64(1e6)
	runDur = int64(60e9)
)

func i64(v int64) *int64 { return &v }

// runRef is a run of a test job: rank, host, boot, clock bound (nil: none)
// and its recording from w0+off for runDur.
func runRef(rank int, host, boot string, bound *int64, off int64) report.RunRef {
	return report.RunRef{Path: "job/" + host + ".db", RunID: "id-" + host, Host: host, BootID: boot, Rank: intp(rank),
		Attribution: report.AttrMissingEvidence, ClockErrorNS: bound, WallStartNS: w0 + off, WallEndNS: w0 + off + runDur}
}

// jobReport is the chosen run's report with m attached.
func jobReport(m *report.MultiRun) *report.Report {
	rep := &report.Report{Attribution: report.AttrAllocation, Verdict: "rank 1 ran out of memory.",
		Run: report.RunInfo{Path: "job/b.db", StartNS: 1e9, WallStartNS: w0, DurationNS: runDur, ClockErrorNS: i64(2 * ms),
			Rank: intp(1), WorldSize: m.WorldSize},
		FirstFailure: &report.Failure{RunPath: "job/b.db", Rank: intp(1), Symbol: "cuMemAlloc_v2", ResultName: "CUDA_ERROR_OUT_OF_MEMORY",
			TimeNS: 1e9 + 50e9},
		MultiRun: m}
	return rep
}

func judged(symbol string, a report.Attribution) *report.Judged {
	return &report.Judged{Failure: report.Failure{Symbol: symbol, ResultName: "CUDA_ERROR_OUT_OF_MEMORY"}, Attribution: a,
		Verdict: "its own story"}
}

// The four test jobs: a certain order (one consequence over two boots,
// one on the first's boot), an uncertain one whose intervals overlap, one
// where a run has no clock bound, and a job with ranks missing.
func testJobs() map[string]*report.Report {
	certain := &report.MultiRun{Order: "certain", WorldSize: intp(4), MissingRanks: []int{3},
		Runs: []report.RunRef{runRef(0, "a", "boot-a", i64(ms), -1e9), runRef(1, "b", "boot-b", i64(2*ms), 0),
			runRef(2, "c", "boot-b", nil, 2e9)},
		Consequences: []report.Consequence{
			// a's failure at wF+30 ms ±1 ms, after wF ±2 ms: 27 to 33 ms later.
			{RunPath: "job/a.db", Rank: intp(0), Host: "a", Symbol: "cuMemAlloc_v2", ResultName: "CUDA_ERROR_UNKNOWN",
				DelayMinNS: 27 * ms, DelayMaxNS: 33 * ms},
			{RunPath: "job/c.db", Rank: intp(2), Host: "c", Symbol: "cuMemAlloc_v2", ResultName: "CUDA_ERROR_UNKNOWN",
				DelayMinNS: 100 * ms, DelayMaxNS: 100 * ms, Exact: true},
		}}
	overlap := &report.MultiRun{Order: "uncertain", WorldSize: intp(3), MissingRanks: []int{},
		Runs: []report.RunRef{runRef(0, "a", "boot-a", i64(ms), -1e9), runRef(1, "b", "boot-b", i64(2*ms), 0),
			runRef(2, "c", "boot-b", i64(2*ms), 2e9)},
		Candidates: []report.Candidate{
			{RunPath: "job/b.db", Rank: intp(1), Host: "b", WallNS: i64(wF), EarliestNS: i64(wF - 2*ms), LatestNS: i64(wF + 2*ms),
				Unordered: []report.Unordered{{RunPath: "job/a.db", Reason: "overlap", OverlapNS: i64(2 * ms)}},
				Judged:    judged("cuMemAlloc_v2", report.AttrAllocation)},
			{RunPath: "job/a.db", Rank: intp(0), Host: "a", WallNS: i64(wF + ms), EarliestNS: i64(wF), LatestNS: i64(wF + 2*ms),
				Unordered: []report.Unordered{}, Judged: judged("cuMemMap", report.AttrMapping)},
		},
		Consequences: []report.Consequence{{RunPath: "job/c.db", Rank: intp(2), Host: "c", Symbol: "cuMemAlloc_v2",
			ResultName: "CUDA_ERROR_UNKNOWN", DelayMinNS: 100 * ms, DelayMaxNS: 100 * ms, Exact: true}}}
	noBound := &report.MultiRun{Order: "uncertain", MissingRanks: []int{},
		Runs: []report.RunRef{runRef(0, "a", "boot-a", nil, -1e9), runRef(1, "b", "boot-b", i64(2*ms), 0)},
		Candidates: []report.Candidate{
			{RunPath: "job/b.db", Rank: intp(1), Host: "b", WallNS: i64(wF), EarliestNS: i64(wF - 2*ms), LatestNS: i64(wF + 2*ms),
				Unordered: []report.Unordered{{RunPath: "job/a.db", Reason: "no-clock-bound"}},
				Judged:    judged("cuMemAlloc_v2", report.AttrAllocation)},
			{RunPath: "job/a.db", Rank: intp(0), Host: "a", WallNS: i64(wF + 5*ms), Unordered: []report.Unordered{},
				Judged: judged("cuMemAlloc_v2", report.AttrAllocation)},
		}}
	missing := &report.MultiRun{Order: "certain", WorldSize: intp(8), MissingRanks: []int{2, 3, 4, 6, 7},
		Runs: []report.RunRef{runRef(5, "f", "boot-f", i64(ms), 0), runRef(1, "b", "boot-b", i64(2*ms), 0),
			runRef(0, "a", "boot-a", i64(ms), 0)},
		Candidates: []report.Candidate{}, Consequences: []report.Consequence{}}
	return map[string]*report.Report{"certain": jobReport(certain), "overlap": jobReport(overlap),
		"no bound": jobReport(noBound), "missing ranks": jobReport(missing)}
}

// placed is a failure's place in test terms: role, estimate and interval
// relative to wF (ms), bounded, exact.
type placed struct {
	role           string
	at, lo, hi     int64
	bounded, exact bool
}

func TestPlaceFailures(t *testing.T) {
	jobs := testJobs()
	for _, tc := range []struct {
		job  string
		want map[string]placed
	}{
		{"certain", map[string]placed{
			"job/b.db": {roleFirst, 0, -2, 2, true, false},
			// the middle of 27..33 ms, its own ±1 ms
			"job/a.db": {roleConsequence, 30, 29, 31, true, false},
			// exact on the first's clock, no bound of its own
			"job/c.db": {roleConsequence, 100, 0, 0, false, true}}},
		{"overlap", map[string]placed{
			"job/b.db": {roleFirst, 0, -2, 2, true, false},
			"job/a.db": {roleCandidate, 1, 0, 2, true, false},
			"job/c.db": {roleConsequence, 100, 98, 102, true, true}}},
		{"no bound", map[string]placed{
			"job/b.db": {roleFirst, 0, -2, 2, true, false},
			"job/a.db": {roleCandidate, 5, 0, 0, false, false}}},
		{"missing ranks", map[string]placed{
			"job/b.db": {roleFirst, 0, -2, 2, true, false}}},
	} {
		got := map[string]placed{}
		for path, p := range placeFailures(jobs[tc.job]) {
			q := placed{role: p.Role, at: (p.WallNS - wF) / ms, bounded: p.Bounded, exact: p.Exact}
			if p.Bounded {
				q.lo, q.hi = (p.Lo-wF)/ms, (p.Hi-wF)/ms
			}
			got[path] = q
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: placed %+v\nwant %+v", tc.job, got, tc.want)
		}
	}
	if n := len(placeFailures(&report.Report{})); n != 0 {
		t.Errorf("a report on one run places %d failures", n)
	}
}

// rowView is a row of the picture in test terms.
type rowView struct {
	name, empty, fail, label string
	interval, chosen         bool
}

func TestNewRunsPicture(t *testing.T) {
	jobs := testJobs()
	for _, tc := range []struct {
		job    string
		rows   []rowView
		panels int
		bands  int
		notes  []string
	}{
		{"certain", []rowView{
			{name: "rank 0 · a", fail: roleConsequence, label: "+27 ms to 33 ms", interval: true},
			{name: "rank 1 · b", fail: roleFirst, label: "first", interval: true, chosen: true},
			{name: "rank 2 · c", fail: roleConsequence, label: "+100 ms"},
			{name: "rank 3", empty: "no run"},
		}, 2, 0, []string{"1 failure from runs with no clock error bound", "Runs of one boot share one clock"}},
		{"overlap", []rowView{
			{name: "rank 0 · a", fail: roleCandidate, label: "could have come first", interval: true},
			{name: "rank 1 · b", fail: roleFirst, label: "earliest estimate", interval: true, chosen: true},
			{name: "rank 2 · c", fail: roleConsequence, label: "+100 ms", interval: true},
		}, 2, 1, []string{"Runs of one boot share one clock"}},
		{"no bound", []rowView{
			{name: "rank 0 · a", fail: roleCandidate, label: "could have come first · no clock bound"},
			{name: "rank 1 · b", fail: roleFirst, label: "earliest estimate", interval: true, chosen: true},
		}, 2, 0, []string{"1 failure from runs with no clock error bound"}},
		{"missing ranks", []rowView{
			{name: "rank 0 · a"},
			{name: "rank 1 · b", fail: roleFirst, label: "first", interval: true, chosen: true},
			{name: "ranks 2–4", empty: "no run"},
			{name: "rank 5 · f"},
			{name: "ranks 6–7", empty: "no run"},
		}, 1, 0, nil},
	} {
		rep := jobs[tc.job]
		pic, notes := newRunsPicture(rep, placeFailures(rep))
		if pic == nil || len(pic.Panels) != tc.panels {
			t.Fatalf("%s: picture %+v, want %d panels", tc.job, pic, tc.panels)
		}
		for k, p := range pic.Panels {
			var rows []rowView
			for _, r := range p.Rows {
				rows = append(rows, viewOfRow(r))
			}
			if !reflect.DeepEqual(rows, tc.rows) {
				t.Errorf("%s, panel %d: rows\n%+v\nwant\n%+v", tc.job, k, rows, tc.rows)
			}
			if len(p.Bands) != tc.bands {
				t.Errorf("%s, panel %d: %d overlap bands, want %d", tc.job, k, len(p.Bands), tc.bands)
			}
			checkPanelGeometry(t, tc.job, p, pic.H)
		}
		if len(notes) != len(tc.notes) {
			t.Errorf("%s: notes %q, want %d", tc.job, notes, len(tc.notes))
		}
		for i, want := range tc.notes {
			if i < len(notes) && !strings.HasPrefix(notes[i], want) {
				t.Errorf("%s: note %q, want %q…", tc.job, notes[i], want)
			}
		}
	}
}

func viewOfRow(r runsRow) rowView {
	v := rowView{name: r.Name.Text, chosen: r.Chosen}
	if r.Empty != nil {
		v.empty = r.Empty.Text
	}
	if f := r.Fail; f != nil {
		v.fail, v.interval = f.Class, f.Interval != nil
		if f.Label != nil {
			v.label = f.Label.Text
		}
	}
	return v
}

// checkPanelGeometry: everything drawn lies inside the picture, each
// failure's mark inside its interval and its row, and an overlap band
// inside the intervals it joins.
func checkPanelGeometry(t *testing.T, job string, p runsPanel, h coord) {
	t.Helper()
	if p.Bottom > h || p.GridY1 >= p.GridY2 || len(p.Ticks) < 3 {
		t.Errorf("%s: panel bottom %v of %v, grid %v..%v, %d ticks", job, p.Bottom, h, p.GridY1, p.GridY2, len(p.Ticks))
	}
	for _, r := range p.Rows {
		if s := r.Span; s != nil && (s.X < svgLeft || s.Right() > svgLeft+plotW+0.1 || s.Y < r.Band.Y || s.Y+s.H > r.Band.Y+r.Band.H) {
			t.Errorf("%s: %s's recording %+v leaves the plot or its row %+v", job, r.Name.Text, s.box, r.Band)
		}
		f := r.Fail
		if f == nil {
			continue
		}
		if f.Y1 < r.Band.Y || f.Y2 > r.Band.Y+r.Band.H || f.X < svgLeft || f.X > svgLeft+plotW {
			t.Errorf("%s: %s's failure mark at %v, %v..%v leaves its row %+v", job, r.Name.Text, f.X, f.Y1, f.Y2, r.Band)
		}
		if i := f.Interval; i != nil && (f.X < i.X-0.1 || f.X > i.Right()+0.1) {
			t.Errorf("%s: %s's estimate %v lies outside its interval %+v", job, r.Name.Text, f.X, *i)
		}
	}
	for _, b := range p.Bands {
		for _, r := range p.Rows {
			if f := r.Fail; f != nil && f.Interval != nil && (f.Class == roleFirst || f.Class == roleCandidate) &&
				(b.X < f.Interval.X-0.1 || b.Right() > f.Interval.Right()+0.1) {
				t.Errorf("%s: overlap %+v is not inside %s's interval %+v", job, b.box, r.Name.Text, *f.Interval)
			}
		}
	}
}

func TestNewRuns(t *testing.T) {
	if v := newRuns(&report.Report{}); v != nil {
		t.Errorf("a report on one run has a Runs section: %+v", v)
	}
	jobs := testJobs()
	for _, tc := range []struct {
		job          string
		order        string
		roles        []string // each run's failure, as the runs table says it (the failing run first)
		bounds       []string
		missing      string
		candidates   []string // rank: call, own attribution, unordered
		consequences []string // rank: delay (how)
	}{
		{"certain", "b-none",
			[]string{"first: cuMemAlloc_v2 OUT_OF_MEMORY", "cuMemAlloc_v2 UNKNOWN, 27 ms to 33 ms after the first",
				"cuMemAlloc_v2 UNKNOWN, 100 ms after the first"},
			[]string{"±2 ms", "±1 ms", "no bound"}, "rank 3 of the job's 4 has no run", nil,
			[]string{"rank 0: 27 ms to 33 ms later (a range: the wall clocks' error bounds)",
				"rank 2: 100 ms later (exact: one boot, one clock)"}},
		{"overlap", "b-missing",
			[]string{"earliest estimate of those that could have come first: cuMemAlloc_v2 OUT_OF_MEMORY",
				"could have come first: cuMemMap OUT_OF_MEMORY",
				"cuMemAlloc_v2 UNKNOWN, 100 ms after the first"},
			[]string{"±2 ms", "±1 ms", "±2 ms"}, "",
			[]string{"rank 1: cuMemAlloc_v2 → CUDA_ERROR_OUT_OF_MEMORY, allocation, [job/a.db: their clock intervals overlap by 2 ms]",
				"rank 0: cuMemMap → CUDA_ERROR_OUT_OF_MEMORY, mapping, [job/b.db (the earliest estimate): their clock intervals overlap by 2 ms]"},
			[]string{"rank 2: 100 ms later (exact: one boot, one clock)"}},
		{"no bound", "b-missing",
			[]string{"earliest estimate of those that could have come first: cuMemAlloc_v2 OUT_OF_MEMORY",
				"could have come first: cuMemAlloc_v2 OUT_OF_MEMORY"},
			[]string{"±2 ms", "no bound"}, "",
			[]string{"rank 1: cuMemAlloc_v2 → CUDA_ERROR_OUT_OF_MEMORY, allocation, [job/a.db: a clock with no error bound]",
				"rank 0: cuMemAlloc_v2 → CUDA_ERROR_OUT_OF_MEMORY, allocation, [job/b.db (the earliest estimate): a clock with no error bound]"}, nil},
		{"missing ranks", "b-none", []string{"first: cuMemAlloc_v2 OUT_OF_MEMORY", "no failed call", "no failed call"},
			[]string{"±2 ms", "±1 ms", "±1 ms"}, "ranks 2–4, 6–7 of the job's 8 have no run", nil, nil},
	} {
		v := newRuns(jobs[tc.job])
		var roles, bounds, cands, cons []string
		for _, r := range v.Runs {
			roles, bounds = append(roles, r.Failure), append(bounds, r.Bound)
		}
		for _, c := range v.Candidates {
			cands = append(cands, fmt.Sprintf("%s: %s → %s, %s, %v", c.Rank, c.Symbol, c.Result, c.Judgement.Attribution, c.Unordered))
		}
		for _, c := range v.Consequences {
			cons = append(cons, fmt.Sprintf("%s: %s (%s)", c.Rank, c.Delay, c.How))
		}
		got := []any{v.OrderClass, roles, bounds, cands, cons}
		want := []any{tc.order, tc.roles, tc.bounds, tc.candidates, tc.consequences}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.job, got, want)
		}
		if !strings.HasPrefix(v.Missing, tc.missing) || (tc.missing == "") != (v.Missing == "") {
			t.Errorf("%s: missing %q, want %q…", tc.job, v.Missing, tc.missing)
		}
		if !strings.Contains(v.Chosen, "rank 1's run (host b), job/b.db") {
			t.Errorf("%s: %q does not say which run the page shows", tc.job, v.Chosen)
		}
	}
}

func TestRankRanges(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{[]int{3}, "rank 3"},
		{[]int{7, 2, 3, 4, 9}, "ranks 2–4, 7, 9"},
		{[]int{0, 1}, "ranks 0–1"},
		{[]int{5, 5}, "rank 5"},
	} {
		if got := rankRanges(tc.in); got != tc.want {
			t.Errorf("rankRanges(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Runs with no failure, runs without a wall time, and a job of many
// ranks: the section says so, and the picture still holds together.
func TestRunsEdges(t *testing.T) {
	none := jobReport(&report.MultiRun{Order: "none", Runs: []report.RunRef{runRef(0, "a", "boot-a", nil, 0), runRef(1, "b", "boot-b", nil, 0)}})
	none.FirstFailure = nil
	v := newRuns(none)
	if v.Picture == nil || len(v.Picture.Panels) != 1 || v.Runs[0].Failure != "no failed call" || v.Runs[1].Failure != "no failed call" ||
		!strings.Contains(v.Chosen, "no run failed") {
		t.Errorf("no failure: %d panels, %q, %q, %q", len(v.Picture.Panels), v.Runs[0].Failure, v.Runs[1].Failure, v.Chosen)
	}
	for _, r := range v.Picture.Panels[0].Rows {
		if r.Fail != nil {
			t.Errorf("no failure: %s has a failure mark", r.Name.Text)
		}
	}

	old := testJobs()["certain"]
	for i := range old.Runs {
		if old.Runs[i].Path != old.Run.Path {
			old.Runs[i].WallStartNS, old.Runs[i].WallEndNS = 0, 0
		}
	}
	pic, notes := newRunsPicture(old, placeFailures(old))
	if pic == nil || len(notes) == 0 || !strings.Contains(notes[len(notes)-1], "recorded no wall-clock time") {
		t.Errorf("runs without a wall time: notes %q", notes)
	}
	old.Run.WallStartNS = 0
	for i := range old.Runs {
		old.Runs[i].WallStartNS, old.Runs[i].WallEndNS = 0, 0
	}
	if pic, notes := newRunsPicture(old, placeFailures(old)); pic != nil || len(notes) != 1 {
		t.Errorf("no wall time at all: picture %v, notes %q", pic != nil, notes)
	}

	many := &report.MultiRun{Order: "certain", WorldSize: intp(512), Consequences: []report.Consequence{}}
	for k := range 100 {
		many.Runs = append(many.Runs, runRef(k, fmt.Sprintf("n%03d", k), "boot", i64(ms), int64(k)*ms))
		if k > 1 {
			many.Consequences = append(many.Consequences, report.Consequence{RunPath: many.Runs[k].Path, Rank: intp(k),
				DelayMinNS: int64(k) * ms, DelayMaxNS: int64(k) * ms, Exact: true})
		}
	}
	many.Runs[1].Path = "job/b.db"
	for k := 100; k < 512; k++ {
		many.MissingRanks = append(many.MissingRanks, k)
	}
	rep := jobReport(many)
	pic, _ = newRunsPicture(rep, placeFailures(rep))
	rows := pic.Panels[0].Rows
	if len(rows) != 101 || !rows[0].Dense || rows[100].Name.Text != "ranks 100–511" {
		t.Fatalf("many ranks: %d rows, dense %v, last %q", len(rows), rows[0].Dense, rows[len(rows)-1].Name.Text)
	}
	for _, r := range rows {
		if f := r.Fail; f != nil && (f.Label != nil) != (f.Class == roleFirst) {
			t.Errorf("many ranks: %s's failure labelled %v: dense rows label only the first", r.Name.Text, f.Label != nil)
		}
	}
	for _, p := range pic.Panels {
		checkPanelGeometry(t, "many ranks", p, pic.H)
	}
}

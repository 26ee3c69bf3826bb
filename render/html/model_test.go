package html

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

func u64(v uint64) *uint64 { return &v }
func intp(v int) *int      { return &v }

func capp(c report.Capacity) *report.Capacity { return &c }

// testClock starts at 1 s on the run clock, at a known wall time.
func testClock(t *testing.T) clock {
	t.Helper()
	return newClock(&report.RunInfo{StartNS: 1_000_000_000, WallStart: "2026-03-14T09:26:53.5Z"})
}

func TestClock(t *testing.T) {
	for _, tc := range []struct {
		name, wallStart string
		t               int64
		rel, wall       string
	}{
		{"with a wall time", "2026-03-14T09:26:53.5Z", 2_250_000_000, "+1.250 s", "09:26:54.750000"},
		{"before the start", "2026-03-14T09:26:53.5Z", 500_000_000, "-0.500 s", "09:26:53.000000"},
		{"zero wall time", "0001-01-01T00:00:00Z", 2_000_000_000, "+1.000 s", ""},
		{"no wall time", "", 2_000_000_000, "+1.000 s", ""},
		{"unreadable wall time", "yesterday", 2_000_000_000, "+1.000 s", ""},
	} {
		c := newClock(&report.RunInfo{StartNS: 1_000_000_000, WallStart: tc.wallStart})
		if got := c.rel(tc.t); got != tc.rel {
			t.Errorf("%s: rel = %q, want %q", tc.name, got, tc.rel)
		}
		if got := c.at(tc.t, wallShort); got != tc.wall {
			t.Errorf("%s: at = %q, want %q", tc.name, got, tc.wall)
		}
	}
}

func TestNewHeader(t *testing.T) {
	ff := &report.Failure{Symbol: "cuMemAlloc_v2", ResultName: "CUDA_ERROR_OUT_OF_MEMORY"}
	code := 1
	for _, tc := range []struct {
		name                      string
		rep                       report.Report
		head, what, ended, interr string
	}{
		{"failure", report.Report{FirstFailure: ff, Attribution: report.AttrAllocation,
			Run: report.RunInfo{Mode: "spawn", Command: []string{"python3", "train.py"}, Ended: "clean", StopReason: "workload-exited",
				WorkloadExit: &report.Exit{Code: &code}}},
			"cuMemAlloc_v2 → CUDA_ERROR_OUT_OF_MEMORY", "python3 train.py", "clean (workload-exited), workload exit status 1", ""},
		{"no failure, evidence missing", report.Report{Attribution: report.AttrMissingEvidence,
			Run: report.RunInfo{Mode: "pid", TargetPID: 77, Ended: "abrupt"}},
			"No recorded call failed, but evidence is missing", "pid 77", "abrupt", ""},
		{"interrupted", report.Report{Attribution: report.AttrNone,
			Run: report.RunInfo{Mode: "all", Ended: "clean", StopReason: "signal", Interrupted: "SIGINT"}},
			"No recorded call failed", "all", "clean (signal)",
			"interrupted by SIGINT: stopped by the user or forensic, not a crash"},
	} {
		h := newHeader(&tc.rep, testClock(t))
		if h.Head != tc.head || h.What != tc.what || h.Ended != tc.ended || h.Interrupted != tc.interr {
			t.Errorf("%s: header %q / %q / %q / %q, want %q / %q / %q / %q", tc.name, h.Head, h.What, h.Ended, h.Interrupted,
				tc.head, tc.what, tc.ended, tc.interr)
		}
	}
}

// A flight recording's header says so, with its segments and what
// retention deleted; a run.db's says nothing of segments.
func TestNewHeaderFlight(t *testing.T) {
	for _, tc := range []struct {
		name               string
		flight             *report.FlightRead
		recorded, segments string
		deleted, notRead   string
	}{
		{"a run.db", nil, "spawn mode", "", "", ""},
		{"flight, closed", &report.FlightRead{SegmentsRead: 5, Live: "none", DroppedRanges: 2, DroppedCalls: 1234},
			"flight mode (spawn)", "5 segments read", "2 stretches deleted by retention to keep the recording within its size bound (1234 call events)", ""},
		{"flight, live", &report.FlightRead{SegmentsRead: 3, Live: "copy", LiveTaken: "2026-03-14T09:30:00Z",
			NotRead: []string{"segments/00000002.db: no such file"}},
			"flight mode (spawn)", "3 segments read, the live one from a copy its recorder made at 2026-03-14T09:30:00Z",
			"nothing: every stretch recorded is still on disk", "segments/00000002.db: no such file"},
	} {
		rep := report.Report{Run: report.RunInfo{Mode: "spawn", Flight: tc.flight}}
		h := newHeader(&rep, testClock(t))
		if !strings.HasPrefix(h.Recorded, tc.recorded) {
			t.Errorf("%s: recorded %q, want %q", tc.name, h.Recorded, tc.recorded)
		}
		if tc.flight == nil {
			if h.Flight != nil {
				t.Errorf("%s: flight %+v", tc.name, h.Flight)
			}
			continue
		}
		f := h.Flight
		if f == nil || f.Segments != tc.segments || f.Deleted != tc.deleted || (tc.notRead != "" && (len(f.NotRead) != 1 || f.NotRead[0] != tc.notRead)) {
			t.Errorf("%s: flight %+v", tc.name, f)
		}
	}
}

// What the page shows people: the capacity of a run without a failure,
// how a CUDA device was matched, each process's scope, in words, each
// once; never a JSON null or a method's id.
func TestWordsNotIDs(t *testing.T) {
	if j := newJudgement("Verdict", report.AttrNone, nil, ""); j.Capacity != "none (no failure)" {
		t.Errorf("capacity without a failure: %q", j.Capacity)
	}
	f := report.Failure{Symbol: "cuMemAlloc_v2", GPUMapping: "single-gpu", GPUIndex: intp(0)}
	if v := newFailureView("First failure", &f, nil, testClock(t)); v.Mapping != "the only GPU" {
		t.Errorf("mapping %q", v.Mapping)
	}
	ps := newProcesses([]report.ProcessInfo{{PID: 7, Devices: []report.DeviceMap{
		{Ordinal: 0, GPU: intp(1), Method: "order-same-model"}, {Ordinal: 1, Method: "unknown", Why: "ordinal 1 but 1 GPUs visible"}}}}, testClock(t))
	want := []string{"CUDA 0 → GPU 1 (matched on identical GPUs in NVML order)", "CUDA 1 → unknown (not matched): ordinal 1 but 1 GPUs visible"}
	if !reflect.DeepEqual(ps[0].Devices, want) {
		t.Errorf("devices %q, want %q", ps[0].Devices, want)
	}
	for _, tc := range []struct {
		row  report.ViewRow
		want string
	}{
		{report.ViewRow{Scope: "pid 42", PID: 42}, "pid 42"},
		{report.ViewRow{Scope: "process", PID: 42}, "process, pid 42"},
		{report.ViewRow{Scope: "traced MIG 1", MIGIndex: intp(1)}, "traced MIG 1"},
		{report.ViewRow{Scope: "MIG 0", PID: 7, MIGIndex: intp(0)}, "MIG 0, pid 7"},
		{report.ViewRow{Scope: "pid 421", PID: 42}, "pid 421, pid 42"},
		{report.ViewRow{Scope: "device"}, "device"},
	} {
		if got := scopeText(&tc.row); got != tc.want {
			t.Errorf("scope of %+v: %q, want %q", tc.row, got, tc.want)
		}
	}
}

func TestJobText(t *testing.T) {
	for _, tc := range []struct {
		name string
		rep  report.Report
		want string
	}{
		{"no job", report.Report{}, ""},
		{"a rank", report.Report{Run: report.RunInfo{Rank: intp(3), WorldSize: intp(8), JobID: "4711"}}, "rank 3 of 8, job 4711"},
		{"several runs", report.Report{Run: report.RunInfo{Rank: intp(1)}, MultiRun: &report.MultiRun{Runs: make([]report.RunRef, 3)}},
			"rank 1, 3 runs analyzed together (see Runs)"},
	} {
		if got := jobText(&tc.rep); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestNewEvidence(t *testing.T) {
	ev := []report.Evidence{
		{Field: "result", Text: "CUDA_ERROR_OUT_OF_MEMORY", Unit: "CUresult", Status: "recorded", TimeNS: 2_000_000_000,
			Rule: "attribution-by-result-code"},
		{Field: "request size", Value: u64(24 << 30), Unit: "bytes", Status: "recorded", TimeNS: 2_000_000_000},
		{Field: "framebuffer free at the failure", Value: u64(20937965568), Unit: "bytes", Status: "NVML_SUCCESS",
			TimeNS: 2_000_700_000, GPU: intp(0), Scope: "device", Rule: "reference-sample", Decisive: true},
		{Field: "allocations", Value: u64(6), Unit: "allocations", Text: "of this process", Status: "NVML_ERROR_NOT_SUPPORTED",
			TimeNS: 2_000_000_000},
		{Field: "framebuffer free, reconciled", Value: u64(1 << 30), Unit: "bytes", Text: "1 GiB after 2 frees",
			Status: "recorded"},
	}
	v := newEvidence(ev, testClock(t))
	if !v.Decisive {
		t.Error("the view does not say that a value was decisive")
	}
	var fields []string
	for _, r := range v.Rows {
		fields = append(fields, r.Field)
	}
	wantOrder := []string{"framebuffer free at the failure", "result", "request size", "allocations", "framebuffer free, reconciled"}
	if !reflect.DeepEqual(fields, wantOrder) {
		t.Errorf("rows in order %q, want the decisive one first, the rest as given: %q", fields, wantOrder)
	}
	for _, tc := range []struct {
		row                              int
		value, detail, status, gpu, rule string
		code, decisive                   bool
	}{
		{0, "19.50 GiB", "20937965568 bytes", "ok", "0", "reference-sample", false, true},
		{1, "CUDA_ERROR_OUT_OF_MEMORY", "", "ok", "", "attribution-by-result-code", true, false},
		{2, "24.00 GiB", "25769803776 bytes", "ok", "", "", false, false},
		{3, "6 allocations", "of this process", "warn", "", "", false, false},
		{4, "1.00 GiB", "1 GiB after 2 frees (1073741824 bytes)", "ok", "", "", false, false},
	} {
		r := v.Rows[tc.row]
		got := []any{r.Value, r.Detail, r.StatusClass, r.GPU, r.Rule, r.Code, r.Decisive}
		want := []any{tc.value, tc.detail, tc.status, tc.gpu, tc.rule, tc.code, tc.decisive}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("row %d (%s): %v, want %v", tc.row, r.Field, got, want)
		}
	}
	if v.Rows[0].Time != "+1.001 s" || v.Rows[4].Time != "" {
		t.Errorf("times %q and %q, want +1.001 s and none for a finding without a time", v.Rows[0].Time, v.Rows[4].Time)
	}
	if r := v.Rows[0]; r.RuleLine != ruleLine("reference-sample") || r.RuleLine == "" || v.Rows[2].RuleLine != "" {
		t.Errorf("rule lines %q and %q, want the named rule's and none", r.RuleLine, v.Rows[2].RuleLine)
	}
	var legend []string
	for _, r := range v.Rules {
		legend = append(legend, r.Name)
	}
	if want := []string{"attribution-by-result-code", "reference-sample"}; !reflect.DeepEqual(legend, want) {
		t.Errorf("legend %q, want %q", legend, want)
	}
	if n := len(newEvidence(nil, testClock(t)).Rows); n != 0 {
		t.Errorf("%d rows without evidence", n)
	}
}

func TestNewVerdict(t *testing.T) {
	first := report.Failure{Symbol: "cuMemAlloc_v2", Operation: "allocation", ResultName: "CUDA_ERROR_OUT_OF_MEMORY",
		PID: 10, TID: 11, TimeNS: 2_000_000_000, Recovered: true, Size: u64(1 << 30)}
	later := report.Failure{Symbol: "cuIpcOpenMemHandle_v2", Operation: "mapping", ResultName: "CUDA_ERROR_MAP_FAILED",
		PID: 10, TID: 12, TimeNS: 3_000_000_000, Size: u64(2 << 20), SizeSource: "the exporter's cuMemAlloc_v2 (pid 9)",
		ApertureGPU: intp(1), Grants: []report.Grant{{Location: "device", CUDADevice: 1, GPU: intp(1), Access: "read-write", Peer: true}}}
	for _, tc := range []struct {
		name        string
		rep         report.Report
		firstTitle  string
		unrecovered bool
	}{
		{"no failure", report.Report{Attribution: report.AttrNone, Verdict: "No recorded call failed."}, "", false},
		{"not recovered", report.Report{Attribution: report.AttrAllocation, Capacity: capp(report.CapFBExhausted),
			FirstFailure: &later}, "First failure", false},
		{"recovered, then an unrecovered one", report.Report{Attribution: report.AttrAllocation,
			Capacity: capp(report.CapFBHadRoom), FirstFailure: &first, NextSteps: []string{"check the IPC exporter"},
			FirstUnrecovered: &report.Judged{Failure: later, Attribution: report.AttrMapping, Capacity: capp(report.CapBAR1Exhausted),
				Verdict:  "The first unrecovered failure is a mapping problem.",
				Evidence: []report.Evidence{{Field: "BAR1 free", Value: u64(1 << 20), Unit: "bytes", Decisive: true}}}},
			"First failure (recovered)", true},
	} {
		v := newVerdict(&tc.rep, testClock(t))
		if v.Judgement.Label != "Verdict" || v.Judgement.Attribution != string(tc.rep.Attribution) {
			t.Errorf("%s: judgement %+v", tc.name, v.Judgement)
		}
		switch {
		case tc.firstTitle == "" && v.First != nil:
			t.Errorf("%s: a first failure is shown", tc.name)
		case tc.firstTitle != "" && (v.First == nil || v.First.Title != tc.firstTitle):
			t.Errorf("%s: first failure %+v, want the title %q", tc.name, v.First, tc.firstTitle)
		}
		if (v.Unrecovered != nil) != tc.unrecovered {
			t.Fatalf("%s: unrecovered shown %v, want %v", tc.name, v.Unrecovered != nil, tc.unrecovered)
		}
		if !reflect.DeepEqual(v.NextSteps, tc.rep.NextSteps) {
			t.Errorf("%s: next steps %q", tc.name, v.NextSteps)
		}
		if u := v.Unrecovered; u != nil {
			j := u.Judgement
			if j.Label != "First unrecovered failure" || j.Attribution != "mapping" || j.Capacity != "bar1-exhausted" ||
				j.Class != "map" || j.Text != tc.rep.FirstUnrecovered.Verdict {
				t.Errorf("%s: unrecovered judgement %+v", tc.name, j)
			}
			f := u.Failure
			if f.SizeSource != later.SizeSource || len(f.Grants) != 1 || !strings.Contains(f.Grants[0], "GPU 1") ||
				!strings.Contains(f.Grants[0], "BAR1") || !strings.Contains(f.Aperture, "GPU 1") {
				t.Errorf("%s: unrecovered failure %+v", tc.name, f)
			}
			if len(u.Evidence.Rows) != 1 || !u.Evidence.Decisive {
				t.Errorf("%s: unrecovered evidence %+v", tc.name, u.Evidence)
			}
		}
	}
}

func TestNewFailures(t *testing.T) {
	mk := func(sym string, tns int64) report.Failure {
		return report.Failure{Symbol: sym, PID: 1, TID: 2, TimeNS: tns, ResultName: "CUDA_ERROR_OUT_OF_MEMORY"}
	}
	first, unrec, cons := mk("cuMemAlloc_v2", 10), mk("cuMemAlloc_v2", 20), mk("cuMemFree_v2", 30)
	first.Recovered, cons.PossibleConsequence = true, true
	unrec.SizeSource = "the exporter's allocation"
	unrec.Size = u64(4096)
	rep := report.Report{FirstFailure: &first, FirstUnrecovered: &report.Judged{Failure: unrec},
		Failures: []report.Failure{first, unrec, cons}, FailuresTruncated: 5}
	v := newFailures(&rep, testClock(t))
	if v.Count != 8 || v.More != 5 || len(v.Rows) != 3 {
		t.Fatalf("count %d, more %d, rows %d; want 8, 5, 3", v.Count, v.More, len(v.Rows))
	}
	for i, want := range [][]string{{"first", "recovered"}, {"first unrecovered"}, {"possible consequence"}} {
		var got []string
		for _, tg := range v.Rows[i].Tags {
			got = append(got, tg.Text)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("row %d tags %q, want %q", i, got, want)
		}
		if v.Rows[i].Highlight != (i < 2) {
			t.Errorf("row %d highlighted %v", i, v.Rows[i].Highlight)
		}
	}
	if r := v.Rows[1]; r.Size != "4.0 KiB" || r.SizeSource != unrec.SizeSource {
		t.Errorf("size %q from %q", r.Size, r.SizeSource)
	}
	many := report.Report{}
	for i := range maxFailureRows + 3 {
		many.Failures = append(many.Failures, mk("cuMemAlloc_v2", int64(i)))
	}
	if v := newFailures(&many, testClock(t)); len(v.Rows) != maxFailureRows || v.More != 3 {
		t.Errorf("%d failures: %d rows, %d more", len(many.Failures), len(v.Rows), v.More)
	}
}

func TestNewCalls(t *testing.T) {
	rep := report.Report{
		Calls: []report.CallCount{{Symbol: "cuMemAlloc_v2", Operation: "allocation", Calls: 3, Failed: 1},
			{Symbol: "cuInit", Operation: "other", Calls: 1}, {Symbol: "cuLaunchKernel", Calls: 100000}},
		// The failures and marks name other classes: the count's own wins.
		Failures: []report.Failure{{Symbol: "cuMemAlloc_v2", Operation: "mapping"}},
		Timeline: &report.Timeline{Processes: []report.ProcessTrack{{Marks: []report.CallMark{{Symbol: "cuInit", Operation: "context"}}}}},
	}
	var got []string
	for _, c := range newCalls(&rep) {
		got = append(got, c.Symbol+":"+c.Operation)
	}
	want := []string{"cuMemAlloc_v2:allocation", "cuInit:other", "cuLaunchKernel:"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
}

func TestNewViews(t *testing.T) {
	change := int64(-1 << 20)
	rep := report.Report{
		MemoryViews: []report.ViewRow{
			{GPU: 0, View: "framebuffer", Field: "framebuffer free", Scope: "device", API: "nvmlDeviceGetMemoryInfo_v2",
				Struct: "nvmlMemory_v2_t", Support: "supported", Start: u64(2 << 20), End: u64(1 << 20), Change: &change,
				Phases: []report.PhaseValue{{Phase: "b", Last: u64(3 << 20)}}},
			{GPU: 0, View: "bar1", Field: "BAR1 used", Scope: "aperture", Support: "NVML_ERROR_NOT_SUPPORTED"},
			{GPU: 0, View: "framebuffer", Field: "process used", Scope: "process", PID: 42, Support: "supported"},
			{GPU: -1, View: "framebuffer", Field: "traced device allocations", Scope: "traced", Support: "GPU unknown for these calls"},
		},
		Phases: []report.Phase{{Label: "a"}, {Label: "b"}},
		Evidence: []report.Evidence{{Field: "framebuffer free, corrected", Value: u64(5 << 20), GPU: intp(0), Decisive: true,
			Source: "nvmlDeviceGetMemoryInfo_v2, corrected by traced calls"}},
	}
	v := newViews(&rep, testClock(t))
	r0, r1, r2 := v.Rows[0], v.Rows[1], v.Rows[2]
	if r0.Cells[0].Text != "2.0" || r0.Cells[0].Bytes != "2097152 bytes" || r0.Cells[1].Text != "—" || r0.Cells[1].Bytes != "" {
		t.Errorf("cells %+v", r0.Cells)
	}
	if r0.Change.Text != "-1.0" || r0.Source != "nvmlDeviceGetMemoryInfo_v2" || r0.Struct != "nvmlMemory_v2_t" {
		t.Errorf("row 0: change %+v, source %q %q", r0.Change, r0.Source, r0.Struct)
	}
	for _, c := range r1.Cells {
		if c.Text != "—" {
			t.Errorf("an unsupported field shows %q, not a dash", c.Text)
		}
	}
	if r1.ViewLabel != "BAR1" || !r1.GroupStart || r1.SupportCls != "warn" || r0.GroupStart {
		t.Errorf("row 1: %+v", r1)
	}
	if g := v.Rows[3].GPU; r0.GPU != "0" || g != "?" {
		t.Errorf("GPUs %q and %q, want 0 and ? for traced calls on an unknown GPU", r0.GPU, g)
	}
	if r2.Scope != "process, pid 42" || !r2.GroupStart {
		t.Errorf("row 2: scope %q, group start %v", r2.Scope, r2.GroupStart)
	}
	if len(v.PhaseRows) != 1 || len(v.PhaseRows[0].Cells) != 2 || v.PhaseRows[0].Cells[0].Text != "—" ||
		v.PhaseRows[0].Cells[1].Text != "3.0" {
		t.Errorf("phase rows %+v", v.PhaseRows)
	}
	if len(v.Notes) != 1 || !strings.Contains(v.Notes[0], "5.0 MiB") {
		t.Errorf("reconciled notes %q", v.Notes)
	}
}

func TestNewLoss(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    report.Loss
		lost bool
	}{
		{"nothing lost", report.Loss{Known: true, Calls: 10, Events: 10, Unmatched: 2}, false},
		{"ring buffer", report.Loss{Known: true, LostCalls: 1}, true},
		{"in flight", report.Loss{Known: true, LostInflight: 1}, true},
		{"too deep", report.Loss{Known: true, TooDeep: 1}, true},
		{"process records", report.Loss{Known: true, LostProc: 1}, true},
	} {
		if got := newLoss(&report.Report{Loss: tc.l}).Lost; got != tc.lost {
			t.Errorf("%s: lost %v, want %v", tc.name, got, tc.lost)
		}
	}
	// Stack captures skipped or lost are said, and are no loss of calls.
	v := newLoss(&report.Report{Loss: report.Loss{Known: true, StackSkipped: 3, StackLost: 1}})
	if v.Lost || !strings.Contains(v.Calls, "stack captures: 3 skipped by their rate limit, 1 lost") {
		t.Errorf("stack captures: lost %v, %q", v.Lost, v.Calls)
	}
	if v := newLoss(&report.Report{Loss: report.Loss{Known: true}}); strings.Contains(v.Calls, "stack captures") {
		t.Errorf("no stack capture skipped, yet %q", v.Calls)
	}
}

func TestDrawnProcesses(t *testing.T) {
	tl := &report.Timeline{Processes: []report.ProcessTrack{{PID: 1, Calls: 1}, {PID: 2, Calls: 0}, {PID: 3, Calls: 5}, {PID: 4, Calls: 1}}}
	ps := []report.ProcessInfo{{PID: 1, StartNS: 30}, {PID: 3, StartNS: 10}, {PID: 4, StartNS: 30}}
	var got []uint32
	for _, p := range drawnProcesses(tl, ps) {
		got = append(got, p.PID)
	}
	if want := []uint32{3, 1, 4}; !reflect.DeepEqual(got, want) {
		t.Errorf("processes drawn in order %v, want %v (by start, then pid; none without calls)", got, want)
	}
}

func TestNewPanel(t *testing.T) {
	ax := timeAxis{T0: 0, T1: 1000, X0: svgLeft, W: plotW}
	series := func(peak uint64) *report.Series {
		s := &report.Series{Buckets: make([]report.Bucket, 4), Points: 1, Peak: peak}
		s.Buckets[1] = report.Bucket{N: 1, MinT: 300, Min: peak, MaxT: 300, Max: peak}
		return s
	}
	for _, tc := range []struct {
		name                 string
		view                 report.ViewSeries
		empty                string
		series, legend, dots int
		total, unusable      bool
	}{
		{"no sample", report.ViewSeries{Status: map[string]int{}}, "no usable samples", 0, 0, 0, false, false},
		{"only unusable samples", report.ViewSeries{Used: &report.Series{Gaps: 2}, Unusable: []int64{100, 500},
			Status: map[string]int{"NVML_ERROR_NOT_SUPPORTED": 2}},
			"no usable samples: NVML_ERROR_NOT_SUPPORTED ×2 (never drawn as zero)", 0, 0, 0, false, true},
		{"drawn", report.ViewSeries{Used: series(6 << 20), Free: series(250 << 20), Total: 256 << 20, API: "nvmlDeviceGetBAR1MemoryInfo"},
			"", 2, 2, 2, true, false},
	} {
		p := newPanel(panelSpec{title: "BAR1 aperture", totalLabel: "BAR1 total", y: 100, h: barPanelH, view: &tc.view,
			lines: []seriesSpec{{"used", "s-bar-used", tc.view.Used, false}, {"free", "s-bar-free", tc.view.Free, false}}}, ax, testClock(t))
		empty := ""
		if p.Empty != nil {
			empty = p.Empty.Text
		}
		dots := 0
		for _, s := range p.Series {
			dots += len(s.Dots)
		}
		if empty != tc.empty || len(p.Series) != tc.series || len(p.Legend) != tc.legend || dots != tc.dots ||
			(p.Total != nil) != tc.total || (p.Unusable != nil) != tc.unusable {
			t.Errorf("%s: empty %q, %d series, %d keys, %d dots, total %v, unusable %v", tc.name, empty, len(p.Series),
				len(p.Legend), dots, p.Total != nil, p.Unusable != nil)
		}
		if p.Total != nil && (p.Total.Y < p.Frame.Y || p.Total.Y > p.Frame.Y+p.Frame.H) {
			t.Errorf("%s: the total line at %v is outside the panel %+v", tc.name, p.Total.Y, p.Frame)
		}
		if len(p.Series) == 0 && len(p.Grid) > 0 {
			t.Errorf("%s: an axis without a value to show", tc.name)
		}
	}
}

func TestNewProcRow(t *testing.T) {
	ax := timeAxis{T0: 0, T1: 1_000_000, X0: svgLeft, W: plotW}
	fails := []report.CallMark{
		{Symbol: "cuMemAlloc_v2", PID: 7, TID: 7, StartNS: 100_000, EndNS: 100_100, Result: 2, ResultName: "CUDA_ERROR_OUT_OF_MEMORY", First: true},
		{Symbol: "cuMemAlloc_v2", PID: 7, TID: 7, StartNS: 101_000, EndNS: 101_100, Result: 2, ResultName: "CUDA_ERROR_OUT_OF_MEMORY"},
		{Symbol: "cuMemAlloc_v2", PID: 7, TID: 7, StartNS: 899_000, EndNS: 900_000, Result: 2, ResultName: "CUDA_ERROR_OUT_OF_MEMORY",
			Unrecovered: true},
	}
	ok := report.CallMark{Symbol: "cuInit", Operation: "other", PID: 7, TID: 7, StartNS: 0, EndNS: 10}
	for _, tc := range []struct {
		name   string
		p      report.ProcessTrack
		binned bool
		marks  int
		labels []string
	}{
		{"marks", report.ProcessTrack{PID: 7, Calls: 4, Failed: 3, Marks: append([]report.CallMark{ok}, fails...),
			Bins: make([]uint32, 8), Fails: fails}, false, 1,
			[]string{"FIRST: cuMemAlloc_v2 OUT_OF_MEMORY", "", "UNRECOVERED: cuMemAlloc_v2 OUT_OF_MEMORY"}},
		{"binned", report.ProcessTrack{PID: 7, Calls: 5000, Failed: 3, Bins: []uint32{4000, 0, 997, 3}, Fails: fails}, true, 0,
			[]string{"FIRST: cuMemAlloc_v2 OUT_OF_MEMORY", "", "UNRECOVERED: cuMemAlloc_v2 OUT_OF_MEMORY"}},
	} {
		r := newProcRow(&tc.p, 0, 50, ax, testClock(t))
		if r.Binned != tc.binned || len(r.Marks) != tc.marks || len(r.Fails) != len(tc.p.Fails) {
			t.Errorf("%s: binned %v, %d marks, %d failure marks", tc.name, r.Binned, len(r.Marks), len(r.Fails))
		}
		var labels []string
		for _, f := range r.Fails {
			l := ""
			if f.Label != nil {
				l = f.Label.Text
			}
			labels = append(labels, l)
		}
		if !reflect.DeepEqual(labels, tc.labels) {
			t.Errorf("%s: labels %q, want %q (a label too close to the one before is left to the tooltip)", tc.name, labels, tc.labels)
		}
		if tc.binned {
			if len(r.Bins) != 3 {
				t.Errorf("%s: %d bins drawn for 3 non-empty", tc.name, len(r.Bins))
			}
			for _, b := range r.Bins {
				if b.Y < r.Band.Y || b.Y+b.H > r.Band.Y+r.Band.H {
					t.Errorf("%s: bin %+v leaves its row %+v", tc.name, b.box, r.Band)
				}
			}
		}
	}
}

// Failure labels stay inside the plot and never overlap, and the first
// and first unrecovered failures get theirs before any other.
func TestFailLabelsFit(t *testing.T) {
	ax := timeAxis{T0: 0, T1: 1_000_000, X0: svgLeft, W: plotW}
	fail := func(end int64, first, unrec bool) report.CallMark {
		return report.CallMark{Symbol: "cuMemAlloc_v2", Result: 2, ResultName: "CUDA_ERROR_OUT_OF_MEMORY", StartNS: end - 10, EndNS: end,
			First: first, Unrecovered: unrec}
	}
	many := []report.CallMark{fail(10_000, true, false)}
	for i := int64(1); i < 40; i++ {
		many = append(many, fail(i*24_000, false, false))
	}
	many = append(many, fail(990_000, false, true))
	for _, tc := range []struct {
		name  string
		fails []report.CallMark
		want  []string // labels that must be drawn (whole or shortened to their result)
	}{
		{"first and unrecovered close, at the right edge", []report.CallMark{fail(700_000, true, false), fail(990_000, false, true)},
			[]string{"FIRST: cuMemAlloc_v2 OUT_OF_MEMORY", "UNRECOVERED: OUT_OF_MEMORY"}},
		{"at the left edge", []report.CallMark{fail(0, true, false)}, []string{"FIRST: cuMemAlloc_v2 OUT_OF_MEMORY"}},
		{"many, landmarks first", many, []string{"FIRST: cuMemAlloc_v2 OUT_OF_MEMORY", "UNRECOVERED: cuMemAlloc_v2 OUT_OF_MEMORY"}},
		{"on top of each other", []report.CallMark{fail(500_000, true, false), fail(500_100, false, true)},
			[]string{"FIRST: cuMemAlloc_v2 OUT_OF_MEMORY", "UNRECOVERED: cuMemAlloc_v2 OUT_OF_MEMORY"}},
	} {
		var spans []span
		var got []string
		for _, f := range failMarks(tc.fails, 50, ax, testClock(t)) {
			l := f.Label
			if l == nil {
				continue
			}
			got = append(got, l.Text)
			s := span{float64(l.X), float64(l.X) + textWidth(l.Text)}
			if l.Anchor == "end" {
				s = span{float64(l.X) - textWidth(l.Text), float64(l.X)}
			}
			if s.lo < svgLeft || s.hi > svgW {
				t.Errorf("%s: %q spans %.0f..%.0f, outside the plot %.0f..%.0f", tc.name, l.Text, s.lo, s.hi, svgLeft, svgW)
			}
			if overlaps(s, spans) {
				t.Errorf("%s: %q overlaps another label", tc.name, l.Text)
			}
			spans = append(spans, s)
		}
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("%s: no label %q in %q", tc.name, w, got)
			}
		}
	}
}

// A rule's label stays inside the picture, also for a rule at its right
// edge, and labels on one row do not overlap.
func TestRuleLabelsInside(t *testing.T) {
	ax := timeAxis{T0: 0, T1: 1_000_000, X0: svgLeft, W: plotW}
	var rules []vrule
	for _, tns := range []int64{0, 500_000, 930_000, 990_000, 1_000_000} {
		rules = append(rules, vrule{t: tns, X: ax.X(tns), Label: &label{Text: "first unrecovered"}})
	}
	placeRuleLabels(rules, ax)
	type ext struct {
		y      coord
		lo, hi float64
	}
	var seen []ext
	for _, r := range rules {
		l := r.Label
		if l == nil {
			continue
		}
		e := ext{l.Y, float64(l.X), float64(l.X) + textWidth(l.Text)}
		if l.Anchor == "end" {
			e.lo, e.hi = float64(l.X)-textWidth(l.Text), float64(l.X)
		}
		if e.lo < 0 || e.hi > svgW {
			t.Errorf("rule at x %v: label spans %.0f..%.0f, outside 0..%.0f", r.X, e.lo, e.hi, svgW)
		}
		for _, o := range seen {
			if o.y == e.y && e.lo < o.hi && o.lo < e.hi {
				t.Errorf("rule at x %v: its label overlaps another on its row", r.X)
			}
		}
		seen = append(seen, e)
	}
	if len(seen) < 4 {
		t.Errorf("%d of 5 labels placed", len(seen))
	}
}

// A stack's Python frames are listed apart and first, with file:line;
// each list is bounded.
func TestNewStack(t *testing.T) {
	st := &report.Stack{Partial: true, Note: "ran past the copied stack", Frames: []report.Frame{
		{Address: 0x7f00, Library: "libffi.so.8", Language: report.LangNative},
		{Function: "Model.forward", File: "train.py", Line: 42, Language: report.LangPython},
		{Function: "main", File: "train.py", Language: report.LangPython},
		{Function: "Py_RunMain", Offset: 9, Library: "python3.11", Language: report.LangNative},
	}}
	v := newStack(st)
	want := stackView{Recorded: true, Note: "partial: ran past the copied stack",
		Python: []frameRow{{"Model.forward", "train.py:42", false}, {"main", "train.py", false}},
		Frames: []frameRow{{"0x7f00", "libffi.so.8", false}, {"Py_RunMain+0x9", "python3.11", false}}}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("stack view\n%+v\nwant\n%+v", v, want)
	}
	long := &report.Stack{}
	for range maxFrames + 2 {
		long.Frames = append(long.Frames, report.Frame{Function: "f", Language: report.LangPython}, report.Frame{Function: "g"})
	}
	if v := newStack(long); len(v.Python) != maxFrames || v.MorePy != 2 || len(v.Frames) != maxFrames || v.More != 2 {
		t.Errorf("%d Python (%d more), %d native (%d more)", len(v.Python), v.MorePy, len(v.Frames), v.More)
	}
	if v := newStack(nil); v.Recorded {
		t.Error("no stack is recorded")
	}
}

// An identifier is escaped, and may break after _ / . , and inside a
// camel-case word, nowhere else.
func TestBreakable(t *testing.T) {
	for in, want := range map[string]string{
		"nvmlDeviceGetMemoryInfo_v2":  "nvml<wbr>Device<wbr>Get<wbr>Memory<wbr>Info_<wbr>v2",
		"CUDA_ERROR_OUT_OF_MEMORY":    "CUDA_<wbr>ERROR_<wbr>OUT_<wbr>OF_<wbr>MEMORY",
		"/usr/lib/libcuda.so.1":       "/<wbr>usr/<wbr>lib/<wbr>libcuda.<wbr>so.<wbr>1",
		"<script>x</script>":          "&lt;script&gt;x&lt;/<wbr>script&gt;",
		"a \"quoted\" & 'single' arg": "a &#34;quoted&#34; &amp; &#39;single&#39; arg",
	} {
		if got := string(breakable(in)); got != want {
			t.Errorf("breakable(%q) = %q, want %q", in, got, want)
		}
	}
}

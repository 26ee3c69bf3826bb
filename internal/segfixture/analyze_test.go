package segfixture_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrivium/forensic/analyze"
	"github.com/retrivium/forensic/internal/runfixture"
	"github.com/retrivium/forensic/internal/segfixture"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// reportJSON analyzes src and returns its --json report with the
// recording's path written as PATH.
func reportJSON(t *testing.T, src analyze.Source) []byte {
	t.Helper()
	rep, err := analyze.Analyze(src, analyze.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := report.WriteJSON(&b, rep); err != nil {
		t.Fatal(err)
	}
	return bytes.ReplaceAll(b.Bytes(), []byte(src.Path()), []byte("PATH"))
}

// A recording cut into segments (symbol ids differing between them,
// processes and libraries repeated) analyzes exactly as the whole file:
// the same verdict, evidence, counts, timeline and sample numbers.
func TestSetAnalyzesAsTheWholeRun(t *testing.T) {
	whole := runfixture.BuildRun(t, 3000)
	r, err := store.Open(whole)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want := reencode(t, reportJSON(t, r), nil)

	tc := runfixture.TClock
	cuts := [][]int64{
		{tc + 300e6},
		{tc + 300e6, tc + 900e6, tc + 1_250e6},
		{tc + 100e6, tc + 400e6, tc + 700e6, tc + 1_000e6, tc + 1_300e6, tc + 1_500e6},
	}
	for _, c := range cuts {
		paths := segfixture.Split(t, whole, t.TempDir(), c)
		set, err := store.OpenSet(paths, store.SetOptions{Path: filepath.Dir(paths[0])})
		if err != nil {
			t.Fatal(err)
		}
		got := withoutFlight(t, reportJSON(t, set), len(paths))
		set.Close()
		if !bytes.Equal(got, want) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "whole.json"), want, 0o644)
			os.WriteFile(filepath.Join(dir, "set.json"), got, 0o644)
			t.Fatalf("%d segments: the set's report differs from the whole run's (diff %s/whole.json %s/set.json)",
				len(paths), dir, dir)
		}
	}
}

// withoutFlight checks what the report of a whole set says of how its
// segments were read (all of them, every event the recorder counted) and
// returns the report without it: the rest is the whole run's.
func withoutFlight(t *testing.T, js []byte, segments int) []byte {
	t.Helper()
	var rep report.Report
	if err := json.Unmarshal(js, &rep); err != nil {
		t.Fatal(err)
	}
	f := rep.Run.Flight
	if f == nil || f.SegmentsRead != segments || len(f.NotRead) != 0 || f.Live != "none" || f.DroppedRanges != 0 ||
		f.EventsRead != rep.Run.Events || f.EventsRecorded != f.EventsRead {
		t.Fatalf("flight read %+v, want %d segments read, the live none, %d events read and recorded", f, segments, rep.Run.Events)
	}
	return reencode(t, js, func(raw map[string]any) { delete(raw["run"].(map[string]any), "flight") })
}

// reencode decodes a report's JSON and encodes it again (keys sorted),
// after edit when given.
func reencode(t *testing.T, js []byte, edit func(map[string]any)) []byte {
	t.Helper()
	var raw map[string]any
	if err := json.Unmarshal(js, &raw); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(raw)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	enc.Encode(raw)
	return b.Bytes()
}

// The segments after a failure alone: the analysis reads what is there,
// and a recording whose last segment is still being written has no stop.
func TestSetWithoutItsFirstAndLastSegments(t *testing.T) {
	whole := runfixture.BuildRun(t, 100)
	tc := runfixture.TClock
	paths := segfixture.Split(t, whole, t.TempDir(), []int64{tc + 500e6, runfixture.TFail + 1, tc + 1_500e6})
	// The first segment was deleted by retention; the last is live.
	live, err := store.Create(paths[3]+".live", store.CreateOptions{}, store.RunInfo{ID: "test-run-1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	set, err := store.OpenSet(append(paths[1:3], paths[3]+".live"), store.SetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if sk := set.Skipped(); len(sk) != 1 {
		t.Fatalf("skipped %v, want the live segment", sk)
	}
	rep, err := analyze.Analyze(set, analyze.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.FirstFailure == nil || rep.FirstFailure.Symbol != "cuMemAlloc_v2" || rep.FirstFailure.TimeNS != runfixture.TFail {
		t.Errorf("first failure %+v, want the allocation at TFail", rep.FirstFailure)
	}
	if rep.Run.Ended != "recording" || rep.Run.Flight == nil || rep.Run.Flight.Live != "not-read" {
		t.Errorf("run ended %q, flight %+v; want a recording still being written, its live segment not read", rep.Run.Ended, rep.Run.Flight)
	}
}

// A recording whose first segment was deleted: the events of the deleted
// stretch and those read add up to the recorder's count, and nothing is
// said to be missing beyond the stretch itself. When the index's count
// of the stretch falls short (a segment removed by hand, say), the
// analysis says that events are in no file read.
func TestSetEventsReconcileWithGaps(t *testing.T) {
	whole := runfixture.BuildRun(t, 300)
	tc := runfixture.TClock
	paths := segfixture.Split(t, whole, t.TempDir(), []int64{tc + 200e6, tc + 900e6})
	first, err := store.Open(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	var deleted uint64
	first.Events(func(*store.Event) error { deleted++; return nil })
	first.Close()
	for _, tt := range []struct {
		name        string
		gapCalls    uint64
		gapFailures uint64
		missing     bool
	}{
		{"the stretch holds the events not read", deleted, 0, false},
		{"the index undercounts the stretch", deleted - 5, 0, true},
		{"a stretch with a failure", deleted, 1, false},
	} {
		gap := store.Gap{From: tc, To: tc + 200e6, Calls: tt.gapCalls, Failures: tt.gapFailures, Reason: store.GapRetention}
		set, err := store.OpenSet(paths[1:], store.SetOptions{Gaps: []store.Gap{gap}})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := analyze.Analyze(set, analyze.Options{})
		set.Close()
		if err != nil {
			t.Fatal(err)
		}
		f := rep.Run.Flight
		if f == nil || f.EventsRead+deleted != f.EventsRecorded || f.DroppedCalls != tt.gapCalls || f.DroppedRanges != 1 {
			t.Fatalf("%s: flight read %+v; %d events were deleted", tt.name, f, deleted)
		}
		found, gapSaid := false, false
		for _, m := range rep.Missing {
			if strings.Contains(m.What, "are in no file read") {
				found = m.Decisive
			}
			if strings.Contains(m.What, "flight mode deleted") {
				gapSaid = true
				// A stretch whose calls did not fail cannot hide the
				// first failure; one with a failure can.
				if m.Decisive != (tt.gapFailures > 0) {
					t.Errorf("%s: %+v: decisive %v, the stretch had %d failures", tt.name, m, m.Decisive, tt.gapFailures)
				}
			}
		}
		if !gapSaid {
			t.Errorf("%s: the deleted stretch is not named among %+v", tt.name, rep.Missing)
		}
		if found != tt.missing {
			t.Errorf("%s: missing %+v; want an unaccounted count: %v", tt.name, rep.Missing, tt.missing)
		}
	}
}

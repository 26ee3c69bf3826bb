package segfixture_test

import (
	"bytes"
	"os"
	"path/filepath"
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
	want := reportJSON(t, r)

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
		got := reportJSON(t, set)
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
	if rep.Run.Ended != "abrupt" {
		t.Errorf("run stopped %+v, want an open recording (no stop record)", rep.Run)
	}
}

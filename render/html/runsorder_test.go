package html

import (
	"reflect"
	"testing"

	"github.com/retrivium/forensic/report"
)

// The runs table leads with the run whose failure the page shows, as the
// text report does, then lists the others in numeric rank order (10 after
// 2, not after 1), runs with no rank last; with no failure, rank order
// alone.
func TestRunsTableLeadsWithTheFailingRun(t *testing.T) {
	run := func(path string, rank *int) report.RunRef {
		return report.RunRef{Path: path, Rank: rank, Attribution: report.AttrNone}
	}
	runs := []report.RunRef{run("r10.db", intp(10)), run("r2.db", intp(2)), run("none.db", nil), run("r1.db", intp(1)),
		run("r100.db", intp(100)), run("r0.db", intp(0))}
	tests := []struct {
		name    string
		chosen  string
		failure bool
		want    []string
	}{
		{"rank 10 failed", "r10.db", true, []string{"r10.db", "r0.db", "r1.db", "r2.db", "r100.db", "none.db"}},
		{"the run with no rank failed", "none.db", true, []string{"none.db", "r0.db", "r1.db", "r2.db", "r10.db", "r100.db"}},
		{"no run failed", "r10.db", false, []string{"r0.db", "r1.db", "r2.db", "r10.db", "r100.db", "none.db"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := &report.Report{Run: report.RunInfo{Path: tt.chosen}, MultiRun: &report.MultiRun{Order: "certain", Runs: runs}}
			if tt.failure {
				rep.FirstFailure = &report.Failure{RunPath: tt.chosen, Symbol: "cuMemAlloc_v2", ResultName: "CUDA_ERROR_OUT_OF_MEMORY"}
			}
			var got []string
			for _, r := range runRows(rep, placeFailures(rep)) {
				got = append(got, r.Path)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("runs table %v, want %v", got, tt.want)
			}
			if tt.failure && !runRows(rep, placeFailures(rep))[0].Chosen {
				t.Error("the leading row is not marked as the page's run")
			}
		})
	}
}

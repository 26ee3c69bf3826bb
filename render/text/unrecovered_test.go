package text

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// A job's first unrecovered failure from another run names that run, and
// its time counts from that run's start, not the subject run's; the RUNS
// section says how certain its order is and places later failures after
// it.
func TestUnrecoveredFromAnotherRun(t *testing.T) {
	const s0, s1 = int64(1_000_000_000), int64(1_300_000_000)
	rank0, rank1 := 0, 1
	rep := &report.Report{Run: report.RunInfo{Path: "rank0.db", StartNS: s0},
		FirstFailure: &report.Failure{RunPath: "rank0.db", Symbol: "cuMemAlloc_v2", TimeNS: s0 + 101_000_000, Recovered: true},
		FirstUnrecovered: &report.Judged{Failure: report.Failure{RunPath: "rank1.db", Symbol: "cuMemSetAccess",
			TimeNS: s1 + 115_000_000}, Verdict: "x"},
		MultiRun: &report.MultiRun{Order: "certain", UnrecoveredOrder: "certain", Runs: []report.RunRef{
			{Path: "rank0.db", Rank: &rank0, Host: "vm", StartNS: s0}, {Path: "rank1.db", Rank: &rank1, Host: "vm", StartNS: s1}},
			Consequences: []report.Consequence{{RunPath: "rank2.db", Symbol: "cuMemAlloc_v2", ResultName: "CUDA_ERROR_UNKNOWN"}}}}
	out := oneLine(render(t, rep, false))
	sec := out[strings.Index(out, "FIRST UNRECOVERED FAILURE"):]
	for _, w := range []string{"run rank 1, host vm, rank1.db (another run of the job: times count from its start)", "time +0.115 s"} {
		if !strings.Contains(sec, w) {
			t.Errorf("the unrecovered failure lacks %q:\n%s", w, sec)
		}
	}
	for _, w := range []string{"order of the failures no process recovered from: certain", "after the first unrecovered failure, in other runs"} {
		if !strings.Contains(out, w) {
			t.Errorf("RUNS lacks %q:\n%s", w, out)
		}
	}
}

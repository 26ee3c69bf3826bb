package text

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// The failure the verdict names as the cause, listed before the first
// failure, is marked so in FAILURES: the table does not leave an earlier,
// unmarked row to contradict the verdict.
func TestFailuresMarkTheCause(t *testing.T) {
	query := report.Failure{Symbol: "cuDeviceGet", ResultName: "CUDA_ERROR_NOT_INITIALIZED", PID: 7, TID: 7, TimeNS: 100}
	first := report.Failure{Symbol: "cuMemAlloc_v2", ResultName: "CUDA_ERROR_NOT_INITIALIZED", PID: 7, TID: 7, TimeNS: 200}
	for _, named := range []bool{true, false} {
		rep := &report.Report{FirstFailure: &first, Failures: []report.Failure{query, first},
			Cause: &report.Cause{Result: 3, ResultName: "CUDA_ERROR_NOT_INITIALIZED", PID: 7, Text: "not initialized"}}
		if named {
			rep.Cause.Symbol, rep.Cause.TimeNS = "cuDeviceGet", 100
		}
		out := render(t, rep, false)
		row := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "cuDeviceGet") {
				row = l
			}
		}
		if got := strings.HasSuffix(strings.TrimSpace(row), "cause"); got != named {
			t.Errorf("named %v: the row %q marks the cause %v", named, row, got)
		}
	}
}

// A request from 1 TiB up is written in TiB in the first failure and the
// failure list, with its exact bytes once.
func TestFailureSizesInTiB(t *testing.T) {
	size := uint64(100 << 40)
	f := report.Failure{Symbol: "cuMemAlloc_v2", ResultName: "CUDA_ERROR_OUT_OF_MEMORY", PID: 7, TID: 7, TimeNS: 100, Size: &size}
	out := render(t, &report.Report{FirstFailure: &f, Failures: []report.Failure{f}}, false)
	if !strings.Contains(out, "100.00 TiB (109951162777600 bytes)") {
		t.Errorf("the first failure's size is not 100.00 TiB with its bytes:\n%s", out)
	}
	if n := strings.Count(out, "100.00 TiB"); n < 2 {
		t.Errorf("100.00 TiB written %d times, want the first failure and its row in the list:\n%s", n, out)
	}
}

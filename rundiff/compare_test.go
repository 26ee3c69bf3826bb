package rundiff

import (
	"math"
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// The failing call itself lies in the phase that ends at it ("up to first
// failure"), as the analysis places it, not in the phase that starts
// there; any other call at a boundary lies in the phase that starts there.
func TestPhaseAtKeepsTheFailureInThePhaseItEnds(t *testing.T) {
	phases := []report.Phase{{Label: "start", StartNS: 0, EndNS: 10}, {Label: "up to first failure", StartNS: 10, EndNS: 50},
		{Label: "after first failure", StartNS: 50, EndNS: 90}}
	for _, c := range []struct {
		t, failEnd int64
		want       string
	}{
		{50, 50, "up to first failure"},
		{51, 50, "after first failure"},
		{10, 50, "up to first failure"},
		{50, math.MinInt64, "after first failure"},
		{-5, 50, "start"},
	} {
		if got := phaseAt(phases, c.t, c.failEnd); got != c.want {
			t.Errorf("phaseAt(%d, failure at %d) = %q, want %q", c.t, c.failEnd, got, c.want)
		}
	}
}

// An extra call in the failing run that is itself a failure says so: it
// is the call the post-mortem is about, not a successful allocation
// that used up memory.
func TestExtraCallThatFailedSaysSo(t *testing.T) {
	size := uint64(2 << 30)
	for _, c := range []struct {
		result string
		failed bool
	}{{"CUDA_SUCCESS", false}, {"failed", true}} {
		d := &report.Difference{Departure: report.DepartExtraCall,
			Call: &report.DiffCall{Symbol: "cuMemAlloc_v2", Size: &size, Result: c.result, Phase: "up to first failure"}}
		got := departureShort(d)
		if strings.HasSuffix(got, "which failed") != c.failed || !strings.Contains(got, "an extra cuMemAlloc_v2 of 2.00 GiB") {
			t.Errorf("%s: %q", c.result, got)
		}
	}
}

package text

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// Counters from the recorder's last periodic reading count nothing after
// it: the section says when they were read and never says "none lost" of
// the calls that came later; counters never read are unknown, not 0.
func TestLossCountersAsOfTheirReading(t *testing.T) {
	const start = int64(1_000_000_000)
	tests := []struct {
		name      string
		loss      report.Loss
		want, not []string
	}{
		{"stop record", report.Loss{Known: true, CountersFrom: report.CountersStop, Calls: 6, Events: 6},
			[]string{"6 calls seen, 6 events stored, none lost"}, []string{"as of", "unknown"}},
		{"a reading before the end", report.Loss{Known: true, CountersFrom: report.CountersReading, CountersAtNS: start + 1_000_000_000},
			[]string{"as of the recorder's last reading of its counters, at +1.000 s (the record ends at +2.020 s):",
				"calls after it are not counted"}, nil},
		{"never read", report.Loss{CountersFrom: report.CountersNone},
			[]string{"loss counters were never read: calls seen and lost are unknown"}, []string{"none lost", "0 calls"}},
	}
	for _, tt := range tests {
		rep := &report.Report{Run: report.RunInfo{StartNS: start, EndNS: start + 2_020_000_000}, Loss: tt.loss}
		out := render(t, rep, false)
		loss := oneLine(out[strings.Index(out, "LOSS AND SAMPLING"):])
		for _, w := range tt.want {
			if !strings.Contains(loss, w) {
				t.Errorf("%s: lacks %q:\n%s", tt.name, w, loss)
			}
		}
		for _, n := range tt.not {
			if strings.Contains(loss, n) {
				t.Errorf("%s: says %q:\n%s", tt.name, n, loss)
			}
		}
	}
}

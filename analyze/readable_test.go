package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/internal/readcheck"
	"github.com/retrivium/forensic/internal/runfixture"
	"github.com/retrivium/forensic/render/text"
	"github.com/retrivium/forensic/report"
)

// The default text report of every unit fixture reads at 80 columns: no
// sentence over readcheck.MaxWords words, and the first screen says what
// failed, the numbers compared, a next step and the process's command
// line.
func TestFixtureReportsRead(t *testing.T) {
	for _, tt := range []struct {
		name string
		rep  func(t *testing.T) *report.Report
	}{
		{"a run with a failure", func(t *testing.T) *report.Report {
			_, rep := openAnalyzed(t, runfixture.BuildRun(t, 0))
			return rep
		}},
		{"a run without one", func(t *testing.T) *report.Report {
			_, rep := openAnalyzed(t, runfixture.BuildRunNoFailure(t))
			return rep
		}},
		{"a job of 128 ranks", func(*testing.T) *report.Report { return jobOfRanks(128, 77) }},
		{"a job of 1024 ranks", func(*testing.T) *report.Report { return jobOfRanks(1024, 900) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rep := tt.rep(t)
			var b strings.Builder
			if err := text.Write(&b, rep, text.Options{Width: 80}); err != nil {
				t.Fatal(err)
			}
			for _, p := range readcheck.Problems(b.String(), rep, 80) {
				t.Error(p)
			}
			if t.Failed() {
				t.Logf("the report:\n%s", b.String())
			}
		})
	}
}

package analyze

import (
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
)

// Missing evidence outranks every other fact; a run's own attribution
// stands when a report of several runs finds nothing hidden; no failure
// and nothing hidden is none.
func TestAttributionFromFacts(t *testing.T) {
	oom := cuda.LookupResult(2).Meaning
	tests := []struct {
		name  string
		facts attributionFacts
		want  report.Attribution
	}{
		{"out of memory, nothing hidden", attributionFacts{failed: sym("cuMemAlloc_v2"), meaning: oom}, report.AttrAllocation},
		{"out of memory, a gap before it", attributionFacts{failed: sym("cuMemAlloc_v2"), meaning: oom, hidden: true}, report.AttrMissingEvidence},
		{"recovered, then a process ended badly", attributionFacts{failed: sym("cuMemAlloc_v2"), meaning: oom, endedBadly: true}, report.AttrMissingEvidence},
		{"no failure, nothing hidden", attributionFacts{}, report.AttrNone},
		{"no failure, a gap", attributionFacts{hidden: true}, report.AttrMissingEvidence},
		{"a run's own verdict, nothing hidden across runs", attributionFacts{judged: report.AttrMapping}, report.AttrMapping},
		{"a run's own verdict, a rank with no run", attributionFacts{judged: report.AttrMapping, hidden: true}, report.AttrMissingEvidence},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := attribution(tt.facts); got != tt.want {
				t.Errorf("attribution %s, want %s", got, tt.want)
			}
		})
	}
}

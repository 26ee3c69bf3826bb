package report

import (
	"strings"
	"testing"
)

// Every kind of loss is named in the summary; "none lost" only when there
// is none.
func TestLossSummaryNamesEveryLoss(t *testing.T) {
	for _, tc := range []struct {
		name string
		loss Loss
		want string
	}{
		{"none", Loss{Calls: 3, Events: 3}, "3 calls seen, 3 events stored, none lost"},
		{"lost holds", Loss{Calls: 3, Events: 3, LostHolds: 2}, "2 libcuda mappings not held until the probes were in"},
		{"untracked", Loss{Calls: 3, Events: 3, Untracked: 1}, "1 process not followed"},
		{"ring full", Loss{Calls: 3, Events: 2, LostCalls: 1}, "1 call lost (ring buffer full)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.loss.Summary()
			if !strings.Contains(got, tc.want) {
				t.Errorf("Summary() = %q, want it to contain %q", got, tc.want)
			}
			if tc.name != "none" && strings.Contains(got, "none lost") {
				t.Errorf("Summary() = %q says none lost", got)
			}
		})
	}
}

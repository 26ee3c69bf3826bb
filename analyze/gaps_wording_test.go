package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// What was lost is said with a verb that agrees with its count: "1
// process lifecycle record was lost", "2 ... were lost".
func TestGapsVerbAgrees(t *testing.T) {
	for _, tt := range []struct {
		n    uint64
		want []string
	}{
		{1, []string{"1 call was already in progress", "1 process lifecycle record was lost", "1 call was lost (ring buffer full)"}},
		{2, []string{"2 calls were already in progress", "2 process lifecycle records were lost", "2 calls were lost (ring buffer full)"}},
	} {
		s := &state{inv: &store.Inventory{}, stop: &store.StopInfo{Reason: "workload-exited"}, replay: &replayer{},
			rep: &report.Report{Loss: report.Loss{Known: true, Unmatched: tt.n, LostProc: tt.n, LostCalls: tt.n, LostFirstNS: 5}}}
		var said []string
		for _, m := range append(s.generalGaps(), s.hiding(0)...) {
			said = append(said, m.What)
		}
		all := strings.Join(said, "\n")
		for _, w := range tt.want {
			if !strings.Contains(all, w) {
				t.Errorf("%d lost: want %q in:\n%s", tt.n, w, all)
			}
		}
	}
}

package analyze

import (
	"testing"

	"github.com/retrivium/forensic/store"
)

// Events written out of time order (a later release stored before earlier
// calls) must not change the totals at the failure: the live-bytes replay
// restores time order.
func TestTotalsIgnoreStorageOrder(t *testing.T) {
	for _, extra := range []int{0, 200000} {
		r, err := store.Open(buildRun(t, extra))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := Analyze(r, Options{})
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range rep.MemoryViews {
			if v.Field == "traced device allocations" && v.GPU == 1 {
				if v.Before == nil || *v.Before != 2<<30 || v.At == nil || *v.At != 2<<30 {
					t.Errorf("%d extra calls: GPU 1 before %v at %v, want 2 GiB held since long before", extra, v.Before, v.At)
				}
			}
		}
	}
}

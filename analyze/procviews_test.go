package analyze

import (
	"testing"

	"github.com/retrivium/forensic/store"
)

// A process a usable per-process query no longer lists holds 0 from that
// query on, in the memory views and in the exports' counters; before it
// is first listed it held 0 too. A failed query is no evidence of 0.
func TestProcessUsedAbsentIsZero(t *testing.T) {
	ok, failed := "NVML_SUCCESS", "NVML_ERROR_UNKNOWN"
	type q struct {
		status string
		uses   map[uint32]uint64
	}
	tests := []struct {
		name             string
		queries          []q
		start, end, peak uint64
		exported         []uint64 // the counter values the export gets for pid 8
	}{
		{"exited", []q{{ok, map[uint32]uint64{7: gib, 8: 2 * gib}}, {ok, map[uint32]uint64{7: gib}}, {ok, map[uint32]uint64{7: gib}}},
			2 * gib, 0, 2 * gib, []uint64{2 * gib, 0}},
		{"a failed query after it", []q{{ok, map[uint32]uint64{8: 2 * gib}}, {failed, nil}},
			2 * gib, 2 * gib, 2 * gib, []uint64{2 * gib}},
		{"a failed query, then unlisted", []q{{ok, map[uint32]uint64{8: 2 * gib}}, {failed, nil}, {ok, map[uint32]uint64{}}},
			2 * gib, 0, 2 * gib, []uint64{2 * gib, 0}},
		{"listed late", []q{{ok, map[uint32]uint64{7: gib}}, {failed, nil}, {ok, map[uint32]uint64{7: gib, 8: 3 * gib}}},
			0, 3 * gib, 3 * gib, []uint64{3 * gib}},
		{"back again", []q{{ok, map[uint32]uint64{8: gib}}, {ok, nil}, {ok, map[uint32]uint64{8: 2 * gib}}},
			gib, 2 * gib, 2 * gib, []uint64{gib, 0, 2 * gib}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var samples []store.Sample
			for i, qq := range tt.queries {
				samples = append(samples, procSample(tClock+int64(i+1)*100*ms, qq.status, qq.uses))
			}
			log := &sampleLog{}
			rep := runSpec{symbols: []string{"cuMemAlloc_v2"}, samples: samples}.analyze(t, log)
			v := viewRow(rep, "process used", 8)
			if v == nil {
				t.Fatal("no process used row for pid 8")
			}
			for _, c := range []struct {
				name string
				got  *uint64
				want uint64
			}{{"start", v.Start, tt.start}, {"end", v.End, tt.end}, {"peak", v.Peak, tt.peak}} {
				if c.got == nil || *c.got != c.want {
					t.Errorf("%s %v MiB, want %v MiB", c.name, mibOf(c.got), c.want>>20)
				}
			}
			if got := log.byPID[8]; !equalU64(got, tt.exported) {
				t.Errorf("exported counter values %v, want %v", got, tt.exported)
			}
		})
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

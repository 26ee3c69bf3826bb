package html

import (
	"testing"

	"github.com/retrivium/forensic/report"
)

// The "traced live after it" column is of each call's own GPU: its header
// names a GPU only when every call ran on that one, else each cell names
// its GPU (a process that used GPU 1 and then failed on GPU 0 must not
// show GPU 1's bytes under "GPU 0").
func TestLeadLiveColumnNamesEachCallsGPU(t *testing.T) {
	mark := func(end int64, gpu *int, live uint64, first bool) report.CallMark {
		return report.CallMark{EndNS: end, PID: 7, TID: 7, Symbol: "cuMemAlloc_v2", GPU: gpu, Live: u64(live), First: first}
	}
	tests := []struct {
		name   string
		lead   []report.CallMark
		header string
		cells  []string
	}{
		{"one GPU", []report.CallMark{mark(1e9, intp(1), 100<<20, false), mark(2e9, intp(1), 200<<20, true)},
			"GPU 1", []string{"100.0 MiB", "200.0 MiB"}},
		{"two GPUs", []report.CallMark{mark(1e9, intp(1), 100<<20, false), mark(2e9, intp(0), 0, true)},
			"the call's GPU", []string{"GPU 1: 100.0 MiB", "GPU 0: 0 B"}},
		{"a GPU unknown", []report.CallMark{mark(1e9, nil, 100<<20, false), mark(2e9, intp(0), 0, true)},
			"the call's GPU", []string{"100.0 MiB", "GPU 0: 0 B"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := &report.Report{FirstFailure: &report.Failure{PID: 7, TimeNS: 2e9, GPUIndex: intp(0)},
				Timeline: &report.Timeline{Lead: tt.lead}}
			v := newLead(rep, testClock(t))
			if v == nil {
				t.Fatal("no lead table")
			}
			if v.GPU != tt.header {
				t.Errorf("header names %q, want %q", v.GPU, tt.header)
			}
			for i, want := range tt.cells {
				if v.Rows[i].Live != want {
					t.Errorf("row %d: %q, want %q", i, v.Rows[i].Live, want)
				}
			}
		})
	}
}

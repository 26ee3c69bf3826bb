package analyze

import (
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
)

func sym(name string) *cuda.Symbol {
	s, _, ok := cuda.Lookup(name)
	if !ok {
		panic(name)
	}
	return s
}

// The attribution rule: the operation class meets the meaning of the code.
func TestAttributionOf(t *testing.T) {
	tests := []struct {
		symbol string
		code   int32
		want   report.Attribution
	}{
		{"cuMemAlloc_v2", 2, report.AttrAllocation},          // out of memory
		{"cuMemAlloc_v2", 1, report.AttrAllocation},          // a bad size
		{"cuMemAllocHost_v2", 2, report.AttrAllocation},      // host allocation
		{"cuCtxCreate_v2", 2, report.AttrAllocation},         // a context needs memory too
		{"cuIpcOpenMemHandle_v2", 205, report.AttrMapping},   // map failed
		{"cuMemHostRegister_v2", 712, report.AttrMapping},    // already registered
		{"cuCtxEnablePeerAccess", 711, report.AttrMapping},   // too many peers
		{"cuMemAlloc_v2", 3, report.AttrNotMemory},           // not initialized
		{"cuMemAlloc_v2", 201, report.AttrNotMemory},         // no context
		{"cuIpcOpenMemHandle_v2", 100, report.AttrNotMemory}, // no device
		{"cuMemAlloc_v2", 700, report.AttrMissingEvidence},   // sticky: a kernel faulted earlier
		{"cuMemAlloc_v2", 999, report.AttrMissingEvidence},   // the driver does not say
		{"cuMemAlloc_v2", 12345, report.AttrMissingEvidence}, // a code not in the table
		{"cuMemFree_v2", 1, report.AttrAllocation},           // a bad free is the allocation side's
		{"cuIpcCloseMemHandle", 400, report.AttrMapping},     // a bad unmap is the mapping side's
		{"cuInit", 100, report.AttrNotMemory},                // identity/initialization
	}
	for _, tt := range tests {
		got := attributionOf(sym(tt.symbol), cuda.LookupResult(tt.code).Meaning)
		if got != tt.want {
			t.Errorf("%s returning %d: %s, want %s", tt.symbol, tt.code, got, tt.want)
		}
	}
}

// The bounds of the traced difference between what a sample saw and the
// state at the failure (at t=100).
func TestTracedBetween(t *testing.T) {
	tests := []struct {
		name    string
		changes []change
		s, e    int64
		lo, hi  int64
	}{
		{"nothing", nil, 200, 210, 0, 0},
		{"freed after the failure, before the sample", []change{{150, 160, -10, -10, 0}}, 200, 210, 10, 10},
		{"freed after the failure, after the sample", []change{{250, 260, -10, -10, 0}}, 200, 210, 0, 0},
		{"allocated before the failure, after an earlier sample", []change{{50, 60, +10, +10, 0}}, 20, 30, 10, 10},
		{"allocated before the failure, before the sample", []change{{50, 60, +10, +10, 0}}, 70, 80, 0, 0},
		{"a free overlapping the sample", []change{{205, 215, -10, -10, 0}}, 200, 210, 0, 10},
		{"an allocation overlapping an earlier sample", []change{{25, 35, +10, +10, 0}}, 20, 30, 0, 10},
		// A grant to several peers costs between one mapping and one per peer.
		{"a grant to 3 peers released after the failure, before the sample", []change{{150, 160, -30, -10, 0}}, 200, 210, 10, 30},
		{"a grant to 2 peers made before the failure, after an earlier sample", []change{{50, 60, 10, 20, 0}}, 20, 30, 10, 20},
		{"a grant to 2 peers the sample saw before the failure", []change{{50, 60, 10, 20, 0}}, 70, 80, 0, 0},
		{"a grant to 2 peers overlapping an earlier sample", []change{{25, 35, 10, 20, 0}}, 20, 30, 0, 20},
		// A call that straddles the failure may have taken effect on either side.
		{"a free overlapping the failure, seen by the sample", []change{{90, 110, -10, -10, 0}}, 200, 210, 0, 10},
		// What a process held when it exited is freed between its last call
		// and its exit; a sample in between may or may not have seen it.
		{"an exit's release spanning the sample", []change{{100, 260, -10, -10, 7}}, 200, 210, 0, 10},
		{"an exit's release before the sample", []change{{100, 150, -10, -10, 7}}, 200, 210, 10, 10},
		{"an exact and a ranged change", []change{{150, 160, -10, -10, 0}, {170, 180, -20, -10, 0}}, 200, 210, 20, 30},
	}
	for _, tt := range tests {
		lo, hi := between(tt.changes, 100, tt.s, tt.e)
		if lo != tt.lo || hi != tt.hi {
			t.Errorf("%s: between = [%d, %d], want [%d, %d]", tt.name, lo, hi, tt.lo, tt.hi)
		}
	}
}

func TestHumanBytes(t *testing.T) {
	for v, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1 << 20: "1.0 MiB", 3 << 29: "1.50 GiB"} {
		if got := report.HumanBytes(v); got != want {
			t.Errorf("HumanBytes(%d) = %s, want %s", v, got, want)
		}
	}
}

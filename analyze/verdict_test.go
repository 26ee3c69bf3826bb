package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

func sym(name string) *cuda.Symbol {
	s, _, ok := cuda.Lookup(name)
	if !ok {
		panic(name)
	}
	return s
}

// The attribution rule: the operation class meets the meaning of the code.
func TestAttributionByResultCode(t *testing.T) {
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
		got := attribution(attributionFacts{failed: sym(tt.symbol), meaning: cuda.LookupResult(tt.code).Meaning})
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
		{"freed after the failure, before the sample", []change{{150, 160, -10, -10}}, 200, 210, 10, 10},
		{"freed after the failure, after the sample", []change{{250, 260, -10, -10}}, 200, 210, 0, 0},
		{"allocated before the failure, after an earlier sample", []change{{50, 60, +10, +10}}, 20, 30, 10, 10},
		{"allocated before the failure, before the sample", []change{{50, 60, +10, +10}}, 70, 80, 0, 0},
		{"a free overlapping the sample", []change{{205, 215, -10, -10}}, 200, 210, 0, 10},
		{"an allocation overlapping an earlier sample", []change{{25, 35, +10, +10}}, 20, 30, 0, 10},
		// A grant to several peers costs between one mapping and one per peer.
		{"a grant to 3 peers released after the failure, before the sample", []change{{150, 160, -30, -10}}, 200, 210, 10, 30},
		{"a grant to 2 peers made before the failure, after an earlier sample", []change{{50, 60, 10, 20}}, 20, 30, 10, 20},
		{"a grant to 2 peers the sample saw before the failure", []change{{50, 60, 10, 20}}, 70, 80, 0, 0},
		{"a grant to 2 peers overlapping an earlier sample", []change{{25, 35, 10, 20}}, 20, 30, 0, 20},
		// A call that straddles the failure may have taken effect on either side.
		{"a free overlapping the failure, seen by the sample", []change{{90, 110, -10, -10}}, 200, 210, 0, 10},
		// What a process held when it exited is freed between its last call
		// and its exit; a sample in between may or may not have seen it.
		{"an exit's release spanning the sample", []change{{100, 260, -10, -10}}, 200, 210, 0, 10},
		{"an exit's release before the sample", []change{{100, 150, -10, -10}}, 200, 210, 10, 10},
		{"an exact and a ranged change", []change{{150, 160, -10, -10}, {170, 180, -20, -10}}, 200, 210, 20, 30},
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

// When an identity query failed before the first failed allocation, the
// verdict does not call the allocation the first failed operation: it is
// the first failed allocation, and the earlier call it names as the cause
// is the one the failure list can mark.
func TestFirstFailureAfterAnEarlierQuery(t *testing.T) {
	syms := []string{"cuMemAlloc_v2", "cuDeviceGet"}
	const notInit = 3 // CUDA_ERROR_NOT_INITIALIZED
	cases := []struct {
		name  string
		query bool // cuDeviceGet failed first
		lead  string
	}{
		{"an earlier failed query", true, "The first failed allocation is cuMemAlloc_v2"},
		{"the allocation alone", false, "The first failed operation is cuMemAlloc_v2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs := []store.Event{call(0, tClock+200*ms, notInit, cuda.Fields{Has: cuda.FieldSize, Size: gib})}
			if c.query {
				evs = append(evs, call(1, tClock+100*ms, notInit, cuda.Fields{}))
			}
			rep := runSpec{symbols: syms, events: evs}.analyze(t, nil)
			if rep.FirstFailure == nil || rep.FirstFailure.Symbol != "cuMemAlloc_v2" || rep.Attribution != report.AttrNotMemory {
				t.Fatalf("first %+v, attribution %s", rep.FirstFailure, rep.Attribution)
			}
			if !strings.HasPrefix(rep.Verdict, c.lead) {
				t.Errorf("verdict %q, want it to begin %q", rep.Verdict, c.lead)
			}
			if c.query && (!rep.Cause.Names(&rep.Failures[0]) || rep.Cause.Names(&rep.Failures[1])) {
				t.Errorf("cause %+v does not name the earlier query alone: %+v", rep.Cause, rep.Failures)
			}
		})
	}
}

// Page-locked host memory that could not be had (cuMemHostAlloc, or
// cuMemHostRegister, which pins what it registers) is an allocation
// problem of host memory, judged against no GPU view, with next steps for
// pinned memory; a registration refused for a mapping reason stays a
// mapping problem.
func TestHostPinnedMemoryFailures(t *testing.T) {
	syms := []string{"cuMemHostRegister_v2", "cuMemHostAlloc"}
	cases := []struct {
		name  string
		sym   uint16
		res   int32
		want  report.Attribution
		steps bool
	}{
		{"register out of memory", 0, 2, report.AttrAllocation, true},
		{"host alloc out of memory", 1, 2, report.AttrAllocation, true},
		{"register of a registered range", 0, 712, report.AttrMapping, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := call(c.sym, tClock+100*ms, c.res, cuda.Fields{Has: cuda.FieldSize, Size: 100 << 20})
			rep := runSpec{symbols: syms, events: []store.Event{e}}.analyze(t, nil)
			if rep.Attribution != c.want || rep.Capacity == nil || *rep.Capacity != report.CapNotApplicable {
				t.Fatalf("attribution %s, capacity %v, want %s, not-applicable: %s", rep.Attribution, rep.Capacity, c.want, rep.Verdict)
			}
			steps := strings.Join(rep.NextSteps, " / ")
			if got := strings.Contains(steps, "ulimit -l") && strings.Contains(steps, "pin_memory"); got != c.steps {
				t.Errorf("pinned-memory next steps %v, want %v: %q", got, c.steps, steps)
			}
			if c.steps && (strings.Contains(rep.Verdict, "mapping problem") || !strings.Contains(rep.Verdict, "page-locked")) {
				t.Errorf("verdict %q", rep.Verdict)
			}
		})
	}
}

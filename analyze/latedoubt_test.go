package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// Under --pid the process had libcuda loaded before the probes went in.
// When the capacity is evidenced, the verdict gives the numbers first,
// then the one uncertain thing, in few words and with the attach's time:
// the time the probes went in on the library the process maps, else the
// earliest attach, else no time. Another gap that could hide a failure is
// said after it, as the missing list says it.
func TestLateAttachDoubtFollowsTheNumbers(t *testing.T) {
	oom := call(0, tClock+500*ms, 2, cuda.Fields{Has: cuda.FieldSize, Size: 32 * gib})
	libcuda := store.Library{Path: "/usr/lib/libcuda.so.1", Inode: 42, Attached: []string{"cuMemAlloc_v2"}, Time: tClock + 250*ms}
	other := store.Library{Path: "/opt/other/libcuda.so.1", Inode: 43, Attached: []string{"cuMemAlloc_v2"}, Time: tClock + 100*ms}
	tests := []struct {
		name   string
		libs   []store.Library
		maps   []store.Mapping
		abrupt bool
		drops  []store.Drops
		doubt  string
	}{
		{"the process's own library", []store.Library{other, libcuda}, []store.Mapping{{Path: "/usr/lib/libcuda.so.1", Inode: 42}}, false, nil,
			"This may not be the job's first failure: calls before the attach at +0.250 s are not recorded."},
		{"mappings name no library: the earliest attach", []store.Library{libcuda, other}, nil, false, nil,
			"This may not be the job's first failure: calls before the attach at +0.100 s are not recorded."},
		{"no library recorded", nil, nil, false, nil,
			"This may not be the job's first failure: calls before the recorder attached are not recorded."},
		{"lost calls too", []store.Library{libcuda}, []store.Mapping{{Path: "/usr/lib/libcuda.so.1", Inode: 42}}, true,
			[]store.Drops{{Time: tClock + 600*ms, Stats: store.Stats{Calls: 4, Events: 1, LostCalls: 3, LostFirst: tClock + 300*ms, LostLast: tClock + 310*ms}}},
			"This may not be the job's first failure: 3 calls were lost (ring buffer full) from +0.300 s on, before the failure: an earlier failure may be among them. Calls before the attach at +0.250 s are not recorded."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			procs := []store.Process{{PID: 7, Start: tClock, Exe: "/bin/app", Root: true, AttachedLate: true, Maps: tt.maps,
				Devices: []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}}}
			rep := runSpec{symbols: []string{"cuMemAlloc_v2"}, events: []store.Event{oom}, procs: procs, libs: tt.libs,
				samples: []store.Sample{fbSample(tClock+400*ms, 2*gib)}, abrupt: tt.abrupt, drops: tt.drops}.analyze(t, nil)
			if rep.Attribution != report.AttrMissingEvidence || rep.Capacity == nil || *rep.Capacity != report.CapFBExhausted {
				t.Fatalf("attribution %s, capacity %v; want missing-evidence, framebuffer-exhausted: %s", rep.Attribution, rep.Capacity, rep.Verdict)
			}
			v := rep.Verdict
			numbers, doubt := strings.Index(v, "32.00 GiB requested"), strings.Index(v, tt.doubt)
			if doubt < 0 {
				t.Fatalf("verdict does not say %q:\n%s", tt.doubt, v)
			}
			if numbers < 0 || numbers > doubt {
				t.Errorf("the numbers do not come before the doubt:\n%s", v)
			}
		})
	}
}

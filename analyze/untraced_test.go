package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// A recorded process NVML saw holding memory with no traced call is
// missing evidence, and the reason fits what the record says of it: a
// process already running when recording started allocated before it;
// one followed from its start reached the driver some other way.
func TestUntracedMemoryReason(t *testing.T) {
	for _, tt := range []struct {
		name string
		late bool
		want string
	}{
		{"followed from its start", false, "used a libcuda forensic did not attach to"},
		{"already running", true, "was already running when recording started"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			procs := []store.Process{{PID: 7, Start: tClock, Exe: "/bin/app", Root: true, AttachedLate: tt.late,
				Devices: []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}}}
			samples := []store.Sample{procSample(tClock+100*ms, "NVML_SUCCESS", map[uint32]uint64{7: 3 * gib})}
			rep := runSpec{symbols: []string{"cuMemAlloc_v2"}, samples: samples, procs: procs}.analyze(t, &sampleLog{})
			var found *report.Missing
			for i, m := range rep.Missing {
				if strings.Contains(m.What, "holding 3.00 GiB") {
					found = &rep.Missing[i]
				}
			}
			if found == nil {
				t.Fatalf("no missing evidence for the untraced 3 GiB: %+v", rep.Missing)
			}
			if !strings.Contains(found.What, tt.want) {
				t.Errorf("%q lacks %q", found.What, tt.want)
			}
		})
	}
}

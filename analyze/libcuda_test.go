package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// A workload that never loaded libcuda is told so: no framework-pool
// advice (it had no pool on the GPU), and "record again without
// --libcuda" only when --libcuda was given.
func TestWorkloadWithoutLibcuda(t *testing.T) {
	one := 1
	exit1 := &store.Exit{Code: &one, Time: tClock + 50*ms}
	given := store.Library{Path: "/usr/lib/libcuda.so.1", Attached: []string{"cuInit"}} // MappedBy 0: --libcuda
	mapped := given
	mapped.MappedBy = 7
	tests := []struct {
		name      string
		libs      []store.Library
		abrupt    bool
		want, not []string
	}{
		{"never loaded", nil, false,
			[]string{"never loaded libcuda", "exited with status 1", "LD_DEBUG=libs"},
			[]string{"memory pool", "PREALLOCATE", "--libcuda"}},
		{"given with --libcuda, no call", []store.Library{given}, false,
			[]string{"no traced call was recorded", "record again without --libcuda", "memory pool"},
			[]string{"never loaded"}},
		{"mapped by the workload, no call", []store.Library{mapped}, false,
			[]string{"no traced call was recorded", "memory pool"},
			[]string{"--libcuda", "never loaded"}},
		// Without a stop record the libraries may not all have been
		// written: nothing is said to be never loaded.
		{"abrupt, no library", nil, true,
			[]string{"no traced call was recorded"},
			[]string{"never loaded"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			procs := []store.Process{{PID: 7, Start: tClock, Exe: "/bin/app", Root: true, Exit: exit1}}
			rep := runSpec{symbols: []string{"cuInit"}, procs: procs, libs: tt.libs, abrupt: tt.abrupt, workload: exit1}.analyze(t, nil)
			if rep.Attribution != report.AttrMissingEvidence {
				t.Errorf("attribution %s, want missing-evidence: the workload's failure is not in the record", rep.Attribution)
			}
			var all []string
			for _, m := range rep.Missing {
				all = append(all, m.What, m.Fix)
			}
			text := rep.Verdict + "\n" + strings.Join(all, "\n")
			for _, w := range tt.want {
				if !strings.Contains(text, w) {
					t.Errorf("lacks %q:\n%s", w, text)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(text, n) {
					t.Errorf("says %q:\n%s", n, text)
				}
			}
		})
	}
}

// A process held at its libcuda mapping that ran on before the probes were
// in (and exited before the recorder could attach) leaves no library and
// no call: the record then says the hold was lost, never that the
// workload did not load libcuda.
func TestLostHoldIsNotANeverLoadedLibcuda(t *testing.T) {
	procs := []store.Process{{PID: 7, Start: tClock, Exe: "/bin/app", Root: true}}
	rep := runSpec{symbols: []string{"cuInit"}, procs: procs, lostHolds: 1}.analyze(t, nil)
	var all []string
	for _, m := range rep.Missing {
		all = append(all, m.What)
	}
	text := rep.Verdict + "\n" + strings.Join(all, "\n")
	if rep.Attribution != report.AttrMissingEvidence || strings.Contains(text, "never loaded") ||
		!strings.Contains(text, "did not hold its process") {
		t.Errorf("attribution %s; want missing-evidence naming the lost hold, not a libcuda never loaded:\n%s", rep.Attribution, text)
	}
}

package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/cuda"
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

// A process whose calls were traced reached the driver through a libcuda
// the probes were on: when it exits 1 with every failure recovered, an
// untraced libcuda is not offered as a cause, nor "record again without
// --libcuda" as a step; a process with no traced call keeps both.
func TestBadExitOfATracedProcessDoesNotBlameAnUntracedLibcuda(t *testing.T) {
	one := 1
	exit1 := &store.Exit{Code: &one, Time: tClock + 500*ms}
	given := store.Library{Path: "/usr/lib/libcuda.so.1", Attached: allocFreeSyms} // MappedBy 0: --libcuda
	oom := call(0, tClock+100*ms, 2, cuda.Fields{Has: cuda.FieldSize, Size: 4 * gib})
	evs := []store.Event{alloc(0, tClock+50*ms, gib, 0xa000), oom, alloc(0, tClock+200*ms, 4*gib, 0xb000)}
	procs := []store.Process{{PID: 7, Start: tClock, Exe: "/bin/app", Root: true, Exit: exit1}}
	rep := runSpec{symbols: allocFreeSyms, events: evs, procs: procs, libs: []store.Library{given}, workload: exit1}.analyze(t, nil)
	if rep.Attribution != report.AttrMissingEvidence || len(rep.Missing) == 0 {
		t.Fatalf("attribution %s, missing %+v: want the bad exit as missing evidence", rep.Attribution, rep.Missing)
	}
	m := rep.Missing[len(rep.Missing)-1]
	if !strings.Contains(m.What, "exited with status 1") || !strings.Contains(m.What, "Its own code may have failed, or a framework's memory pool") {
		t.Errorf("what: %s", m.What)
	}
	if strings.Contains(m.What, "untraced libcuda") || strings.Contains(m.Fix, "--libcuda") {
		t.Errorf("a traced process is sent after an untraced libcuda: %s / %s", m.What, m.Fix)
	}
}

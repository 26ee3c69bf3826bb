package bpf

import (
	"os"
	"os/exec"
	"reflect"
	"testing"

	"github.com/retrivium/forensic/internal/e2eenv"
)

// Every counter of enum fx_counter has a row, and each row fills its own
// Stats field: setting one counter changes exactly one field.
func TestCountersTable(t *testing.T) {
	seen := map[string]int{}
	for i, c := range counters {
		if c.set == nil {
			t.Fatalf("counter %d has no row in the counters table", i)
		}
		var got Stats
		c.set(&got, 1_000_000_007)
		v := reflect.ValueOf(got)
		var changed []string
		for f := 0; f < v.NumField(); f++ {
			if !v.Field(f).IsZero() {
				changed = append(changed, v.Type().Field(f).Name)
			}
		}
		if len(changed) != 1 {
			t.Errorf("counter %d fills %v, want one field", i, changed)
			continue
		}
		if j, dup := seen[changed[0]]; dup {
			t.Errorf("counters %d and %d both fill %s", j, i, changed[0])
		}
		seen[changed[0]] = i
		if n := v.FieldByName(changed[0]); n.CanInt() && n.Int() != 1_000_000_007 || n.CanUint() && n.Uint() != 1_000_000_007 {
			t.Errorf("counter %d: %s = %v", i, changed[0], n)
		}
	}
	if n := reflect.TypeOf(Stats{}).NumField(); len(seen) != n {
		t.Errorf("%d counters fill %d of Stats's %d fields", len(counters), len(seen), n)
	}
}

// Per-CPU values combine as their row says: counts add up, "first" times
// take the earliest one seen (a CPU that saw none has 0), "last" times the
// latest.
func TestSumCPUs(t *testing.T) {
	cpu := func(kv map[forensicFxCounter]uint64) forensicFxStats {
		var s forensicFxStats
		for k, v := range kv {
			s.C[k] = v
		}
		return s
	}
	got := sumCPUs([]forensicFxStats{
		cpu(map[forensicFxCounter]uint64{forensicFxCounterFX_CTR_LOST_CALLS: 2, forensicFxCounterFX_CTR_LOST_FIRST_NS: 500,
			forensicFxCounterFX_CTR_LOST_LAST_NS: 900}),
		cpu(nil),
		cpu(map[forensicFxCounter]uint64{forensicFxCounterFX_CTR_LOST_CALLS: 3, forensicFxCounterFX_CTR_LOST_FIRST_NS: 300,
			forensicFxCounterFX_CTR_LOST_LAST_NS: 700, forensicFxCounterFX_CTR_UNTRACKED: 1, forensicFxCounterFX_CTR_UNTRACKED_FIRST_NS: 42}),
	})
	want := Stats{LostCalls: 5, LostFirst: 300, LostLast: 900, Untracked: 1, UntrackedFirst: 42}
	if got != want {
		t.Fatalf("combined = %+v, want %+v", got, want)
	}
}

// A tracked process forking when the tracked map is full: the child
// cannot be tracked, and the probes count it with the time of the first.
func TestUntrackedCounted(t *testing.T) {
	e2eenv.NeedRoot(t)
	o, err := Load(Options{maxTracked: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	links, err := o.AttachLifecycle()
	if err != nil {
		t.Fatal(err)
	}
	defer CloseLinks(links)
	// This test process fills the one-entry map, then forks.
	if err := o.Track(uint32(os.Getpid())); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := exec.Command("true").Run(); err != nil {
			t.Fatal(err)
		}
	}
	s, err := o.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.Untracked < 3 || s.UntrackedFirst <= 0 {
		t.Fatalf("untracked = %d, first at %d; want at least 3 and a time", s.Untracked, s.UntrackedFirst)
	}
}

package text

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/retrivium/forensic/report"
)

func TestHeadroomSection(t *testing.T) {
	size := uint64(512 << 20)
	mig := 1
	alloc := &report.Failure{Symbol: "cuMemAlloc_v2", Size: &size, PID: 4242,
		Stack: &report.Stack{Frames: []report.Frame{{Address: 0x10}, {Function: "grow_kv_cache", Library: "app"}}}}
	exact := report.Headroom{GPU: 0, View: "framebuffer", LeastFree: 512 << 20, Total: 16 << 30, Percent: 3.125,
		AtNS: 1_500_000_000, Source: "sample and traced calls", Exact: true, Call: alloc}
	bound := report.Headroom{GPU: 1, MIG: &mig, View: "framebuffer", LeastFree: 2 << 30, Total: 20 << 30, Percent: 10,
		AtNS: 2_000_000_000, Source: "sample and traced calls", Note: "no sample was taken after it"}
	read := report.Headroom{GPU: 0, View: "bar1", LeastFree: 252 << 20, Total: 256 << 20, Percent: 98.4, AtNS: 1_000_000_000,
		Source: "sample", Exact: true}
	cases := []struct {
		name     string
		rep      report.Report
		want     []string // in this order
		wantNot  []string
		firstOut bool // the section comes before FAILURES (no failure)
	}{
		{"a near miss leads, with the call that brought it there",
			report.Report{NearMiss: true, NearMissPercent: 5, Headroom: []report.Headroom{exact, read}},
			[]string{"HEADROOM near miss: under 5% of a framebuffer was free",
				"GPU 0 framebuffer: 512.0 MiB free of 16.00 GiB (3.1%) at +1.500 s, exact.",
				"after cuMemAlloc_v2 of 512.0 MiB by pid 4242, in grow_kv_cache",
				"GPU 0 BAR1: 252.0 MiB free of 256.0 MiB (98.4%) at +1.000 s, as a sample read it."},
			[]string{"not exact"}, true},
		{"a bound says why",
			report.Report{NearMissPercent: 5, Headroom: []report.Headroom{bound}},
			[]string{"GPU 1 MIG 1 framebuffer: 2.00 GiB free of 20.00 GiB (10.0%) at +2.000 s, a bound.",
				"not exact: no sample was taken after it"},
			[]string{"near miss"}, true},
		{"after the failure when a call failed",
			report.Report{FirstFailure: alloc, NearMissPercent: 5, Headroom: []report.Headroom{exact}},
			[]string{"FIRST FAILURE", "HEADROOM"}, nil, false},
		{"nothing without samples", report.Report{NearMissPercent: 5}, nil, []string{"HEADROOM"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Write(&b, &tc.rep, Options{Width: 80}); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			flat := strings.Join(strings.Fields(out), " ")
			at := 0
			for _, w := range tc.want {
				i := strings.Index(flat[at:], w)
				if i < 0 {
					t.Fatalf("missing (or out of order) %q in:\n%s", w, out)
				}
				at += i + len(w)
			}
			for _, w := range tc.wantNot {
				if strings.Contains(flat, w) {
					t.Errorf("%q should not be said:\n%s", w, out)
				}
			}
			if tc.firstOut && strings.Index(out, "HEADROOM") > strings.Index(out, "FAILURES") {
				t.Errorf("a run with no failure shows its headroom before the failures list:\n%s", out)
			}
			for _, line := range strings.Split(out, "\n") {
				if utf8.RuneCountInString(line) > 80 {
					t.Errorf("line over 80 columns: %q", line)
				}
			}
		})
	}
}

func TestBudgetSectionNamesEachProcessOnce(t *testing.T) {
	pid, other := uint32(4194304), uint32(77)
	size := uint64(1 << 30)
	cmd := "python serve.py --model " + strings.Repeat("very-long-model-name/", 6)
	rep := report.Report{FirstFailure: &report.Failure{Symbol: "cuMemAlloc_v2", Size: &size}, NearMissPercent: 5,
		Budget: []report.Budget{{GPU: 3, View: "framebuffer", TimeNS: 2_000_000_000, Total: 80 << 30, Parts: []report.BudgetPart{
			{Kind: "reserved", Bytes: 1 << 30, Bound: "exact"},
			{Kind: "traced", PID: &pid, Command: cmd, Bytes: 70 << 30, Bound: "at-least"},
			{Kind: "untraced", PID: &pid, Command: cmd, Bytes: 512 << 20, Bound: "at-most"},
			{Kind: "process-not-recorded", PID: &other, Bytes: 8 << 30, Bound: "exact"},
			{Kind: "free", Bytes: 512 << 20, Bound: "exact"}}}}}
	var b bytes.Buffer
	if err := Write(&b, &rep, Options{Width: 80}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, w := range []string{"BUDGET AT THE FAILURE", "GPU 3's framebuffer (80.00 GiB)", "traced allocations (pid 4194304)",
		"70.00 GiB  at-least", "not sized by a call (pid 4194304)", "not recorded (pid 77)", "free"} {
		if !strings.Contains(out, w) {
			t.Errorf("missing %q:\n%s", w, out)
		}
	}
	if n := strings.Count(strings.Join(strings.Fields(out), " "), "python serve.py"); n != 1 {
		t.Errorf("the command line is said %d times, want once:\n%s", n, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if utf8.RuneCountInString(line) > 80 {
			t.Errorf("line over 80 columns: %q", line)
		}
	}
}

func TestBudgetNamesANeighbourByCommandLineAndUserInOneLineEach(t *testing.T) {
	pid := uint32(31337)
	id := strings.Repeat("0123456789abcdef", 4)
	cmd := "python3 /srv/neighbour/serve.py --cache " + strings.Repeat("x", 200) + " --tail-arg"
	size := uint64(4 << 30)
	rep := report.Report{FirstFailure: &report.Failure{Symbol: "cuMemAlloc_v2", Size: &size}, NearMissPercent: 5,
		Budget: []report.Budget{{GPU: 0, View: "framebuffer", Total: 16 << 30, Parts: []report.BudgetPart{
			{Kind: "process-not-recorded", PID: &pid, Command: cmd, User: "alice", Container: id, Pod: "ml/serve-0",
				Bytes: 2 << 30, Bound: "exact"},
			{Kind: "free", Bytes: 14 << 30, Bound: "exact"}}}}}
	var b bytes.Buffer
	if err := Write(&b, &rep, Options{Width: 80}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	var cmdLine string
	for _, line := range strings.Split(out, "\n") {
		if utf8.RuneCountInString(line) > 80 {
			t.Errorf("line over 80 columns: %q", line)
		}
		if strings.HasPrefix(line, "      $ ") {
			cmdLine = line
		}
	}
	if !strings.HasPrefix(cmdLine, "      $ python3 /srv/neighbour/serve.py") || !strings.HasSuffix(cmdLine, "--tail-arg") ||
		!strings.Contains(cmdLine, "…") {
		t.Errorf("the command line %q: want it on one line, clipped in its middle:\n%s", cmdLine, out)
	}
	if !strings.Contains(out, "not recorded (pid 31337)") ||
		!strings.Contains(out, "      user alice, container 0123456789ab, pod ml/serve-0\n") {
		t.Errorf("the neighbour is not named by pid, user, container and pod:\n%s", out)
	}
}

// A process not recorded that could not be named (it exited before the
// recorder read its /proc) says why under its pid, rather than standing
// as a bare pid; one that was named does not.
func TestBudgetSaysWhyANeighbourIsNotNamed(t *testing.T) {
	gone, named := uint32(4242), uint32(4343)
	rep := report.Report{Budget: []report.Budget{{GPU: 0, View: "framebuffer", Total: 16 << 30, Parts: []report.BudgetPart{
		{Kind: "process-not-recorded", PID: &gone, Bytes: 2 << 30, Bound: "exact",
			Source: "nvmlDeviceGetComputeRunningProcesses" + report.BudgetNotNamed + "not readable in /proc (the process had exited)"},
		{Kind: "process-not-recorded", PID: &named, Command: "serve", Bytes: 1 << 30, Bound: "exact",
			Source: "nvmlDeviceGetComputeRunningProcesses"},
		{Kind: "free", Bytes: 13 << 30, Bound: "exact"}}}}}
	var b bytes.Buffer
	if err := Write(&b, &rep, Options{Width: 80}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "not recorded (pid 4242)") ||
		!strings.Contains(out, "      not named: not readable in /proc (the process had exited)\n") {
		t.Errorf("the unnamed neighbour does not say why:\n%s", out)
	}
	if strings.Count(out, "not named:") != 1 {
		t.Errorf("want one 'not named' line, for pid 4242 only:\n%s", out)
	}
}

func TestBudgetPoolPartNamesThePoolAndItsLimit(t *testing.T) {
	pid := uint32(7)
	size, max := uint64(4<<30), uint64(4<<30)
	rep := report.Report{FirstFailure: &report.Failure{Symbol: "cuMemAlloc_v2", Size: &size}, NearMissPercent: 5,
		Budget: []report.Budget{{GPU: 0, View: "framebuffer", Total: 16 << 30, Parts: []report.BudgetPart{
			{Kind: "pool", PID: &pid, Pool: "0x77", PoolMax: &max, Bytes: 3 << 30, Bound: "exact"},
			{Kind: "free", Bytes: 13 << 30, Bound: "exact"}}}}}
	var b bytes.Buffer
	if err := Write(&b, &rep, Options{Width: 80}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"memory pool in use (pid 7)", "3.00 GiB  exact", "pool 0x77, maxSize 4.00 GiB"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("missing %q:\n%s", w, b.String())
		}
	}
}

func TestBudgetOfBAR1NamesMappingsByKind(t *testing.T) {
	pid := uint32(4194304)
	size := uint64(192 << 20)
	rep := report.Report{FirstFailure: &report.Failure{Symbol: "cuIpcOpenMemHandle_v2", Size: &size}, NearMissPercent: 5,
		Budget: []report.Budget{{GPU: 1, View: "bar1", Total: 256 << 20, Parts: []report.BudgetPart{
			{Kind: "mapping", PID: &pid, Mapping: "peer-access-range", Command: "python train.py", Bytes: 96 << 20, Bound: "at-least"},
			{Kind: "unattributed", Bytes: 4 << 20, Bound: "exact"},
			{Kind: "free", Bytes: 156 << 20, Bound: "exact"}}}}}
	var b bytes.Buffer
	if err := Write(&b, &rep, Options{Width: 80}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, w := range []string{"GPU 1's BAR1 (256.0 MiB)", "peer-access-range (pid 4194304)", "96.0 MiB  at-least",
		"not traced (driver, others)", "$ python train.py"} {
		if !strings.Contains(out, w) {
			t.Errorf("missing %q:\n%s", w, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if utf8.RuneCountInString(line) > 80 {
			t.Errorf("line over 80 columns: %q", line)
		}
	}
}

func TestBudgetAtTheLeastFreeIsSaidOnceAndForARunWithNoFailure(t *testing.T) {
	size := uint64(1 << 30)
	parts := []report.BudgetPart{{Kind: "reserved", Bytes: 1 << 30, Bound: "exact"}, {Kind: "free", Bytes: 15 << 30, Bound: "exact"}}
	least := report.Budget{GPU: 0, View: "framebuffer", At: "least-headroom", TimeNS: 2_000_000_000, Total: 16 << 30, Parts: parts}
	atFailure := least
	atFailure.At = "first-failure"
	laterLeast := least
	laterLeast.TimeNS = 1_000_000_000
	otherLeast := laterLeast
	otherLeast.Parts = []report.BudgetPart{{Kind: "reserved", Bytes: 1 << 30, Bound: "exact"}, {Kind: "free", Bytes: 14 << 30, Bound: "exact"},
		{Kind: "unattributed", Bytes: 1 << 30, Bound: "exact"}}
	pid := uint32(8)
	bar1Least := report.Budget{GPU: 0, View: "bar1", At: "least-headroom", TimeNS: 1_000_000_000, Total: 256 << 20,
		Parts: []report.BudgetPart{{Kind: "mapping", PID: &pid, Mapping: "ipc-mapping", Bytes: 240 << 20, Bound: "exact"},
			{Kind: "unattributed", Bytes: 4 << 20, Bound: "exact"}, {Kind: "free", Bytes: 12 << 20, Bound: "exact"}}}
	bar1Unsplit := bar1Least
	bar1Unsplit.Parts = bar1Least.Parts[1:]
	cases := []struct {
		name      string
		failure   *report.Failure
		budgets   []report.Budget
		wantLeast int // sections at the least free
	}{
		{"a run with no failure shows where its memory went at its least free", nil, []report.Budget{least}, 1},
		{"the failure's own moment is not said twice", &report.Failure{Symbol: "cuMemAlloc_v2", Size: &size},
			[]report.Budget{atFailure, least}, 0},
		{"a least free just before the failure, with the same parts, is not said twice", &report.Failure{Symbol: "cuMemAlloc_v2", Size: &size},
			[]report.Budget{atFailure, laterLeast}, 0},
		{"a least free at another moment than the failure is said too", &report.Failure{Symbol: "cuMemAlloc_v2", Size: &size},
			[]report.Budget{atFailure, otherLeast}, 1},
		{"BAR1 at its least free is said beside the framebuffer", nil, []report.Budget{least, bar1Least}, 2},
		{"BAR1 at its least free with no traced mapping is not said: HEADROOM says its used and free", nil,
			[]report.Budget{least, bar1Unsplit}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := report.Report{FirstFailure: tc.failure, NearMissPercent: 5, Budget: tc.budgets}
			var b bytes.Buffer
			if err := Write(&b, &rep, Options{Width: 80}); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			if n := strings.Count(out, "BUDGET AT THE LEAST FREE"); n != tc.wantLeast {
				t.Errorf("%d sections at the least free, want %d:\n%s", n, tc.wantLeast, out)
			}
			if tc.wantLeast > 0 && !strings.Contains(out, "went when it had least free") {
				t.Errorf("the section does not say its moment:\n%s", out)
			}
		})
	}
}

func TestBudgetTracedPartShowsItsPhasesAndCallSitesIndented(t *testing.T) {
	pid := uint32(7)
	size := uint64(1 << 30)
	rep := report.Report{FirstFailure: &report.Failure{Symbol: "cuMemAlloc_v2", Size: &size}, NearMissPercent: 5,
		Budget: []report.Budget{{GPU: 0, View: "framebuffer", At: "first-failure", Total: 16 << 30, Parts: []report.BudgetPart{
			{Kind: "traced", PID: &pid, Bytes: 11 << 30, Bound: "exact",
				ByPhase: []report.BudgetShare{{Name: "load", Bytes: 6 << 30}, {Name: "serve", Bytes: 5 << 30}},
				BySite:  []report.BudgetShare{{Name: "load, model.py:12", Bytes: 6 << 30}, {Name: "grow_cache, kv.py:40", Bytes: 5 << 30}}},
			{Kind: "free", Bytes: 5 << 30, Bound: "exact"}}}}}
	var b bytes.Buffer
	if err := Write(&b, &rep, Options{Width: 80}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	// Under the part, in its byte column.
	for _, w := range []string{"  traced allocations (pid 7)           11.00 GiB  exact\n      phase: load                       6.00 GiB\n      phase: serve                      5.00 GiB\n",
		"      site: load, model.py:12           6.00 GiB\n      site: grow_cache, kv.py:40        5.00 GiB\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("missing %q:\n%s", w, out)
		}
	}
}

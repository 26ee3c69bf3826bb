package report

import (
	"strings"
	"testing"
)

// Who held the memory: the traced processes, the processes NVML listed,
// the driver's reserve, and what none of them explains, said only when
// the free value compared is exact.
func TestGlanceHeldBy(t *testing.T) {
	gib := uint64(1 << 30)
	gpu, total, reserved, free := 0, 4*gib, gib/2, 3*gib/2
	ns := &NearestSamples{At: []SampleRef{{Kind: "framebuffer", Total: &total}}}
	base := func(text string, nvml uint64) *Report {
		ev := []Evidence{{Field: "framebuffer free at the failure", Value: &free, Text: text, Unit: "bytes", Decisive: true},
			{Field: "framebuffer reserved", Value: &reserved, Unit: "bytes"}}
		if nvml > 0 {
			ev = append(ev, Evidence{Field: "NVML usage of process 9 (not recorded)", Value: &nvml, Unit: "bytes"})
		}
		size := 2 * gib
		return &Report{Verdict: "v", Evidence: ev, NearestSamples: ns,
			FirstFailure:  &Failure{Symbol: "cuMemAlloc_v2", Size: &size, PID: 7, GPUIndex: &gpu},
			LiveAtFailure: []LiveBytes{{PID: 7, GPU: &gpu, View: "framebuffer", Bytes: gib, Count: 1}}}
	}
	for _, tt := range []struct {
		name string
		rep  *Report
		want string
	}{
		{"an untraced gigabyte", base("", 0), "pid 7 1.00 GiB in 1 allocation; the driver 512.0 MiB (reserved); 1.00 GiB no traced call explains"},
		{"NVML names its holder", base("", gib), "pid 7 1.00 GiB in 1 allocation; the driver 512.0 MiB (reserved); process 9 (not recorded) 1.00 GiB"},
		{"a bound says nothing of the rest", base("at most 1.50 GiB", 0), "pid 7 1.00 GiB in 1 allocation; the driver 512.0 MiB (reserved)"},
	} {
		var held string
		for _, l := range tt.rep.Glance() {
			if l.Label == "held by" {
				held = l.Text
			}
		}
		if held != tt.want {
			t.Errorf("%s: held by %q, want %q", tt.name, held, tt.want)
		}
		if !strings.Contains(tt.rep.Glance()[0].Text, "cuMemAlloc_v2") {
			t.Errorf("%s: the first line is not the failed call: %+v", tt.name, tt.rep.Glance())
		}
	}
}

// With a budget of the failure's GPU and view, the summary names its
// largest parts, the largest first, each with its bound, a process's
// parts together, and counts the rest; free memory is no holder, and the
// failing process's command line is on its own line.
func TestGlanceHeldByCitesTheBudget(t *testing.T) {
	gib := uint64(1 << 30)
	gpu, free, size := 0, gib/4, 2*gib
	pid := func(p uint32) *uint32 { return &p }
	rep := &Report{Verdict: "v", FirstFailure: &Failure{Symbol: "cuMemAlloc_v2", Size: &size, PID: 7, GPUIndex: &gpu},
		Evidence: []Evidence{{Field: "framebuffer free at the failure", Value: &free, Unit: "bytes", Decisive: true}},
		Budget: []Budget{{GPU: 0, View: "framebuffer", At: "first-failure", Total: 16 * gib, Parts: []BudgetPart{
			{Kind: "reserved", Bytes: gib / 2, Bound: "exact"},
			{Kind: "traced", PID: pid(7), Command: "python3 serve.py", Bytes: 10 * gib, Bound: "exact"},
			{Kind: "untraced", PID: pid(7), Bytes: gib / 4, Bound: "at-most"},
			{Kind: "process-not-recorded", PID: pid(9), Command: "python3 neighbour.py --hold 4G", Bytes: 4 * gib, Bound: "exact"},
			{Kind: "unattributed", Bytes: gib / 8, Bound: "exact"},
			{Kind: "free", Bytes: free, Bound: "exact"}}}}}
	var held string
	for _, l := range rep.Glance() {
		if l.Label == "held by" {
			held = l.Text
		}
	}
	want := "pid 7 10.00 GiB traced and at most 256.0 MiB in contexts; pid 9 (python3 nei…py --hold 4G) 4.00 GiB, not recorded; " +
		"the driver 512.0 MiB reserved; 1 other part 128.0 MiB"
	if held != want {
		t.Errorf("held by %q\nwant     %q", held, want)
	}
}

// A budget whose sample came after traced calls changed a process's use
// (its use is one "process" part) shows the sample's moment, not the
// failure's: the summary does not cite it.
func TestGlanceHeldByLeavesOutABudgetOfAnotherMoment(t *testing.T) {
	gib := uint64(1 << 30)
	gpu, free, size := 0, gib/2, 2*gib
	pid := uint32(7)
	rep := &Report{Verdict: "v", FirstFailure: &Failure{Symbol: "cuMemAlloc_v2", Size: &size, PID: 7, GPUIndex: &gpu},
		Evidence:      []Evidence{{Field: "framebuffer free at the failure", Value: &free, Unit: "bytes", Decisive: true}},
		LiveAtFailure: []LiveBytes{{PID: 7, GPU: &gpu, View: "framebuffer", Bytes: 15 * gib, Count: 6}},
		Budget: []Budget{{GPU: 0, View: "framebuffer", At: "first-failure", Total: 16 * gib, Parts: []BudgetPart{
			{Kind: "process", PID: &pid, Bytes: 10 * gib, Bound: "exact"},
			{Kind: "free", Bytes: 6 * gib, Bound: "exact"}}}}}
	for _, l := range rep.Glance() {
		if l.Label == "held by" && l.Text != "pid 7 15.00 GiB in 6 allocations" {
			t.Errorf("held by %q, want what the process held at the failure", l.Text)
		}
	}
}

// When the verdict leads with a later failure (the first was recovered),
// "held by" says what that failure's process held then, from its own
// evidence: never LIVE AT THE FIRST FAILURE, a moment when it held more.
func TestGlanceHeldByOfALaterFailureIsItsOwn(t *testing.T) {
	gib := uint64(1 << 30)
	gpu, reserved, free, held, size := 0, gib/2, 9*gib/2, 3*gib, 6*gib
	first := &Failure{Symbol: "cuMemAlloc_v2", Size: &size, PID: 7, GPUIndex: &gpu, Recovered: true}
	later := Failure{Symbol: "cuMemAlloc_v2", Size: &size, PID: 7, GPUIndex: &gpu}
	rep := &Report{Verdict: "v", FirstFailure: first,
		LiveAtFailure: []LiveBytes{{PID: 7, GPU: &gpu, View: "framebuffer", Bytes: 6 * gib, Count: 2}},
		FirstUnrecovered: &Judged{Failure: later, Evidence: []Evidence{
			{Field: "framebuffer free at the failure", Value: &free, Text: "at most 4.50 GiB", Unit: "bytes", Decisive: true},
			{Field: "framebuffer reserved", Value: &reserved, Unit: "bytes"},
			{Field: "traced device allocations of this process", Value: &held, Unit: "bytes", Note: "1 allocation"}}}}
	var got string
	for _, l := range rep.Glance() {
		if l.Label == "held by" {
			got = l.Text
		}
	}
	if want := "pid 7 3.00 GiB in 1 allocation; the driver 512.0 MiB (reserved)"; got != want {
		t.Errorf("held by %q, want %q", got, want)
	}
}

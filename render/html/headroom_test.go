package html

import (
	"bytes"
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

func TestHeadroomSectionHTML(t *testing.T) {
	size := uint64(512 << 20)
	fb := report.Headroom{GPU: 0, View: "framebuffer", LeastFree: 512 << 20, Total: 16 << 30, Percent: 3.125,
		AtNS: 1_500_000_000, Source: "sample and traced calls", Exact: true,
		Call: &report.Failure{Symbol: "cuMemAlloc_v2", Size: &size, PID: 4242}}
	bar1 := report.Headroom{GPU: 0, View: "bar1", LeastFree: 252 << 20, Total: 256 << 20, Percent: 98.4, AtNS: 1_000_000_000,
		Source: "sample", Note: "a traced call overlapped a sample's query"}
	cases := []struct {
		name    string
		rep     report.Report
		want    []string
		wantNot []string
	}{
		{"a near miss", report.Report{Attribution: report.AttrNone, Verdict: "v", NearMiss: true, NearMissPercent: 5,
			Headroom: []report.Headroom{fb, bar1}},
			[]string{`<section id="headroom">`, "near miss</span> Near miss: no call failed, but less than 5% of a framebuffer was free",
				`title="536870912 bytes">512.0 MiB`, "3.1% of 16.00 GiB", "cu<wbr>Mem<wbr>Alloc_<wbr>v2</code> 512.0 MiB", "pid 4242",
				"a bound", "a traced call overlapped"},
			nil},
		{"no near miss", report.Report{Attribution: report.AttrNone, Verdict: "v", NearMissPercent: 5, Headroom: []report.Headroom{bar1}},
			[]string{`<section id="headroom">`, "none traced"}, []string{"Near miss"}},
		{"no samples, no section", report.Report{Attribution: report.AttrNone, Verdict: "v", NearMissPercent: 5},
			nil, []string{`id="headroom"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Write(&b, &tc.rep); err != nil {
				t.Fatal(err)
			}
			page := b.String()
			for _, w := range tc.want {
				if !strings.Contains(page, w) {
					t.Errorf("page lacks %q", w)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(page, w) {
					t.Errorf("page has %q", w)
				}
			}
		})
	}
}

func TestBudgetSectionHTML(t *testing.T) {
	pid := uint32(4242)
	rep := report.Report{Attribution: report.AttrAllocation, Verdict: "v", NearMissPercent: 5,
		Budget: []report.Budget{{GPU: 0, View: "framebuffer", At: "first-failure", Total: 16 << 30, Parts: []report.BudgetPart{
			{Kind: "reserved", Bytes: 4 << 30, Bound: "exact", Source: "nvml reserved"},
			{Kind: "traced", PID: &pid, Command: "python serve.py", Bytes: 8 << 30, Bound: "exact", Source: "traced"},
			{Kind: "free", Bytes: 4 << 30, Bound: "exact", Source: "nvml free"}}}}}
	var b bytes.Buffer
	if err := Write(&b, &rep); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, w := range []string{`<section id="budget">`, `class="b-reserved" style="width:25.00%"`, `class="b-traced" style="width:50.00%"`,
		`class="b-free" style="width:25.00%"`, "pid 4242 python serve.py", `title="8589934592 bytes">8.00 GiB`} {
		if !strings.Contains(page, w) {
			t.Errorf("page lacks %q", w)
		}
	}
	rep.Budget = nil
	b.Reset()
	if err := Write(&b, &rep); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), `id="budget"`) {
		t.Error("a budget section without a budget")
	}
}

func TestBudgetHTMLNamesANeighbourAndAPool(t *testing.T) {
	pid := uint32(31337)
	rep := report.Report{Attribution: report.AttrAllocation, Verdict: "v", NearMissPercent: 5,
		Budget: []report.Budget{{GPU: 0, View: "framebuffer", At: "first-failure", Total: 16 << 30, Parts: []report.BudgetPart{
			{Kind: "process-not-recorded", PID: &pid, Command: "python3 serve.py --port 8000", User: "alice", Pod: "ml/serve-0",
				Bytes: 2 << 30, Bound: "exact", Source: "nvml"},
			{Kind: "pool", PID: &pid, Pool: "0x77", Bytes: 4 << 30, Bound: "exact", Source: "pool"},
			{Kind: "free", Bytes: 10 << 30, Bound: "exact", Source: "nvml free"}}}}}
	var b bytes.Buffer
	if err := Write(&b, &rep); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"pid 31337 python3 serve.py --port 8000 (user alice, pod ml/serve-0)",
		`class="b-pool" style="width:25.00%"`, "(memory pool 0x77)"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("page lacks %q", w)
		}
	}
}

func TestBudgetHTMLOfBAR1AtItsLeastFreeNamesItsViewAndMappings(t *testing.T) {
	pid := uint32(4242)
	rep := report.Report{Attribution: report.AttrNone, Verdict: "v", NearMissPercent: 5,
		Budget: []report.Budget{{GPU: 1, View: "bar1", At: "least-headroom", Total: 256 << 20, Parts: []report.BudgetPart{
			{Kind: "mapping", PID: &pid, Mapping: "ipc-mapping", Command: "python serve.py", Bytes: 240 << 20, Bound: "exact",
				Source: "traced mappings of kind ipc-mapping live at the least free"},
			{Kind: "unattributed", Bytes: 4 << 20, Bound: "exact", Source: "nvml used"},
			{Kind: "free", Bytes: 12 << 20, Bound: "exact", Source: "nvml free"}}}}}
	var b bytes.Buffer
	if err := Write(&b, &rep); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"GPU 1 BAR1, 256.0 MiB in all, at its least free (", "pid 4242 python serve.py (mappings of kind ipc-mapping)",
		`class="b-mapping" style="width:93.75%"`} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("page lacks %q", w)
		}
	}
}

func TestBudgetHTMLSaysItsMomentAndATracedPartsSplit(t *testing.T) {
	pid := uint32(4242)
	parts := []report.BudgetPart{
		{Kind: "traced", PID: &pid, Bytes: 8 << 30, Bound: "exact", Source: "traced",
			ByPhase: []report.BudgetShare{{Name: "load", Bytes: 6 << 30}, {Name: "serve", Bytes: 2 << 30}},
			BySite:  []report.BudgetShare{{Name: "grow_cache, kv.py:40", Bytes: 8 << 30}}},
		{Kind: "free", Bytes: 8 << 30, Bound: "exact", Source: "nvml free"}}
	cases := []struct {
		at   string
		want []string
	}{
		{"first-failure", []string{"at the failure (", "by phase: load 6.00 GiB; serve 2.00 GiB.", "by call site: grow_cache, kv.py:40 8.00 GiB."}},
		{"least-headroom", []string{"at its least free ("}},
	}
	for _, tc := range cases {
		t.Run(tc.at, func(t *testing.T) {
			rep := report.Report{Attribution: report.AttrAllocation, Verdict: "v", NearMissPercent: 5,
				Budget: []report.Budget{{GPU: 0, View: "framebuffer", At: tc.at, Total: 16 << 30, Parts: parts}}}
			var b bytes.Buffer
			if err := Write(&b, &rep); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("page lacks %q", w)
				}
			}
		})
	}
}

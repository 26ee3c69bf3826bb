package rundiff

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// head is a whole GPU's headroom of one view, in MiB.
func head(gpu int, view string, leastMiB uint64, exact bool) report.Headroom {
	return report.Headroom{GPU: gpu, View: view, LeastFree: leastMiB << 20, Total: 80 << 30, Exact: exact}
}

func TestLeastFreeComesFromTheHeadroom(t *testing.T) {
	mig := func(h report.Headroom) report.Headroom { i := 1; h.MIG = &i; return h }
	cases := []struct {
		name      string
		bad, good []report.Headroom
		// want: the least-free differences as "view bytesMiB exact", in order.
		want    []string
		summary string // a part of the first one's summary
	}{
		{"less framebuffer free, both exact", []report.Headroom{head(0, "framebuffer", 100, true)},
			[]report.Headroom{head(0, "framebuffer", 2148, true)}, []string{"framebuffer 2048 true"},
			"least free framebuffer on GPU 0: 100.0 MiB in the failing run, 2.10 GiB in the good run"},
		{"a bound on either side makes the difference a bound", []report.Headroom{head(0, "framebuffer", 100, false)},
			[]report.Headroom{head(0, "framebuffer", 612, true)}, []string{"framebuffer 512 false"},
			"(the failing run's a bound, not exact)"},
		{"each view apart, never added", []report.Headroom{head(0, "framebuffer", 100, true), head(0, "bar1", 10, true)},
			[]report.Headroom{head(0, "framebuffer", 200, false), head(0, "bar1", 200, true)},
			[]string{"framebuffer 100 false", "bar1 190 true"}, "(the good run's a bound, not exact)"},
		{"more free in the failing run is no difference", []report.Headroom{head(0, "framebuffer", 900, true)},
			[]report.Headroom{head(0, "framebuffer", 100, true)}, nil, ""},
		{"under a MiB is noise", []report.Headroom{head(0, "framebuffer", 100, true)},
			[]report.Headroom{{GPU: 0, View: "framebuffer", LeastFree: 101<<20 - 1, Exact: true}}, nil, ""},
		{"a GPU the good run lacks is not compared", []report.Headroom{head(1, "framebuffer", 100, true)},
			[]report.Headroom{head(0, "framebuffer", 900, true)}, nil, ""},
		{"MIG instances are left out", []report.Headroom{mig(head(0, "framebuffer", 1, true))},
			[]report.Headroom{mig(head(0, "framebuffer", 900, true))}, nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := headroomDiffs(&report.Report{Headroom: c.bad}, &report.Report{Headroom: c.good})
			if len(got) != len(c.want) {
				t.Fatalf("%d differences %+v, want %v", len(got), got, c.want)
			}
			for i, cd := range got {
				d := cd.d
				s := d.View + " " + itoa(uint32(d.Bytes>>20)) + " " + map[bool]string{true: "true", false: "false"}[d.Exact]
				if d.Kind != report.DiffLeastFree || s != c.want[i] {
					t.Errorf("difference %d: %s %q, want least-free %q", i, d.Kind, s, c.want[i])
				}
			}
			if len(got) > 0 && !contains(got[0].d.Summary, c.summary) {
				t.Errorf("summary %q, want it to say %q", got[0].d.Summary, c.summary)
			}
		})
	}
}

// A sampled least free (the memory view's low) is not the least free
// compared: only the headroom, which the traced calls correct, is.
func TestLeastFreeIgnoresTheSampledLow(t *testing.T) {
	low := func(v uint64) report.ViewRow {
		return report.ViewRow{GPU: 0, Field: "framebuffer free", View: "framebuffer", Scope: "device", Low: u64(v)}
	}
	bad := &report.Report{MemoryViews: []report.ViewRow{low(1 << 30)}, Headroom: []report.Headroom{head(0, "framebuffer", 3072, true)}}
	good := &report.Report{MemoryViews: []report.ViewRow{low(9 << 30)}, Headroom: []report.Headroom{head(0, "framebuffer", 3072, true)}}
	for _, cd := range viewDiffs(bad, good) {
		if cd.d.Kind == report.DiffLeastFree {
			t.Errorf("a least-free difference from the sampled low: %s", cd.d.Summary)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

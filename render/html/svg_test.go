package html

import (
	"reflect"
	"testing"

	"github.com/retrivium/forensic/report"
)

func TestCoordString(t *testing.T) {
	for _, tc := range []struct {
		in   coord
		want string
	}{
		{0, "0"},
		{208, "208"},
		{12.34, "12.3"},
		{12.35, "12.4"},
		{0.04, "0"},
		{-0.04, "0"}, // never "-0"
		{-3.26, "-3.3"},
		{1199.96, "1200"},
	} {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("coord(%v) = %q, want %q", float64(tc.in), got, tc.want)
		}
	}
}

func TestPathD(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    path
		want string
	}{
		{"empty", path{}, ""},
		{"one point stays visible", path{Points: []point{{1, 2}}}, "M1 2h1.5"},
		{"lines", path{Points: []point{{0, 0}, {10, 5.25}, {20, 0}}}, "M0 0L10 5.3L20 0"},
		{"steps hold each value", path{Points: []point{{0, 0}, {10, 5}, {20, 0}}, Step: true}, "M0 0H10V5H20V0"},
	} {
		if got := tc.p.D(); got != tc.want {
			t.Errorf("%s: D() = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestMarkerAndTicksD(t *testing.T) {
	for _, tc := range []struct {
		name, got, want string
	}{
		{"failure triangle", downMarker{100, 9}.D(), "M100 9l-4.5 -6h9z"},
		{"no ticks", vticks{Y1: 1, Y2: 2}.D(), ""},
		{"ticks", vticks{Xs: []coord{10, 20.5}, Y1: 94, Y2: 100}.D(), "M10 94V100M20.5 94V100"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

func TestTimeAxis(t *testing.T) {
	ax := timeAxis{T0: 1000, T1: 2000, X0: 200, W: 1000}
	for _, tc := range []struct {
		t    int64
		want coord
	}{
		{1000, 200},
		{1500, 700},
		{2000, 1200},
		{0, 200},     // before the run: its left edge
		{9999, 1200}, // after: its right edge
	} {
		if got := ax.X(tc.t); got != tc.want {
			t.Errorf("X(%d) = %v, want %v", tc.t, got, tc.want)
		}
	}
	if got := ax.binStart(3, 10); got != 1300 {
		t.Errorf("binStart(3, 10) = %d, want 1300", got)
	}
	empty := timeAxis{T0: 5, T1: 5, X0: 10, W: 100}
	if got := empty.X(5); got != 10 {
		t.Errorf("an empty axis puts its time at %v, want 10", got)
	}
}

func TestValueAxis(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    valueAxis
		v    uint64
		want coord
	}{
		{"zero at the bottom", valueAxis{Top: 100, Bottom: 150, Height: 142}, 0, 150},
		{"top at the top", valueAxis{Top: 100, Bottom: 150, Height: 142}, 100, 8},
		{"half way", valueAxis{Top: 100, Bottom: 150, Height: 140}, 50, 80},
		{"no top: no division by zero", valueAxis{Top: 0, Bottom: 150, Height: 140}, 0, 150},
	} {
		if got := tc.a.Y(tc.v); got != tc.want {
			t.Errorf("%s: Y(%d) = %v, want %v", tc.name, tc.v, got, tc.want)
		}
	}
}

func TestNiceTimeStep(t *testing.T) {
	for _, tc := range []struct{ span, want int64 }{
		{0, 1},
		{8, 1},
		{1_600_000_000, 200_000_000},
		{148_000_000, 20_000_000},
		{1_000, 200},
		{80_000_000_000, 10_000_000_000},
	} {
		if got := niceTimeStep(tc.span); got != tc.want {
			t.Errorf("niceTimeStep(%d) = %d, want %d", tc.span, got, tc.want)
		}
	}
}

func TestRelLabelAndWallLayout(t *testing.T) {
	for _, tc := range []struct {
		ns, step   int64
		want, wall string
	}{
		{0, 1_000_000_000, "+0 s", "15:04:05"},
		{200_000_000, 200_000_000, "+0.2 s", "15:04:05.000"},
		{40_000_000, 20_000_000, "+0.04 s", "15:04:05.000"},
		{500, 100, "+0.0000005 s", "15:04:05.000000"},
	} {
		if got := relLabel(tc.ns, tc.step); got != tc.want {
			t.Errorf("relLabel(%d, %d) = %q, want %q", tc.ns, tc.step, got, tc.want)
		}
		if got := wallLayout(tc.step); got != tc.wall {
			t.Errorf("wallLayout(%d) = %q, want %q", tc.step, got, tc.wall)
		}
	}
}

func TestValueTicks(t *testing.T) {
	for _, tc := range []struct {
		name string
		top  uint64
		want []string
	}{
		{"80 GiB", 80 << 30, []string{"0 GiB", "20 GiB", "40 GiB", "60 GiB", "80 GiB"}},
		{"256 MiB aperture", 256 << 20, []string{"0 MiB", "100 MiB", "200 MiB"}},
		{"bytes", 3, []string{"0 B", "1 B", "2 B", "3 B"}},
		{"nothing", 0, []string{"0 B", "1 B"}},
		{"just under 2 GiB stays in MiB", 2<<30 - 1, []string{"0 MiB", "1000 MiB", "2000 MiB"}},
	} {
		a := valueAxis{Top: tc.top, Bottom: 150, Height: 142}
		ticks := valueTicks(a, 4)
		var labels []string
		for i, tk := range ticks {
			labels = append(labels, tk.Label)
			if i == 0 && tk.Y != 150 {
				t.Errorf("%s: the first tick is at %v, not the bottom", tc.name, tk.Y)
			}
			if i > 0 && tk.Y >= ticks[i-1].Y {
				t.Errorf("%s: tick %d at %v is not above the one before (%v)", tc.name, i, tk.Y, ticks[i-1].Y)
			}
			if tk.Y < 8 {
				t.Errorf("%s: tick %q at %v is above the axis's top", tc.name, tk.Label, tk.Y)
			}
		}
		if !reflect.DeepEqual(labels, tc.want) {
			t.Errorf("%s: ticks %q, want %q", tc.name, labels, tc.want)
		}
	}
}

func TestLanes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		xs, w []float64
		n     int
		want  []int
	}{
		{"apart: one row", []float64{0, 100, 200}, []float64{50, 50, 50}, 4, []int{0, 0, 0}},
		{"overlapping: next row", []float64{0, 10, 20}, []float64{50, 50, 50}, 4, []int{0, 1, 2}},
		{"a freed row is reused", []float64{0, 10, 60}, []float64{50, 50, 50}, 4, []int{0, 1, 0}},
		{"no row left: no label", []float64{0, 10, 20}, []float64{50, 50, 50}, 2, []int{0, 1, -1}},
		{"none", nil, nil, 4, []int{}},
	} {
		if got := lanes(tc.xs, tc.w, tc.n); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: lanes = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSeriesPaths(t *testing.T) {
	ax := timeAxis{T0: 0, T1: 100, X0: 0, W: 100}
	va := valueAxis{Top: 100, Bottom: 100, Height: 100}
	bucket := func(minT int64, min uint64, maxT int64, max uint64, n int32) report.Bucket {
		return report.Bucket{N: n, MinT: minT, Min: min, MaxT: maxT, Max: max}
	}
	for _, tc := range []struct {
		name    string
		buckets []report.Bucket
		step    bool
		want    []string
	}{
		{"one value per bucket", []report.Bucket{bucket(10, 50, 10, 50, 1), {}, bucket(30, 20, 30, 20, 1)}, false,
			[]string{"M10 50L30 80"}},
		{"min and max in time order", []report.Bucket{bucket(20, 10, 10, 90, 5)}, false,
			[]string{"M10 10L20 90"}},
		{"a gap splits the line", []report.Bucket{bucket(10, 50, 10, 50, 1), {Gaps: 1}, bucket(30, 20, 30, 20, 1)}, false,
			[]string{"M10 50h1.5", "M30 80h1.5"}},
		{"a step series holds to the end", []report.Bucket{bucket(10, 50, 10, 50, 1), bucket(30, 20, 30, 20, 1)}, true,
			[]string{"M10 50H30V80H100V80"}},
		{"nothing", []report.Bucket{{}, {}}, false, nil},
	} {
		var got []string
		for _, p := range seriesPaths(&report.Series{Buckets: tc.buckets}, ax, va, tc.step) {
			got = append(got, p.D())
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: paths %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestRunsMarksD(t *testing.T) {
	for _, tc := range []struct {
		name, got, want string
	}{
		{"failure diamond", diamond{300, 40}.D(), "M300 34l5 6l-5 6l-5 -6z"},
		{"clock interval", errorBar{X0: 290, X1: 310.25, Y: 40, H: 10}.D(), "M290 35V45M310.3 35V45M290 40H310.3"},
		{"an interval of no width", errorBar{X0: 5, X1: 5, Y: 8, H: 4}.D(), "M5 6V10M5 6V10M5 8H5"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

func TestOffsetLabel(t *testing.T) {
	for _, tc := range []struct {
		ns, step int64
		want     string
	}{
		{0, 1_000_000, "0"},
		{-2_000_000, 1_000_000, "−2 ms"},
		{40_000_000, 20_000_000, "+40 ms"},
		{500_000, 500_000, "+500 µs"},
		{-50, 10, "−50 ns"},
		{3_000_000_000, 1_000_000_000, "+3 s"},
		{2_500_000, 500_000, "+2500 µs"}, // counted in the step's unit
	} {
		if got := offsetLabel(tc.ns, tc.step); got != tc.want {
			t.Errorf("offsetLabel(%d, %d) = %q, want %q", tc.ns, tc.step, got, tc.want)
		}
	}
}

func TestFloorDiv(t *testing.T) {
	for _, tc := range []struct{ a, b, want int64 }{{7, 2, 3}, {-7, 2, -4}, {-6, 2, -3}, {0, 5, 0}} {
		if got := floorDiv(tc.a, tc.b); got != tc.want {
			t.Errorf("floorDiv(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// Ticks of a wall-clock axis fall on whole steps of its origin, inside
// the axis, labelled as wall times or as offsets from the origin.
func TestWallTicks(t *testing.T) {
	const base = int64(1_800_000_000) * 1e9
	ax := timeAxis{T0: base - 3_000_000, T1: base + 9_000_000, X0: svgLeft, W: plotW}
	for _, tc := range []struct {
		name     string
		pa       panelAxis
		first    string
		firstAt  int64
		relative bool
	}{
		{"wall clock", panelAxis{ax: ax}, "08:00:00.000", base, false}, // step 2 ms: the first whole one in the axis is base-2 ms
		{"from a failure", panelAxis{ax: ax, origin: base + 500_000, relative: true}, "−2 ms", base - 1_500_000, true},
	} {
		ticks := wallTicks(tc.pa)
		if len(ticks) < 4 {
			t.Fatalf("%s: %d ticks", tc.name, len(ticks))
		}
		for _, tk := range ticks {
			if tk.X < svgLeft || tk.X > svgLeft+plotW {
				t.Errorf("%s: tick %q at %v outside the plot", tc.name, tk.Label, tk.X)
			}
			if (tk.Wall != "") != tc.relative {
				t.Errorf("%s: tick %q has wall label %q", tc.name, tk.Label, tk.Wall)
			}
		}
		i := 0
		if !tc.relative {
			i = 1
		}
		if ticks[i].Label != tc.first || ticks[i].X != ax.X(tc.firstAt) {
			t.Errorf("%s: tick %d %q at %v, want %q at %v", tc.name, i, ticks[i].Label, ticks[i].X, tc.first, ax.X(tc.firstAt))
		}
	}
}

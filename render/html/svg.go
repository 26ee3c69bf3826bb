package html

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// The timeline is inline SVG. These types carry its geometry to the
// template as values, so no markup is formatted by hand: a coordinate
// prints itself, a path writes its own `d` attribute, and the template
// places them in attributes html/template escapes.

// coord is a length or position in SVG user units. It prints with at most
// one decimal, which is finer than a pixel at any size the page is shown.
type coord float64

// String writes c with one decimal, without a trailing ".0".
func (c coord) String() string {
	v := math.Round(float64(c)*10) / 10
	if v == 0 {
		v = 0 // no "-0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// point is one vertex of a path.
type point struct{ X, Y coord }

// path is a line through points: straight segments, or steps (a value
// holds until the next one: horizontal, then vertical).
type path struct {
	Points []point
	Step   bool
}

// D is the path's `d` attribute. A single point is drawn as a short
// horizontal stroke, so it stays visible.
func (p path) D() string {
	var b strings.Builder
	for i, pt := range p.Points {
		switch {
		case i == 0:
			b.WriteString("M" + pt.X.String() + " " + pt.Y.String())
		case p.Step:
			b.WriteString("H" + pt.X.String() + "V" + pt.Y.String())
		default:
			b.WriteString("L" + pt.X.String() + " " + pt.Y.String())
		}
	}
	if len(p.Points) == 1 {
		b.WriteString("h1.5")
	}
	return b.String()
}

// downMarker is the small triangle over a failed call, its tip at (X, Y).
type downMarker struct{ X, Y coord }

// D is the triangle's `d` attribute.
func (m downMarker) D() string {
	return "M" + m.X.String() + " " + m.Y.String() + "l-4.5 -6h9z"
}

// diamond is a failure's mark on the runs picture, centred on (X, Y).
type diamond struct{ X, Y coord }

// D is the diamond's `d` attribute.
func (d diamond) D() string {
	return "M" + d.X.String() + " " + (d.Y - 6).String() + "l5 6l-5 6l-5 -6z"
}

// errorBar is an interval from X0 to X1 at height Y: a horizontal stroke
// with an end cap H tall at each end.
type errorBar struct{ X0, X1, Y, H coord }

// D is the bar's `d` attribute.
func (e errorBar) D() string {
	top, bottom := (e.Y - e.H/2).String(), (e.Y + e.H/2).String()
	return "M" + e.X0.String() + " " + top + "V" + bottom + "M" + e.X1.String() + " " + top + "V" + bottom +
		"M" + e.X0.String() + " " + e.Y.String() + "H" + e.X1.String()
}

// box is a rectangle.
type box struct{ X, Y, W, H coord }

// Right is the x of the box's right edge.
func (b box) Right() coord { return b.X + b.W }

// timeAxis maps run-clock times onto the plot's horizontal extent,
// clamping times outside the run to its edges.
type timeAxis struct {
	T0, T1 int64   // run clock, ns
	X0, W  float64 // plot left and width, user units
}

// span is the axis's length in ns (at least 1).
func (a timeAxis) span() int64 { return max(a.T1-a.T0, 1) }

// X is where time t falls.
func (a timeAxis) X(t int64) coord {
	t = min(max(t, a.T0), a.T1)
	return coord(a.X0 + float64(t-a.T0)/float64(a.span())*a.W)
}

// binStart is when bin i of n equal bins starts.
func (a timeAxis) binStart(i, n int) int64 {
	return a.T0 + int64(float64(i)/float64(n)*float64(a.span()))
}

// valueAxis maps byte values onto a panel's height: 0 at Bottom, Top a
// little below the panel's top edge.
type valueAxis struct {
	Top    uint64
	Bottom float64 // y of the value 0
	Height float64 // from 0 to Top
}

// Y is where value v falls.
func (a valueAxis) Y(v uint64) coord {
	top := max(a.Top, 1)
	return coord(a.Bottom - float64(v)/float64(top)*a.Height)
}

// niceTimeStep picks a grid step (ns) of 1, 2 or 5 times a power of ten
// that gives about eight ticks over span.
func niceTimeStep(span int64) int64 {
	raw := float64(max(span, 1)) / 8
	e := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if m*e >= raw {
			return max(int64(m*e), 1)
		}
	}
	return max(int64(10*e), 1)
}

// relLabel writes an elapsed time as seconds with as many decimals as
// the tick step needs ("+0.25 s" for a 50 ms step).
func relLabel(ns, step int64) string {
	dec := 0
	for s := step; s < int64(time.Second) && dec < 9; s *= 10 {
		dec++
	}
	return "+" + strconv.FormatFloat(float64(ns)/1e9, 'f', dec, 64) + " s"
}

// wallLayout is the wall-clock layout fine enough for a tick step.
func wallLayout(step int64) string {
	switch {
	case step < int64(time.Millisecond):
		return "15:04:05.000000"
	case step < int64(time.Second):
		return "15:04:05.000"
	}
	return "15:04:05"
}

// byteUnit picks the binary unit an axis whose top is v bytes is
// labelled in: the largest that leaves at least 2 of it at the top.
func byteUnit(v uint64) (div float64, unit string) {
	switch {
	case v >= 2<<30:
		return 1 << 30, "GiB"
	case v >= 2<<20:
		return 1 << 20, "MiB"
	case v >= 2<<10:
		return 1 << 10, "KiB"
	}
	return 1, "B"
}

// niceStep picks a tick step of 1, 2, 2.5 or 5 times a power of ten that
// divides top into about n steps.
func niceStep(top float64, n int) float64 {
	if top <= 0 || n <= 0 {
		return 1
	}
	raw := top / float64(n)
	e := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*e >= raw {
			return m * e
		}
	}
	return 10 * e
}

// valueTick is one horizontal grid line of a panel and its label.
type valueTick struct {
	Y     coord
	Label string
}

// valueTicks are the grid lines of an axis from 0 to its top, about n
// steps, labelled in one binary unit.
func valueTicks(a valueAxis, n int) []valueTick {
	div, unit := byteUnit(max(a.Top, 1))
	topU := float64(max(a.Top, 1)) / div
	step := niceStep(topU, n)
	if div == 1 {
		step = math.Max(step, 1) // no fraction of a byte
	}
	var out []valueTick
	for i := 0; ; i++ {
		v := float64(i) * step
		if v > topU*1.0001 {
			break
		}
		y := coord(a.Bottom - v/topU*a.Height)
		out = append(out, valueTick{Y: y, Label: strconv.FormatFloat(v, 'f', -1, 64) + " " + unit})
	}
	return out
}

// lanes places labels on at most n rows so that none overlaps the one
// before it on its row: xs are the labels' left edges in increasing
// order, widths their widths. A label that fits no row gets -1 (its rule
// is drawn without a label; its title still names it).
func lanes(xs, widths []float64, n int) []int {
	ends := []float64{}
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = -1
		for l, end := range ends {
			if x > end {
				out[i], ends[l] = l, x+widths[i]
				break
			}
		}
		if out[i] < 0 && len(ends) < n {
			ends = append(ends, x+widths[i])
			out[i] = len(ends) - 1
		}
	}
	return out
}

// offsetLabel writes a tick's signed offset from the axis's origin in the
// unit its step is counted in ("−2 ms", "0", "+500 µs"). The steps of
// niceTimeStep are whole numbers of that unit, so no decimals are needed.
func offsetLabel(ns, step int64) string {
	div, unit := int64(1), "ns"
	for _, u := range []struct {
		div  int64
		name string
	}{{1_000, "µs"}, {1_000_000, "ms"}, {1_000_000_000, "s"}} {
		if step >= u.div {
			div, unit = u.div, u.name
		}
	}
	switch {
	case ns == 0:
		return "0"
	case ns < 0:
		return "−" + strconv.FormatFloat(float64(-ns)/float64(div), 'f', -1, 64) + " " + unit
	}
	return "+" + strconv.FormatFloat(float64(ns)/float64(div), 'f', -1, 64) + " " + unit
}

// wallText writes Unix nanoseconds as UTC wall time in layout.
func wallText(ns int64, layout string) string {
	return time.Unix(0, ns).UTC().Format(layout)
}

// floorDiv is a / b rounded down (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

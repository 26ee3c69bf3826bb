package html

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/retrivium/forensic/report"
)

// panel is one memory view of one GPU over the run, with its own value
// axis: the framebuffer and the BAR1 aperture each get one.
type panel struct {
	Frame      box
	Title, Sub label
	Legend     []legendKey
	API        *label
	APIFull    string
	Empty      *label
	Grid       []valueTick
	TickX      coord // right edge of the value labels
	Total      *totalLine
	Series     []seriesView
	Unusable   *unusableView
}

// legendKey is one series' key: a short line and its name.
type legendKey struct {
	Y, TextY    coord
	Class, Name string
}

// totalLine is the view's configured size, dashed across the panel.
type totalLine struct {
	Y, LabelY   coord
	Text, Title string
}

// seriesView is one field's series: a path per run of buckets without a
// gap, and a dot per point when there are few.
type seriesView struct {
	Class, Title string
	Paths        []path
	Dots         []dot
}

// dot is one sampled value.
type dot struct {
	X, Y  coord
	Title string
}

// unusableView marks the samples that had no value: a tick each at the
// panel's bottom, never a zero.
type unusableView struct {
	Title string
	Ticks vticks
}

// vticks are short vertical strokes from Y1 to Y2 at each of Xs.
type vticks struct {
	Xs     []coord
	Y1, Y2 coord
}

// D is the strokes' `d` attribute.
func (v vticks) D() string {
	var b strings.Builder
	for _, x := range v.Xs {
		b.WriteString("M" + x.String() + " " + v.Y1.String() + "V" + v.Y2.String())
	}
	return b.String()
}

// panelSpec is what a panel draws.
type panelSpec struct {
	title, sub, totalLabel string
	y, h                   float64
	view                   *report.ViewSeries
	lines                  []seriesSpec
}

// seriesSpec is one field of a view: its name, CSS class and series; a
// step series holds each value until the next (traced totals).
type seriesSpec struct {
	name, class string
	s           *report.Series
	step        bool
}

func newPanel(sp panelSpec, ax timeAxis, c clock) panel {
	v, y0 := sp.view, sp.y
	p := panel{Frame: box{svgLeft, coord(y0), plotW, coord(sp.h)}, Title: label{X: 8, Y: coord(y0 + 13), Text: sp.title},
		Sub: label{X: 8, Y: coord(y0 + 27), Text: sp.sub}}
	top := v.Total
	var drawn []seriesSpec
	for _, l := range sp.lines {
		if l.s != nil && l.s.Points > 0 {
			drawn = append(drawn, l)
			top = max(top, l.s.Peak)
		}
	}
	ly := y0 + 44
	for _, l := range drawn {
		p.Legend = append(p.Legend, legendKey{Y: coord(ly - 4), TextY: coord(ly), Class: l.class, Name: l.name})
		ly += 14
	}
	if v.API != "" {
		p.API, p.APIFull = &label{X: 8, Y: coord(min(ly+2, y0+sp.h+6)), Text: clip(v.API, 34)}, v.API
	}
	p.Unusable = newUnusable(v, ax, y0+sp.h)
	if len(drawn) == 0 {
		msg := "no usable samples"
		if st := statusCounts(v.Status); st != "" {
			msg += ": " + st + " (never drawn as zero)"
		}
		p.Empty = &label{X: svgLeft + 12, Y: coord(y0 + sp.h/2 + 4), Text: msg}
		return p
	}
	va := valueAxis{Top: max(top, 1), Bottom: y0 + sp.h, Height: sp.h - 8}
	p.Grid, p.TickX = valueTicks(va, 4), svgLeft-6
	if v.Total > 0 {
		y := va.Y(v.Total)
		p.Total = &totalLine{Y: y, LabelY: y - 3, Text: sp.totalLabel + " " + report.HumanBytes(v.Total),
			Title: fmt.Sprintf("%s: %s (%d bytes)", sp.totalLabel, report.HumanBytes(v.Total), v.Total)}
	}
	for _, l := range drawn {
		p.Series = append(p.Series, newSeriesView(sp.title, l, ax, va, c))
	}
	return p
}

// statusCounts lists how many samples had each unusable status, sorted.
func statusCounts(status map[string]int) string {
	var ss []string
	for k, n := range status {
		ss = append(ss, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(ss)
	return strings.Join(ss, ", ")
}

// newUnusable places a tick per unusable sample (at least 2 units apart).
func newUnusable(v *report.ViewSeries, ax timeAxis, bottom float64) *unusableView {
	if len(v.Unusable) == 0 {
		return nil
	}
	u := &unusableView{Title: "samples without a value: " + statusCounts(v.Status) + " (shown as gaps, never as zero)",
		Ticks: vticks{Y1: coord(bottom - 6), Y2: coord(bottom)}}
	last := coord(-10)
	for _, t := range v.Unusable {
		if x := ax.X(t); x-last >= 2 {
			u.Ticks.Xs, last = append(u.Ticks.Xs, x), x
		}
	}
	return u
}

func newSeriesView(view string, l seriesSpec, ax timeAxis, va valueAxis, c clock) seriesView {
	s := l.s
	sv := seriesView{Class: l.class, Paths: seriesPaths(s, ax, va, l.step),
		Title: fmt.Sprintf("%s %s: peak %s in this view (%d points before downsampling)", view, l.name,
			report.HumanBytes(s.Peak), s.Points)}
	if s.Points > maxDots || l.step {
		return sv
	}
	for _, b := range s.Buckets {
		if b.N == 0 {
			continue
		}
		for i, pt := range []struct {
			t int64
			v uint64
		}{{b.MinT, b.Min}, {b.MaxT, b.Max}} {
			if i == 1 && (b.N == 1 || (b.MinT == b.MaxT && b.Min == b.Max)) {
				break
			}
			sv.Dots = append(sv.Dots, dot{X: ax.X(pt.t), Y: va.Y(pt.v), Title: fmt.Sprintf("%s %s: %s (%d bytes) at %s, %s",
				view, l.name, report.HumanBytes(pt.v), pt.v, c.rel(pt.t), c.at(pt.t, wallLong))})
		}
	}
	return sv
}

// seriesPaths draws a bucketed series: each bucket's lowest and highest
// values in time order, one path per run of buckets without an unusable
// sample between them. A step series holds its last value to the end of
// the run.
func seriesPaths(s *report.Series, ax timeAxis, va valueAxis, step bool) []path {
	var out []path
	var cur []point
	flush := func() {
		if len(cur) > 0 {
			out = append(out, path{Points: cur, Step: step})
			cur = nil
		}
	}
	var last uint64
	for _, b := range s.Buckets {
		if b.N == 0 {
			if b.Gaps > 0 {
				flush()
			}
			continue
		}
		t1, v1, t2, v2 := b.MinT, b.Min, b.MaxT, b.Max
		if t2 < t1 {
			t1, v1, t2, v2 = t2, v2, t1, v1
		}
		cur, last = append(cur, point{ax.X(t1), va.Y(v1)}), v1
		if b.N > 1 && (t1 != t2 || v1 != v2) {
			cur, last = append(cur, point{ax.X(t2), va.Y(v2)}), v2
		}
	}
	if step && len(cur) > 0 {
		cur = append(cur, point{ax.X(ax.T1), va.Y(last)})
	}
	flush()
	return out
}

// procRow is one process's calls: a mark per call, or a histogram of
// bins when it made too many, and every failure drawn on its own.
type procRow struct {
	Band        box
	Alt, Binned bool
	Name, Sub   label
	NameTitle   string
	Calls       string
	Failed      uint64
	Marks       []callRect
	Bins        []binRect
	FailBins    []binRect
	Fails       []failMark
}

// callRect is one call, coloured by its operation class.
type callRect struct {
	box
	Op, Title string
}

// binRect is one time bin of calls.
type binRect struct {
	box
	Title string
}

// failMark is one failed call: a line, a triangle and maybe a label.
type failMark struct {
	X, Y1, Y2 coord
	Tip       downMarker
	Title     string
	Label     *label
}

func newProcRow(p *report.ProcessTrack, i int, y float64, ax timeAxis, c clock) procRow {
	name := p.Name
	if name == "" {
		name = "?"
	}
	r := procRow{Band: box{0, coord(y), svgW, procRowH}, Alt: i%2 == 1, Binned: p.Marks == nil,
		Name: label{X: 8, Y: coord(y + 13), Text: fmt.Sprintf("pid %d · %s", p.PID, clip(name, 20))},
		Sub:  label{X: 8, Y: coord(y + 25)}, NameTitle: fmt.Sprintf("pid %d %s", p.PID, p.Name), Calls: report.Plural(int(p.Calls), "call"), Failed: p.Failed}
	mid := y + procRowH/2
	for k := range p.Marks {
		m := &p.Marks[k]
		if m.Result != 0 {
			continue // drawn as a failure below
		}
		x := ax.X(m.StartNS)
		r.Marks = append(r.Marks, callRect{box: box{x, coord(mid - 6), max(ax.X(m.EndNS)-x, 1.2), 12}, Op: m.Operation,
			Title: markTitle(m, c)})
	}
	if r.Binned {
		r.Bins = callBins(p.Bins, y, ax, c)
	}
	r.FailBins = failBins(p.FailBins, y, ax, c)
	r.Fails = failMarks(p.Fails, y, ax, c)
	return r
}

// callBins draws calls per time bin, heights on a square-root scale so a
// quiet bin stays visible next to a busy one.
func callBins(bins []uint32, y float64, ax timeAxis, c clock) []binRect {
	var peak uint32
	for _, n := range bins {
		peak = max(peak, n)
	}
	var out []binRect
	bw := plotW / float64(max(len(bins), 1))
	for b, n := range bins {
		if n == 0 {
			continue
		}
		h := 3 + (procRowH-8)*math.Sqrt(float64(n)/float64(peak))
		out = append(out, binRect{box: box{coord(svgLeft + float64(b)*bw), coord(y + procRowH - 4 - h), coord(bw), coord(h)},
			Title: fmt.Sprintf("%d calls from %s to %s", n, c.rel(ax.binStart(b, len(bins))), c.rel(ax.binStart(b+1, len(bins))))})
	}
	return out
}

// failBins draws the failed calls that were counted rather than kept.
func failBins(bins []uint32, y float64, ax timeAxis, c clock) []binRect {
	var out []binRect
	bw := plotW / float64(max(len(bins), 1))
	for b, n := range bins {
		if n > 0 {
			out = append(out, binRect{box: box{coord(svgLeft + float64(b)*bw), coord(y + 3), coord(max(bw, 1.5)), procRowH - 6},
				Title: fmt.Sprintf("%d more failed calls from %s", n, c.rel(ax.binStart(b, len(bins))))})
		}
	}
	return out
}

// failMarks draws each failed call. Labels go where they fit inside the
// plot and overlap no other label: the first and the first unrecovered
// failure get theirs first (shortened to their result if both do not fit
// whole), then the others in time order; a failure whose label has no
// room keeps its tooltip.
func failMarks(fails []report.CallMark, y float64, ax timeAxis, c clock) []failMark {
	out := make([]failMark, len(fails))
	var landmarks, others []int
	for k := range fails {
		m := &fails[k]
		x := ax.X(m.EndNS)
		out[k] = failMark{X: x, Y1: coord(y + 4), Y2: coord(y + procRowH - 3), Tip: downMarker{x, coord(y + 9)},
			Title: "FAILED " + markTitle(m, c)}
		if m.First || m.Unrecovered {
			landmarks = append(landmarks, k)
		} else {
			others = append(others, k)
		}
	}
	var taken []span
	for _, k := range bestLabels(fails, out, landmarks, coord(y+12)) {
		out[k.mark].Label = k.label
		taken = append(taken, k.extent)
	}
	for _, k := range others {
		m := &fails[k]
		for _, l := range labelChoices(clip(m.Symbol+" "+shortResult(m), 40), float64(out[k].X), coord(y+12)) {
			if !overlaps(l.extent, taken) {
				out[k].Label = l.label
				taken = append(taken, l.extent)
				break
			}
		}
	}
	return out
}

// shortResult is a call's result without the CUDA_ERROR_ prefix.
func shortResult(m *report.CallMark) string { return strings.TrimPrefix(resultName(m), "CUDA_ERROR_") }

// span is the horizontal extent of a placed label, with a margin.
type span struct{ lo, hi float64 }

// placedLabel is a label placed for the failure mark at index mark.
type placedLabel struct {
	mark   int
	label  *label
	extent span
}

// labelChoices are the places a label may go, best first: right of x,
// then left of it; only those inside the plot.
func labelChoices(text string, x float64, y coord) []placedLabel {
	w := textWidth(text)
	var out []placedLabel
	if x+5+w <= svgW-4 {
		out = append(out, placedLabel{label: &label{X: coord(x + 5), Y: y, Anchor: "start", Text: text}, extent: span{x + 2, x + 8 + w}})
	}
	if x-5-w >= svgLeft {
		out = append(out, placedLabel{label: &label{X: coord(x - 5), Y: y, Anchor: "end", Text: text}, extent: span{x - 8 - w, x - 2}})
	}
	return out
}

// bestLabels places the labels of the first and first unrecovered
// failures (at most two per row): of every combination of whole or
// shortened labels, right or left, the one that shows the most text
// without an overlap.
func bestLabels(fails []report.CallMark, marks []failMark, idx []int, y coord) []placedLabel {
	var choices [][]placedLabel
	for _, k := range idx {
		m := &fails[k]
		tag := "FIRST: "
		if !m.First {
			tag = "UNRECOVERED: "
		}
		var cs []placedLabel
		for _, text := range []string{clip(tag+m.Symbol+" "+shortResult(m), 40), tag + shortResult(m)} {
			for _, c := range labelChoices(text, float64(marks[k].X), y) {
				c.mark = k
				cs = append(cs, c)
			}
		}
		choices = append(choices, append(cs, placedLabel{mark: k})) // or none
	}
	var best []placedLabel
	bestScore := -1
	var try func(i int, cur []placedLabel)
	try = func(i int, cur []placedLabel) {
		if i == len(choices) {
			if sc := labelScore(cur); sc > bestScore {
				best, bestScore = append([]placedLabel(nil), cur...), sc
			}
			return
		}
		for _, c := range choices[i] {
			if c.label == nil || !overlaps(c.extent, extents(cur)) {
				try(i+1, append(cur, c))
			}
		}
	}
	try(0, nil)
	return slices.DeleteFunc(best, func(p placedLabel) bool { return p.label == nil })
}

// labelScore prefers more labels, then more of their text.
func labelScore(ls []placedLabel) int {
	n := 0
	for _, l := range ls {
		if l.label != nil {
			n += 1000 + len(l.label.Text)
		}
	}
	return n
}

func extents(ls []placedLabel) []span {
	var out []span
	for _, l := range ls {
		if l.label != nil {
			out = append(out, l.extent)
		}
	}
	return out
}

func overlaps(s span, taken []span) bool {
	for _, t := range taken {
		if s.lo < t.hi && t.lo < s.hi {
			return true
		}
	}
	return false
}

// markTitle is a call's tooltip: what it was, when, by whom.
func markTitle(m *report.CallMark, c clock) string {
	var b strings.Builder
	b.WriteString(m.Symbol)
	if m.Size != nil {
		fmt.Fprintf(&b, "(%s)", report.HumanBytes(*m.Size))
	}
	fmt.Fprintf(&b, " → %s\n%s", resultName(m), c.rel(m.EndNS))
	if w := c.at(m.EndNS, wallLong); w != "" {
		fmt.Fprintf(&b, " (%s)", w)
	}
	fmt.Fprintf(&b, ", took %s\npid %d tid %d", report.Duration(m.EndNS-m.StartNS), m.PID, m.TID)
	if m.CUDADevice >= 0 {
		fmt.Fprintf(&b, ", CUDA device %d", m.CUDADevice)
	}
	if m.Live != nil {
		fmt.Fprintf(&b, "\ntraced live on its GPU after it: %s", report.HumanBytes(*m.Live))
	}
	return b.String()
}

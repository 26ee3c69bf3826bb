package html

import (
	"fmt"
	"sort"

	"github.com/retrivium/forensic/report"
)

// The runs picture: one row per run (and per range of missing ranks) on
// one wall-clock axis: each run's recording span, its first failure as a
// mark with its clock-error interval, and where two failures' intervals
// overlap. When the failures lie close together compared with the
// recordings, a second panel widens the stretch around them.

// Runs picture geometry, in SVG user units (the width and the gutter are
// the timeline's).
const (
	runRowH      = 30.0
	runRowHDense = 16.0 // the row height when there are more than denseRows rows
	denseRows    = 24
	// zoomFactor: a second panel is drawn when the failures span less than
	// 1/zoomFactor of the recordings.
	zoomFactor = 5
)

// runsPicture is the picture: one or two panels of the same rows.
type runsPicture struct {
	W, H   coord
	Panels []runsPanel
}

// runsPanel is the rows on one time axis.
type runsPanel struct {
	Title, Sub     label
	Ticks          []timeTick
	LabelY, WallY  coord
	HasWall        bool
	AxisTitle      string
	WallTitle      string
	GridY1, GridY2 coord
	Rows           []runsRow
	Bands          []overlapBand
	Bottom         coord
}

// runsRow is one run, or a range of ranks with no run.
type runsRow struct {
	Band          box
	Alt, Missing  bool
	Name          label
	Sub           *label
	NameTitle     string
	Empty         *label
	Span          *spanBar
	Fail          *runFail
	Chosen, Dense bool
}

// spanBar is a run's recording, start to end.
type spanBar struct {
	box
	Title string
}

// runFail is a run's first failure: a mark at its wall-time estimate and,
// with a clock error bound, the interval its true time lies in.
type runFail struct {
	Class     string
	X, Y1, Y2 coord
	Mark      diamond
	Interval  *box
	Bar       *errorBar
	Title     string
	Label     *label
}

// overlapBand is where two failures' clock intervals overlap: either
// could have come first.
type overlapBand struct {
	box
	Title string
}

// rowSpec is what one row shows: a run, or ranks with no run.
type rowSpec struct {
	run     *report.RunRef
	missing [2]int
	name    string // the run's rank and host, for titles
}

// runSpecs are the rows in rank order: the runs, and each range of
// consecutive missing ranks at its place; runs with no rank last.
func runSpecs(m *report.MultiRun) []rowSpec {
	type keyed struct {
		key int
		rowSpec
	}
	var ks []keyed
	for i := range m.Runs {
		r := &m.Runs[i]
		ks = append(ks, keyed{sortKey(r), rowSpec{run: r, name: rankText(r.Rank, r.Ranks) + ", host " + orDash(r.Host)}})
	}
	for _, g := range groupRanks(m.MissingRanks) {
		ks = append(ks, keyed{g[0], rowSpec{missing: g}})
	}
	sort.SliceStable(ks, func(i, j int) bool { return ks[i].key < ks[j].key })
	out := make([]rowSpec, len(ks))
	for i, k := range ks {
		out[i] = k.rowSpec
	}
	return out
}

// newRunsPicture draws the runs, with notes on what it cannot show; no
// picture when no run recorded a wall-clock time.
func newRunsPicture(rep *report.Report, places map[string]failurePlace) (*runsPicture, []string) {
	m := rep.MultiRun
	over, ok := overviewAxis(m.Runs, places)
	if !ok {
		return nil, []string{"No run recorded a wall-clock time, so the runs cannot be drawn on one axis."}
	}
	specs := runSpecs(m)
	h := runRowH
	if len(specs) > denseRows {
		h = runRowHDense
	}
	pic := &runsPicture{W: svgW}
	p := newRunsPanel(panelAxis{ax: over, origin: 0, title: "Runs on one wall clock",
		sub: "the recordings and their first failures, UTC " + dateText(over)}, specs, h, 0, rep, places)
	pic.Panels = append(pic.Panels, p)
	if zoom, ok := zoomAxis(places, over); ok {
		first := zoom.T0 + zoom.span()/2
		if f, ok := places[rep.Run.Path]; ok {
			first = f.WallNS
		}
		z := newRunsPanel(panelAxis{ax: zoom, origin: first, relative: true, title: "Around the failures",
			sub: "the " + report.Duration(zoom.span()) + " around the failures, widened"},
			specs, h, float64(p.Bottom)+14, rep, places)
		pic.Panels = append(pic.Panels, z)
	}
	pic.H = pic.Panels[len(pic.Panels)-1].Bottom + 4
	return pic, runsNotes(m, places)
}

// overviewAxis spans every recording and failure interval, with a little
// room at both ends.
func overviewAxis(runs []report.RunRef, places map[string]failurePlace) (timeAxis, bool) {
	var lo, hi int64
	ok := false
	widen := func(a, b int64) {
		if !ok {
			lo, hi, ok = a, b, true
			return
		}
		lo, hi = min(lo, a), max(hi, b)
	}
	for _, r := range runs {
		if r.WallStartNS != 0 {
			widen(r.WallStartNS, max(r.WallEndNS, r.WallStartNS))
		}
	}
	for _, p := range places {
		a, b := p.extent()
		widen(a, b)
	}
	if !ok {
		return timeAxis{}, false
	}
	pad := max((hi-lo)/50, 1)
	return timeAxis{T0: lo - pad, T1: hi + pad, X0: svgLeft, W: plotW}, true
}

// extent is the stretch of time a placed failure covers: its interval,
// or its estimate.
func (p failurePlace) extent() (int64, int64) {
	if p.Bounded {
		return min(p.Lo, p.WallNS), max(p.Hi, p.WallNS)
	}
	return p.WallNS, p.WallNS
}

// zoomAxis is the stretch around the failures, when there are several
// and they lie close enough together beside the recordings to be worth a
// panel of their own.
func zoomAxis(places map[string]failurePlace, over timeAxis) (timeAxis, bool) {
	var lo, hi int64
	n := 0
	for _, p := range places {
		a, b := p.extent()
		if n == 0 {
			lo, hi = a, b
		}
		lo, hi, n = min(lo, a), max(hi, b), n+1
	}
	if n < 2 || (hi-lo)*zoomFactor >= over.span() {
		return timeAxis{}, false
	}
	pad := max((hi-lo)/8, 1000)
	return timeAxis{T0: lo - pad, T1: hi + pad, X0: svgLeft, W: plotW}, true
}

// dateText is the day (or days) an axis covers.
func dateText(ax timeAxis) string {
	a, b := wallText(ax.T0, "2006-01-02"), wallText(ax.T1, "2006-01-02")
	if a == b {
		return a
	}
	return a + " to " + b
}

// panelAxis is a panel's time axis and how its ticks are labelled: as
// wall-clock times, or (relative) as offsets from origin with the wall
// time under them.
type panelAxis struct {
	ax         timeAxis
	origin     int64
	relative   bool
	title, sub string
}

// wallTicks are the grid lines of a wall-clock axis, a nice step apart
// and aligned on the origin.
func wallTicks(pa panelAxis) []timeTick {
	ax := pa.ax
	step := niceTimeStep(ax.span())
	var out []timeTick
	for k := floorDiv(ax.T0-pa.origin, step); pa.origin+k*step <= ax.T1; k++ {
		t := pa.origin + k*step
		if t < ax.T0 {
			continue
		}
		tk := timeTick{X: ax.X(t), Label: wallText(t, wallLayout(step)), Title: wallText(t, wallLong)}
		if pa.relative {
			tk.Label, tk.Wall = offsetLabel(t-pa.origin, step), wallText(t, wallLayout(step/10))
		}
		tk.LabelAnchor, tk.WallAnchor = tickAnchor(tk.X, tk.Label), tickAnchor(tk.X, tk.Wall)
		out = append(out, tk)
	}
	return out
}

// newRunsPanel draws the rows on one axis, starting at y.
func newRunsPanel(pa panelAxis, specs []rowSpec, h, y float64, rep *report.Report, places map[string]failurePlace) runsPanel {
	p := runsPanel{Title: label{X: 8, Y: coord(y + 16), Text: pa.title}, Sub: label{X: svgLeft, Y: coord(y + 16), Text: pa.sub},
		Ticks: wallTicks(pa), LabelY: coord(y + 36), HasWall: pa.relative, AxisTitle: "wall clock (UTC)"}
	top := y + 44
	if pa.relative {
		p.AxisTitle, p.WallTitle, p.WallY, top = "from the first failure", "wall clock (UTC)", coord(y+50), y+58
	}
	for i, s := range specs {
		p.Rows = append(p.Rows, newRunsRow(s, i, top+h*float64(i), h, pa.ax, rep, places))
	}
	bottom := top + h*float64(len(specs))
	p.GridY1, p.GridY2, p.Bottom = coord(top-4), coord(bottom), coord(bottom+8)
	p.Bands = overlapBands(rep, places, pa.ax, top, bottom)
	return p
}

// newRunsRow draws one row.
func newRunsRow(s rowSpec, i int, y, h float64, ax timeAxis, rep *report.Report, places map[string]failurePlace) runsRow {
	mid := y + h/2
	dense := h < runRowH
	r := runsRow{Band: box{0, coord(y), svgW, coord(h)}, Alt: i%2 == 1, Dense: dense}
	nameY := coord(mid - 1)
	if dense {
		nameY = coord(mid + 4)
	}
	if s.run == nil {
		r.Missing = true
		r.Name = label{X: 8, Y: nameY, Text: rankRanges(rangeRanks(s.missing))}
		r.NameTitle = r.Name.Text + ": no run was given for it"
		r.Empty = &label{X: svgLeft + 8, Y: coord(mid + 4), Text: "no run"}
		return r
	}
	run := s.run
	r.Chosen = run.Path == rep.Run.Path
	r.Name = label{X: 8, Y: nameY, Text: clip(rankText(run.Rank, run.Ranks)+" · "+orDash(run.Host), 28)}
	r.NameTitle = fmt.Sprintf("%s\nrun %s\n%s", s.name, run.RunID, run.Path)
	if !dense {
		r.Sub = &label{X: 8, Y: coord(mid + 10), Text: clipLeft(shortPath(run.Path), 32)}
	}
	if run.WallStartNS == 0 {
		r.Empty = &label{X: svgLeft + 8, Y: coord(mid + 4), Text: "no wall-clock time recorded"}
		return r
	}
	bar, bh := barY(y, h), 8.0
	if dense {
		bh = 6
	}
	x0, x1 := ax.X(run.WallStartNS), ax.X(max(run.WallEndNS, run.WallStartNS))
	r.Span = &spanBar{box: box{x0, coord(bar - bh/2), max(x1-x0, 1.5), coord(bh)}, Title: spanTitle(s.name, run, r.Chosen)}
	if p, ok := places[run.Path]; ok {
		r.Fail = newRunFail(p, s.name, y, h, ax, rep.MultiRun.Order)
	}
	return r
}

// barY is the height of a row's recording bar and failure mark: below
// the middle, leaving room above for the failure's label (in the middle
// of a dense row, which has none but the first's).
func barY(y, h float64) float64 {
	if h < runRowH {
		return y + h/2
	}
	return y + h*0.6
}

// rangeRanks lists the ranks of a range.
func rangeRanks(g [2]int) []int {
	out := make([]int, 0, g[1]-g[0]+1)
	for k := g[0]; k <= g[1]; k++ {
		out = append(out, k)
	}
	return out
}

// spanTitle is a recording's tooltip.
func spanTitle(name string, r *report.RunRef, chosen bool) string {
	s := fmt.Sprintf("%s: recorded from %s to %s (%s)", name, wallText(r.WallStartNS, wallLong), wallText(r.WallEndNS, wallShort),
		report.Duration(r.WallEndNS-r.WallStartNS))
	if e := r.ClockErrorNS; e != nil && *e >= 0 {
		s += "\nclock error ±" + report.Duration(*e)
	} else {
		s += "\nno clock error bound (an unsynchronized clock)"
	}
	s += "\n" + r.Path
	if chosen {
		s += "\nthe rest of this page is this run"
	}
	return s
}

// newRunFail draws a run's first failure in a row from y, h tall.
func newRunFail(p failurePlace, name string, y, h float64, ax timeAxis, order string) *runFail {
	mid := barY(y, h)
	x := ax.X(p.WallNS)
	f := &runFail{Class: p.Role, X: x, Y1: coord(y + 2), Y2: coord(y + h - 2), Mark: diamond{x, coord(mid)},
		Title: failTitle(p, name, order)}
	if p.Bounded {
		lo, hi := ax.X(p.Lo), ax.X(p.Hi)
		f.Interval = &box{lo, coord(mid - 6), max(hi-lo, 1.5), 12}
		f.Bar = &errorBar{lo, hi, coord(mid), 10}
	}
	text := failLabel(p, order)
	if h < runRowH && p.Role != roleFirst {
		return f // dense rows label only the first failure
	}
	ly := coord(y + 11)
	if h < runRowH {
		ly = coord(mid + 4)
	}
	f.Label = &label{X: x + 8, Y: ly, Anchor: "start", Text: text}
	if float64(x)+12+textWidth(text) > svgW-4 {
		f.Label.X, f.Label.Anchor = x-8, "end"
	}
	return f
}

// failLabel is the short text beside a failure's mark.
func failLabel(p failurePlace, order string) string {
	var s string
	switch p.Role {
	case roleFirst:
		s = "first"
		if order == "uncertain" {
			s = "earliest estimate"
		}
	case roleCandidate:
		s = "could have come first"
	case roleUnrecovered:
		s = "first unrecovered"
	case roleUnrecoveredCandidate:
		s = "could have been the first unrecovered"
	default:
		s = "+" + delayText(p.DelayMin, p.DelayMax, p.Exact)
	}
	if !p.Bounded && !p.Exact {
		s += " · no clock bound"
	}
	return s
}

// failTitle is a failure's tooltip: what failed, what part it plays, and
// when, with the interval its clock allows.
func failTitle(p failurePlace, name, order string) string {
	s := name + ": " + p.Symbol + " → " + p.Result + "\n"
	switch p.Role {
	case roleFirst:
		s += "the first failure of the job"
		if order == "uncertain" {
			s += " by the earliest estimate; others could have come first"
		}
	case roleCandidate:
		s += "could have been the first failure of the job"
	case roleUnrecovered:
		s += "the first failure of the job that no process recovered from (the first was recovered)"
	case roleUnrecoveredCandidate:
		s += "could have been the first failure of the job that no process recovered from"
	default:
		s += delayText(p.DelayMin, p.DelayMax, p.Exact) + " after " + p.After + " failure (" + howText(p.Exact) + ")"
	}
	s += "\nat " + wallText(p.WallNS, wallLong)
	if p.Bounded {
		return s + fmt.Sprintf(" (estimate)\nbetween %s and %s (clock error ±%s)", wallText(p.Lo, wallShort), wallText(p.Hi, wallShort),
			report.Duration((p.Hi-p.Lo)/2))
	}
	return s + " (estimate; no clock error bound)"
}

// overlapBands shade, across the rows, where the first failure's clock
// interval overlaps another's that it cannot be ordered against.
func overlapBands(rep *report.Report, places map[string]failurePlace, ax timeAxis, top, bottom float64) []overlapBand {
	f, ok := places[rep.Run.Path]
	if !ok || !f.Bounded {
		return nil
	}
	names := map[string]string{}
	for _, r := range rep.MultiRun.Runs {
		names[r.Path] = rankText(r.Rank, r.Ranks)
	}
	var out []overlapBand
	for _, c := range rep.Candidates {
		if c.RunPath != rep.Run.Path {
			continue
		}
		for _, u := range c.Unordered {
			p, ok := places[u.RunPath]
			if u.Reason != "overlap" || !ok || !p.Bounded {
				continue
			}
			lo, hi := max(f.Lo, p.Lo), min(f.Hi, p.Hi)
			if hi < lo {
				continue
			}
			x0, x1 := ax.X(lo), ax.X(hi)
			out = append(out, overlapBand{box: box{x0, coord(top), max(x1-x0, 1.5), coord(bottom - top)},
				Title: fmt.Sprintf("The clock intervals of %s's and %s's failures overlap by %s: either could have come first.",
					names[rep.Run.Path], names[u.RunPath], report.Duration(hi-lo))})
		}
	}
	return out
}

// runsNotes say what the picture cannot show.
func runsNotes(m *report.MultiRun, places map[string]failurePlace) []string {
	var notes []string
	unbounded, exact := 0, false
	for _, p := range places {
		if !p.Bounded {
			unbounded++
		}
		exact = exact || p.Exact
	}
	if unbounded > 0 {
		verb := "are"
		if unbounded == 1 {
			verb = "is"
		}
		notes = append(notes, fmt.Sprintf("%s from runs with no clock error bound (an unsynchronized clock) %s drawn at the wall-clock estimate with no interval: against runs of another boot they cannot be ordered.",
			report.Plural(unbounded, "failure"), verb))
	}
	if exact {
		notes = append(notes, "Runs of one boot share one clock: their failures are ordered exactly by it, whatever the intervals drawn.")
	}
	for _, r := range m.Runs {
		if r.WallStartNS == 0 {
			notes = append(notes, r.Path+" recorded no wall-clock time: it has a row but nothing on the axis.")
		}
	}
	return notes
}

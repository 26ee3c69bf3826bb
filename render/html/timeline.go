package html

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/retrivium/forensic/report"
)

// Timeline geometry, in SVG user units. The SVG scales to the page's
// width; these fix its proportions.
const (
	svgW      = 1000.0
	svgLeft   = 208.0 // gutter: panel titles, legends, y-axis labels
	svgRight  = 28.0
	plotW     = svgW - svgLeft - svgRight
	fbPanelH  = 150.0
	barPanelH = 96.0
	procRowH  = 30.0
	laneH     = 14.0 // one row of rule labels
	maxLanes  = 4
	// maxDots: a series with at most this many points also gets a dot
	// (with its value as a tooltip) per point.
	maxDots = 240
)

// operations are the operation classes, in legend order (the JSON's
// `operation` values).
func operations() []string {
	return []string{"allocation", "host-allocation", "mapping", "context", "free", "other"}
}

// timelineView is the timeline section.
type timelineView struct {
	Start string
	SVG   svgView
	Notes []string
}

// svgView is the timeline picture: one time axis for the GPUs' memory
// views and the processes' calls, with rules across all of them.
type svgView struct {
	W, H                  coord
	X0, PW                coord
	SpanNS                int64
	Wall0MS, Wall0NS      int64
	TicksY, Bottom, WallY coord
	Ticks                 []timeTick
	HasWall               bool
	GPUs                  []gpuBlock
	Calls                 *callsBlock
	Empty                 *label
	Rules                 []vrule
	CursorY1, CursorLabel coord
}

// timeTick is one vertical grid line with its elapsed and wall labels.
type timeTick struct {
	X                              coord
	Label, Wall                    string
	LabelAnchor, WallAnchor, Title string
}

// label is a piece of text at a position.
type label struct {
	X, Y         coord
	Anchor, Text string
}

// vrule is a vertical line across the picture: a failure, a kernel log
// line or a marker.
type vrule struct {
	t           int64
	Kind, Title string
	X, Y1, Y2   coord
	Label       *label
}

func newTimeline(rep *report.Report, c clock) timelineView {
	tl := rep.Timeline
	if tl == nil {
		tl = &report.Timeline{StartNS: rep.Run.StartNS, EndNS: rep.Run.EndNS}
	}
	ax := timeAxis{T0: tl.StartNS, T1: max(tl.EndNS, tl.StartNS+1), X0: svgLeft, W: plotW}
	procs := drawnProcesses(tl, rep.Processes)
	rules := newRules(rep, c, ax)
	v := timelineView{Start: orDash(c.at(ax.T0, wallLong))}
	s := &v.SVG
	nLanes := placeRuleLabels(rules, ax)
	top := 34 + laneH*float64(max(nLanes, 1))
	y := top + 8
	for i := range tl.GPUs {
		y += 22 // the GPU's heading
		s.GPUs = append(s.GPUs, newGPUBlock(&tl.GPUs[i], ax, y, c))
		y += fbPanelH + 18 + barPanelH + 30
	}
	if len(procs) > 0 {
		s.Calls = newCallsBlock(procs, ax, y, c)
		y += 22 + procRowH*float64(len(procs)) + 8
	}
	bottom := y
	if len(tl.GPUs) == 0 && len(procs) == 0 {
		s.Empty = &label{X: svgLeft + 10, Y: coord(top + 30), Text: "no samples and no calls were recorded"}
	}
	s.W, s.H = svgW, coord(bottom+36)
	s.X0, s.PW, s.SpanNS = svgLeft, plotW, ax.span()
	if !c.wall.IsZero() {
		s.HasWall, s.Wall0MS, s.Wall0NS = true, c.wall.UnixMilli(), int64(c.wall.Nanosecond()%int(time.Millisecond))
	}
	s.TicksY, s.Bottom, s.WallY = coord(top-2), coord(bottom), coord(bottom+16)
	s.Ticks = timeTicks(ax, c)
	for i := range rules {
		rules[i].Y1, rules[i].Y2 = coord(top-4), coord(bottom)
	}
	s.Rules = rules
	s.CursorY1, s.CursorLabel = coord(top-4), coord(bottom+30)
	v.Notes = timelineNotes(tl, procs)
	return v
}

// drawnProcesses are the processes that made calls, in the order they
// started (then by pid).
func drawnProcesses(tl *report.Timeline, ps []report.ProcessInfo) []*report.ProcessTrack {
	start := map[uint32]int64{}
	for _, p := range ps {
		if _, ok := start[p.PID]; !ok {
			start[p.PID] = p.StartNS
		}
	}
	var out []*report.ProcessTrack
	for i := range tl.Processes {
		if tl.Processes[i].Calls > 0 {
			out = append(out, &tl.Processes[i])
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := start[out[i].PID], start[out[j].PID]
		if a != b {
			return a < b
		}
		return out[i].PID < out[j].PID
	})
	return out
}

// timeTicks are the grid lines of the time axis, about eight.
func timeTicks(ax timeAxis, c clock) []timeTick {
	step := niceTimeStep(ax.span())
	var out []timeTick
	for i := int64(0); i*step <= ax.span(); i++ {
		t := ax.T0 + i*step
		tk := timeTick{X: ax.X(t), Label: relLabel(i*step, step), Wall: c.at(t, wallLayout(step)), Title: c.at(t, wallLong)}
		tk.LabelAnchor, tk.WallAnchor = tickAnchor(tk.X, tk.Label), tickAnchor(tk.X, tk.Wall)
		out = append(out, tk)
	}
	return out
}

// newRules are the vertical rules, in time order: the first failure, the
// first unrecovered one, kernel log lines and markers.
func newRules(rep *report.Report, c clock, ax timeAxis) []vrule {
	var rules []vrule
	add := func(t int64, kind, text, title string) {
		rules = append(rules, vrule{t: t, Kind: kind, Title: title, X: ax.X(t), Label: &label{Text: clip(text, 28)}})
	}
	if f := rep.FirstFailure; f != nil {
		add(f.TimeNS, "fail", "first failure", fmt.Sprintf("first failure: %s → %s, pid %d, %s (%s)", f.Symbol, f.ResultName,
			f.PID, c.rel(f.TimeNS), c.at(f.TimeNS, wallLong)))
	}
	// A first unrecovered failure of another run of the job counts on
	// that run's clock: it has no place on this run's timeline.
	if u := rep.FirstUnrecovered; u != nil && (u.RunPath == "" || u.RunPath == rep.Run.Path) {
		add(u.TimeNS, "fail", "first unrecovered", fmt.Sprintf("first unrecovered failure: %s → %s, pid %d, %s (%s)",
			u.Symbol, u.ResultName, u.PID, c.rel(u.TimeNS), c.at(u.TimeNS, wallLong)))
	}
	for _, k := range rep.KernelLog {
		text := "kernel"
		if k.Xid != nil {
			text = fmt.Sprintf("Xid %d", *k.Xid)
		}
		add(k.TimeNS, "kernel", text, fmt.Sprintf("%s %s: %s", c.rel(k.TimeNS), c.at(k.TimeNS, wallLong), k.Text))
	}
	for _, m := range rep.Markers {
		add(m.TimeNS, "marker", m.Label, fmt.Sprintf("marker %q at %s (%s)", m.Label, c.rel(m.TimeNS), c.at(m.TimeNS, wallLong)))
	}
	sort.SliceStable(rules, func(i, j int) bool { return rules[i].t < rules[j].t })
	return rules
}

// tickAnchor centres a tick's label on it, unless the label would be cut
// at the picture's right edge: then it ends there.
func tickAnchor(x coord, s string) string {
	if float64(x)+textWidth(s)/2 > svgW {
		return "end"
	}
	return "middle"
}

// textWidth estimates the width of an 11-unit label.
func textWidth(s string) float64 { return 6.2 * float64(len([]rune(s))) }

// placeRuleLabels puts the rules' labels on rows above the plot so that
// none overlaps another and none leaves the picture (a rule near the
// right edge has its label on its left), and returns how many rows it
// used. A label that
// does not fit is dropped (the rule keeps its tooltip).
func placeRuleLabels(rules []vrule, ax timeAxis) int {
	xs, ws := make([]float64, len(rules)), make([]float64, len(rules))
	left := make([]bool, len(rules)) // the label ends at its rule: no room right of it
	for i, r := range rules {
		w := textWidth(r.Label.Text)
		xs[i], ws[i] = float64(r.X), w+10
		if float64(r.X)+3+w > svgW-2 {
			xs[i], left[i] = float64(r.X)-3-w, true
		}
	}
	n := 0
	for i, l := range lanes(xs, ws, maxLanes) {
		if l < 0 {
			rules[i].Label = nil
			continue
		}
		lb := rules[i].Label
		lb.X, lb.Y, lb.Anchor = rules[i].X+3, coord(34+laneH*float64(l)+10), "start"
		if left[i] {
			lb.X, lb.Anchor = rules[i].X-3, "end"
		}
		n = max(n, l+1)
	}
	return n
}

// timelineNotes say what the picture reduced and what it leaves out.
func timelineNotes(tl *report.Timeline, procs []*report.ProcessTrack) []string {
	var notes []string
	if tl.BinnedFailures > 0 {
		notes = append(notes, fmt.Sprintf("%d failures beyond the first %d are drawn as red bins rather than one mark each.",
			tl.BinnedFailures, tl.DrawnFailures))
	}
	for _, p := range procs {
		if p.Marks == nil {
			notes = append(notes, fmt.Sprintf("pid %d made %d calls: drawn as the number of calls per time bin (%d bins), with every failed call still marked.",
				p.PID, p.Calls, len(p.Bins)))
		}
	}
	if tl.LiveCapped {
		notes = append(notes, "Too many allocations were live at once to follow them all: the traced-live line stops there.")
	}
	for _, g := range tl.GPUs {
		if g.MIGSamples > 0 {
			notes = append(notes, fmt.Sprintf("GPU %d: %d MIG-instance samples are in the memory-view table, not drawn here.",
				g.Index, g.MIGSamples))
		}
	}
	return notes
}

// gpuBlock is one GPU: a heading, then its framebuffer and BAR1 panels,
// each with its own axis. They are never stacked, added or compared.
type gpuBlock struct {
	Head label
	FB   panel
	BAR1 panel
}

func newGPUBlock(g *report.GPUTrack, ax timeAxis, y float64, c clock) gpuBlock {
	parts := []string{fmt.Sprintf("GPU %d", g.Index)}
	if g.Name != "" {
		parts = append(parts, g.Name)
	}
	if g.UUID != "" {
		parts = append(parts, g.UUID)
	}
	fb := newPanel(panelSpec{title: "Framebuffer", sub: "device memory", totalLabel: "framebuffer total", y: y, h: fbPanelH,
		view: &g.Framebuffer, lines: []seriesSpec{
			{"used", "s-fb-used", g.Framebuffer.Used, false},
			{"free", "s-fb-free", g.Framebuffer.Free, false},
			{"reserved", "s-fb-reserved", g.Framebuffer.Reserved, false},
			{"traced live allocs", "s-traced", g.Traced, true},
		}}, ax, c)
	bar := newPanel(panelSpec{title: "BAR1 aperture", sub: "PCIe mappings, own axis", totalLabel: "BAR1 total (aperture size)",
		y: y + fbPanelH + 18, h: barPanelH, view: &g.BAR1, lines: []seriesSpec{
			{"used", "s-bar-used", g.BAR1.Used, false},
			{"free", "s-bar-free", g.BAR1.Free, false},
		}}, ax, c)
	return gpuBlock{Head: label{X: 8, Y: coord(y - 8), Text: strings.Join(parts, " · ")}, FB: fb, BAR1: bar}
}

// callsBlock is the calls of every process, one row each.
type callsBlock struct {
	Title  label
	Legend coord // x of the legend, on the title's line
	Ops    []string
	Rows   []procRow
}

func newCallsBlock(procs []*report.ProcessTrack, ax timeAxis, y float64, c clock) *callsBlock {
	b := &callsBlock{Title: label{X: 8, Y: coord(y + 14), Text: "Calls per process"}, Legend: svgLeft, Ops: operations()}
	for i, p := range procs {
		b.Rows = append(b.Rows, newProcRow(p, i, y+22+procRowH*float64(i), ax, c))
	}
	return b
}

package analyze

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

// The HTML report is one self-contained file: inline CSS, inline SVG and a
// few lines of inline JavaScript (a time cursor). It loads nothing from
// the network, so it can be attached to a post-mortem as is.
//
// It scales with the recording, not with the number of calls: events and
// samples are streamed, a process with more than htmlMaxMarks calls is
// drawn as a histogram of htmlCallBins fixed time bins, and every sample
// series is reduced to htmlSeriesBuckets time buckets that keep their
// minimum and maximum (at most 2 points each), so peaks survive. Failed
// calls are always drawn one by one (up to htmlMaxFailureMarks; beyond
// that they are binned too, in red, and the report says so).
const (
	htmlMaxMarks        = 2000
	htmlCallBins        = 480
	htmlSeriesBuckets   = 1000
	htmlMaxFailureMarks = 20000
	htmlMaxFailureRows  = 200
	// htmlLeadCalls is how many calls of the failing process before the
	// first failure the report lists.
	htmlLeadCalls = 16
	// htmlMaxLive bounds the live allocations replayed for the traced
	// series; beyond it the series stops (and says so).
	htmlMaxLive = 1 << 20
)

// Timeline geometry (SVG user units).
const (
	svgW      = 1200.0
	svgLeft   = 208.0 // gutter: panel titles, legends, y-axis labels
	svgRight  = 28.0
	plotW     = svgW - svgLeft - svgRight
	fbPanelH  = 150.0
	barPanelH = 96.0
	procRowH  = 30.0
)

// Colours of the SVG series and marks (the CSS has the rest).
const (
	colFBUsed     = "#1f6feb"
	colFBFree     = "#1a7f37"
	colFBReserved = "#8c959f"
	colTotal      = "#57606a"
	colTraced     = "#d4610b"
	colBARUsed    = "#8250df"
	colBARFree    = "#0e7c86"
	colFail       = "#cf222e"
)

var opColours = map[cuda.Op]string{
	cuda.OpAllocation:     "#1f6feb",
	cuda.OpHostAllocation: "#54aeff",
	cuda.OpMapping:        "#8250df",
	cuda.OpContext:        "#6e7781",
	cuda.OpFree:           "#2da44e",
	cuda.OpOther:          "#afb8c1",
}

// htmlMark is one call drawn as its own mark.
type htmlMark struct {
	start, end int64
	size       uint64
	pid, tid   uint32
	result     int32
	sym        uint16
	hasSize    bool
	op         cuda.Op
	dev        int32
	// live is the traced device allocations on the call's GPU right
	// after it (-1: not known).
	live int64
}

// htmlProc is one process row of the timeline.
type htmlProc struct {
	pid    uint32
	name   string
	calls  uint64
	failed uint64
	marks  []htmlMark // nil once the process has more than htmlMaxMarks calls
	over   bool
	bins   []uint32 // calls per time bin (always kept)
	fbins  []uint32 // failures not drawn individually, per bin
	fails  []htmlMark
}

// bucket is one time bucket of a downsampled series.
type bucket struct {
	n          int32
	gaps       int32
	minT, maxT int64
	min, max   uint64
}

// series is a downsampled value series: a fixed number of buckets.
type series struct {
	b      []bucket
	points int
	gaps   int
	peak   uint64
}

type timeScale struct {
	t0, t1 int64
}

func (ts timeScale) span() int64 { return max(ts.t1-ts.t0, 1) }

func (ts timeScale) x(t int64) float64 {
	t = min(max(t, ts.t0), ts.t1)
	return svgLeft + float64(t-ts.t0)/float64(ts.span())*plotW
}

func (ts timeScale) bin(t int64, n int) int {
	t = min(max(t, ts.t0), ts.t1)
	i := int(float64(t-ts.t0) / float64(ts.span()) * float64(n))
	return min(max(i, 0), n-1)
}

func (ts timeScale) binStart(i, n int) int64 {
	return ts.t0 + int64(float64(i)/float64(n)*float64(ts.span()))
}

func newSeries() *series { return &series{b: make([]bucket, htmlSeriesBuckets)} }

func (s *series) add(ts timeScale, t int64, v uint64) {
	b := &s.b[ts.bin(t, len(s.b))]
	if b.n == 0 || v < b.min {
		b.min, b.minT = v, t
	}
	if b.n == 0 || v > b.max {
		b.max, b.maxT = v, t
	}
	b.n++
	s.points++
	s.peak = max(s.peak, v)
}

func (s *series) gap(ts timeScale, t int64) {
	s.b[ts.bin(t, len(s.b))].gaps++
	s.gaps++
}

// gpuPanel is what the samples say about one GPU.
type gpuPanel struct {
	index      int
	uuid, name string
	fb         viewPanel // used, free, reserved
	bar        viewPanel // used, free
	traced     *series   // traced device allocations
	mig        int       // MIG-scope samples (in the table, not drawn)
}

// viewPanel is what the samples say about one memory view of a GPU.
type viewPanel struct {
	series   map[string]*series // per field
	total    uint64
	api      string
	status   map[string]int // status name -> samples, for unusable ones
	unusable []int64        // times of unusable samples, bounded
}

func newGPUPanel(i int) *gpuPanel {
	return &gpuPanel{index: i, fb: newViewPanel(), bar: newViewPanel()}
}

func newViewPanel() viewPanel {
	return viewPanel{series: map[string]*series{}, status: map[string]int{}}
}

// seriesValue is one field of a sample, for a view's series.
type seriesValue struct {
	field string
	v     *uint64
}

// add draws one sample of the view: its fields' values, or a gap in
// every field when the query gave none.
func (v *viewPanel) add(ts timeScale, s *store.Sample, values ...seriesValue) {
	v.api = apiOf(s.API, s.Struct)
	if !s.Usable() {
		v.status[s.Status.Name]++
		if len(v.unusable) < 4*htmlSeriesBuckets {
			v.unusable = append(v.unusable, s.Start)
		}
		for _, f := range values {
			v.field(f.field).gap(ts, s.Start)
		}
		return
	}
	if s.Total != nil {
		v.total = max(v.total, *s.Total)
	}
	for _, f := range values {
		if f.v != nil {
			v.field(f.field).add(ts, s.Start, *f.v)
		}
	}
}

// field returns the series of field f, making it on first use.
func (v *viewPanel) field(f string) *series {
	s := v.series[f]
	if s == nil {
		s = newSeries()
		v.series[f] = s
	}
	return s
}

// htmlData is what the streaming passes collect for the timeline.
type htmlData struct {
	ts          timeScale
	procs       map[uint32]*htmlProc
	gpus        map[int]*gpuPanel
	drawnFails  int
	binnedFails uint64
	liveCapped  bool
	symName     func(uint16) string // the file's name of a symbol id
	inv         *store.Inventory
	// lead are the last calls of the failing process up to and including
	// the first failure, by time (at most htmlLeadCalls).
	lead []htmlMark
}

// keepLead keeps m if it is among the latest htmlLeadCalls calls of the
// first failure's process that ended no later than the failure.
func (d *htmlData) keepLead(m htmlMark, ff *Failure) {
	if ff == nil || m.pid != ff.PID || m.end > ff.TimeNS {
		return
	}
	if len(d.lead) < htmlLeadCalls {
		d.lead = append(d.lead, m)
		return
	}
	oldest := 0
	for i := range d.lead {
		if d.lead[i].end < d.lead[oldest].end {
			oldest = i
		}
	}
	if m.end > d.lead[oldest].end {
		d.lead[oldest] = m
	}
}

func (d *htmlData) gpu(i int) *gpuPanel {
	g := d.gpus[i]
	if g == nil {
		g = newGPUPanel(i)
		d.gpus[i] = g
	}
	return g
}

// collect streams the run's events and samples into fixed-size bins.
func collectHTML(r *store.Reader, rep *Report) (*htmlData, error) {
	run := r.Run()
	t0 := run.ClockStart
	t1 := max(rep.Run.EndNS, t0)
	for _, m := range rep.Markers {
		t1 = max(t1, m.TimeNS)
	}
	for _, k := range rep.KernelLog {
		t1 = max(t1, k.TimeNS)
	}
	if t1 <= t0 {
		t1 = t0 + int64(time.Millisecond)
	}
	d := &htmlData{ts: timeScale{t0, t1}, procs: map[uint32]*htmlProc{}, gpus: map[int]*gpuPanel{}, symName: r.SymbolName}
	var err error
	if d.inv, err = r.Inventory(); err != nil {
		return nil, err
	}
	if d.inv != nil {
		for _, g := range d.inv.GPUs {
			p := d.gpu(g.Index)
			if g.UUID.Value != nil {
				p.uuid = *g.UUID.Value
			}
			if g.Name.Value != nil {
				p.name = *g.Name.Value
			}
			if g.FBTotal.Value != nil {
				p.fb.total = *g.FBTotal.Value
			}
			if g.BAR1Total.Value != nil {
				p.bar.total = *g.BAR1Total.Value
			}
		}
	}
	// Device ordinal -> GPU, as the analysis matched it (never a guess).
	devGPU := map[uint32]map[int32]int{}
	for _, p := range rep.Processes {
		hp := d.proc(p.PID)
		hp.name = filepath.Base(p.Exe)
		if p.Exe == "" {
			hp.name = ""
		}
		for _, dm := range p.Devices {
			if dm.GPU != nil {
				if devGPU[p.PID] == nil {
					devGPU[p.PID] = map[int32]int{}
				}
				devGPU[p.PID][dm.Ordinal] = *dm.GPU
			}
		}
	}
	syms := resolveSymbols(r.SymbolNames())
	live := map[resKey]liveRes{}
	totals := map[int]uint64{}
	// A process's exit releases what it still held (the driver frees it),
	// as the analysis counts it.
	var exits []procExit
	for _, p := range rep.Processes {
		if p.Exit != nil {
			exits = append(exits, procExit{p.PID, p.Exit.TimeNS})
		}
	}
	eq := newExitQueue(exits)
	releaseUpTo := func(t int64) {
		eq.releaseUpTo(t, live, func(vk viewKey, at int64, n uint64) {
			totals[vk.gpu] -= n
			d.gpu(vk.gpu).traced.add(d.ts, at, totals[vk.gpu])
		})
	}
	// Replayed in time order, as the analysis replays them, so that a
	// release stored before its allocation still frees it.
	err = eventsInOrder(r, nil, func(e *store.Event) error {
		if e.Depth > 0 {
			return nil // a library's call to itself
		}
		releaseUpTo(e.End - 1)
		sym := symbolAt(syms, e.Symbol)
		p := d.proc(e.PID)
		p.calls++
		p.bins[d.ts.bin(e.Start, htmlCallBins)]++
		m := htmlMark{start: e.Start, end: e.End, pid: e.PID, tid: e.TID, result: e.Result, sym: e.Symbol, op: sym.Op, dev: e.Dev, live: -1}
		if e.Has&cuda.FieldSize != 0 {
			m.size, m.hasSize = e.Size, true
		}
		if !p.over {
			if p.calls > htmlMaxMarks {
				p.over, p.marks = true, nil
			} else {
				p.marks = append(p.marks, m)
			}
		}
		if e.Result != 0 {
			p.failed++
			if d.drawnFails < htmlMaxFailureMarks {
				p.fails = append(p.fails, m)
				d.drawnFails++
			} else {
				if p.fbins == nil {
					p.fbins = make([]uint32, htmlCallBins)
				}
				p.fbins[d.ts.bin(e.End, htmlCallBins)]++
				d.binnedFails++
			}
		} else if !d.liveCapped {
			d.traceLive(e, sym, live, totals, devGPU)
		}
		if g, ok := devGPU[e.PID][e.Dev]; ok && e.Dev >= 0 && !d.liveCapped {
			m.live = int64(totals[g])
		}
		d.keepLead(m, rep.FirstFailure)
		return nil
	})
	if err != nil {
		return nil, err
	}
	releaseUpTo(math.MaxInt64)
	err = r.Samples(func(s *store.Sample) error {
		g := d.gpu(s.GPU.Index)
		if g.uuid == "" {
			g.uuid = s.GPU.UUID
		}
		if s.GPU.MIGIndex != nil || (s.Scope != store.ScopeDevice && s.Scope != store.ScopeAperture) {
			if s.Kind != store.KindProcesses {
				g.mig++
			}
			return nil
		}
		switch s.Kind {
		case store.KindFramebuffer:
			g.fb.add(d.ts, s, seriesValue{"used", s.Used}, seriesValue{"free", s.Free}, seriesValue{"reserved", s.Reserved})
		case store.KindBAR1:
			g.bar.add(d.ts, s, seriesValue{"used", s.Used}, seriesValue{"free", s.Free})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// traceLive replays one successful call into the traced live device
// allocations (framebuffer view only), per GPU.
func (d *htmlData) traceLive(e *store.Event, sym *cuda.Symbol, live map[resKey]liveRes, totals map[int]uint64, devGPU map[uint32]map[int32]int) {
	if sym.Creates != cuda.ResNone && sym.Creates.View() == cuda.ViewFramebuffer && e.Has&cuda.FieldPtr != 0 && e.Has&cuda.FieldSize != 0 {
		g, ok := devGPU[e.PID][e.Dev]
		if !ok || e.Dev < 0 {
			return
		}
		k := resKey{e.PID, sym.Creates, e.Ptr}
		if old, ok := live[k]; ok {
			totals[old.gpu] -= old.size
		} else if len(live) >= htmlMaxLive {
			d.liveCapped = true
			return
		}
		live[k] = liveRes{size: e.Size, sized: true, gpu: g, mig: -1, view: cuda.ViewFramebuffer}
		totals[g] += e.Size
		gp := d.gpu(g)
		if gp.traced == nil {
			gp.traced = newSeries()
			gp.traced.add(d.ts, d.ts.t0, 0)
		}
		gp.traced.add(d.ts, e.End, totals[g])
	}
	for _, res := range sym.Releases {
		k := resKey{e.PID, res, e.Target}
		if l, ok := live[k]; ok {
			delete(live, k)
			totals[l.gpu] -= l.size
			d.gpu(l.gpu).traced.add(d.ts, e.End, totals[l.gpu])
		}
	}
}

// apiOf names the NVML function and structure version a value came from.
func apiOf(api, strct string) string {
	if strct != "" {
		return api + " / " + strct
	}
	return api
}

func (d *htmlData) proc(pid uint32) *htmlProc {
	p := d.procs[pid]
	if p == nil {
		p = &htmlProc{pid: pid, bins: make([]uint32, htmlCallBins)}
		d.procs[pid] = p
	}
	return p
}

// htmlWriter writes the report; the first write error sticks.
type htmlWriter struct {
	w   *bufio.Writer
	err error
	rep *Report
	run store.RunInfo
	d   *htmlData
}

func (h *htmlWriter) f(format string, a ...any) {
	if h.err == nil {
		_, h.err = fmt.Fprintf(h.w, format, a...)
	}
}

func (h *htmlWriter) s(s string) {
	if h.err == nil {
		_, h.err = h.w.WriteString(s)
	}
}

func esc(s string) string { return html.EscapeString(s) }

// rel formats a run-clock time relative to the start.
func (h *htmlWriter) rel(t int64) string {
	return relTime(t - h.run.ClockStart)
}

func relTime(ns int64) string {
	sign := "+"
	if ns < 0 {
		sign, ns = "-", -ns
	}
	return fmt.Sprintf("%s%.3f s", sign, float64(ns)/1e9)
}

// wall converts a run-clock time to wall time (UTC).
func (h *htmlWriter) wall(t int64, layout string) string {
	if h.run.WallStart.IsZero() {
		return ""
	}
	return h.run.WallStart.Add(time.Duration(t - h.run.ClockStart)).UTC().Format(layout)
}

const wallLong = "2006-01-02 15:04:05.000000 UTC"

// WriteHTML writes the report as one self-contained HTML page: the verdict
// first, then the evidence, what was missing, the failures, per-GPU
// timelines (framebuffer and BAR1 in separate panels with their own axes,
// never stacked or added), the calls of each process on the same time axis,
// and the memory-view table. r is read again, streaming, for the timelines.
func WriteHTML(w io.Writer, r *store.Reader, rep *Report) error {
	d, err := collectHTML(r, rep)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	h := &htmlWriter{w: bw, rep: rep, run: r.Run(), d: d}
	h.page()
	if h.err != nil {
		return h.err
	}
	return bw.Flush()
}

func (h *htmlWriter) page() {
	rep := h.rep
	title := "forensic report: " + rep.Attribution
	if rep.FirstFailure != nil {
		title += ", " + rep.FirstFailure.Symbol + " " + rep.FirstFailure.ResultName
	}
	h.f(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="forensic %s">
<title>%s</title>
<style>%s</style>
</head>
<body>
<main>
`, esc(rep.Run.Version), esc(title), htmlCSS)
	h.header()
	h.verdict()
	h.evidence()
	h.missing()
	h.failures()
	h.timeline()
	h.memoryViews()
	h.processes()
	h.kernelAndMarkers()
	h.lossAndSampling()
	h.coverage()
	h.calls()
	h.f(`<footer>Written by forensic %s from <code>%s</code> (run.db schema %d, report schema %s). This file is self-contained: it loads nothing from the network.
Times are on %s; wall times are the run's start wall time plus the elapsed run clock, in UTC.</footer>
</main>
<script>%s</script>
</body>
</html>
`, esc(rep.Run.Version), esc(rep.Run.Path), rep.Run.Schema, esc(rep.Schema), esc(orDash(rep.Run.Clock)), htmlJS)
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func (h *htmlWriter) header() {
	r := h.rep.Run
	what := r.Mode
	if len(r.Command) > 0 {
		what = strings.Join(r.Command, " ")
	} else if r.TargetPID != 0 {
		what = fmt.Sprintf("pid %d", r.TargetPID)
	}
	end := r.Ended
	if r.StopReason != "" {
		end += " (" + r.StopReason + ")"
	}
	if x := r.WorkloadExit; x != nil {
		switch {
		case x.Code != nil:
			end += fmt.Sprintf(", workload exit status %d", *x.Code)
		case x.Signal != nil:
			end += ", workload killed by " + x.Name
		}
	}
	head := "No recorded call failed"
	if f := h.rep.FirstFailure; f != nil {
		head = f.Symbol + " → " + f.ResultName
	} else if h.rep.Attribution == AttrMissingEvidence {
		head = "No recorded call failed, but evidence is missing"
	}
	h.f(`<header>
<div class="eyebrow">forensic · CUDA memory failure report</div>
<h1>%s</h1>
<div class="cmd" title="%s"><code>%s</code></div>
<dl class="runmeta">
<div><dt>run</dt><dd><code>%s</code></dd></div>
<div><dt>recorded</dt><dd>%s mode on <b>%s</b> (kernel %s)</dd></div>
<div><dt>started</dt><dd>%s</dd></div>
<div><dt>duration</dt><dd>%.3f s, ended %s</dd></div>
<div><dt>calls</dt><dd>%d events stored</dd></div>
</dl>
</header>
`, esc(head), esc(what), esc(clip(what, 400)), esc(r.ID), esc(r.Mode), esc(r.Host), esc(r.Kernel), esc(h.wall(r.StartNS, wallLong)),
		float64(r.DurationNS)/1e9, esc(end), r.Events)
}

var attrClass = map[string]string{
	AttrAllocation: "alloc", AttrMapping: "map", AttrNotMemory: "notmem", AttrMissingEvidence: "missing", AttrNone: "none",
}

var attrText = map[string]string{
	AttrAllocation:      "an allocation problem",
	AttrMapping:         "a mapping problem",
	AttrNotMemory:       "not a memory problem",
	AttrMissingEvidence: "the evidence is missing",
	AttrNone:            "no call failed",
}

func (h *htmlWriter) verdict() {
	rep := h.rep
	cap := "null (no failure)"
	if rep.Capacity != nil {
		cap = *rep.Capacity
	}
	sum := attrText[rep.Attribution]
	if sum == "" {
		sum = "attribution " + rep.Attribution
	}
	h.f(`<section class="verdict v-%s" id="verdict">
<div class="vhead"><span class="vlabel">Verdict</span>
<span class="badge b-%s" title="attribution">attribution: %s</span>
<span class="badge cap" title="capacity: what the one memory view that can explain the failure says">capacity: %s</span></div>
<p class="vsum">%s</p>
<p class="vtext">%s</p>
`, attrClass[rep.Attribution], attrClass[rep.Attribution], esc(rep.Attribution), esc(cap),
		esc(strings.ToUpper(sum[:1])+sum[1:]), esc(rep.Verdict))
	if f := rep.FirstFailure; f != nil {
		h.s(`<h3>First failure</h3><dl class="kv">`)
		h.kv("call", fmt.Sprintf("<code>%s</code> (%s)", esc(f.Symbol), esc(f.Operation)))
		h.kv("result", fmt.Sprintf("<code class=\"bad\">%s</code> (%d, %s)", esc(f.ResultName), f.Result, esc(f.Meaning)))
		if f.Size != nil {
			h.kv("size", fmt.Sprintf("%s <span class=\"dim\">(%d bytes)</span>", esc(HumanBytes(*f.Size)), *f.Size))
		}
		gpu := "unknown"
		if f.GPUIndex != nil {
			gpu = fmt.Sprintf("GPU %d", *f.GPUIndex)
			if f.GPU != nil {
				gpu += " <code>" + esc(*f.GPU) + "</code>"
			}
			if f.MIGIndex != nil {
				gpu += fmt.Sprintf(", MIG instance %d", *f.MIGIndex)
			}
		}
		h.kv("process", fmt.Sprintf("pid %d, tid %d%s", f.PID, f.TID, h.procName(f.PID)))
		h.kv("device", fmt.Sprintf("CUDA device %d → %s <span class=\"dim\">(matched by %s)</span>", f.CUDADevice, gpu, esc(f.GPUMapping)))
		h.kv("time", fmt.Sprintf("%s <span class=\"dim\">%s</span>%s", esc(h.rel(f.TimeNS)), esc(h.wall(f.TimeNS, wallLong)), phaseNote(f.Phase)))
		if f.Frozen {
			h.kv("frozen", "the process was held stopped while its GPUs were sampled")
		}
		if rep.Cause != nil {
			h.kv("cause", esc(rep.Cause.Text))
		}
		h.s("</dl>\n")
		h.stack(f.Stack)
		h.lead(f)
	}
	h.s("</section>\n")
}

// lead lists the last calls of the failing process up to the failure.
func (h *htmlWriter) lead(f *Failure) {
	lead := append([]htmlMark(nil), h.d.lead...)
	if len(lead) < 2 {
		return
	}
	sort.Slice(lead, func(i, j int) bool { return lead[i].end < lead[j].end })
	gpu := "its GPU"
	if f.GPUIndex != nil {
		gpu = fmt.Sprintf("GPU %d", *f.GPUIndex)
	}
	h.f(`<h3>Leading up to it <span class="dim">(the last %d calls of pid %d)</span></h3>`+"\n", len(lead), f.PID)
	h.f(`<div class="tablewrap"><table class="data lead"><thead><tr><th class="num">before the failure</th><th class="num">tid</th><th>call</th><th class="num">size</th><th>result</th><th class="num" title="bytes of device memory the recorded processes allocated through hooked calls and had not freed, on the call's GPU, right after the call">traced live on %s after it</th></tr></thead><tbody>`+"\n", esc(gpu))
	for _, m := range lead {
		before := "failure"
		cls := ` class="first"`
		if !h.isFirstMark(&m) {
			before = "−" + fmtDur(f.TimeNS-m.end)
			cls = ""
		}
		size := "—"
		if m.hasSize {
			size = esc(HumanBytes(m.size))
		}
		res := cuda.LookupResult(m.result).Name
		resHTML := `<span class="dim">` + esc(res) + `</span>`
		if m.result != 0 {
			resHTML = `<code class="bad">` + esc(res) + `</code>`
		}
		live := `<span class="dim">—</span>`
		if m.live >= 0 {
			live = esc(HumanBytes(uint64(m.live)))
		}
		h.f("<tr%s><td class=\"num\">%s</td><td class=\"num\">%d</td><td><code>%s</code></td><td class=\"num\">%s</td><td>%s</td><td class=\"num\">%s</td></tr>\n",
			cls, esc(before), m.tid, esc(h.d.symName(m.sym)), size, resHTML, live)
	}
	h.s("</tbody></table></div>\n")
}

// fmtDur formats a positive duration compactly (µs, ms or s).
func fmtDur(ns int64) string {
	switch {
	case ns < 1_000_000:
		return fmt.Sprintf("%.1f µs", float64(ns)/1e3)
	case ns < 1_000_000_000:
		return fmt.Sprintf("%.3f ms", float64(ns)/1e6)
	}
	return fmt.Sprintf("%.3f s", float64(ns)/1e9)
}

func phaseNote(p string) string {
	if p == "" {
		return ""
	}
	return ", phase <i>" + esc(p) + "</i>"
}

func (h *htmlWriter) procName(pid uint32) string {
	for _, p := range h.rep.Processes {
		if p.PID == pid && p.Exe != "" {
			return " (" + esc(filepath.Base(p.Exe)) + ")"
		}
	}
	return ""
}

func (h *htmlWriter) kv(k, vHTML string) {
	h.f("<div><dt>%s</dt><dd>%s</dd></div>\n", esc(k), vHTML)
}

func (h *htmlWriter) stack(st *Stack) {
	if st == nil || len(st.Frames) == 0 {
		h.s(`<p class="dim">No user stack was recorded for this call.</p>` + "\n")
		return
	}
	note := ""
	if st.Partial {
		note = "partial"
	}
	if st.Note != "" {
		if note != "" {
			note += ": "
		}
		note += st.Note
	}
	h.f(`<h3>User stack of the failed call <span class="dim">%s</span></h3><ol class="stack">`, esc(note))
	for i, fr := range st.Frames {
		if i >= 32 {
			h.f(`<li class="dim">… %d more frames</li>`, len(st.Frames)-i)
			break
		}
		name := fmt.Sprintf("0x%x", fr.Address)
		if fr.Function != "" {
			name = fmt.Sprintf("%s+0x%x", fr.Function, fr.Offset)
		}
		h.f(`<li><code>%s</code> <span class="dim">%s</span></li>`, esc(name), esc(fr.Library))
	}
	h.s("</ol>\n")
}

func (h *htmlWriter) evidence() {
	h.s(`<section id="evidence"><h2>Evidence</h2>` + "\n")
	if len(h.rep.Evidence) == 0 {
		h.s(`<p class="dim">The verdict used no measured values.</p></section>` + "\n")
		return
	}
	h.s(`<div class="tablewrap"><table class="data"><thead><tr><th>finding</th><th>value</th><th>source</th><th>status</th><th>time</th><th>GPU</th><th>note</th></tr></thead><tbody>` + "\n")
	for _, e := range h.rep.Evidence {
		val := esc(e.Text)
		if e.Value != nil {
			if e.Unit == "bytes" {
				val = fmt.Sprintf("<b>%s</b><br><span class=\"dim\">%d bytes</span>", esc(HumanBytes(*e.Value)), *e.Value)
			} else {
				val = fmt.Sprintf("<b>%d</b> %s", *e.Value, esc(e.Unit))
				if e.Text != "" {
					val += "<br><span class=\"dim\">" + esc(e.Text) + "</span>"
				}
			}
		} else if e.Text != "" {
			val = "<code>" + esc(e.Text) + "</code>"
		}
		gpu := "—"
		if e.GPU != nil {
			gpu = fmt.Sprint(*e.GPU)
		}
		scope := ""
		if e.Scope != "" {
			scope = "<br><span class=\"dim\">scope " + esc(e.Scope) + "</span>"
		}
		h.f("<tr><td>%s</td><td>%s</td><td><code>%s</code>%s</td><td>%s</td><td class=\"num\">%s</td><td class=\"num\">%s</td><td>%s</td></tr>\n",
			esc(e.Field), val, esc(e.Source), scope, statusHTML(e.Status), esc(h.rel(e.TimeNS)), gpu, esc(e.Note))
	}
	h.s("</tbody></table></div></section>\n")
}

func statusHTML(s string) string {
	switch s {
	case "NVML_SUCCESS", "recorded", "supported":
		return `<span class="ok">` + esc(s) + `</span>`
	}
	return `<span class="warn">` + esc(s) + `</span>`
}

func (h *htmlWriter) missing() {
	h.s(`<section id="missing"><h2>Missing evidence</h2>` + "\n")
	if len(h.rep.Missing) == 0 {
		h.s(`<p class="dim">Nothing the verdict needed was missing.</p></section>` + "\n")
		return
	}
	h.s(`<ul class="missing">`)
	for _, m := range h.rep.Missing {
		tag := ""
		if m.Decisive {
			tag = `<span class="badge b-missing">decisive</span> `
		}
		h.f("<li>%s%s<div class=\"fix\">next time: %s</div></li>\n", tag, esc(m.What), esc(m.Fix))
	}
	h.s("</ul></section>\n")
}

func (h *htmlWriter) isFirst(f *Failure) bool {
	return isFirstFailure(h.rep.FirstFailure, f.TimeNS, f.PID, f.TID, f.Symbol)
}

// isFirstMark reports whether a drawn call is the first failure.
func (h *htmlWriter) isFirstMark(m *htmlMark) bool {
	return m.result != 0 && isFirstFailure(h.rep.FirstFailure, m.end, m.pid, m.tid, h.d.symName(m.sym))
}

func (h *htmlWriter) failures() {
	rep := h.rep
	n := len(rep.Failures) + rep.FailuresTruncated
	h.f(`<section id="failures"><h2>Failures <span class="count">%d</span></h2>`+"\n", n)
	if n == 0 {
		h.s(`<p class="dim">No recorded call failed.</p></section>` + "\n")
		return
	}
	h.s(`<div class="tablewrap"><table class="data"><thead><tr><th>time</th><th>wall (UTC)</th><th>pid / tid</th><th>call</th><th class="num">size</th><th>result</th><th>GPU</th><th></th></tr></thead><tbody>` + "\n")
	for i := range rep.Failures {
		if i >= htmlMaxFailureRows {
			break
		}
		f := &rep.Failures[i]
		var tags []string
		cls := ""
		if h.isFirst(f) {
			tags = append(tags, `<span class="badge b-alloc">first</span>`)
			cls = ` class="first"`
		}
		if f.Recovered {
			tags = append(tags, `<span class="badge b-none">recovered</span>`)
		}
		if f.PossibleConsequence {
			tags = append(tags, `<span class="badge b-notmem">possible consequence</span>`)
		}
		size := "—"
		if f.Size != nil {
			size = esc(HumanBytes(*f.Size))
		}
		gpu := "?"
		if f.GPUIndex != nil {
			gpu = fmt.Sprint(*f.GPUIndex)
		}
		h.f("<tr%s><td class=\"num\">%s</td><td class=\"num dim\">%s</td><td class=\"num\">%d / %d</td><td><code>%s</code></td><td class=\"num\">%s</td><td><code class=\"bad\">%s</code></td><td class=\"num\">%s</td><td>%s</td></tr>\n",
			cls, esc(h.rel(f.TimeNS)), esc(h.wall(f.TimeNS, "15:04:05.000000")), f.PID, f.TID, esc(f.Symbol), size, esc(f.ResultName), gpu, strings.Join(tags, " "))
	}
	h.s("</tbody></table></div>\n")
	if more := n - min(len(rep.Failures), htmlMaxFailureRows); more > 0 {
		h.f(`<p class="dim">… %d more failures: see <code>forensic analyze --json</code> and the timeline below.</p>`+"\n", more)
	}
	h.s("</section>\n")
}

// ---- timeline ----

type vrule struct {
	t     int64
	kind  string // fail, kernel, marker
	label string
	title string
}

func (h *htmlWriter) timeline() {
	d := h.d
	ts := d.ts
	h.s(`<section id="timeline"><h2>Timeline</h2>` + "\n")
	h.f(`<p class="note">One time axis for everything below, from the start of the recording (+0 s = %s). Framebuffer (device memory) and BAR1 (the PCIe aperture that maps device memory for the CPU and peers) are <b>separate views with separate axes</b>: they are never stacked, added or compared. Sizes in binary units (1 GiB = 1024 MiB; the conversion is declared with the memory views). Hover over a line, a call or a rule for its details.</p>`+"\n",
		esc(h.wall(ts.t0, wallLong)))

	gpus := make([]int, 0, len(d.gpus))
	for i := range d.gpus {
		gpus = append(gpus, i)
	}
	sort.Ints(gpus)
	procs := make([]*htmlProc, 0, len(d.procs))
	for _, p := range d.procs {
		if p.calls > 0 {
			procs = append(procs, p)
		}
	}
	startOf := map[uint32]int64{}
	for _, p := range h.rep.Processes {
		if _, ok := startOf[p.PID]; !ok {
			startOf[p.PID] = p.StartNS
		}
	}
	sort.Slice(procs, func(i, j int) bool {
		a, b := startOf[procs[i].pid], startOf[procs[j].pid]
		if a != b {
			return a < b
		}
		return procs[i].pid < procs[j].pid
	})

	// Vertical rules: failures (the first labelled), kernel lines, markers.
	var rules []vrule
	if f := h.rep.FirstFailure; f != nil {
		rules = append(rules, vrule{t: f.TimeNS, kind: "fail", label: "first failure",
			title: fmt.Sprintf("first failure: %s → %s, pid %d, %s (%s)", f.Symbol, f.ResultName, f.PID, h.rel(f.TimeNS), h.wall(f.TimeNS, wallLong))})
	}
	for _, k := range h.rep.KernelLog {
		label := "kernel"
		if k.Xid != nil {
			label = fmt.Sprintf("Xid %d", *k.Xid)
		}
		rules = append(rules, vrule{t: k.TimeNS, kind: "kernel", label: label, title: fmt.Sprintf("%s %s: %s", h.rel(k.TimeNS), h.wall(k.TimeNS, wallLong), k.Text)})
	}
	for _, m := range h.rep.Markers {
		rules = append(rules, vrule{t: m.TimeNS, kind: "marker", label: m.Label, title: fmt.Sprintf("marker %q at %s (%s)", m.Label, h.rel(m.TimeNS), h.wall(m.TimeNS, wallLong))})
	}
	sort.SliceStable(rules, func(i, j int) bool { return rules[i].t < rules[j].t })

	// Label lanes for the rules.
	const laneH = 14.0
	lanes := []float64{}
	laneOf := make([]int, len(rules))
	for i, r := range rules {
		x := ts.x(r.t)
		w := 6.2*float64(len([]rune(clip(r.label, 28)))) + 10
		laneOf[i] = -1
		for l, end := range lanes {
			if x > end {
				laneOf[i], lanes[l] = l, x+w
				break
			}
		}
		if laneOf[i] < 0 && len(lanes) < 4 {
			lanes = append(lanes, x+w)
			laneOf[i] = len(lanes) - 1
		}
	}
	top := 34.0 + laneH*float64(max(len(lanes), 1))

	// Height.
	y := top + 8
	type gpuLayout struct{ fbY, barY float64 }
	layouts := map[int]gpuLayout{}
	for _, g := range gpus {
		y += 22 // GPU heading
		fbY := y
		y += fbPanelH + 18
		barY := y
		y += barPanelH + 30
		layouts[g] = gpuLayout{fbY, barY}
	}
	callsY := y
	if len(procs) > 0 {
		y += 22 + procRowH*float64(len(procs)) + 8
	}
	bottom := y
	height := bottom + 36

	wall0 := int64(0)
	if !h.run.WallStart.IsZero() {
		wall0 = h.run.WallStart.UnixMilli()
	}
	h.f(`<div class="svgwrap"><svg id="timeline-svg" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="timeline" data-x0="%.1f" data-pw="%.1f" data-span-ns="%d" data-wall0-ms="%d" data-wall0-ns="%d">`+"\n",
		svgW, height, svgW, height, svgLeft, plotW, ts.span(), wall0, h.run.WallStart.Nanosecond()%int(time.Millisecond))
	h.s(`<rect x="0" y="0" width="100%" height="100%" fill="#ffffff"/>` + "\n")

	// Time grid and axes.
	step := niceTimeStep(ts.span())
	h.s(`<g class="axis">`)
	for i := int64(0); i*step <= ts.span(); i++ {
		t := ts.t0 + i*step
		x := ts.x(t)
		h.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="grid"/>`, x, top-2, x, bottom)
		h.f(`<text x="%.1f" y="22" text-anchor="middle"><title>%s</title>%s</text>`, x, esc(h.wall(t, wallLong)), esc(fmtRel(i*step, step)))
		h.f(`<text x="%.1f" y="%.1f" text-anchor="middle" class="wall">%s</text>`, x, bottom+16, esc(h.wall(t, wallFmt(step))))
	}
	h.s(`<text x="8" y="22" class="axtitle">elapsed since start</text>`)
	if !h.run.WallStart.IsZero() {
		h.f(`<text x="8" y="%.1f" class="axtitle">wall clock (UTC)</text>`, bottom+16)
	}
	h.s("</g>\n")

	for _, g := range gpus {
		h.gpuPanels(d.gpus[g], layouts[g].fbY, layouts[g].barY)
	}
	if len(procs) > 0 {
		h.f(`<text x="8" y="%.1f" class="ptitle">Calls per process</text>`, callsY+14)
		h.f(`<text x="%.1f" y="%.1f" class="legend">`, svgLeft, callsY+14)
		for i, op := range []cuda.Op{cuda.OpAllocation, cuda.OpHostAllocation, cuda.OpMapping, cuda.OpContext, cuda.OpFree, cuda.OpOther} {
			dx := 14
			if i == 0 {
				dx = 0
			}
			h.f(`<tspan dx="%d" fill="%s">■</tspan><tspan dx="3">%s</tspan>`, dx, opColours[op], esc(op.String()))
		}
		h.f(`<tspan dx="14" fill="%s">▼</tspan><tspan dx="3">failed call</tspan></text>`, colFail)
		for i, p := range procs {
			h.procRow(p, callsY+22+procRowH*float64(i), i)
		}
	}
	if len(gpus) == 0 && len(procs) == 0 {
		h.f(`<text x="%.1f" y="%.1f" class="empty">no samples and no calls were recorded</text>`, svgLeft+10, top+30)
	}

	// Rules over everything.
	for i, r := range rules {
		x := ts.x(r.t)
		h.f(`<g class="rule r-%s"><title>%s</title><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, r.kind, esc(r.title), x, top-4, x, bottom)
		if laneOf[i] >= 0 {
			ly := 34 + laneH*float64(laneOf[i]) + 10
			h.f(`<text x="%.1f" y="%.1f">%s</text>`, x+3, ly, esc(clip(r.label, 28)))
		}
		h.s("</g>\n")
	}
	h.f(`<line id="cursor" x1="0" y1="%.1f" x2="0" y2="%.1f" visibility="hidden"/><text id="cursor-label" x="0" y="%.1f" visibility="hidden"></text>`,
		top-4, bottom, bottom+30)
	h.s("</svg></div>\n")
	var notes []string
	if d.binnedFails > 0 {
		notes = append(notes, fmt.Sprintf("%d failures beyond the first %d are drawn as red bins rather than one mark each.", d.binnedFails, htmlMaxFailureMarks))
	}
	for _, p := range procs {
		if p.over {
			notes = append(notes, fmt.Sprintf("pid %d made %d calls: drawn as the number of calls per time bin (%d bins), with every failed call still marked.", p.pid, p.calls, htmlCallBins))
		}
	}
	if d.liveCapped {
		notes = append(notes, fmt.Sprintf("More than %d allocations were live at once: the traced-live line stops there.", htmlMaxLive))
	}
	for _, g := range gpus {
		if d.gpus[g].mig > 0 {
			notes = append(notes, fmt.Sprintf("GPU %d: %d MIG-instance samples are in the memory-view table, not drawn here.", g, d.gpus[g].mig))
		}
	}
	if len(notes) > 0 {
		h.s(`<ul class="notes">`)
		for _, n := range notes {
			h.f("<li>%s</li>", esc(n))
		}
		h.s("</ul>\n")
	}
	h.s("</section>\n")
}

// niceTimeStep picks a grid step (ns) giving about 8 ticks.
func niceTimeStep(span int64) int64 {
	raw := float64(span) / 8
	e := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*e >= raw {
			return max(int64(m*e), 1)
		}
	}
	return max(int64(10*e), 1)
}

func fmtRel(ns, step int64) string {
	dec := 0
	for s := step; s < int64(time.Second) && dec < 9; s *= 10 {
		dec++
	}
	return fmt.Sprintf("+%.*f s", dec, float64(ns)/1e9)
}

func wallFmt(step int64) string {
	switch {
	case step < int64(time.Millisecond):
		return "15:04:05.000000"
	case step < int64(time.Second):
		return "15:04:05.000"
	}
	return "15:04:05"
}

// unitFor picks a binary unit for an axis whose top is v bytes.
func unitFor(v uint64) (float64, string) {
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

func niceStep(top float64, n int) float64 {
	if top <= 0 {
		return 1
	}
	raw := top / float64(n)
	e := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*e >= raw {
			return m * e
		}
	}
	return 10 * e
}

type line struct {
	name, colour, dash string
	s                  *series
	step               bool
}

// panel draws one memory view of one GPU with its own y-axis.
func (h *htmlWriter) panel(y0, ph float64, title, sub, totalLabel string, v *viewPanel, lines []line) {
	total, unusable, status, api := v.total, v.unusable, v.status, v.api
	top := total
	for _, l := range lines {
		if l.s != nil {
			top = max(top, l.s.peak)
		}
	}
	any := false
	for _, l := range lines {
		if l.s != nil && l.s.points > 0 {
			any = true
		}
	}
	h.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" class="panel"/>`, svgLeft, y0, plotW, ph)
	h.f(`<text x="8" y="%.1f" class="ptitle">%s</text><text x="8" y="%.1f" class="psub">%s</text>`, y0+13, esc(title), y0+27, esc(sub))
	ly := y0 + 44
	for _, l := range lines {
		if l.s == nil || l.s.points == 0 {
			continue
		}
		dash := ""
		if l.dash != "" {
			dash = ` stroke-dasharray="` + l.dash + `"`
		}
		h.f(`<line x1="8" y1="%.1f" x2="26" y2="%.1f" stroke="%s" stroke-width="2.2"%s/><text x="31" y="%.1f" class="legend">%s</text>`, ly-4, ly-4, l.colour, dash, ly, esc(l.name))
		ly += 14
	}
	if api != "" {
		h.f(`<text x="8" y="%.1f" class="api"><title>%s</title>%s</text>`, min(ly+2, y0+ph+6), esc(api), esc(clip(api, 34)))
	}
	if !any {
		msg := "no usable samples"
		if len(status) > 0 {
			var ss []string
			for k, n := range status {
				ss = append(ss, fmt.Sprintf("%s ×%d", k, n))
			}
			sort.Strings(ss)
			msg += ": " + strings.Join(ss, ", ") + " (never drawn as zero)"
		}
		h.f(`<text x="%.1f" y="%.1f" class="empty">%s</text>`, svgLeft+12, y0+ph/2+4, esc(msg))
		h.unusableTicks(y0+ph, unusable, status)
		return
	}
	if top == 0 {
		top = 1
	}
	div, unit := unitFor(top)
	topU := float64(top) / div
	stepU := niceStep(topU, 4)
	yOf := func(v uint64) float64 { return y0 + ph - float64(v)/float64(top)*(ph-8) }
	for v := 0.0; v <= topU*1.0001; v += stepU {
		yy := y0 + ph - v/topU*(ph-8)
		h.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="hgrid"/><text x="%.1f" y="%.1f" text-anchor="end" class="tick">%s %s</text>`,
			svgLeft, yy, svgLeft+plotW, yy, svgLeft-6, yy+3.5, trimFloat(v), unit)
	}
	if total > 0 {
		yy := yOf(total)
		h.f(`<g><title>%s: %s (%d bytes)</title><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="5 4" stroke-width="1"/><text x="%.1f" y="%.1f" text-anchor="end" class="totlabel">%s %s</text></g>`,
			esc(totalLabel), esc(HumanBytes(total)), total, svgLeft, yy, svgLeft+plotW, yy, colTotal, svgLeft+plotW-4, yy-3, esc(totalLabel), esc(HumanBytes(total)))
	}
	for _, l := range lines {
		if l.s == nil || l.s.points == 0 {
			continue
		}
		h.seriesPath(l, yOf, title)
	}
	h.unusableTicks(y0+ph, unusable, status)
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

func (h *htmlWriter) unusableTicks(yb float64, ts []int64, status map[string]int) {
	if len(ts) == 0 {
		return
	}
	var ss []string
	for k, n := range status {
		ss = append(ss, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(ss)
	h.f(`<g class="unusable"><title>samples without a value: %s (shown as gaps, never as zero)</title>`, esc(strings.Join(ss, ", ")))
	lastX := -10.0
	for _, t := range ts {
		x := h.d.ts.x(t)
		if x-lastX < 2 {
			continue
		}
		lastX = x
		h.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, x, yb-6, x, yb)
	}
	h.s("</g>")
}

// seriesPath draws a downsampled series as a polyline (or step line), one
// path per run of buckets without gaps, and dots when it is sparse.
func (h *htmlWriter) seriesPath(l line, yOf func(uint64) float64, view string) {
	ts := h.d.ts
	type pt struct {
		t int64
		v uint64
	}
	var pts []pt
	var paths []string
	flush := func() {
		if len(pts) == 0 {
			return
		}
		var b strings.Builder
		for i, p := range pts {
			x, y := ts.x(p.t), yOf(p.v)
			switch {
			case i == 0:
				fmt.Fprintf(&b, "M%.1f %.1f", x, y)
			case l.step:
				fmt.Fprintf(&b, "H%.1fV%.1f", x, y)
			default:
				fmt.Fprintf(&b, "L%.1f %.1f", x, y)
			}
		}
		if len(pts) == 1 {
			fmt.Fprintf(&b, "h1.5")
		}
		paths = append(paths, b.String())
		pts = pts[:0]
	}
	last := pt{}
	for _, b := range l.s.b {
		if b.n == 0 {
			if b.gaps > 0 {
				flush()
			}
			continue
		}
		a, c := pt{b.minT, b.min}, pt{b.maxT, b.max}
		if c.t < a.t {
			a, c = c, a
		}
		pts = append(pts, a)
		if b.n > 1 && (c.t != a.t || c.v != a.v) {
			pts = append(pts, c)
		}
		last = pts[len(pts)-1]
	}
	if l.step && len(pts) > 0 {
		// A traced total holds its value until the end of the run.
		pts = append(pts, pt{ts.t1, last.v})
	}
	flush()
	dash := ""
	if l.dash != "" {
		dash = ` stroke-dasharray="` + l.dash + `"`
	}
	peak := HumanBytes(l.s.peak)
	h.f(`<g class="series"><title>%s %s: peak %s in this view (%d points before downsampling)</title>`, esc(view), esc(l.name), esc(peak), l.s.points)
	for _, p := range paths {
		h.f(`<path d="%s" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round"%s/>`, p, l.colour, dash)
	}
	h.s("</g>")
	if l.s.points <= 240 && !l.step {
		for _, b := range l.s.b {
			if b.n == 0 {
				continue
			}
			for _, p := range []pt{{b.minT, b.min}, {b.maxT, b.max}} {
				h.f(`<circle cx="%.1f" cy="%.1f" r="2.6" fill="%s"><title>%s %s: %s (%d bytes) at %s, %s</title></circle>`,
					ts.x(p.t), yOf(p.v), l.colour, esc(view), esc(l.name), esc(HumanBytes(p.v)), p.v, esc(h.rel(p.t)), esc(h.wall(p.t, wallLong)))
				if b.n == 1 || (b.minT == b.maxT && b.min == b.max) {
					break
				}
			}
		}
	}
}

func (h *htmlWriter) gpuPanels(g *gpuPanel, fbY, barY float64) {
	head := fmt.Sprintf("GPU %d", g.index)
	if g.name != "" {
		head += " · " + g.name
	}
	if g.uuid != "" {
		head += " · " + g.uuid
	}
	h.f(`<text x="8" y="%.1f" class="gpuhead">%s</text>`, fbY-8, esc(head))
	fbLines := []line{
		{name: "used", colour: colFBUsed, s: g.fb.series["used"]},
		{name: "free", colour: colFBFree, s: g.fb.series["free"]},
		{name: "reserved", colour: colFBReserved, s: g.fb.series["reserved"]},
		{name: "traced live allocs", colour: colTraced, dash: "6 3", s: g.traced, step: true},
	}
	h.panel(fbY, fbPanelH, "Framebuffer", "device memory", "framebuffer total", &g.fb, fbLines)
	barLines := []line{
		{name: "used", colour: colBARUsed, s: g.bar.series["used"]},
		{name: "free", colour: colBARFree, s: g.bar.series["free"]},
	}
	h.panel(barY, barPanelH, "BAR1 aperture", "PCIe mappings, own axis", "BAR1 total (aperture size)", &g.bar, barLines)
}

func (h *htmlWriter) procRow(p *htmlProc, y float64, i int) {
	ts := h.d.ts
	cls := "row"
	if i%2 == 1 {
		cls = "row alt"
	}
	h.f(`<rect x="0" y="%.1f" width="%.1f" height="%.1f" class="%s"/>`, y, svgW, procRowH, cls)
	name := p.name
	if name == "" {
		name = "?"
	}
	h.f(`<text x="8" y="%.1f" class="pname"><title>pid %d %s</title>pid %d · %s</text>`, y+13, p.pid, esc(p.name), p.pid, esc(clip(name, 20)))
	fl := ""
	if p.failed > 0 {
		fl = fmt.Sprintf(`, <tspan fill="%s">%d failed</tspan>`, colFail, p.failed)
	}
	mode := ""
	if p.over {
		mode = " (binned)"
	}
	h.f(`<text x="8" y="%.1f" class="psub">%d calls%s%s</text>`, y+25, p.calls, fl, mode)
	midY := y + procRowH/2
	if !p.over {
		for _, m := range p.marks {
			if m.result != 0 {
				continue
			}
			x := ts.x(m.start)
			w := max(ts.x(m.end)-x, 1.2)
			h.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="12" fill="%s" class="call"><title>%s</title></rect>`,
				x, midY-6, w, opColours[m.op], esc(h.markTitle(&m)))
		}
	} else {
		var peak uint32
		for _, c := range p.bins {
			peak = max(peak, c)
		}
		bw := plotW / htmlCallBins
		for b, c := range p.bins {
			if c == 0 {
				continue
			}
			hh := 3 + (procRowH-8)*math.Sqrt(float64(c)/float64(peak))
			t := ts.binStart(b, htmlCallBins)
			h.f(`<rect x="%.2f" y="%.1f" width="%.2f" height="%.1f" class="bin"><title>%d calls from %s to %s</title></rect>`,
				svgLeft+float64(b)*bw, y+procRowH-4-hh, bw, hh, c, esc(h.rel(t)), esc(h.rel(ts.binStart(b+1, htmlCallBins))))
		}
	}
	if p.fbins != nil {
		bw := plotW / htmlCallBins
		for b, c := range p.fbins {
			if c > 0 {
				h.f(`<rect x="%.2f" y="%.1f" width="%.2f" height="%.1f" fill="%s"><title>%d more failed calls from %s</title></rect>`,
					svgLeft+float64(b)*bw, y+3, max(bw, 1.5), procRowH-6, colFail, c, esc(h.rel(ts.binStart(b, htmlCallBins))))
			}
		}
	}
	lastLabel := -1e9
	for _, m := range p.fails {
		x := ts.x(m.end)
		h.f(`<g class="fail"><title>FAILED %s</title><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/><path d="M%.1f %.1fl-4.5 -6h9z"/>`,
			esc(h.markTitle(&m)), x, y+4, x, y+procRowH-3, x, y+9)
		if x-lastLabel > 150 && x < svgLeft+plotW-40 {
			label := h.d.symName(m.sym) + " " + strings.TrimPrefix(cuda.LookupResult(m.result).Name, "CUDA_ERROR_")
			if h.isFirstMark(&m) {
				label = "FIRST: " + label
			}
			anchor, lx := "start", x+5
			if x > svgLeft+plotW-180 {
				anchor, lx = "end", x-5
			}
			h.f(`<text x="%.1f" y="%.1f" text-anchor="%s">%s</text>`, lx, y+12, anchor, esc(clip(label, 40)))
			lastLabel = x
		}
		h.s("</g>")
	}
	h.s("\n")
}

func (h *htmlWriter) markTitle(m *htmlMark) string {
	var b strings.Builder
	b.WriteString(h.d.symName(m.sym))
	if m.hasSize {
		fmt.Fprintf(&b, "(%s)", HumanBytes(m.size))
	}
	fmt.Fprintf(&b, " → %s", cuda.LookupResult(m.result).Name)
	fmt.Fprintf(&b, "\n%s (%s), took %v", h.rel(m.end), h.wall(m.end, wallLong), time.Duration(m.end-m.start))
	fmt.Fprintf(&b, "\npid %d tid %d", m.pid, m.tid)
	if m.dev >= 0 {
		fmt.Fprintf(&b, ", CUDA device %d", m.dev)
	}
	return b.String()
}

// ---- tables ----

func mibCell(v *uint64) string {
	if v == nil {
		return `<td class="num dim">—</td>`
	}
	return fmt.Sprintf(`<td class="num" title="%d bytes">%.1f</td>`, *v, float64(*v)/(1<<20))
}

func (h *htmlWriter) memoryViews() {
	rows := h.rep.MemoryViews
	h.s(`<section id="memory-views"><h2>Memory views</h2>` + "\n")
	h.s(`<p class="note">Values in MiB (<b>MiB = 2^20 bytes</b>; hover a value for bytes). One row per field, GPU and scope. Framebuffer and BAR1 are separate views: their rows are never added to or compared with each other. “—” means no usable value (an unsupported or failed query is never shown as zero).</p>` + "\n")
	if len(rows) == 0 {
		h.s(`<p class="dim">No memory views: no samples and no traced allocations.</p></section>` + "\n")
		return
	}
	h.s(`<div class="tablewrap"><table class="data views"><thead><tr><th>GPU</th><th>view</th><th>field</th><th>scope</th><th class="num">start</th><th class="num">before 1st failure</th><th class="num">at failure</th><th class="num">end</th><th class="num">peak</th><th class="num">low</th><th class="num">change</th><th>source</th><th>support</th></tr></thead><tbody>` + "\n")
	prev := ""
	for _, v := range rows {
		group := fmt.Sprintf("%d/%s", v.GPU, v.View)
		cls := "v-" + v.View
		if group != prev && prev != "" {
			cls += " groupstart"
		}
		prev = group
		view := "framebuffer"
		if v.View == "bar1" {
			view = "BAR1"
		} else if v.View != "framebuffer" {
			view = v.View
		}
		change := `<td class="num dim">—</td>`
		if v.Change != nil {
			change = fmt.Sprintf(`<td class="num" title="%d bytes">%+.1f</td>`, *v.Change, float64(*v.Change)/(1<<20))
		}
		src := apiOf(v.API, v.Struct)
		h.f(`<tr class="%s"><td class="num">%d</td><td><span class="chip c-%s">%s</span></td><td title="%s — examines %s">%s</td><td>%s</td>%s%s%s%s%s%s%s<td><code>%s</code></td><td>%s</td></tr>`+"\n",
			cls, v.GPU, esc(v.View), esc(view), esc(v.Meaning), esc(v.Examines), esc(v.Field), esc(v.Scope),
			mibCell(v.Start), mibCell(v.Before), mibCell(v.At), mibCell(v.End), mibCell(v.Peak), mibCell(v.Low), change,
			esc(src), statusHTML(v.Support))
	}
	h.s("</tbody></table></div>\n")
	if len(h.rep.Phases) > 0 {
		h.f(`<h3>Per phase <span class="dim">(%s; last value in each phase, MiB)</span></h3>`+"\n", esc(h.rep.PhasesFrom))
		h.s(`<div class="tablewrap"><table class="data views"><thead><tr><th>GPU</th><th>field</th><th>scope</th>`)
		for _, p := range h.rep.Phases {
			h.f(`<th class="num" title="%s .. %s">%s</th>`, esc(h.rel(p.StartNS)), esc(h.rel(p.EndNS)), esc(p.Label))
		}
		h.s("</tr></thead><tbody>\n")
		for _, v := range rows {
			if len(v.Phases) == 0 {
				continue
			}
			h.f(`<tr class="v-%s"><td class="num">%d</td><td>%s</td><td>%s</td>`, esc(v.View), v.GPU, esc(v.Field), esc(v.Scope))
			byLabel := map[string]PhaseValue{}
			for _, pv := range v.Phases {
				byLabel[pv.Phase] = pv
			}
			for _, p := range h.rep.Phases {
				pv, ok := byLabel[p.Label]
				if !ok {
					h.s(`<td class="num dim">—</td>`)
					continue
				}
				h.s(mibCell(pv.Last))
			}
			h.s("</tr>\n")
		}
		h.s("</tbody></table></div>\n")
	}
	h.s("</section>\n")
}

func (h *htmlWriter) processes() {
	ps := h.rep.Processes
	h.f(`<section id="processes"><h2>Processes <span class="count">%d</span></h2>`+"\n", len(ps))
	if len(ps) == 0 {
		h.s(`<p class="dim">No process was recorded.</p></section>` + "\n")
		return
	}
	h.s(`<div class="tablewrap"><table class="data"><thead><tr><th>pid</th><th>ppid</th><th>executable</th><th>arguments</th><th>exit</th><th class="num">calls</th><th class="num">failed</th><th>devices</th></tr></thead><tbody>` + "\n")
	for _, p := range ps {
		exit := "running at end"
		if p.Exit != nil {
			switch {
			case p.Exit.Code != nil:
				exit = fmt.Sprintf("exit %d at %s", *p.Exit.Code, h.rel(p.Exit.TimeNS))
			case p.Exit.Signal != nil:
				exit = fmt.Sprintf("killed by %s at %s", p.Exit.Name, h.rel(p.Exit.TimeNS))
			}
		}
		if p.AttachedLate {
			exit += "; attached late"
		}
		var devs []string
		for _, dm := range p.Devices {
			g := "unknown"
			if dm.GPU != nil {
				g = fmt.Sprintf("GPU %d", *dm.GPU)
			}
			s := fmt.Sprintf("CUDA %d → %s (%s)", dm.Ordinal, g, dm.Method)
			if dm.Why != "" {
				s += ": " + dm.Why
			}
			devs = append(devs, esc(s))
		}
		failed := fmt.Sprint(p.Failed)
		if p.Failed > 0 {
			failed = `<span class="bad">` + failed + `</span>`
		}
		h.f("<tr><td class=\"num\">%d</td><td class=\"num\">%d</td><td><code title=\"%s\">%s</code></td><td><code>%s</code></td><td>%s</td><td class=\"num\">%d</td><td class=\"num\">%s</td><td>%s</td></tr>\n",
			p.PID, p.PPID, esc(p.Exe), esc(filepath.Base(p.Exe)), esc(clip(strings.Join(p.Args, " "), 120)), esc(exit), p.Calls, failed, strings.Join(devs, "<br>"))
	}
	h.s("</tbody></table></div></section>\n")
}

func (h *htmlWriter) kernelAndMarkers() {
	rep := h.rep
	h.s(`<section id="kernel-log"><h2>Kernel log and markers</h2>` + "\n")
	if len(rep.KernelLog) == 0 && len(rep.Markers) == 0 {
		h.s(`<p class="dim">No NVRM or Xid kernel log lines and no markers were recorded.</p></section>` + "\n")
		return
	}
	type item struct {
		t          int64
		kind, text string
		pos        string
	}
	var items []item
	for _, k := range rep.KernelLog {
		kind := "kernel"
		if k.Xid != nil {
			kind = fmt.Sprintf("Xid %d", *k.Xid)
		}
		items = append(items, item{k.TimeNS, kind, k.Text, k.Position})
	}
	for _, m := range rep.Markers {
		items = append(items, item{m.TimeNS, "marker", m.Label, ""})
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].t < items[j].t })
	h.s(`<div class="tablewrap"><table class="data"><thead><tr><th>time</th><th>wall (UTC)</th><th>kind</th><th>relative to the first failure</th><th>text</th></tr></thead><tbody>` + "\n")
	for _, it := range items {
		cls := "k-marker"
		if it.kind != "marker" {
			cls = "k-kernel"
		}
		h.f("<tr><td class=\"num\">%s</td><td class=\"num dim\">%s</td><td><span class=\"chip %s\">%s</span></td><td>%s</td><td><code>%s</code></td></tr>\n",
			esc(h.rel(it.t)), esc(h.wall(it.t, "15:04:05.000000")), cls, esc(it.kind), esc(it.pos), esc(it.text))
	}
	h.s("</tbody></table></div></section>\n")
}

func (h *htmlWriter) lossAndSampling() {
	l, sm := h.rep.Loss, h.rep.Sampling
	h.s(`<section id="loss"><h2>Loss and sampling</h2><dl class="kv">` + "\n")
	if l.Known {
		lost := fmt.Sprintf("%d calls seen, %d events stored, %d lost (in-flight table %d, too deep %d), %d unmatched returns, %d lost process records",
			l.Calls, l.Events, l.LostCalls, l.LostInflight, l.TooDeep, l.Unmatched, l.LostProc)
		cls := "ok"
		if l.stats().Lost() {
			cls = "warn"
		}
		h.kv("calls", fmt.Sprintf(`<span class="%s">%s</span>`, cls, esc(lost)))
		if l.BeforeFailure {
			h.kv("", `<span class="warn">evidence was lost before the first failure</span>`)
		}
	} else {
		h.kv("calls", `<span class="warn">loss counters were not recorded (the recorder did not stop cleanly)</span>`)
	}
	h.kv("NVML", fmt.Sprintf("%s from <code>%s</code>: %d samples, %d thinned out, %d rounds triggered by failures",
		statusHTML(sm.NVMLInit), esc(sm.NVMLLibrary), sm.Samples, sm.Thinned, sm.Triggered))
	if sm.DelayMedian != nil && sm.DelayMax != nil {
		h.kv("failure → sample", fmt.Sprintf("median %v, max %v", time.Duration(*sm.DelayMedian), time.Duration(*sm.DelayMax)))
	}
	if len(sm.Unsupported) > 0 {
		h.kv("unsupported", esc(strings.Join(sm.Unsupported, ", ")))
	}
	h.kv("interval", esc(time.Duration(h.rep.Run.Interval).String()))
	h.s("</dl></section>\n")
}

func (h *htmlWriter) coverage() {
	h.s(`<section id="coverage"><h2>Coverage</h2>` + "\n")
	if len(h.rep.Coverage) == 0 {
		h.s(`<p class="dim">No libcuda was attached.</p></section>` + "\n")
		return
	}
	h.s(`<ul class="plain">`)
	for _, l := range h.rep.Coverage {
		h.f(`<li><code>%s</code> <span class="dim">build id %s</span>: %d symbols hooked, %d absent, %d exported but not hooked`,
			esc(l.Path), esc(orDash(l.BuildID)), len(l.Hooked), len(l.Absent), len(l.Unknown))
		if len(l.Absent) > 0 {
			h.f(`<div class="dim">absent: %s</div>`, esc(strings.Join(l.Absent, " ")))
		}
		if len(l.Unknown) > 0 {
			h.f(`<div class="warn">not hooked: %s</div>`, esc(strings.Join(l.Unknown, " ")))
		}
		if l.Error != "" {
			h.f(`<div class="warn">%s</div>`, esc(l.Error))
		}
		h.s("</li>\n")
	}
	h.s("</ul></section>\n")
}

func (h *htmlWriter) calls() {
	cs := h.rep.Calls
	h.s(`<section id="calls"><h2>Calls per symbol</h2>` + "\n")
	if len(cs) == 0 {
		h.s(`<p class="dim">No hooked call was recorded.</p></section>` + "\n")
		return
	}
	h.s(`<div class="tablewrap"><table class="data narrow"><thead><tr><th>symbol</th><th>operation</th><th class="num">calls</th><th class="num">failed</th></tr></thead><tbody>` + "\n")
	for _, c := range cs {
		op := opOf(c.Symbol)
		failed := fmt.Sprint(c.Failed)
		if c.Failed > 0 {
			failed = `<span class="bad">` + failed + `</span>`
		}
		h.f("<tr><td><code>%s</code></td><td><span class=\"chip\" style=\"border-color:%s\">%s</span></td><td class=\"num\">%d</td><td class=\"num\">%s</td></tr>\n",
			esc(c.Symbol), opColours[op], esc(op.String()), c.Calls, failed)
	}
	h.s("</tbody></table></div></section>\n")
}

func opOf(name string) cuda.Op {
	if sym, _, ok := cuda.Lookup(name); ok {
		return sym.Op
	}
	return cuda.OpOther
}

const htmlCSS = `
:root{--fg:#1f2328;--dim:#656d76;--line:#d0d7de;--bg:#ffffff;--soft:#f6f8fa;--red:#cf222e;--amber:#9a6700;--green:#1a7f37;--purple:#8250df;--blue:#0969da}
*{box-sizing:border-box}
body{margin:0;background:var(--soft);color:var(--fg);font:15px/1.5 -apple-system,BlinkMacSystemFont,"Segoe UI","Noto Sans",Helvetica,Arial,sans-serif}
main{max-width:1240px;margin:0 auto;padding:28px 28px 48px}
code,.mono{font-family:ui-monospace,SFMono-Regular,"SF Mono",Menlo,Consolas,"DejaVu Sans Mono","Liberation Mono",monospace;font-size:.88em}
h1{font-size:25px;margin:4px 0 6px;word-break:break-word;font-weight:650}
.cmd{margin:0 0 10px;color:#424a53;word-break:break-all;max-height:4.6em;overflow:hidden}
h2{font-size:19px;margin:0 0 12px;padding-bottom:6px;border-bottom:1px solid var(--line)}
h3{font-size:15px;margin:18px 0 6px}
section,header{background:var(--bg);border:1px solid var(--line);border-radius:10px;padding:18px 22px;margin:0 0 18px}
.eyebrow{text-transform:uppercase;letter-spacing:.08em;font-size:12px;color:var(--dim);font-weight:600}
.runmeta{display:flex;flex-wrap:wrap;gap:6px 28px;margin:0;font-size:14px}
.runmeta div{display:flex;gap:8px}.runmeta dt{color:var(--dim)}.runmeta dd{margin:0}
.verdict{border-left:8px solid var(--dim)}
.verdict.v-alloc{border-left-color:var(--red)}.verdict.v-map{border-left-color:var(--purple)}
.verdict.v-notmem{border-left-color:var(--amber)}.verdict.v-missing{border-left-color:#bc4c00}.verdict.v-none{border-left-color:var(--green)}
.vhead{display:flex;align-items:center;flex-wrap:wrap;gap:10px}
.vlabel{font-size:13px;text-transform:uppercase;letter-spacing:.1em;font-weight:700;color:var(--dim)}
.vsum{font-size:22px;font-weight:650;margin:10px 0 4px}
.vtext{font-size:17px;line-height:1.55;margin:0 0 8px;max-width:75em}
.badge{display:inline-block;border-radius:999px;padding:2px 11px;font-size:13px;font-weight:600;border:1px solid var(--line);background:var(--soft);white-space:nowrap}
.b-alloc{background:#ffebe9;border-color:#ff8182;color:#a40e26}.b-map{background:#fbefff;border-color:#d8b9ff;color:#6639ba}
.b-notmem{background:#fff8c5;border-color:#d4a72c;color:#7d4e00}.b-missing{background:#fff1e5;border-color:#fb8f44;color:#953800}
.b-none{background:#dafbe1;border-color:#4ac26b;color:#116329}.cap{background:#ddf4ff;border-color:#54aeff;color:#0550ae}
dl.kv{display:grid;grid-template-columns:max-content 1fr;gap:3px 18px;margin:6px 0}
dl.kv div{display:contents}dl.kv dt{color:var(--dim)}dl.kv dd{margin:0}
ol.stack{margin:4px 0;padding-left:28px;font-size:14px}ol.stack li{padding:1px 0}
.dim{color:var(--dim)}.bad{color:var(--red);font-weight:600}.ok{color:var(--green)}.warn{color:#bc4c00;font-weight:600}
.note{color:var(--dim);font-size:14px;margin:0 0 12px;max-width:80em}
.count{display:inline-block;background:var(--soft);border:1px solid var(--line);border-radius:999px;font-size:13px;padding:0 9px;vertical-align:middle;color:var(--dim)}
table.data{border-collapse:collapse;width:100%;font-size:13.5px}
table.data th{text-align:left;font-weight:600;color:var(--dim);border-bottom:2px solid var(--line);padding:5px 8px;vertical-align:bottom}
.tablewrap{overflow-x:auto}
table.views td code{font-size:11.5px;word-break:break-word}
table.data td{border-bottom:1px solid #eaeef2;padding:5px 8px;vertical-align:top}
table.data tr.first td{background:#fff5f5}
table.data.narrow{width:auto;min-width:50%}
table.data.lead{width:auto;min-width:60%;font-size:13px}table.data.lead td{padding:2px 10px}
.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
th.num{text-align:right}
table.views tr.groupstart td{border-top:2px solid var(--line)}
table.views tr.v-bar1 td:first-child{box-shadow:inset 3px 0 0 #8250df}
table.views tr.v-framebuffer td:first-child{box-shadow:inset 3px 0 0 #1f6feb}
.chip{display:inline-block;border:1px solid var(--line);border-radius:5px;padding:0 6px;font-size:12px;white-space:nowrap}
.c-framebuffer{border-color:#54aeff;color:#0550ae;background:#ddf4ff}.c-bar1{border-color:#c297ff;color:#6639ba;background:#fbefff}
.k-kernel{border-color:#d4a72c;color:#7d4e00;background:#fff8c5}.k-marker{color:var(--dim)}
ul.missing{margin:0;padding-left:20px}ul.missing li{margin:0 0 8px}.fix{color:var(--dim);font-size:14px}
ul.plain{margin:0;padding-left:20px}ul.notes{margin:10px 0 0;padding-left:20px;color:var(--dim);font-size:13.5px}
.svgwrap{overflow-x:auto}
svg{display:block;width:100%;height:auto;font-family:-apple-system,BlinkMacSystemFont,"Segoe UI","Noto Sans",Helvetica,Arial,sans-serif}
svg text{font-size:11px;fill:#424a53}
svg .axis text{font-size:11px;fill:#57606a;font-variant-numeric:tabular-nums}
svg .axis .wall{fill:#8c959f}
svg .axtitle{font-weight:600;fill:#8c959f}
svg .grid{stroke:#eaeef2;stroke-width:1}
svg .hgrid{stroke:#eef1f4;stroke-width:1}
svg .panel{fill:#fbfcfd;stroke:#d0d7de}
svg .ptitle{font-size:12.5px;font-weight:700;fill:#1f2328}
svg .psub{font-size:10.5px;fill:#656d76}
svg .gpuhead{font-size:13px;font-weight:700;fill:#1f2328}
svg .legend{font-size:11px;fill:#424a53}
svg .api{font-size:9.5px;fill:#8c959f}
svg .tick{font-size:10px;fill:#656d76;font-variant-numeric:tabular-nums}
svg .totlabel{font-size:10px;fill:#57606a}
svg .empty{font-size:12px;fill:#bc4c00;font-style:italic}
svg .row{fill:#ffffff}svg .row.alt{fill:#f6f8fa}
svg .pname{font-size:11.5px;font-weight:600;fill:#1f2328}
svg .bin{fill:#6e7781}
svg .call{opacity:.85}
svg .fail line{stroke:#cf222e;stroke-width:2}svg .fail path{fill:#cf222e}svg .fail text{fill:#cf222e;font-weight:700;font-size:10.5px}
svg .unusable line{stroke:#bc4c00;stroke-width:1.5}
svg .rule line{stroke-width:1.4}
svg .r-fail line{stroke:#cf222e;stroke-dasharray:2 2}svg .r-fail text{fill:#cf222e;font-weight:700}
svg .r-kernel line{stroke:#9a6700}svg .r-kernel text{fill:#9a6700;font-weight:700}
svg .r-marker line{stroke:#57606a;stroke-dasharray:6 3}svg .r-marker text{fill:#57606a;font-style:italic}
svg #cursor{stroke:#0969da;stroke-width:1;pointer-events:none}
svg #cursor-label{fill:#0969da;font-size:11px;font-weight:600;pointer-events:none}
footer{color:var(--dim);font-size:12.5px;margin-top:8px}
@media print{body{background:#fff}section,header{break-inside:avoid;border-color:#ccc}main{padding:0}}
`

const htmlJS = `
(function () {
  var svg = document.getElementById("timeline-svg");
  if (!svg || !svg.getScreenCTM) { return; }
  var x0 = parseFloat(svg.getAttribute("data-x0")), pw = parseFloat(svg.getAttribute("data-pw"));
  var span = parseFloat(svg.getAttribute("data-span-ns")), wall0 = parseFloat(svg.getAttribute("data-wall0-ms"));
  var wallNs = parseFloat(svg.getAttribute("data-wall0-ns"));
  var line = document.getElementById("cursor"), label = document.getElementById("cursor-label");
  var pt = svg.createSVGPoint();
  function hide() { line.setAttribute("visibility", "hidden"); label.setAttribute("visibility", "hidden"); }
  svg.addEventListener("mousemove", function (ev) {
    var m = svg.getScreenCTM();
    if (!m) { return; }
    pt.x = ev.clientX; pt.y = ev.clientY;
    var p = pt.matrixTransform(m.inverse());
    if (p.x < x0 || p.x > x0 + pw) { hide(); return; }
    var ns = (p.x - x0) / pw * span;
    line.setAttribute("x1", p.x); line.setAttribute("x2", p.x);
    var text = "+" + (ns / 1e9).toFixed(span < 1e10 ? 4 : 2) + " s";
    if (wall0 > 0) {
      var ms = wall0 + (wallNs + ns) / 1e6;
      text += "   " + new Date(ms).toISOString().substring(11, 23) + " UTC";
    }
    label.textContent = text;
    label.setAttribute("x", Math.min(p.x + 6, x0 + pw - 190));
    line.setAttribute("visibility", "visible"); label.setAttribute("visibility", "visible");
  });
  svg.addEventListener("mouseleave", hide);
  document.documentElement.setAttribute("data-timeline-ready", "1");
})();
`

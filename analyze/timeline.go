package analyze

import (
	"path/filepath"
	"sort"
	"time"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// timeScale maps run-clock times to bins of the timeline.
type timeScale struct{ t0, t1 int64 }

func (ts timeScale) span() int64 { return max(ts.t1-ts.t0, 1) }

func (ts timeScale) bin(t int64, n int) int {
	t = min(max(t, ts.t0), ts.t1)
	i := int(float64(t-ts.t0) / float64(ts.span()) * float64(n))
	return min(max(i, 0), n-1)
}

// timelineBuilder fills the report's Timeline from the event replay and
// the samples, in fixed sizes (see report.Timeline).
type timelineBuilder struct {
	ts    timeScale
	first *failed
	procs map[uint32]*report.ProcessTrack
	gpus  map[int]*report.GPUTrack
	tl    report.Timeline
}

func newTimelineBuilder(s *state) *timelineBuilder {
	t0 := s.run.ClockStart
	t1 := max(s.rep.Run.EndNS, t0)
	for _, m := range s.rep.Markers {
		t1 = max(t1, m.TimeNS)
	}
	for _, k := range s.rep.KernelLog {
		t1 = max(t1, k.TimeNS)
	}
	if t1 <= t0 {
		t1 = t0 + int64(time.Millisecond)
	}
	b := &timelineBuilder{ts: timeScale{t0, t1}, first: s.first, procs: map[uint32]*report.ProcessTrack{},
		gpus: map[int]*report.GPUTrack{}}
	b.tl.StartNS, b.tl.EndNS = t0, t1
	if s.inv != nil {
		for _, g := range s.inv.GPUs {
			gt := b.gpu(g.Index)
			gt.UUID = deref(g.UUID.Value)
			gt.Name = deref(g.Name.Value)
			if g.FBTotal.Value != nil {
				gt.Framebuffer.Total = *g.FBTotal.Value
			}
			if g.BAR1Total.Value != nil {
				gt.BAR1.Total = *g.BAR1Total.Value
			}
		}
	}
	for _, p := range s.procList {
		pt := b.proc(p.PID)
		pt.Name = ""
		if p.Exe != "" {
			pt.Name = filepath.Base(p.Exe)
		}
	}
	return b
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func (b *timelineBuilder) proc(pid uint32) *report.ProcessTrack {
	p := b.procs[pid]
	if p == nil {
		p = &report.ProcessTrack{PID: pid, Bins: make([]uint32, report.CallBins)}
		b.procs[pid] = p
	}
	return p
}

func (b *timelineBuilder) gpu(i int) *report.GPUTrack {
	g := b.gpus[i]
	if g == nil {
		g = &report.GPUTrack{Index: i}
		g.Framebuffer.Status = map[string]int{}
		g.BAR1.Status = map[string]int{}
		b.gpus[i] = g
	}
	return g
}

// call draws one application call of the replay; live is the traced
// device memory on its GPU right after it.
func (b *timelineBuilder) call(e *store.Event, sym *cuda.Symbol, name string, gpu int, live func() *uint64) {
	p := b.proc(e.PID)
	p.Calls++
	p.Bins[b.ts.bin(e.Start, report.CallBins)]++
	if p.Calls > report.MaxMarks {
		p.Marks = nil
	}
	if p.Calls > report.MaxMarks && e.Result == 0 && !b.leads(e) {
		return // binned only: no mark is made (most calls of a long run)
	}
	m := report.CallMark{StartNS: e.Start, EndNS: e.End, PID: e.PID, TID: e.TID, Symbol: name, Operation: sym.Op.String(),
		Result: e.Result, CUDADevice: e.Dev, GPU: optInt(gpu), Live: live()}
	if e.Result != 0 {
		m.ResultName = cuda.LookupResult(e.Result).Name
	}
	if e.Has&cuda.FieldSize != 0 {
		size := e.Size
		m.Size = &size
	}
	m.First = sameCall(b.first, e)
	if p.Calls <= report.MaxMarks {
		p.Marks = append(p.Marks, m)
	}
	if e.Result != 0 {
		b.fail(p, m)
	}
	b.keepLead(m)
}

// fail keeps a failed call as a mark, or bins it past MaxFailureMarks.
func (b *timelineBuilder) fail(p *report.ProcessTrack, m report.CallMark) {
	p.Failed++
	if b.tl.DrawnFailures < report.MaxFailureMarks {
		p.Fails = append(p.Fails, m)
		b.tl.DrawnFailures++
		return
	}
	if p.FailBins == nil {
		p.FailBins = make([]uint32, report.CallBins)
	}
	p.FailBins[b.ts.bin(m.EndNS, report.CallBins)]++
	b.tl.BinnedFailures++
}

// leads reports whether a call may be among the lead of the first
// failure: one of its process's that ended no later than it.
func (b *timelineBuilder) leads(e *store.Event) bool {
	f := b.first
	return f != nil && e.PID == f.e.PID && e.End <= f.e.End
}

// keepLead keeps m if it is among the latest LeadCalls calls of the first
// failure's process that ended no later than the failure.
func (b *timelineBuilder) keepLead(m report.CallMark) {
	f := b.first
	if f == nil || m.PID != f.e.PID || m.EndNS > f.e.End {
		return
	}
	lead := &b.tl.Lead
	if len(*lead) < report.LeadCalls {
		*lead = append(*lead, m)
		return
	}
	oldest := 0
	for i := range *lead {
		if (*lead)[i].EndNS < (*lead)[oldest].EndNS {
			oldest = i
		}
	}
	if m.EndNS > (*lead)[oldest].EndNS {
		(*lead)[oldest] = m
	}
}

// traced adds a value of a GPU's traced device memory.
func (b *timelineBuilder) traced(gpu int, t int64, v uint64) {
	if gpu < 0 {
		return
	}
	g := b.gpu(gpu)
	if g.Traced == nil {
		g.Traced = newSeries()
		addPoint(g.Traced, b.ts, b.ts.t0, 0)
	}
	addPoint(g.Traced, b.ts, t, v)
}

// sample draws one NVML sample of a whole device or its aperture; MIG and
// per-process samples are counted, not drawn.
func (b *timelineBuilder) sample(s *store.Sample) {
	g := b.gpu(s.GPU.Index)
	if g.UUID == "" {
		g.UUID = s.GPU.UUID
	}
	if s.GPU.MIGIndex != nil || (s.Scope != store.ScopeDevice && s.Scope != store.ScopeAperture) {
		if s.Kind != store.KindProcesses {
			g.MIGSamples++
		}
		return
	}
	switch s.Kind {
	case store.KindFramebuffer:
		b.view(&g.Framebuffer, s, []**report.Series{&g.Framebuffer.Used, &g.Framebuffer.Free, &g.Framebuffer.Reserved},
			[]*uint64{s.Used, s.Free, s.Reserved})
	case store.KindBAR1:
		b.view(&g.BAR1, s, []**report.Series{&g.BAR1.Used, &g.BAR1.Free}, []*uint64{s.Used, s.Free})
	}
}

// view adds one sample's values to a view's series, or a gap in each
// field when the query gave none.
func (b *timelineBuilder) view(v *report.ViewSeries, s *store.Sample, series []**report.Series, vals []*uint64) {
	v.API = apiOf(s.API, s.Struct)
	if !s.Usable() {
		v.Status[s.Status.Name]++
		if len(v.Unusable) < 4*report.SeriesBuckets {
			v.Unusable = append(v.Unusable, s.Start)
		}
		for _, sp := range series {
			if *sp == nil {
				*sp = newSeries()
			}
			addGap(*sp, b.ts, s.Start)
		}
		return
	}
	if s.Total != nil {
		v.Total = max(v.Total, *s.Total)
	}
	for i, sp := range series {
		if vals[i] == nil {
			continue
		}
		if *sp == nil {
			*sp = newSeries()
		}
		addPoint(*sp, b.ts, s.Start, *vals[i])
	}
}

// sameCall reports whether event e is the failed call f (a thread makes
// one call at a time, so these name one call).
func sameCall(f *failed, e *store.Event) bool {
	return f != nil && e.End == f.e.End && e.PID == f.e.PID && e.TID == f.e.TID && e.Symbol == f.e.Symbol
}

// markUnrecovered marks the first unrecovered failure's marks, known only
// once the replay has seen which failures were recovered.
func (b *timelineBuilder) markUnrecovered(f *failed) {
	if f == nil {
		return
	}
	mark := func(ms []report.CallMark) {
		for i := range ms {
			m := &ms[i]
			m.Unrecovered = m.EndNS == f.e.End && m.PID == f.e.PID && m.TID == f.e.TID && m.Result == f.e.Result
		}
	}
	for _, p := range b.procs {
		if p.PID == f.e.PID {
			mark(p.Marks)
			mark(p.Fails)
		}
	}
	mark(b.tl.Lead)
}

// finish returns the timeline, processes and GPUs in order.
func (b *timelineBuilder) finish() *report.Timeline {
	tl := b.tl
	pids := make([]uint32, 0, len(b.procs))
	for pid := range b.procs {
		pids = append(pids, pid)
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	for _, pid := range pids {
		tl.Processes = append(tl.Processes, *b.procs[pid])
	}
	idx := make([]int, 0, len(b.gpus))
	for i := range b.gpus {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		tl.GPUs = append(tl.GPUs, *b.gpus[i])
	}
	sort.Slice(tl.Lead, func(i, j int) bool { return tl.Lead[i].EndNS < tl.Lead[j].EndNS })
	return &tl
}

func newSeries() *report.Series {
	return &report.Series{Buckets: make([]report.Bucket, report.SeriesBuckets)}
}

// addPoint adds a value at t to its bucket, keeping the bucket's lowest
// and highest values.
func addPoint(s *report.Series, ts timeScale, t int64, v uint64) {
	b := &s.Buckets[ts.bin(t, len(s.Buckets))]
	if b.N == 0 || v < b.Min {
		b.Min, b.MinT = v, t
	}
	if b.N == 0 || v > b.Max {
		b.Max, b.MaxT = v, t
	}
	b.N++
	s.Points++
	s.Peak = max(s.Peak, v)
}

// addGap notes an unusable sample at t.
func addGap(s *report.Series, ts timeScale, t int64) {
	s.Buckets[ts.bin(t, len(s.Buckets))].Gaps++
	s.Gaps++
}

// apiOf names the NVML function and structure version a value came from.
func apiOf(api, strct string) string {
	if strct != "" {
		return api + " / " + strct
	}
	return api
}

package analyze

import (
	"fmt"
	"sort"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// val is an optional value (the accumulators keep no pointers, so
// observing allocates nothing; rows get pointers at the end).
type val struct {
	v  uint64
	ok bool
}

func some(v uint64) val { return val{v, true} }

func (v val) ptr() *uint64 {
	if !v.ok {
		return nil
	}
	x := v.v
	return &x
}

// landmarks are the times a field's values are reported at: the first
// failure (-1 when none) and the phases.
type landmarks struct {
	first  int64
	phases *phaseSet
}

// landmarks returns the run's landmarks (phases are set before the passes).
func (s *state) landmarks() *landmarks {
	if s.marks == nil {
		ps := s.phaseSet
		if ps == nil {
			ps = newPhaseSet(nil, -1)
		}
		s.marks = &landmarks{first: -1, phases: ps}
		if s.first != nil {
			s.marks.first = s.first.e.End
		}
	}
	return s.marks
}

// phaseAcc is one phase's last and peak value.
type phaseAcc struct{ last, peak val }

// span is a stretch of time, [from, to); to is -1 while it lasts.
type span struct{ from, to int64 }

// maxPeakSpans bounds the stretches at its peak a field remembers; a field
// that returns to its peak more often than this says so (spansCut).
const maxPeakSpans = 64

// fieldAcc accumulates one field's values over the run.
type fieldAcc struct {
	start, before, at, end, peak, low val
	// beforePeak is the largest value at or before the first failure.
	beforePeak val
	beforeT    int64
	phases     []phaseAcc
	phase      int // index of the phase last observed (times only grow)
	// peakSpans are the stretches during which the field held its peak.
	peakSpans  []span
	spansCut   bool
	api, strct string
	// lastStatus is the NVML status of the last sample without a value,
	// and lastNotReported, instead, why its struct has no such field.
	lastStatus      string
	lastNotReported string
	usable          bool
	scope           string
	migIndex        *int
}

func (a *fieldAcc) observe(v uint64, t int64, lm *landmarks) {
	if a.start.ok && !a.end.ok {
		// An accumulator that starts from a known value (a traced total
		// starts from zero) held it in every phase before this one.
		a.seedPhases(a.start.v, t, lm.phases)
	}
	if !a.start.ok {
		a.start = some(v)
	}
	a.end = some(v)
	a.observePeak(v, t)
	if !a.low.ok || v < a.low.v {
		a.low = some(v)
	}
	if lm.first >= 0 && t <= lm.first {
		a.before, a.beforeT = some(v), t
		if !a.beforePeak.ok || v > a.beforePeak.v {
			a.beforePeak = some(v)
		}
	}
	a.observePhase(v, t, lm.phases)
}

// observePeak keeps the peak and the stretches of time the field held it.
func (a *fieldAcc) observePeak(v uint64, t int64) {
	n := len(a.peakSpans)
	switch {
	case !a.peak.ok || v > a.peak.v:
		a.peak = some(v)
		a.peakSpans = append(a.peakSpans[:0], span{t, -1})
		a.spansCut = false
	case v < a.peak.v:
		if n > 0 && a.peakSpans[n-1].to < 0 {
			a.peakSpans[n-1].to = t
		}
	case n > 0 && a.peakSpans[n-1].to < 0:
		// Still at the peak.
	case n < maxPeakSpans:
		a.peakSpans = append(a.peakSpans, span{t, -1})
	default:
		a.spansCut = true
	}
}

// seedPhases gives every phase before the one t falls in the value v.
func (a *fieldAcc) seedPhases(v uint64, t int64, ps *phaseSet) {
	i := ps.index(t, 0)
	if i <= 0 {
		return
	}
	a.phases = make([]phaseAcc, len(ps.phases))
	for j := range i {
		a.phases[j] = phaseAcc{some(v), some(v)}
	}
}

func (a *fieldAcc) observePhase(v uint64, t int64, ps *phaseSet) {
	if len(ps.phases) == 0 {
		return
	}
	if a.phases == nil {
		a.phases = make([]phaseAcc, len(ps.phases))
	}
	// Times arrive in order (the replay and the samples are ordered), so
	// the phase only moves forward; a stray earlier time searches back.
	a.phase = ps.index(t, a.phase)
	p := &a.phases[a.phase]
	p.last = some(v)
	if !p.peak.ok || v > p.peak.v {
		p.peak = some(v)
	}
}

// clone copies an accumulator's values (its own copy of the slices).
func (a *fieldAcc) clone() fieldAcc {
	c := *a
	c.phases = append([]phaseAcc(nil), a.phases...)
	c.peakSpans = append([]span(nil), a.peakSpans...)
	return c
}

// fieldMissing says why a sample may have no value for a field: the
// NVML status to report, or (notReported) that the sample's struct has
// no such field, in words.
type fieldMissing struct {
	status      string
	notReported string
}

// sampleField names a sampled field of one GPU.
type sampleField struct {
	gpu   int
	mig   int // -1: whole device
	field string
	pid   uint32
}

// field returns the accumulator of k, making it on first use.
func (sp *samplesPass) field(k sampleField, scope string) *fieldAcc {
	a := sp.fields[k]
	if a == nil {
		a = &fieldAcc{scope: scope}
		if k.mig >= 0 {
			m := k.mig
			a.migIndex = &m
		}
		sp.fields[k] = a
	}
	return a
}

// feedFields feeds a sample's values into the field accumulators; trig
// says the first failure triggered it, so it stands for the state at the
// failure.
func (s *state) feedFields(sp *samplesPass, smp *store.Sample, trig bool) {
	mig := -1
	if smp.Scope == store.ScopeMIG && smp.GPU.MIGIndex != nil {
		mig = *smp.GPU.MIGIndex
	}
	lm := s.landmarks()
	feed := func(name string, pid uint32, v *uint64, missing fieldMissing) {
		scope := smp.Scope
		if smp.Kind == store.KindProcesses {
			scope = store.ScopeProcess
		}
		a := sp.field(sampleField{gpu: smp.GPU.Index, mig: mig, field: name, pid: pid}, scope)
		a.api, a.strct = smp.API, smp.Struct
		switch {
		case !smp.Status.OK():
			a.lastStatus, a.lastNotReported = smp.Status.Name, ""
		case v == nil:
			a.lastStatus, a.lastNotReported = missing.status, missing.notReported
		default:
			a.usable = true
			a.observe(*v, smp.End, lm)
			if trig {
				a.at = some(*v)
			}
		}
	}
	switch smp.Kind {
	case store.KindFramebuffer:
		s.watchPeak(smp)
		feed("framebuffer total", 0, smp.Total, fieldMissing{})
		feed("framebuffer reserved", 0, smp.Reserved, fieldMissing{notReported: "not reported by " + smp.Struct + " (v1 has no reserved field)"})
		feed("framebuffer used", 0, smp.Used, fieldMissing{})
		feed("framebuffer free", 0, smp.Free, fieldMissing{})
	case store.KindBAR1:
		feed("BAR1 total", 0, smp.Total, fieldMissing{})
		feed("BAR1 used", 0, smp.Used, fieldMissing{})
		feed("BAR1 free", 0, smp.Free, fieldMissing{})
	case store.KindProcesses:
		mig = -1
		if !smp.Status.OK() {
			feed("process used", 0, nil, fieldMissing{})
			return
		}
		s.feedProcesses(sp, smp, trig, feed)
	}
}

// gpuProcs follows the processes NVML lists on one GPU. A usable
// per-process query lists every process holding memory there, so a process
// it does not list (it exited, or holds nothing any more) holds 0 from
// that sample on, and held 0 in the usable samples before it was first
// listed. A failed query says nothing about anyone.
type gpuProcs struct {
	// zero has observed 0 at every usable query: the history of a
	// process not listed yet.
	zero  fieldAcc
	n     uint64        // usable queries so far
	procs []*listedProc // every process listed, in the order first listed
	byPID map[uint32]*listedProc
	// gone lists the processes the latest query no longer lists, that
	// the one before listed (for exports that draw them as counters).
	gone []uint32
}

// listedProc is a process a per-process query of the GPU listed.
type listedProc struct {
	pid  uint32
	acc  *fieldAcc
	last uint64 // the query (gpuProcs.n) that last listed it
}

// procsOn returns what is known of the processes on a GPU.
func (s *state) procsOn(gpu int) *gpuProcs {
	if s.gpuProcs == nil {
		s.gpuProcs = map[int]*gpuProcs{}
	}
	g := s.gpuProcs[gpu]
	if g == nil {
		g = &gpuProcs{byPID: map[uint32]*listedProc{}}
		s.gpuProcs[gpu] = g
	}
	return g
}

// feedProcesses feeds a usable per-process query: each listed process's
// value, and 0 for every process listed before that it no longer lists.
func (s *state) feedProcesses(sp *samplesPass, smp *store.Sample, trig bool, feed func(string, uint32, *uint64, fieldMissing)) {
	g := s.procsOn(smp.GPU.Index)
	g.n++
	g.gone = g.gone[:0]
	for _, p := range smp.Processes {
		lp := g.byPID[p.PID]
		if lp == nil {
			k := sampleField{gpu: smp.GPU.Index, mig: -1, field: "process used", pid: p.PID}
			lp = &listedProc{pid: p.PID, acc: sp.field(k, store.ScopeProcess)}
			if g.n > 1 {
				*lp.acc = g.zero.clone()
				lp.acc.scope = store.ScopeProcess
			}
			g.procs = append(g.procs, lp)
			g.byPID[p.PID] = lp
		}
		lp.last = g.n
		feed("process used", p.PID, p.Used, fieldMissing{status: "NVML_VALUE_NOT_AVAILABLE"})
	}
	lm := s.landmarks()
	for _, lp := range g.procs {
		switch lp.last {
		case g.n:
			continue
		case g.n - 1:
			g.gone = append(g.gone, lp.pid)
		}
		a := lp.acc
		a.api, a.strct, a.usable = smp.API, smp.Struct, true
		a.observe(0, smp.End, lm)
		if trig {
			a.at = some(0)
		}
	}
	g.zero.observe(0, smp.End, lm)
	g.zero.usable = true
	if trig {
		g.zero.at = some(0)
	}
}

// goneFrom lists the processes a usable per-process query no longer lists
// that the one before it on the same GPU did (valid right after the query
// was fed).
func (s *state) goneFrom(smp *store.Sample) []uint32 {
	if smp.Kind != store.KindProcesses || !smp.Status.OK() || s.gpuProcs == nil {
		return nil
	}
	if g := s.gpuProcs[smp.GPU.Index]; g != nil {
		return g.gone
	}
	return nil
}

// fieldInfo says what a sampled field means and which operation it helps
// examine, and where it sorts in the table.
type fieldInfo struct {
	meaning, examines string
	order             int
	view              cuda.View // the memory view the field reads
}

var fieldInfos = map[string]fieldInfo{
	"framebuffer total":    {"device memory the GPU has (configuration)", "device allocations", 0, cuda.ViewFramebuffer},
	"framebuffer reserved": {"device memory the driver keeps for itself; no allocation can get it", "device allocations", 1, cuda.ViewFramebuffer},
	"framebuffer used":     {"device memory allocated on the GPU, by every process", "device allocations", 2, cuda.ViewFramebuffer},
	"framebuffer free":     {"device memory a new allocation can still get", "device allocations", 3, cuda.ViewFramebuffer},
	"BAR1 total":           {"size of the PCIe aperture that maps device memory for the CPU and peers (configuration, not capacity)", "mappings through the aperture (IPC, peer, CPU)", 4, cuda.ViewBAR1},
	"BAR1 used":            {"device memory currently mapped through the aperture", "mappings through the aperture (IPC, peer, CPU)", 5, cuda.ViewBAR1},
	"BAR1 free":            {"aperture space left for new mappings; never room for allocations", "mappings through the aperture (IPC, peer, CPU)", 6, cuda.ViewBAR1},
	"process used":         {"device memory NVML attributes to this process", "device allocations (who holds the memory)", 7, cuda.ViewFramebuffer},
}

// rows builds the memory-view table: one row per sampled field, GPU and
// scope, then the traced totals, then what each process held at the first
// failure.
func (s *state) rows(sp *samplesPass) {
	keys := make([]sampleField, 0, len(sp.fields))
	for k := range sp.fields {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return sampleFieldLess(keys[i], keys[j]) })
	for _, k := range keys {
		s.rep.MemoryViews = append(s.rep.MemoryViews, s.sampledRow(k, sp.fields[k]))
	}
	s.tracedRows()
	s.liveAtFailure()
	s.rep.MemoryViewNotes = s.peakNotes(sp)
}

func sampleFieldLess(a, b sampleField) bool {
	if a.gpu != b.gpu {
		return a.gpu < b.gpu
	}
	if a.mig != b.mig {
		return a.mig < b.mig
	}
	if fa, fb := fieldInfos[a.field].order, fieldInfos[b.field].order; fa != fb {
		return fa < fb
	}
	return a.pid < b.pid
}

func (s *state) sampledRow(k sampleField, a *fieldAcc) report.ViewRow {
	m := fieldInfos[k.field]
	row := report.ViewRow{GPU: k.gpu, GPUUUID: s.gpuUUID[k.gpu], Field: k.field, View: m.view.String(), Meaning: m.meaning, Unit: "bytes",
		Scope: a.scope, API: a.api, Struct: a.strct, Examines: m.examines, PID: k.pid, MIGIndex: a.migIndex}
	if k.pid != 0 {
		row.Scope = fmt.Sprintf("pid %d", k.pid)
	}
	if a.migIndex != nil {
		row.Scope = fmt.Sprintf("MIG %d", *a.migIndex)
	}
	row.Support = "supported"
	if !a.usable {
		row.Support = supportText(a.lastStatus, a.lastNotReported, a.api)
	}
	s.fillRow(&row, a)
	return row
}

// tracedRows adds the bytes live from traced calls, per GPU and view.
func (s *state) tracedRows() {
	slots := append([]*viewSlot(nil), s.replay.slots...)
	sort.Slice(slots, func(i, j int) bool { return viewKeyLess(slots[i].key, slots[j].key) })
	for _, sl := range slots {
		vk := sl.key
		if vk.view == cuda.ViewNone || vk.view == cuda.ViewHost {
			continue // host memory belongs to no GPU view
		}
		row := report.ViewRow{GPU: vk.gpu, GPUUUID: s.gpuUUID[vk.gpu], Unit: "bytes", Scope: "traced",
			API: "traced calls (uprobes on libcuda)", Support: "supported", MIGIndex: optInt(vk.mig)}
		if vk.mig >= 0 {
			row.Scope = fmt.Sprintf("traced MIG %d", vk.mig)
		}
		switch vk.view {
		case cuda.ViewFramebuffer:
			row.Field, row.View = "traced device allocations", "framebuffer"
			row.Meaning = "bytes of device memory the recorded processes allocated through traced calls and had not freed"
			row.Examines = "device allocations"
		case cuda.ViewBAR1:
			row.Field, row.View = "traced aperture mappings", "bar1"
			row.Meaning = "bytes the recorded processes mapped through IPC, pool import or peer calls and had not unmapped (sizes known from the exporter)"
			row.Examines = "mappings through the aperture (IPC, peer, CPU)"
		}
		if vk.gpu < 0 {
			row.Support = "GPU unknown for these calls"
		}
		s.fillRow(&row, &sl.acc)
		s.rep.MemoryViews = append(s.rep.MemoryViews, row)
	}
}

// liveAtFailure lists what each process held at the first failure.
func (s *state) liveAtFailure() {
	perProc := s.replay.perProc
	pids := make([]uint32, 0, len(perProc))
	for pid := range perProc {
		pids = append(pids, pid)
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	for _, pid := range pids {
		m := perProc[pid]
		vks := make([]viewKey, 0, len(m))
		for vk := range m {
			vks = append(vks, vk)
		}
		sort.Slice(vks, func(i, j int) bool { return viewKeyLess(vks[i], vks[j]) })
		for _, vk := range vks {
			if vk.view != cuda.ViewNone {
				s.rep.LiveAtFailure = append(s.rep.LiveAtFailure, *m[vk])
			}
		}
	}
}

// viewKeyLess orders traced totals by GPU, MIG instance and view.
func viewKeyLess(a, b viewKey) bool {
	if a.gpu != b.gpu {
		return a.gpu < b.gpu
	}
	if a.mig != b.mig {
		return a.mig < b.mig
	}
	return a.view < b.view
}

// supportText says in words why a field has no values: "not supported"
// when NVML said so or the struct has no such field (notReported, why),
// never a zero.
func supportText(status, notReported, api string) string {
	switch {
	case status == "NVML_ERROR_NOT_SUPPORTED":
		return "not supported: " + api + " returned NVML_ERROR_NOT_SUPPORTED"
	case notReported != "":
		return "not supported: " + notReported
	case status == "":
		return "no sample"
	}
	return "unavailable: " + api + " returned " + status
}

func (s *state) fillRow(row *report.ViewRow, a *fieldAcc) {
	row.Start, row.Before, row.At, row.End, row.Peak, row.Low = a.start.ptr(), a.before.ptr(), a.at.ptr(), a.end.ptr(), a.peak.ptr(), a.low.ptr()
	if s.first == nil {
		row.Before, row.At = nil, nil
	} else if row.At == nil && a.before.ok && s.first.e.End-a.beforeT <= s.window {
		// No sample was triggered by the failure: the nearest one before
		// it stands in, if it is recent enough.
		row.At = row.Before
	}
	if a.start.ok && a.end.ok {
		d := int64(a.end.v) - int64(a.start.v)
		row.Change = &d
	}
	row.Phases = []report.PhaseValue{}
	for i, p := range a.phases {
		if i < len(s.rep.Phases) {
			row.Phases = append(row.Phases, report.PhaseValue{Phase: s.rep.Phases[i].Label, Last: p.last.ptr(), Peak: p.peak.ptr()})
		}
	}
}

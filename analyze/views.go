package analyze

import (
	"fmt"
	"sort"
	"strings"

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
	phases []report.Phase
}

// landmarks returns the run's landmarks (phases are set before the passes).
func (s *state) landmarks() *landmarks {
	if s.marks == nil {
		s.marks = &landmarks{first: -1, phases: s.rep.Phases}
		if s.first != nil {
			s.marks.first = s.first.e.End
		}
	}
	return s.marks
}

// phaseAcc is one phase's last and peak value.
type phaseAcc struct{ last, peak val }

// fieldAcc accumulates one field's values over the run.
type fieldAcc struct {
	start, before, at, end, peak, low val
	beforeT                           int64
	phases                            []phaseAcc
	phase                             int // index of the phase last observed (times only grow)
	api, strct                        string
	lastStatus                        string
	usable                            bool
	scope                             string
	migIndex                          *int
}

func (a *fieldAcc) observe(v uint64, t int64, lm *landmarks) {
	if !a.start.ok {
		a.start = some(v)
	}
	a.end = some(v)
	if !a.peak.ok || v > a.peak.v {
		a.peak = some(v)
	}
	if !a.low.ok || v < a.low.v {
		a.low = some(v)
	}
	if lm.first >= 0 && t <= lm.first {
		a.before, a.beforeT = some(v), t
	}
	a.observePhase(v, t, lm.phases)
}

func (a *fieldAcc) observePhase(v uint64, t int64, ph []report.Phase) {
	if len(ph) == 0 {
		return
	}
	if a.phases == nil {
		a.phases = make([]phaseAcc, len(ph))
	}
	// Times arrive in order (the replay and the samples are ordered), so
	// the phase only moves forward; a stray earlier time searches back.
	if a.phase >= len(ph) || t < ph[a.phase].StartNS {
		a.phase = 0
	}
	for a.phase < len(ph)-1 && t > ph[a.phase].EndNS {
		a.phase++
	}
	p := &a.phases[a.phase]
	p.last = some(v)
	if !p.peak.ok || v > p.peak.v {
		p.peak = some(v)
	}
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
	feed := func(name string, pid uint32, v *uint64, missingWhy string) {
		scope := smp.Scope
		if smp.Kind == store.KindProcesses {
			scope = store.ScopeProcess
		}
		a := sp.field(sampleField{gpu: smp.GPU.Index, mig: mig, field: name, pid: pid}, scope)
		a.api, a.strct = smp.API, smp.Struct
		switch {
		case !smp.Status.OK():
			a.lastStatus = smp.Status.Name
		case v == nil:
			a.lastStatus = missingWhy
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
		feed("framebuffer total", 0, smp.Total, "")
		feed("framebuffer reserved", 0, smp.Reserved, "not reported by "+smp.Struct+" (v1 has no reserved field)")
		feed("framebuffer used", 0, smp.Used, "")
		feed("framebuffer free", 0, smp.Free, "")
	case store.KindBAR1:
		feed("BAR1 total", 0, smp.Total, "")
		feed("BAR1 used", 0, smp.Used, "")
		feed("BAR1 free", 0, smp.Free, "")
	case store.KindProcesses:
		mig = -1
		if !smp.Status.OK() {
			feed("process used", 0, nil, "")
			return
		}
		for _, p := range smp.Processes {
			feed("process used", p.PID, p.Used, "NVML_VALUE_NOT_AVAILABLE")
		}
	}
}

// fieldInfo says what a sampled field means and which operation it helps
// examine, and where it sorts in the table.
type fieldInfo struct {
	meaning, examines string
	order             int
}

var fieldInfos = map[string]fieldInfo{
	"framebuffer total":    {"device memory the GPU has (configuration)", "device allocations", 0},
	"framebuffer reserved": {"device memory the driver keeps for itself; no allocation can get it", "device allocations", 1},
	"framebuffer used":     {"device memory allocated on the GPU, by every process", "device allocations", 2},
	"framebuffer free":     {"device memory a new allocation can still get", "device allocations", 3},
	"BAR1 total":           {"size of the PCIe aperture that maps device memory for the CPU and peers (configuration, not capacity)", "mappings through the aperture (IPC, peer, CPU)", 4},
	"BAR1 used":            {"device memory currently mapped through the aperture", "mappings through the aperture (IPC, peer, CPU)", 5},
	"BAR1 free":            {"aperture space left for new mappings; never room for allocations", "mappings through the aperture (IPC, peer, CPU)", 6},
	"process used":         {"device memory NVML attributes to this process", "device allocations (who holds the memory)", 7},
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
	view := "framebuffer"
	if strings.HasPrefix(k.field, "BAR1") {
		view = "bar1"
	}
	row := report.ViewRow{GPU: k.gpu, GPUUUID: s.gpuUUID[k.gpu], Field: k.field, View: view, Meaning: m.meaning, Unit: "bytes",
		Scope: a.scope, API: a.api, Struct: a.strct, Examines: m.examines, PID: k.pid, MIGIndex: a.migIndex}
	if k.pid != 0 {
		row.Scope = fmt.Sprintf("pid %d", k.pid)
	}
	if a.migIndex != nil {
		row.Scope = fmt.Sprintf("MIG %d", *a.migIndex)
	}
	row.Support = "supported"
	if !a.usable {
		row.Support = supportText(a.lastStatus, a.api)
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
// when NVML said so, never a zero.
func supportText(status, api string) string {
	switch {
	case status == "NVML_ERROR_NOT_SUPPORTED":
		return "not supported: " + api + " returned NVML_ERROR_NOT_SUPPORTED"
	case strings.HasPrefix(status, "not reported"):
		return "not supported: " + status
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

package analyze

import (
	"fmt"
	"sort"
	"strings"

	"github.com/retrivium/forensic/cuda"
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

func (a *fieldAcc) observe(v uint64, t int64, s *state) {
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
	if s.first != nil && t <= s.first.e.End {
		a.before, a.beforeT = some(v), t
	}
	ph := s.rep.Phases
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

// samplesPass is what the samples say around the first failure.
type samplesPass struct {
	fields map[sampleField]*fieldAcc
	// For the first failure's GPU: the reference samples per kind (the
	// triggered one, else the nearest usable before it within the window),
	// and the latest attempt before it (usable or not), to say why a
	// reference is missing.
	ref, lastBefore map[string]*store.Sample
	nearest         *NearestSamples
	unsupported     map[string]bool
	triggeredRounds map[uint64]bool
	count           int
	delays          []int64
	// procUse: per-process usage on the failure's GPU in the reference
	// round.
	procUse []store.ProcUsage
}

// nvmlErrorNotSupported is NVML_ERROR_NOT_SUPPORTED: the query does not
// exist on this GPU and driver.
const nvmlErrorNotSupported = 3

// kindKey names a sample's kind, per MIG instance for MIG-scope samples.
func kindKey(smp *store.Sample) string {
	var mig *int
	if smp.Scope == store.ScopeMIG {
		mig = smp.GPU.MIGIndex
	}
	return kindKeyOf(smp.Kind, mig)
}

// kindKeyOf is "kind", or "kind/migN" for MIG instance N.
func kindKeyOf(kind string, mig *int) string {
	if mig == nil {
		return kind
	}
	return fmt.Sprintf("%s/mig%d", kind, *mig)
}

func triggeredBy(smp *store.Sample, f *event) (store.Trigger, bool) {
	for _, t := range smp.Triggers {
		if t.PID == f.e.PID && t.TID == f.e.TID && t.End == f.e.End {
			return t, true
		}
	}
	return store.Trigger{}, false
}

// sampleRef describes a sample; t is the first failure's trigger of it,
// nil when the failure did not trigger it.
func sampleRef(smp *store.Sample, t *store.Trigger) SampleRef {
	r := SampleRef{Seq: smp.Seq, Kind: smp.Kind, Scope: smp.Scope, API: smp.API, Struct: smp.Struct,
		Status: smp.Status.Name, StartNS: smp.Start, EndNS: smp.End, Total: smp.Total, Reserved: smp.Reserved,
		Used: smp.Used, Free: smp.Free, Fallback: smp.Fallback}
	if t != nil {
		d := smp.Start - t.End
		r.DelayNS = &d
		r.Frozen = t.Frozen
		r.FreezeNS = t.Freeze
	}
	return r
}

// passSamples streams the samples once.
func (s *state) passSamples(tr *traced) (*samplesPass, error) {
	sp := &samplesPass{fields: map[sampleField]*fieldAcc{}, ref: map[string]*store.Sample{},
		lastBefore: map[string]*store.Sample{}, unsupported: map[string]bool{}, triggeredRounds: map[uint64]bool{}}
	firstGPU := -1
	var f *event = s.first
	if f != nil {
		firstGPU, _, _ = s.gpuOfDev(f.e.PID, f.e.Dev)
		sp.nearest = &NearestSamples{GPU: firstGPU, Before: []SampleRef{}, At: []SampleRef{}, After: []SampleRef{}}
	}
	after := map[string]bool{}
	err := s.r.Samples(func(smp *store.Sample) error {
		sp.count++
		if len(smp.Triggers) > 0 && !sp.triggeredRounds[smp.Round] {
			sp.triggeredRounds[smp.Round] = true
			for _, t := range smp.Triggers {
				sp.delays = append(sp.delays, smp.Start-t.End)
			}
		}
		if smp.Status.Code == nvmlErrorNotSupported {
			sp.unsupported[smp.API] = true
		}
		// Whether the first failure triggered this sample: it then stands
		// for the state at the failure.
		var trig store.Trigger
		isTrig := false
		if f != nil {
			trig, isTrig = triggeredBy(smp, f)
		}
		s.observeSample(sp, smp, isTrig)
		if f == nil || smp.GPU.Index != firstGPU {
			return nil
		}
		k := kindKey(smp)
		if isTrig {
			if smp.Usable() || sp.ref[k] == nil {
				c := *smp
				sp.ref[k] = &c
			}
			sp.nearest.At = append(sp.nearest.At, sampleRef(smp, &trig))
			return nil
		}
		if smp.End <= f.e.End {
			c := *smp
			sp.lastBefore[k] = &c
			return nil
		}
		if !after[k] {
			after[k] = true
			sp.nearest.After = append(sp.nearest.After, sampleRef(smp, nil))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if f != nil {
		kinds := make([]string, 0, len(sp.lastBefore))
		for k := range sp.lastBefore {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		for _, k := range kinds {
			lb := sp.lastBefore[k]
			// A sample the failure triggered is never kept as "before".
			sp.nearest.Before = append(sp.nearest.Before, sampleRef(lb, nil))
			if sp.ref[k] == nil && lb.Usable() && f.e.End-lb.End <= s.window {
				sp.ref[k] = lb
			}
		}
		if p := sp.ref[store.KindProcesses]; p != nil {
			sp.procUse = p.Processes
		}
	}
	s.rows(sp, tr)
	s.samplingSummary(sp)
	return sp, nil
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

// observeSample feeds a sample's values into the field accumulators; trig
// says the first failure triggered it, so it stands for the state at the
// failure.
func (s *state) observeSample(sp *samplesPass, smp *store.Sample, trig bool) {
	mig := -1
	if smp.Scope == store.ScopeMIG && smp.GPU.MIGIndex != nil {
		mig = *smp.GPU.MIGIndex
	}
	t := smp.End
	feed := func(name string, v *uint64, unsupportedWhy string) {
		a := sp.field(sampleField{gpu: smp.GPU.Index, mig: mig, field: name}, smp.Scope)
		a.api, a.strct = smp.API, smp.Struct
		switch {
		case !smp.Status.OK():
			a.lastStatus = smp.Status.Name
		case v == nil:
			a.lastStatus = unsupportedWhy
		default:
			a.usable = true
			a.observe(*v, t, s)
			if trig {
				a.at = some(*v)
			}
		}
	}
	switch smp.Kind {
	case store.KindFramebuffer:
		feed("framebuffer total", smp.Total, "")
		feed("framebuffer reserved", smp.Reserved, "not reported by "+smp.Struct+" (v1 has no reserved field)")
		feed("framebuffer used", smp.Used, "")
		feed("framebuffer free", smp.Free, "")
	case store.KindBAR1:
		feed("BAR1 total", smp.Total, "")
		feed("BAR1 used", smp.Used, "")
		feed("BAR1 free", smp.Free, "")
	case store.KindProcesses:
		if !smp.Status.OK() {
			a := sp.field(sampleField{gpu: smp.GPU.Index, mig: -1, field: "process used"}, store.ScopeProcess)
			a.api, a.strct, a.lastStatus = smp.API, smp.Struct, smp.Status.Name
			return
		}
		for _, p := range smp.Processes {
			a := sp.field(sampleField{gpu: smp.GPU.Index, mig: -1, field: "process used", pid: p.PID}, store.ScopeProcess)
			a.api, a.strct = smp.API, smp.Struct
			if p.Used == nil {
				a.lastStatus = "NVML_VALUE_NOT_AVAILABLE"
				continue
			}
			a.usable = true
			a.observe(*p.Used, t, s)
			if trig {
				a.at = some(*p.Used)
			}
		}
	}
}

var fieldMeaning = map[string][2]string{
	"framebuffer total":    {"device memory the GPU has (configuration)", "device allocations"},
	"framebuffer reserved": {"device memory the driver keeps for itself; no allocation can get it", "device allocations"},
	"framebuffer used":     {"device memory allocated on the GPU, by every process", "device allocations"},
	"framebuffer free":     {"device memory a new allocation can still get", "device allocations"},
	"BAR1 total":           {"size of the PCIe aperture that maps device memory for the CPU and peers (configuration, not capacity)", "mappings through the aperture (IPC, peer, CPU)"},
	"BAR1 used":            {"device memory currently mapped through the aperture", "mappings through the aperture (IPC, peer, CPU)"},
	"BAR1 free":            {"aperture space left for new mappings; never room for allocations", "mappings through the aperture (IPC, peer, CPU)"},
	"process used":         {"device memory NVML attributes to this process", "device allocations (who holds the memory)"},
}

// rows builds the memory-view table: one row per field, GPU and scope.
func (s *state) rows(sp *samplesPass, tr *traced) {
	keys := make([]sampleField, 0, len(sp.fields))
	for k := range sp.fields {
		keys = append(keys, k)
	}
	order := map[string]int{"framebuffer total": 0, "framebuffer reserved": 1, "framebuffer used": 2,
		"framebuffer free": 3, "BAR1 total": 4, "BAR1 used": 5, "BAR1 free": 6, "process used": 7}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.gpu != b.gpu {
			return a.gpu < b.gpu
		}
		if a.mig != b.mig {
			return a.mig < b.mig
		}
		if order[a.field] != order[b.field] {
			return order[a.field] < order[b.field]
		}
		return a.pid < b.pid
	})
	for _, k := range keys {
		a := sp.fields[k]
		m := fieldMeaning[k.field]
		view := "framebuffer"
		if k.field[:4] == "BAR1" {
			view = "bar1"
		}
		row := ViewRow{GPU: k.gpu, GPUUUID: s.gpuUUID[k.gpu], Field: k.field, View: view, Meaning: m[0], Unit: "bytes",
			Scope: a.scope, API: a.api, Struct: a.strct, Examines: m[1], PID: k.pid, MIGIndex: a.migIndex}
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
		s.rep.MemoryViews = append(s.rep.MemoryViews, row)
	}
	// Bytes live from traced calls, per GPU and view.
	vks := make([]viewKey, 0, len(tr.slots))
	accs := map[viewKey]*fieldAcc{}
	for _, sl := range tr.slots {
		vks = append(vks, sl.key)
		accs[sl.key] = &sl.acc
	}
	sort.Slice(vks, func(i, j int) bool { return viewKeyLess(vks[i], vks[j]) })
	for _, vk := range vks {
		if vk.view == cuda.ViewNone || vk.view == cuda.ViewHost {
			continue // host memory belongs to no GPU view
		}
		a := accs[vk]
		row := ViewRow{GPU: vk.gpu, GPUUUID: s.gpuUUID[vk.gpu], Unit: "bytes", Scope: "traced",
			API: "traced calls (uprobes on libcuda)", Support: "supported"}
		if vk.mig >= 0 {
			m := vk.mig
			row.MIGIndex = &m
			row.Scope = fmt.Sprintf("traced MIG %d", m)
		}
		switch vk.view {
		case cuda.ViewFramebuffer:
			row.Field, row.View = "traced device allocations", "framebuffer"
			row.Meaning = "bytes of device memory the recorded processes allocated through hooked calls and had not freed"
			row.Examines = "device allocations"
		case cuda.ViewBAR1:
			row.Field, row.View = "traced aperture mappings", "bar1"
			row.Meaning = "bytes the recorded processes mapped through IPC, pool import or peer calls and had not unmapped (sizes known from the exporter)"
			row.Examines = "mappings through the aperture (IPC, peer, CPU)"
		}
		if vk.gpu < 0 {
			row.Support = "GPU unknown for these calls"
		}
		s.fillRow(&row, a)
		s.rep.MemoryViews = append(s.rep.MemoryViews, row)
	}
	// Live bytes per process at the first failure.
	pids := make([]uint32, 0, len(tr.perProc))
	for pid := range tr.perProc {
		pids = append(pids, pid)
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	for _, pid := range pids {
		m := tr.perProc[pid]
		vks := make([]viewKey, 0, len(m))
		for vk := range m {
			vks = append(vks, vk)
		}
		sort.Slice(vks, func(i, j int) bool { return viewKeyLess(vks[i], vks[j]) })
		for _, vk := range vks {
			if vk.view == cuda.ViewNone {
				continue
			}
			s.rep.LiveAtFailure = append(s.rep.LiveAtFailure, *m[vk])
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

func (s *state) fillRow(row *ViewRow, a *fieldAcc) {
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
	row.Phases = []PhaseValue{}
	for i, p := range a.phases {
		if i < len(s.rep.Phases) {
			row.Phases = append(row.Phases, PhaseValue{Phase: s.rep.Phases[i].Label, Last: p.last.ptr(), Peak: p.peak.ptr()})
		}
	}
}

func (s *state) samplingSummary(sp *samplesPass) {
	sm := Sampling{Samples: sp.count, Triggered: len(sp.triggeredRounds), Unsupported: []string{}}
	if s.inv != nil {
		sm.NVMLInit, sm.NVMLLibrary = s.inv.Init.Name, s.inv.Library
	} else {
		sm.NVMLInit = "no inventory recorded"
	}
	if s.stop != nil {
		sm.Thinned = s.stop.Stats.SamplesThinned
	}
	if len(sp.delays) > 0 {
		d := append([]int64(nil), sp.delays...)
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		med, mx := d[len(d)/2], d[len(d)-1]
		sm.DelayMedian, sm.DelayMax = &med, &mx
	}
	for api := range sp.unsupported {
		sm.Unsupported = append(sm.Unsupported, api)
	}
	sort.Strings(sm.Unsupported)
	s.rep.Sampling = sm
}

package analyze

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// nvmlErrorNotSupported is NVML_ERROR_NOT_SUPPORTED: the query does not
// exist on this GPU and driver.
const nvmlErrorNotSupported = 3

// target is a failure the verdict judges (the first failure, and the first
// unrecovered one): the samples of the GPU it is judged on (judgedGPU)
// that best reflect the state at it, per kind: the one it triggered, else the nearest usable one before it
// within the window; and the latest attempt before it, usable or not, to
// say why a reference is missing.
type target struct {
	f               *failed
	gpu             int
	ref, lastBefore map[string]*store.Sample
}

func newTarget(s *state, f *failed) *target {
	// The samples of the GPU whose view the failure is judged on: for a
	// mapping through another GPU's aperture, that GPU's, not the caller's.
	return &target{f: f, gpu: s.judgedGPU(f), ref: map[string]*store.Sample{}, lastBefore: map[string]*store.Sample{}}
}

// see considers one sample for the target; it reports whether the target
// triggered it.
func (t *target) see(smp *store.Sample) (store.Trigger, bool) {
	trig, isTrig := triggeredBy(smp, t.f)
	if smp.GPU.Index != t.gpu {
		return trig, isTrig
	}
	k := kindKey(smp)
	switch {
	case isTrig:
		if smp.Usable() || t.ref[k] == nil {
			c := *smp
			t.ref[k] = &c
		}
	case smp.End <= t.f.e.End:
		c := *smp
		t.lastBefore[k] = &c
	}
	return trig, isTrig
}

// settle falls back, per kind with no triggered sample, to the nearest
// usable sample before the failure within the window.
func (t *target) settle(window int64) {
	for k, lb := range t.lastBefore {
		if t.ref[k] == nil && lb.Usable() && t.f.e.End-lb.End <= window {
			t.ref[k] = lb
		}
	}
}

// procUse is the per-process usage on the target's GPU in its reference
// round.
func (t *target) procUse() []store.ProcUsage {
	if p := t.ref[store.KindProcesses]; p != nil {
		return p.Processes
	}
	return nil
}

// samplesPass is what the samples say: the memory-view accumulators, the
// judged failures' reference samples, and the sampling summary.
type samplesPass struct {
	fields          map[sampleField]*fieldAcc
	targets         []*target // [0] is the first failure's, when there is one
	nearest         *report.NearestSamples
	after           map[string]bool
	unsupported     map[string]bool
	triggeredRounds map[uint64]bool
	count           int
	delays          []int64
	// least are the rounds of the least-headroom budgets (budgetleast.go).
	least []*leastBase
}

// targetOf returns the target of a judged failure.
func (sp *samplesPass) targetOf(f *failed) *target {
	for _, t := range sp.targets {
		if t.f == f {
			return t
		}
	}
	return nil
}

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

func triggeredBy(smp *store.Sample, f *failed) (store.Trigger, bool) {
	for _, t := range smp.Triggers {
		if t.PID == f.e.PID && t.TID == f.e.TID && t.End == f.e.End {
			return t, true
		}
	}
	return store.Trigger{}, false
}

// sampleRef describes a sample; t is the failure's trigger of it, nil when
// the failure did not trigger it.
func sampleRef(smp *store.Sample, t *store.Trigger) report.SampleRef {
	r := report.SampleRef{Seq: smp.Seq, Kind: smp.Kind, Scope: smp.Scope, API: smp.API, Struct: smp.Struct,
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
func (s *state) passSamples() error {
	sp := &samplesPass{fields: map[sampleField]*fieldAcc{}, after: map[string]bool{}, unsupported: map[string]bool{},
		triggeredRounds: map[uint64]bool{}}
	s.samples = sp
	sp.least = s.leastBases()
	for _, f := range []*failed{s.first, s.unrecovered} {
		if f != nil {
			sp.targets = append(sp.targets, newTarget(s, f))
		}
	}
	if len(sp.targets) > 0 {
		sp.nearest = &report.NearestSamples{GPU: sp.targets[0].gpu, Before: []report.SampleRef{},
			At: []report.SampleRef{}, After: []report.SampleRef{}}
	}
	err := s.r.Samples(func(smp *store.Sample) error {
		s.sample(sp, smp)
		return s.observeSample(smp)
	})
	if err != nil {
		return err
	}
	for _, t := range sp.targets {
		t.settle(s.window)
	}
	if len(sp.targets) > 0 {
		s.nearestBefore(sp, sp.targets[0])
	}
	s.rows(sp)
	s.samplingSummary(sp)
	return nil
}

// sample takes one sample into the pass.
func (s *state) sample(sp *samplesPass, smp *store.Sample) {
	sp.count++
	for _, lb := range sp.least {
		lb.see(smp)
	}
	if len(smp.Triggers) > 0 && !sp.triggeredRounds[smp.Round] {
		sp.triggeredRounds[smp.Round] = true
		for _, t := range smp.Triggers {
			sp.delays = append(sp.delays, smp.Start-t.End)
		}
	}
	if smp.Status.Code == nvmlErrorNotSupported {
		sp.unsupported[smp.API] = true
	}
	if s.tl != nil {
		s.tl.sample(smp)
	}
	firstTrig := false
	for i, t := range sp.targets {
		trig, isTrig := t.see(smp)
		if i != 0 {
			continue
		}
		firstTrig = isTrig
		if smp.GPU.Index != t.gpu {
			continue
		}
		switch {
		case isTrig:
			sp.nearest.At = append(sp.nearest.At, sampleRef(smp, &trig))
		case smp.End > t.f.e.End && !sp.after[kindKey(smp)]:
			sp.after[kindKey(smp)] = true
			sp.nearest.After = append(sp.nearest.After, sampleRef(smp, nil))
		}
	}
	// A sample the first failure triggered stands for the state at it.
	s.feedFields(sp, smp, firstTrig)
}

// nearestBefore lists, per kind, the latest sample before the first
// failure (a sample the failure triggered is never "before").
func (s *state) nearestBefore(sp *samplesPass, t *target) {
	kinds := make([]string, 0, len(t.lastBefore))
	for k := range t.lastBefore {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		sp.nearest.Before = append(sp.nearest.Before, sampleRef(t.lastBefore[k], nil))
	}
}

// namedValue is one field of a sample.
type namedValue struct {
	name string
	v    *uint64
}

// observeSample hands a sample's values to the observer.
func (s *state) observeSample(smp *store.Sample) error {
	obs := s.opts.Observer
	if obs == nil {
		return nil
	}
	v := report.SampleValue{GPU: smp.GPU.Index, MIG: smp.GPU.MIGIndex, UUID: smp.GPU.UUID, Kind: smp.Kind,
		TimeNS: smp.Start, API: smp.API, Status: smp.Status.Name, Usable: smp.Usable()}
	if !v.Usable {
		return obs.Sample(&v)
	}
	emit := func(field string, pid uint32, val *uint64) error {
		if val == nil {
			return nil
		}
		v.Field, v.PID, v.Value = field, pid, val
		return obs.Sample(&v)
	}
	var fields []namedValue
	switch smp.Kind {
	case store.KindFramebuffer:
		fields = []namedValue{{"used", smp.Used}, {"free", smp.Free}, {"reserved", smp.Reserved}}
	case store.KindBAR1:
		fields = []namedValue{{"used", smp.Used}, {"free", smp.Free}}
	case store.KindProcesses:
		for _, u := range smp.Processes {
			if err := emit("used by pid "+strconv.FormatUint(uint64(u.PID), 10), u.PID, u.Used); err != nil {
				return err
			}
		}
		var zero uint64 // a process no longer listed holds nothing
		for _, pid := range s.goneFrom(smp) {
			if err := emit("used by pid "+strconv.FormatUint(uint64(pid), 10), pid, &zero); err != nil {
				return err
			}
		}
	}
	for _, f := range fields {
		if err := emit(f.name, 0, f.v); err != nil {
			return err
		}
	}
	return nil
}

func (s *state) samplingSummary(sp *samplesPass) {
	sm := report.Sampling{Samples: sp.count, Triggered: len(sp.triggeredRounds), Unsupported: []string{}}
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

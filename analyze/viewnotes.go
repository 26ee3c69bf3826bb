package analyze

import (
	"fmt"
	"sort"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// peakWatch follows, for one GPU's (or MIG instance's) traced device
// memory, the NVML framebuffer samples around the stretches during which
// the traced total was at its peak: whether any was taken during one, and
// the nearest before and after the first.
type peakWatch struct {
	caught        bool
	before, after *sampleTime
}

// sampleTime is when a sample was taken, and whether a failure triggered
// it.
type sampleTime struct {
	start, end int64
	triggered  bool
}

// watchPeak takes a usable framebuffer sample into the watch of its GPU's
// traced total.
func (s *state) watchPeak(smp *store.Sample) {
	if smp.Kind != store.KindFramebuffer || !smp.Usable() || smp.Used == nil {
		return
	}
	vk := sampledViewKey(smp)
	sl := s.tracedSlot(vk)
	if sl == nil || !sl.acc.peak.ok || sl.acc.peak.v == 0 || len(sl.acc.peakSpans) == 0 {
		return
	}
	if s.peakWatches == nil {
		s.peakWatches = map[viewKey]*peakWatch{}
	}
	w := s.peakWatches[vk]
	if w == nil {
		w = &peakWatch{}
		s.peakWatches[vk] = w
	}
	for _, sp := range sl.acc.peakSpans {
		if smp.End >= sp.from && (sp.to < 0 || smp.Start < sp.to) {
			w.caught = true
		}
	}
	first := sl.acc.peakSpans[0]
	st := &sampleTime{start: smp.Start, end: smp.End, triggered: len(smp.Triggers) > 0}
	switch {
	case smp.End < first.from:
		w.before = st
	case first.to >= 0 && smp.Start >= first.to && w.after == nil:
		w.after = st
	}
}

// sampledViewKey is the traced total a framebuffer sample reads: its GPU,
// or its MIG instance.
func sampledViewKey(smp *store.Sample) viewKey {
	vk := viewKey{gpu: smp.GPU.Index, mig: -1, view: cuda.ViewFramebuffer}
	if smp.Scope == store.ScopeMIG && smp.GPU.MIGIndex != nil {
		vk.mig = *smp.GPU.MIGIndex
	}
	return vk
}

// tracedSlot returns the traced total of vk, nil when no traced call
// touched it.
func (s *state) tracedSlot(vk viewKey) *viewSlot {
	if s.replay == nil {
		return nil
	}
	for _, sl := range s.replay.slots {
		if sl.key == vk {
			return sl
		}
	}
	return nil
}

// peakNotes explain the memory views where they would seem to contradict
// the verdict: when no NVML sample was taken while the traced processes
// held their most device memory, the sampled "framebuffer used" never
// shows it (it can read 0 throughout next to "the framebuffer was
// exhausted").
func (s *state) peakNotes(sp *samplesPass) []string {
	keys := make([]viewKey, 0, len(s.peakWatches))
	for vk := range s.peakWatches {
		keys = append(keys, vk)
	}
	sort.Slice(keys, func(i, j int) bool { return viewKeyLess(keys[i], keys[j]) })
	var out []string
	for _, vk := range keys {
		w := s.peakWatches[vk]
		sl := s.tracedSlot(vk)
		used := sp.fields[sampleField{gpu: vk.gpu, mig: vk.mig, field: "framebuffer used"}]
		if w.caught || sl.acc.spansCut || used == nil || !used.peak.ok || used.peak.v >= sl.acc.peak.v {
			continue
		}
		out = append(out, s.peakNote(vk, &sl.acc, w, used.peak.v))
	}
	return out
}

// peakNote says in words that no sample caught a traced peak.
func (s *state) peakNote(vk viewKey, traced *fieldAcc, w *peakWatch, sampled uint64) string {
	where := fmt.Sprintf("GPU %d", vk.gpu)
	if vk.mig >= 0 {
		where += fmt.Sprintf(" MIG %d", vk.mig)
	}
	first := traced.peakSpans[0]
	when := s.spanText(first.from, first.to)
	if n := len(traced.peakSpans); n > 1 {
		when = fmt.Sprintf("%d times, first %s", n, when)
	}
	note := fmt.Sprintf("%s: no sample was taken while the traced processes' device memory was at its peak (%s, %s). So framebuffer used (at most %s in any sample) does not show it.",
		where, report.HumanBytes(traced.peak.v), when, report.HumanBytes(sampled))
	var near []string
	if b := w.before; b != nil {
		near = append(near, s.rel(b.start)+", before the peak"+triggeredText(b))
	}
	if a := w.after; a != nil {
		near = append(near, s.rel(a.start)+", after it"+triggeredText(a))
	}
	switch len(near) {
	case 1:
		note += " The nearest sample was taken at " + near[0] + "."
	case 2:
		note += " The nearest samples were taken at " + near[0] + ", and at " + near[1] + "."
	}
	return note
}

// triggeredText notes that a failure triggered a sample.
func triggeredText(st *sampleTime) string {
	if st.triggered {
		return " (triggered by a failure)"
	}
	return ""
}

// spanText says when a stretch of time was: "from +0.171 s to +0.174 s",
// "at +0.171 s for 85 µs" when both ends read the same, "from +0.171 s to
// the end of the record" when it never ended.
func (s *state) spanText(from, to int64) string {
	switch {
	case to < 0:
		return "from " + s.rel(from) + " to the end of the record"
	case s.rel(from) == s.rel(to) && to > from:
		return "at " + s.rel(from) + " for " + report.Duration(to-from)
	case s.rel(from) == s.rel(to):
		return "at " + s.rel(from)
	}
	return "from " + s.rel(from) + " to " + s.rel(to)
}

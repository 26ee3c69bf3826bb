package analyze

import (
	"fmt"
	"sort"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// The budget at the least headroom: where a GPU's framebuffer (or its
// BAR1 aperture: budgetleastbar1.go) went at the moment the run came
// closest to exhausting it, a run with no failure above all (a near miss
// has no failure's budget).
//
// The least free is a sample's reading, or one corrected by the traced
// calls made between it and the moment (headroom.go). The parts come
// from that sample's NVML round (the driver's reserved share, each listed
// process's use, the rest) with each recorded process's traced part
// taken at the moment: what the traced calls changed since the sample
// moves between its traced part and free, and nothing else, which is
// what the least free's exactness says. When the least free is not exact,
// the budget is the sample's own, at the sample's time, and says so.

// leastBase is the NVML round a least-headroom budget is built from:
// the track whose least free it explains, its view's reading (fb: the
// framebuffer's, or BAR1's on a BAR1 track) and, for the framebuffer,
// the per-process reading (nil until the samples pass finds them).
type leastBase struct {
	track     *headTrack
	fb, procs *store.Sample
}

// leastBases are the rounds the least-headroom budgets need: one per
// GPU's whole framebuffer (not a MIG instance's: NVML lists no process
// per instance) and one per GPU's BAR1 whose least free is known.
func (s *state) leastBases() []*leastBase {
	if s.replay == nil || s.replay.head == nil {
		return nil
	}
	var out []*leastBase
	for _, t := range s.replay.head.tracks {
		if (t.key.view == cuda.ViewFramebuffer || t.key.view == cuda.ViewBAR1) && t.key.mig < 0 && t.best.ok && t.best.base != nil {
			out = append(out, &leastBase{track: t})
		}
	}
	return out
}

// see keeps smp when it is the base sample's reading of the track's view
// or, for the framebuffer, the first usable per-process reading of its
// round.
func (lb *leastBase) see(smp *store.Sample) {
	base := lb.track.best.base
	if smp.GPU.Index != lb.track.key.gpu || smp.Round != base.round || !smp.Usable() {
		return
	}
	kind := store.KindFramebuffer
	if lb.track.key.view == cuda.ViewBAR1 {
		kind = store.KindBAR1
	}
	switch {
	case smp.Kind == kind && smp.Scope != store.ScopeMIG && smp.Start == base.start && smp.End == base.end:
		c := *smp
		lb.fb = &c
	case smp.Kind == store.KindProcesses && kind == store.KindFramebuffer && lb.procs == nil:
		c := *smp
		lb.procs = &c
	}
}

// budgetAtLeastHeadroom adds a budget per GPU framebuffer and BAR1 at its
// least free.
func (s *state) budgetAtLeastHeadroom() {
	if s.samples == nil {
		return
	}
	for _, lb := range s.samples.least {
		build := s.leastBudget
		if lb.track.key.view == cuda.ViewBAR1 {
			build = s.leastBAR1Budget
		}
		if b, ok := build(lb); ok {
			s.rep.Budget = append(s.rep.Budget, b)
		}
	}
}

// leastBudget is the budget of one track at its least free.
func (s *state) leastBudget(lb *leastBase) (report.Budget, bool) {
	smp, c := lb.fb, lb.track.best
	if smp == nil || smp.Total == nil || smp.Free == nil || *smp.Total < *smp.Free {
		return report.Budget{}, false
	}
	base := c.base
	// At the moment, when the least free is exact; else at the sample.
	moment := c.exact && c.free >= 0 && c.pids != nil && base.pids != nil
	b := report.Budget{GPU: lb.track.key.gpu, GPUUUID: s.gpuUUID[lb.track.key.gpu], View: cuda.ViewFramebuffer.String(),
		At: "least-headroom", TimeNS: smp.Start, Total: *smp.Total}
	free, at := *smp.Free, "the sample"
	switch {
	case moment:
		b.TimeNS, free, at = c.at, uint64(c.free), "the least free"
	case c.source != "sample":
		// The least free lay between samples and is a bound: the nearest
		// sample's parts would show far more free than the headroom says.
		return report.Budget{}, false
	}
	src := apiOf(smp.API, smp.Struct)
	if smp.Reserved != nil {
		b.Parts = append(b.Parts, report.BudgetPart{Kind: "reserved", Bytes: *smp.Reserved, Bound: boundExact, Source: src + " reserved"})
	}
	restSrc := src + " used, less the processes NVML lists"
	if lb.procs != nil {
		b.Parts = append(b.Parts, s.leastProcessParts(lb, moment, at)...)
	} else {
		restSrc = src + " used (no per-process reading in the same round)"
	}
	if smp.Reserved == nil {
		restSrc += " (with the driver's reserved share: this struct has no reserved field)"
	}
	rest := int64(*smp.Total) - int64(free)
	for _, p := range b.Parts {
		rest -= int64(p.Bytes)
	}
	if rest < 0 {
		b.Note = "the processes NVML lists hold more than its used: the device and per-process queries of one round were not taken at one instant"
		rest = 0
	}
	freeSrc := src + " free"
	if moment && c.source != "sample" {
		freeSrc = "the least free: " + src + " free, less what the traced calls took since the sample"
	}
	b.Parts = append(b.Parts, report.BudgetPart{Kind: "unattributed", Bytes: uint64(rest), Bound: boundExact, Source: restSrc},
		report.BudgetPart{Kind: "free", Bytes: free, Bound: boundExact, Source: freeSrc})
	return b, true
}

// leastProcessParts are the listed processes' shares at the least free, in
// pid order: a recorded process split into its traced allocations (at the
// moment, when moment) and the rest of its NVML use (its contexts, above
// all), when its traced total as the sample saw it is known and within
// its use.
func (s *state) leastProcessParts(lb *leastBase, moment bool, at string) []report.BudgetPart {
	ps, c := lb.procs, lb.track.best
	uses := append([]store.ProcUsage(nil), ps.Processes...)
	sort.Slice(uses, func(a, b int) bool { return uses[a].PID < uses[b].PID })
	var out []report.BudgetPart
	for _, u := range uses {
		if u.Used == nil {
			continue // not available: it stays in the unattributed part
		}
		pid := u.PID
		p := report.BudgetPart{PID: &pid, Bytes: *u.Used, Bound: boundExact, Source: apiOf(ps.API, ps.Struct)}
		proc := s.processAt(pid, lb.fb.End)
		if proc == nil {
			p.Kind = "process-not-recorded"
			s.nameNeighbour(&p, ps.End)
			out = append(out, p)
			continue
		}
		p.Command, p.Kind = commandOf(proc), "process"
		seen, ok := tracedOf(c.base.pids, pid)
		now, _ := tracedOf(c.pids, pid)
		if !moment {
			now = seen
		}
		if !ok || seen.bytes < 0 || now.bytes < 0 || uint64(seen.bytes) > *u.Used {
			out = append(out, p) // its traced total as the sample saw it is not known
			continue
		}
		t := p
		t.Kind, t.Bytes, t.Source = "traced", uint64(now.bytes), fmt.Sprintf("traced allocations live at %s", at)
		rest := p
		rest.Kind, rest.Bytes = "untraced", *u.Used-uint64(seen.bytes)
		rest.Source = "the process's NVML use less its traced allocations, at the sample: its CUDA contexts and memory no traced call sized"
		if seen.unsized || now.unsized {
			t.Bound, rest.Bound = boundAtLeast, boundAtMost // allocations of unknown size are in the rest
		}
		out = append(out, t, rest)
	}
	return out
}

// tracedOf is pid's share in pids, and whether pids is known (a process
// with no share there held nothing traced).
func tracedOf(pids []pidTraced, pid uint32) (pidTraced, bool) {
	if pids == nil {
		return pidTraced{pid: pid}, false
	}
	for _, p := range pids {
		if p.pid == pid {
			return p, true
		}
	}
	return pidTraced{pid: pid}, true
}

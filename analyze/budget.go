package analyze

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// Bounds of a budget part.
const (
	boundExact   = "exact"
	boundAtMost  = "at-most"
	boundAtLeast = "at-least"
)

// budgetAtFailure says where the framebuffer of the first failure's GPU
// went, from the sample the verdict judged it by and the per-process
// reading of the same round: the driver's reserved share, each listed
// process's use (a recorded one split into its traced allocations and the
// rest, its contexts above all, when the traced calls at the failure are
// those the sample saw), the used memory no listed process holds, and
// free. Every figure is one NVML round's, so the parts add up to the total.
func (s *state) budgetAtFailure(j *judgement) {
	fd := &j.cap
	smp := fd.sample
	if fd.view == viewBAR1 {
		s.budgetBAR1(j)
		return
	}
	if fd.view != viewFramebuffer || fd.mig != nil || smp == nil || smp.Total == nil || smp.Free == nil {
		return
	}
	if o := fd.opaque; o != nil && o.exit && fd.trigger != nil {
		// A process exited between the failure and its sample: the
		// sample lists neither the process nor its memory, and its free
		// would contradict the value the verdict judged by. LIVE AT THE
		// FIRST FAILURE and the evidence say what is known instead.
		return
	}
	b := report.Budget{GPU: fd.gpu, GPUUUID: s.gpuUUID[fd.gpu], View: cuda.ViewFramebuffer.String(), At: "first-failure",
		TimeNS: smp.Start, Total: *smp.Total}
	src := apiOf(smp.API, smp.Struct)
	rest := int64(*smp.Total) - int64(*smp.Free)
	if smp.Reserved != nil {
		b.Parts = append(b.Parts, report.BudgetPart{Kind: "reserved", Bytes: *smp.Reserved, Bound: boundExact, Source: src + " reserved"})
		rest -= int64(*smp.Reserved)
	}
	restSrc := src + " used, less the processes NVML lists"
	if smp.Reserved == nil {
		restSrc += " (with the driver's reserved share: this struct has no reserved field)"
	}
	if ps := s.sameRound(j.f, smp); ps != nil {
		parts := s.processParts(j, ps)
		for _, p := range parts {
			rest -= int64(p.Bytes)
		}
		b.Parts = append(b.Parts, parts...)
	} else {
		restSrc = src + " used (no per-process reading in the same round)"
	}
	if rest < 0 {
		b.Note = "the processes NVML lists hold more than its used: the device and per-process queries of one round were not taken at one instant"
		rest = 0
	}
	b.Parts = append(b.Parts, report.BudgetPart{Kind: "unattributed", Bytes: uint64(rest), Bound: boundExact, Source: restSrc},
		report.BudgetPart{Kind: "free", Bytes: *smp.Free, Bound: boundExact, Source: src + " free"})
	s.rep.Budget = append(s.rep.Budget, b)
}

// sameRound is the usable per-process reading of the failure's target
// taken in the same round as the framebuffer sample smp, or nil.
func (s *state) sameRound(f *failed, smp *store.Sample) *store.Sample {
	t := s.samples.targetOf(f)
	if t == nil {
		return nil
	}
	// The framebuffer sample may be the nearest before the failure while
	// the per-process reading is the failure's own (the process exited in
	// between): the reading before is then of the framebuffer's round.
	for _, ps := range []*store.Sample{t.ref[store.KindProcesses], t.lastBefore[store.KindProcesses]} {
		if ps != nil && ps.Usable() && ps.Round == smp.Round && ps.GPU.Index == smp.GPU.Index {
			return ps
		}
	}
	return nil
}

// alignedWithSample reports whether the traced calls at the failure are
// exactly those the reference sample saw: the failure triggered it and
// nothing traced changed in between.
func (fd *finding) alignedWithSample() bool {
	return fd.trigger != nil && fd.unchangedSince()
}

// unchangedSince reports whether no traced call changed the view, and
// nothing of unknown size was released, between the reference sample and
// the failure.
func (fd *finding) unchangedSince() bool {
	return fd.deltaExact && fd.delta == 0 && !fd.openLo && !fd.openHi
}

// heldSince reports whether a process's untraced memory, as the sample
// before the failure read it, was still held at the failure, or more: no
// traced call changed the view in between, and the process released
// nothing of unknown size (a context, its exit) before the failure.
func (s *state) heldSince(fd *finding, pid uint32) bool {
	if fd.trigger != nil || fd.sample == nil || fd.sample.End > fd.failAt || !fd.unchangedSince() {
		return false
	}
	for _, o := range s.replay.opaque {
		if o.pid == pid && !o.acquire && o.at >= fd.sample.Start && o.from < fd.failAt {
			return false
		}
	}
	return true
}

// processParts are the listed processes' shares, in pid order. A recorded
// process is split into its traced allocations and the rest only when the
// traced calls at the failure are exactly those the sample saw (the
// failure triggered it and nothing traced changed in between).
func (s *state) processParts(j *judgement, ps *store.Sample) []report.BudgetPart {
	fd := &j.cap
	aligned := fd.alignedWithSample()
	uses := append([]store.ProcUsage(nil), ps.Processes...)
	sort.Slice(uses, func(a, b int) bool { return uses[a].PID < uses[b].PID })
	var out []report.BudgetPart
	for _, u := range uses {
		if u.Used == nil {
			continue // not available: it stays in the unattributed part
		}
		pid := u.PID
		p := report.BudgetPart{PID: &pid, Bytes: *u.Used, Bound: boundExact, Source: apiOf(ps.API, ps.Struct)}
		proc := s.processAt(pid, j.f.e.End)
		if proc == nil {
			p.Kind = "process-not-recorded"
			s.nameNeighbour(&p, ps.End)
			out = append(out, p)
			continue
		}
		p.Command = commandOf(proc)
		traced, unsized := s.tracedAtFailure(pid, fd.gpu)
		held := !aligned && s.heldSince(fd, pid)
		if (!aligned && !held) || traced > *u.Used {
			p.Kind = "process"
			out = append(out, p)
			continue
		}
		pooled, inPools := s.poolParts(p, fd.gpu)
		t := p
		t.Kind, t.Bytes, t.Source = "traced", traced-inPools, "traced allocations live at the failure"
		if len(pooled) > 0 {
			t.Source += ", outside memory pools"
		}
		rest := p
		rest.Kind, rest.Bytes = "untraced", *u.Used-traced
		rest.Source = "the process's NVML use less its traced allocations: its CUDA contexts and memory no traced call sized"
		if len(pooled) > 0 {
			rest.Source += ", and what its memory pools hold beyond their allocations"
		}
		switch {
		case unsized:
			t.Bound, rest.Bound = boundAtLeast, boundAtMost // allocations of unknown size are in the rest
		case held:
			// Read before the failure: what no call sized is held until a
			// context release or the exit, and none came in between, but
			// the driver may have taken more for it since.
			rest.Bound = boundAtLeast
			rest.Source += "; read in the sample before the failure, and not released before it"
		}
		if t.Bytes > 0 || len(pooled) == 0 {
			s.splitTraced(&t, fd.gpu)
			out = append(out, t)
		}
		out = append(append(out, pooled...), rest)
	}
	return out
}

// poolParts are a process's memory pools on a GPU's framebuffer at the
// first failure, each with what its live traced allocations held (in
// use), and their sum. What a pool holds beyond that (its reserve, which
// no call sizes) is in the process's untraced part.
func (s *state) poolParts(p report.BudgetPart, gpu int) ([]report.BudgetPart, uint64) {
	var out []report.BudgetPart
	var sum uint64
	for _, sh := range s.replay.pools.atFirst[*p.PID] {
		if sh.view != (viewKey{gpu, -1, cuda.ViewFramebuffer}) || sh.bytes == 0 {
			continue
		}
		q := p
		q.Kind, q.Bytes = "pool", sh.bytes
		q.Pool = fmt.Sprintf("%#x", sh.pool.handle)
		limit := "no maxSize recorded"
		if sh.pool.limitRead && sh.pool.maxSize > 0 {
			q.PoolMax = ptr(sh.pool.maxSize)
			limit = "maxSize " + report.HumanBytes(sh.pool.maxSize)
		}
		q.Source = fmt.Sprintf("traced allocations live in memory pool %s (%s) at the failure: in use; what the pool holds beyond them is in the part not sized by a call",
			q.Pool, limit)
		out = append(out, q)
		sum += sh.bytes
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Pool < out[b].Pool })
	return out, sum
}

// nameNeighbour names a process not recorded as the recorder read it
// from /proc: the reading before the sample's end t, else the first after
// it (the recorder reads a neighbour just after the sample that first
// lists it). A file written before neighbours were named has none.
func (s *state) nameNeighbour(p *report.BudgetPart, t int64) {
	var before, after *store.Neighbour
	for i := range s.neighbours {
		n := &s.neighbours[i]
		switch {
		case n.PID != *p.PID:
		case n.Time <= t:
			if before == nil || n.Time > before.Time {
				before = n
			}
		case after == nil || n.Time < after.Time:
			after = n
		}
	}
	best := before
	if best == nil {
		best = after
	}
	switch {
	case best == nil:
		p.Source += report.BudgetNotNamed + "the recording has no reading of its /proc"
		return
	case best.Error != "":
		p.Source += report.BudgetNotNamed + best.Error
		return
	}
	p.Command = strings.Join(best.Args, " ")
	if best.ArgsCut {
		p.Command += " ..."
	}
	if p.Command == "" {
		p.Command = best.Comm
	}
	switch {
	case best.User != "":
		p.User = best.User
	case best.UID != nil:
		p.User = "uid " + strconv.FormatUint(uint64(*best.UID), 10)
	}
	p.Container = best.Container
	if pod := best.Pod; pod != nil {
		p.Pod = pod.UID
		if pod.Name != "" {
			p.Pod = strings.TrimPrefix(pod.Namespace+"/"+pod.Name, "/")
		}
	}
	p.Source += "; named from /proc when a sample first listed it"
}

// tracedAtFailure is what a process held on a GPU's framebuffer from
// traced calls at the first failure, and whether some of it had no size.
func (s *state) tracedAtFailure(pid uint32, gpu int) (uint64, bool) {
	var n uint64
	unsized := false
	for vk, lb := range s.replay.perProc[pid] {
		if vk.gpu == gpu && vk.view == cuda.ViewFramebuffer {
			n += lb.Bytes
			unsized = unsized || lb.Unsized > 0
		}
	}
	return n, unsized
}

// commandOf is a process's command line as recorded.
func commandOf(p *store.Process) string {
	if len(p.Args) > 0 {
		return strings.Join(p.Args, " ")
	}
	if p.Exe != "" {
		return p.Exe
	}
	return p.Comm
}

// budgetBAR1 says where the BAR1 aperture of a failed mapping's GPU went,
// from the sample the verdict judged it by: each recorded process's
// traced mappings live at the failure, by kind (only when the traced
// calls at the failure are those the sample saw), the rest of what NVML
// counts used (the driver's own mappings, those of processes the
// recording did not follow, and those no call sized), and free. NVML has
// no per-process BAR1 reading, so the rest is not split further.
func (s *state) budgetBAR1(j *judgement) {
	fd := &j.cap
	smp := fd.sample
	if smp == nil || smp.Total == nil || smp.Free == nil || *smp.Free > *smp.Total {
		return
	}
	b := report.Budget{GPU: fd.gpu, GPUUUID: s.gpuUUID[fd.gpu], View: cuda.ViewBAR1.String(), At: "first-failure",
		TimeNS: smp.Start, Total: *smp.Total}
	src := apiOf(smp.API, smp.Struct)
	rest := int64(*smp.Total) - int64(*smp.Free)
	restSrc := src + " used (the traced calls at the failure are not exactly those the sample saw, so it is not split)"
	restBound := boundExact
	if fd.alignedWithSample() {
		parts := s.mappingParts(fd.gpu)
		for _, p := range parts {
			rest -= int64(p.Bytes)
		}
		b.Parts = append(b.Parts, parts...)
		restSrc = src + " used, less the traced mappings: the driver's own, those of processes not recorded, and those no call sized"
		restBound, b.Note = restOfMappings(parts)
	}
	if rest < 0 {
		b.Note = "the traced mappings are more than NVML's BAR1 used: the driver counts some of them in other units or not at all"
		rest = 0
	}
	b.Parts = append(b.Parts, report.BudgetPart{Kind: "unattributed", Bytes: uint64(rest), Bound: restBound, Source: restSrc},
		report.BudgetPart{Kind: "free", Bytes: *smp.Free, Bound: boundExact, Source: src + " free"})
	s.rep.Budget = append(s.rep.Budget, b)
}

// mappingParts are the recorded processes' traced BAR1 mappings on a GPU
// at the first failure, one part per process and kind of mapping, in pid
// and kind order. A kind with a mapping of unknown size, or a grant that
// may cost one mapping per peer, is at least its sized part.
func (s *state) mappingParts(gpu int) []report.BudgetPart {
	var out []report.BudgetPart
	for k, sh := range s.replay.kinds {
		if k.view != (viewKey{gpu, -1, cuda.ViewBAR1}) || (sh.bytes == 0 && sh.unsized == 0) {
			continue
		}
		pid := k.pid
		p := report.BudgetPart{Kind: "mapping", PID: &pid, Mapping: k.kind, Bytes: sh.bytes, Bound: boundExact,
			Source: fmt.Sprintf("traced mappings of kind %s live at the failure (%d)", k.kind, sh.count)}
		if proc := s.processAt(pid, s.first.e.End); proc != nil {
			p.Command = commandOf(proc)
		}
		if sh.unsized > 0 || sh.most > sh.bytes {
			p.Bound = boundAtLeast
			p.Source += "; some of no known size, or costing one mapping per peer"
		}
		out = append(out, p)
	}
	sort.Slice(out, func(a, b int) bool {
		if *out[a].PID != *out[b].PID {
			return *out[a].PID < *out[b].PID
		}
		return out[a].Mapping < out[b].Mapping
	})
	return out
}

// heldKindKey names what one process held of one kind of resource on one
// view.
type heldKindKey struct {
	pid  uint32
	view viewKey
	kind string
}

// kindShare is what a process held of one kind on one view at the first
// failure: the sized bytes, the most they may cost, and how many had no
// known size.
type kindShare struct {
	bytes, most    uint64
	count, unsized int
}

// snapshotKind counts a resource live at the first failure in its
// process's share of its kind.
func (p *replayer) snapshotKind(k resKey, l liveRes) {
	if l.view != cuda.ViewBAR1 {
		return // only the BAR1 budget splits by kind
	}
	kk := heldKindKey{k.pid(), l.key(), k.res().String()}
	sh := p.kinds[kk]
	if sh == nil {
		sh = &kindShare{}
		p.kinds[kk] = sh
	}
	sh.count++
	if l.sized {
		sh.bytes += l.size
		sh.most += max(l.most, l.size)
	} else {
		sh.unsized++
	}
}

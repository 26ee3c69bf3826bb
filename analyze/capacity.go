package analyze

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// nvmlMIGEnabled is NVML_DEVICE_MIG_ENABLE: the GPU's CUDA devices are
// its MIG instances.
const nvmlMIGEnabled = 1

// memView is the memory view a request is judged against.
type memView uint8

const (
	viewNone memView = iota
	viewFramebuffer
	viewBAR1
)

func (v memView) String() string {
	if v == viewBAR1 {
		return "BAR1"
	}
	return "framebuffer"
}

// finding is what the memory evidence says about one failed request: the
// one view that can hold it, the sample that best reflects that view at
// the failure, the free space at the failure (reconciled with traced calls
// between the sample and the failure), and the resulting capacity. It is
// computed once; the evidence rows, the verdict's sentences and the next
// steps are all rendered from it.
type finding struct {
	capacity report.Capacity
	view     memView
	gpu      int
	mig      *int
	method   string
	// apertureOf says whose GPU gpu is when a mapping uses another GPU's
	// aperture: "exporter" or "peer" ("" for the caller's own).
	apertureOf string
	// The request: its size, and where the size came from when the call
	// names none (an import sized by its exporter's allocation).
	size       uint64
	sized      bool
	sizeSource string
	sizeAt     int64 // when the exporter made the allocation (0: unknown)
	// most is the most the request may need of its view: size, except for
	// an access grant to several peers through the owner's aperture, which
	// may cost one mapping of the range per peer (peers of them).
	most  uint64
	peers int
	// notApplicable says why no GPU view applies; bar1Irrelevant that it is
	// a mapping whose path does not use the aperture.
	notApplicable  string
	bar1Irrelevant bool
	failAt         int64
	// The reference sample and how it relates to the failure.
	sample   *store.Sample
	trigger  *store.Trigger // the failure's trigger of sample, nil when it is the nearest before
	relation string         // "taken because of this failure" or "the nearest sample before the failure"
	seen     uint64         // free as the sample read it
	lo, hi   uint64         // free at the failure
	// delta is traced(at the failure) - traced(as the sample saw it),
	// when exact: for a later sample, >0 means the traced processes freed
	// that much in between; for an earlier one, that they allocated it.
	delta      int64
	deltaExact bool
	// rangedBetween: a grant to several peers, of uncertain cost, lies
	// between the sample and the failure (it widens lo..hi).
	rangedBetween bool
	// A release of unknown size (a process exit, a free of memory made
	// before the record) lies between the sample and the failure: free at
	// the failure may be below lo (openLo: lo is 0) or above hi (openHi:
	// hi is unbounded). opaque is the first such release.
	openLo, openHi bool
	opaque         *opaqueRel
	// setAside says why the sample this failure triggered was not the
	// reference: a release of unknown size came between.
	setAside   string
	setAsideBy *opaqueRel
	// miss is the decisive missing evidence when capacity is unknown.
	miss *report.Missing
	// pool is the memory pool with a maximum size the allocation drew
	// from, as it stood at the failure (nil: none, or none the record saw
	// created).
	pool *poolState
}

// reconciled reports whether the value at the failure differs from the
// sample as read.
func (f *finding) reconciled() bool { return f.lo != f.seen || f.hi != f.seen }

// capacity judges a failed request against the one view that can hold it.
// A code that is not about memory, or a sticky code an earlier fault left
// on the context, is not judged: no memory view explains it.
func (s *state) capacity(f *failed, m cuda.Meaning, attribution report.Attribution) finding {
	fd := finding{capacity: report.CapNotApplicable, gpu: -1, failAt: f.e.End}
	fd.size, fd.sized = f.e.Size, f.e.Has&cuda.FieldSize != 0
	switch {
	case attribution == report.AttrNotMemory:
		fd.notApplicable = "the code says the failure is not about memory"
		return fd
	case m == cuda.MeaningSticky:
		fd.notApplicable = "the code is a sticky error left on the context by an earlier fault; the call only reported it, so free memory does not explain it"
		return fd
	}
	fd.gpu, fd.mig, fd.method = s.gpuOfCall(&f.e)
	fd.peers = 1
	if f.sym.Creates.View() == cuda.ViewHost {
		fd.notApplicable = "it asks for page-locked host memory; no GPU memory view holds it"
		return fd
	}
	switch f.sym.Op {
	case cuda.OpOther, cuda.OpFree:
		fd.notApplicable = "the call allocates and maps nothing"
		return fd
	case cuda.OpMapping:
		s.mappingRequest(f, &fd)
		if ap := s.apertureOf(f); ap.who != "" {
			fd.gpu, fd.apertureOf = ap.gpu, ap.who
		}
		if !usesBAR1(f.sym, &f.e) {
			fd.notApplicable = "this mapping's path does not use the BAR1 aperture (" + f.sym.Family + ")"
			fd.bar1Irrelevant = true
			return fd
		}
		fd.view, fd.mig = viewBAR1, nil // BAR1 is whole-GPU
		fd.peers = max(grantPeersMost(f.sym, &f.e), 1)
	default:
		// Device allocation or context creation: the framebuffer of its
		// GPU (of its MIG instance when it runs on one).
		fd.view = viewFramebuffer
		if fd.gpu >= 0 && fd.mig == nil && s.migOn(fd.gpu) {
			// The whole GPU's framebuffer is not the instance's.
			fd.capacity, fd.miss = report.CapUnknown, s.unknownInstance(f, fd.gpu)
			return fd
		}
	}
	fd.most = fd.size * uint64(fd.peers)
	s.judgeView(f, &fd)
	if fd.view == viewFramebuffer && s.judgePool(f, &fd) {
		fd.miss = nil // the pool's limit decided; the framebuffer is context
	}
	return fd
}

// migOn reports whether the inventory says a GPU has MIG enabled: its
// CUDA devices are then MIG instances, each with its own framebuffer.
func (s *state) migOn(gpu int) bool {
	if s.inv == nil {
		return false
	}
	for _, g := range s.inv.GPUs {
		if g.Index == gpu {
			return g.MIGMode.Value != nil && *g.MIGMode.Value == nvmlMIGEnabled
		}
	}
	return false
}

// anyMIG lists the GPUs with MIG enabled.
func (s *state) anyMIG() []int {
	var out []int
	if s.inv != nil {
		for _, g := range s.inv.GPUs {
			if s.migOn(g.Index) {
				out = append(out, g.Index)
			}
		}
	}
	return out
}

// migFix is what would pin a CUDA device to its MIG instance next time.
func (s *state) migFix(gpu int) string {
	var uuids []string
	if s.inv != nil {
		for _, g := range s.inv.GPUs {
			for _, m := range g.MIG {
				if (gpu < 0 || g.Index == gpu) && m.UUID.Value != nil {
					uuids = append(uuids, fmt.Sprintf("%s (GPU %d instance %d)", *m.UUID.Value, g.Index, m.Index))
				}
			}
		}
	}
	fix := "run the process with CUDA_VISIBLE_DEVICES=MIG-<uuid> naming its MIG instance (nvidia-smi -L lists them). Then the recorder knows which instance each CUDA device is"
	if len(uuids) > 0 && len(uuids) <= 4 {
		fix += ". This run's instances: " + strings.Join(uuids, ", ")
	}
	return fix
}

// unknownInstance says that a failing call ran on one of a GPU's MIG
// instances, and the record does not say which.
func (s *state) unknownInstance(f *failed, gpu int) *report.Missing {
	what := fmt.Sprintf("GPU %d has MIG enabled, so CUDA device %d of pid %d is one of its MIG instances. The record does not say which, and the whole GPU's framebuffer is not the instance's",
		gpu, f.e.Dev, f.e.PID)
	return &report.Missing{Decisive: true, What: what, Fix: s.migFix(gpu)}
}

// aperture is the GPU whose BAR1 aperture a mapping uses when that is
// the memory's GPU rather than the caller's: who is "exporter" for an
// import of another process's memory, "peer" for peer access to another
// context's memory, "" when the caller's own GPU is the one; gpu is -1
// when the record does not say which GPU that is.
type aperture struct {
	gpu int
	who string
}

// Whose GPU an aperture is (report.Failure.ApertureOf).
const (
	apertureExporter = "exporter"
	aperturePeer     = "peer"
)

// apertureOf finds the GPU whose aperture a mapping goes through. An
// import maps the exporter's memory, which other GPUs and the CPU reach
// through the exporter GPU's BAR1. Peer access (cuCtxEnablePeerAccess)
// maps the peer context's memory for the caller's GPU to reach over PCIe:
// that memory is reached through the peer GPU's BAR1, not the caller's.
// Every part of the analysis that judges the aperture (the reference
// sample, its reconciliation, the evidence label) uses this one GPU.
func (s *state) apertureOf(f *failed) aperture {
	if f.sym.Op != cuda.OpMapping {
		return aperture{gpu: -1}
	}
	if f.sym.Creates == cuda.ResPeer {
		if f.e.Has&cuda.FieldPeer == 0 {
			return aperture{gpu: -1, who: aperturePeer}
		}
		g, _, _ := s.gpuOfDev(f.e.PID, s.ctxDevice(f.e.PID, f.e.Peer))
		return aperture{gpu: g, who: aperturePeer}
	}
	if len(f.e.Key) == 0 || s.replay == nil {
		return aperture{gpu: -1}
	}
	ref, ok := s.replay.exportKeys[string(f.e.Key)]
	if !ok {
		return aperture{gpu: -1}
	}
	if g, _, _ := s.gpuOfDev(ref.pid, ref.dev); g >= 0 {
		return aperture{gpu: g, who: apertureExporter}
	}
	return aperture{gpu: -1}
}

// ctxDevice is the CUDA ordinal of one of a process's contexts, by its
// handle, or -1 when the record does not say.
func (s *state) ctxDevice(pid uint32, handle uint64) int32 {
	p := s.procs[pid]
	if p == nil || handle == 0 {
		return -1
	}
	for _, c := range p.Contexts {
		if c.Handle == handle {
			return c.Device
		}
	}
	return -1
}

// judgedGPU is the GPU whose memory view judges a failure: the aperture's
// GPU for a mapping through another GPU's aperture, else the call's own.
// The reference samples are chosen on this GPU (newTarget), the same one
// the capacity, the reconciliation and the evidence label use.
func (s *state) judgedGPU(f *failed) int {
	if ap := s.apertureOf(f); ap.who != "" {
		return ap.gpu
	}
	g, _, _ := s.gpuOfCall(&f.e)
	return g
}

// mappingRequest finds what an import maps when the call names no size:
// the exporter's allocation size.
func (s *state) mappingRequest(f *failed, fd *finding) {
	if len(f.e.Key) == 0 {
		return
	}
	ref, ok := s.replay.exportKeys[string(f.e.Key)]
	if !ok {
		return
	}
	if sz, ok := s.replay.exportSize[string(f.e.Key)]; ok && !fd.sized {
		fd.size, fd.sized = sz, true
		fd.sizeSource = fmt.Sprintf("the exporter's allocation (pid %d, traced)", ref.pid)
		fd.sizeAt = s.replay.exportAt[string(f.e.Key)]
	}
}

// candidate is a sample that may stand for the view at the failure, with
// the free space at the failure it implies.
type candidate struct {
	smp      *store.Sample
	lo, hi   uint64
	xlo, xhi int64
	relation string
	ranged   bool // a grant of uncertain cost lies between it and the failure
	// up, down: a release of unknown size lies between it and the failure
	// (free at the failure may be higher, lower); opaque is the first.
	up, down bool
	opaque   *opaqueRel
}

// judgeView picks the reference sample, reconciles it, and compares.
func (s *state) judgeView(f *failed, fd *finding) {
	if fd.gpu < 0 {
		fd.capacity = report.CapUnknown
		fd.miss = s.unknownGPU(f, fd.method)
		if fd.apertureOf == aperturePeer {
			fd.miss = unknownPeer(f)
		}
		return
	}
	t := s.samples.targetOf(f)
	cands := s.candidates(f, fd, t)
	if len(cands) == 0 {
		fd.capacity = report.CapUnknown
		fd.miss = s.noSample(fd, t)
		return
	}
	best := cands[0]
	for _, c := range cands[1:] {
		if c.hi-c.lo < best.hi-best.lo {
			best = c
		}
	}
	fd.sample, fd.relation = best.smp, best.relation
	if tr, ok := triggeredBy(best.smp, f); ok {
		fd.trigger = &tr
	}
	fd.seen, fd.lo, fd.hi = *best.smp.Free, best.lo, best.hi
	fd.delta, fd.deltaExact = best.xlo, best.xlo == best.xhi
	fd.rangedBetween = best.ranged
	fd.openLo, fd.openHi, fd.opaque = best.down, best.up, best.opaque
	if c := cands[0]; c.smp != best.smp && c.opaque != nil && fd.trigger == nil {
		fd.setAsideBy = c.opaque
		fd.setAside = fmt.Sprintf("the sample this failure triggered, %s after it, came after pid %d %s",
			report.Duration(c.smp.Start-f.e.End), c.opaque.pid, c.opaque.why)
	}
	fd.capacity = fd.compare()
	if fd.capacity == report.CapUnknown {
		fd.miss = fd.undecided(f.name)
	}
}

// candidates are the sample the failure triggered and the nearest usable
// one before it within the window, each reconciled with what the recorded
// processes allocated and released between it and the failure; the one
// that reconciles exactly (no traced call overlapping its query) best
// reflects the state at the failure.
func (s *state) candidates(f *failed, fd *finding, t *target) []candidate {
	if t == nil {
		return nil
	}
	var mig *int
	vk := viewKey{fd.gpu, -1, cuda.ViewFramebuffer}
	kind := store.KindFramebuffer
	if fd.view == viewBAR1 {
		vk.view, kind = cuda.ViewBAR1, store.KindBAR1
	} else if fd.mig != nil {
		vk.mig, mig = *fd.mig, fd.mig
	}
	key := kindKeyOf(kind, mig)
	var out []candidate
	consider := func(smp *store.Sample, relation string) {
		if smp == nil || !smp.Usable() || smp.Free == nil {
			return
		}
		listed := s.exitsSeen(t.roundProcs(smp))
		calls, exits := s.replay.changes[vk], settleChanges(s.replay.exitChanges[vk], smp, listed)
		xlo, xhi := between(calls, f.e.End, smp.Start, smp.End)
		elo, ehi := between(exits, f.e.End, smp.Start, smp.End)
		xlo, xhi = xlo+elo, xhi+ehi
		// free at the failure = free seen - (traced at failure - traced seen)
		clamp := func(v int64) uint64 { return uint64(max(v, 0)) }
		c := candidate{smp: smp, lo: clamp(int64(*smp.Free) - xhi), hi: clamp(int64(*smp.Free) - xlo),
			xlo: xlo, xhi: xhi, relation: relation, ranged: rangedBetween(calls, f.e.End, smp.Start, smp.End) || rangedBetween(exits, f.e.End, smp.Start, smp.End)}
		c.up, c.down, c.opaque = opaqueBetween(settleOpaque(s.replay.opaque, smp, listed), fd.gpu, vk.view, f.e.End, smp.Start, smp.End)
		if c.down {
			c.lo = 0
		}
		if c.up {
			c.hi = math.MaxUint64
		}
		out = append(out, c)
	}
	if ref := t.ref[key]; ref != nil {
		if _, ok := triggeredBy(ref, f); ok {
			consider(ref, "taken because of this failure")
		}
	}
	if lb := t.lastBefore[key]; lb != nil && f.e.End-lb.End <= s.window {
		consider(lb, "the nearest sample before the failure")
	}
	return out
}

// roundProcs is the usable per-process query of smp's GPU taken in the
// same sampling round as smp, or nil.
func (t *target) roundProcs(smp *store.Sample) *store.Sample {
	for _, p := range []*store.Sample{t.ref[store.KindProcesses], t.lastBefore[store.KindProcesses]} {
		if p != nil && p.Usable() && p.Round == smp.Round && p.GPU.Index == smp.GPU.Index {
			return p
		}
	}
	return nil
}

// exitState says, for a process that exited, whether a sample saw its
// memory released: listed (NVML still showed it), gone (NVML had shown it
// holding memory before, and no longer did), or neither known.
type exitState func(pid uint32) (listed, gone bool)

// exitsSeen reads a round's process list (nil: nothing is known).
func (s *state) exitsSeen(procs *store.Sample) exitState {
	return func(pid uint32) (bool, bool) {
		if procs == nil {
			return false, false
		}
		for _, u := range procs.Processes {
			if u.PID == pid { // NVML lists a process while it has a context
				return true, false
			}
		}
		return false, s.nvmlUseBefore(pid)
	}
}

// settleChanges narrows when each exit's release took effect, where the
// sample's own process list tells: still listed, the sample did not see
// the release; gone, it did. The others are as they were.
func settleChanges(exits []exitChange, smp *store.Sample, st exitState) []change {
	out := make([]change, len(exits))
	for i, c := range exits {
		out[i] = c.change
		if from, to, ok := settle(c.pid, c.start, c.end, smp, st); ok {
			out[i].start, out[i].end = from, to
		}
	}
	return out
}

// settleOpaque is settleChanges for releases of unknown size.
func settleOpaque(rels []opaqueRel, smp *store.Sample, st exitState) []opaqueRel {
	var out []opaqueRel
	for i, r := range rels {
		if r.from == r.at {
			continue
		}
		from, to, ok := settle(r.pid, r.from, r.at, smp, st)
		if !ok {
			continue
		}
		if out == nil {
			out = slices.Clone(rels)
		}
		out[i].from, out[i].at = from, to
	}
	if out == nil {
		return rels
	}
	return out
}

// settle narrows [from, to], when pid's exit freed memory, by whether the
// sample saw pid's memory gone; ok is false when nothing narrows it.
func settle(pid uint32, from, to int64, smp *store.Sample, st exitState) (int64, int64, bool) {
	if pid == 0 || from > smp.End || to < smp.Start {
		return from, to, false
	}
	switch listed, gone := st(pid); {
	case listed: // not yet freed when the sample was taken
		from = max(from, smp.End+1)
		return from, max(to, from), true
	case gone: // freed before it
		return from, min(to, smp.Start-1), from < smp.Start
	}
	return from, to, false
}

// opaqueBetween reports how releases of unknown size on a GPU and view
// bear on a sample whose query ran from s to e, for the value at the
// failure: up, free at the failure may be higher than the sample implies
// (a release after the sample, by the failure); down, lower (a release
// after the failure that the sample saw). A release that overlaps the
// query may be either. An allocation of unknown size (a context's own
// memory) bears the other way. first is the first that bears.
func opaqueBetween(rels []opaqueRel, gpu int, view cuda.View, failure, s, e int64) (up, down bool, first *opaqueRel) {
	for i := range rels {
		r := &rels[i]
		if (r.gpu >= 0 && r.gpu != gpu) || (r.view != viewMixed && r.view != view) {
			continue
		}
		// free at the failure = the sample's + k × (the unknown size).
		k0, k1 := coefficient(r.from, r.at, failure, s, e)
		if r.acquire { // it took memory: free at the failure = the sample's - k × size
			k0, k1 = -k1, -k0
		}
		if k1 > 0 || k0 < 0 {
			up, down = up || k1 > 0, down || k0 < 0
			if first == nil {
				first = r
			}
		}
	}
	return up, down, first
}

// compare decides capacity from the free space at the failure.
func (fd *finding) compare() report.Capacity {
	exhausted, hadRoom := report.CapFBExhausted, report.CapFBHadRoom
	if fd.view == viewBAR1 {
		exhausted, hadRoom = report.CapBAR1Exhausted, report.CapBAR1HadRoom
	}
	switch {
	case !fd.sized && fd.hi == 0:
		return exhausted // nothing fits in nothing
	case !fd.sized:
		return report.CapUnknown
	case fd.size > fd.hi:
		return exhausted // even the least it may need did not fit
	case fd.needMost() <= fd.lo:
		return hadRoom // even the most it may need fitted
	}
	return report.CapUnknown
}

// needMost is the most the request may need: its size, or for a grant to
// several peers one mapping of the range per peer.
func (fd *finding) needMost() uint64 { return max(fd.most, fd.size) }

// needRange reports whether the request's need is itself a range.
func (fd *finding) needRange() bool { return fd.sized && fd.needMost() > fd.size }

// undecided says why a sample with values could not decide capacity.
func (fd *finding) undecided(name string) *report.Missing {
	if !fd.sized && fd.apertureOf == aperturePeer {
		// No exporter: the cost is the peer's allocations, which the
		// call does not name.
		return &report.Missing{Decisive: true,
			What: fmt.Sprintf("%s names no size: it maps the peer context's memory (what it holds now and what it allocates later) through GPU %d's BAR1 aperture. The record does not hold that cost. GPU %d's BAR1 had %s free at the failure",
				name, fd.gpu, fd.gpu, fd.freeText()),
			Fix: fmt.Sprintf("read GPU %d's BAR1 used (nvidia-smi -q -d MEMORY) before and after enabling peer access to learn its cost. A large or resizable BAR1 gives peer mappings room. GPUs joined by NVLink (nvidia-smi topo -m) do not map peers through BAR1",
				fd.gpu)}
	}
	if !fd.sized {
		return &report.Missing{Decisive: true,
			What: fmt.Sprintf("%s has no request size (an import whose exporter was not recorded, or a peer grant)", name),
			Fix:  "record the exporting process too (forensic record --all)"}
	}
	if fd.needRange() && (fd.lo == fd.hi || (fd.size <= fd.lo && fd.needMost() > fd.hi)) {
		// Free is known well enough; the request's own cost is the doubt.
		return &report.Missing{Decisive: true,
			What: fmt.Sprintf("the grant maps %s for %d peers through GPU %d's BAR1 aperture. That costs between %s (the range mapped once) and %s (once per peer), depending on the driver. %s was free at the failure: enough for the one, not the other",
				report.HumanBytes(fd.size), fd.peers, fd.gpu, report.HumanBytes(fd.size), report.HumanBytes(fd.needMost()), fd.freeText()),
			Fix: "to settle it, grant one peer per cuMemSetAccess call (each then maps the range once). Or read BAR1 used (nvidia-smi -q -d MEMORY) before and after a grant to several peers, to learn the driver's per-peer cost"}
	}
	if fd.opaque != nil {
		fix := "record with --freeze-on-failure, so the failure's own sample is taken while the process is held stopped; start the recorder before the workload, so what its processes allocate is traced"
		if fd.opaque.ctx {
			fix = "record with --freeze-on-failure, so the failure's own sample is taken while the process is held stopped, before it frees a context or exits"
		}
		return &report.Missing{Decisive: true,
			What: fmt.Sprintf("between the failure and the %s sample (%s), pid %d %s. So %s free at the failure was %s, and %s were requested",
				fd.view, fd.relation, fd.opaque.pid, fd.opaque.why, fd.view, fd.freeText(), report.HumanBytes(fd.size)),
			Fix: fix}
	}
	why := "the sample overlapped traced calls"
	if fd.rangedBetween {
		why = "between the sample and the failure lies a grant to several peers, whose cost is between one mapping of its range and one per peer"
	}
	need := report.HumanBytes(fd.size) + " were requested"
	if fd.needRange() {
		need = fmt.Sprintf("the request needed between %s and %s", report.HumanBytes(fd.size), report.HumanBytes(fd.needMost()))
	}
	return &report.Missing{Decisive: true,
		What: fmt.Sprintf("%s: %s free at the failure was between %s and %s, and %s",
			why, fd.view, report.HumanBytes(fd.lo), report.HumanBytes(fd.hi), need),
		Fix: "record with --freeze-on-failure, so the failure's own sample is taken before the process moves on"}
}

// unknownGPU says why the failing call's GPU is unknown, and what would
// tell it next time: the advice follows the reason.
func (s *state) unknownGPU(f *failed, method string) *report.Missing {
	why, kind := method, store.DeviceWhy("")
	if p := s.procs[f.e.PID]; p != nil {
		for _, d := range p.Devices {
			if d.Ordinal == f.e.Dev && d.Why != "" {
				why, kind = d.Why, d.WhyKind
			}
		}
	}
	m := &report.Missing{Decisive: true}
	switch {
	case f.e.Dev < 0 || method == noContext:
		why = "no current context was seen for the thread"
		m.Fix = "start the recorder before the process creates its CUDA context, so the context and its device are recorded"
	case s.inv == nil || s.inv.Init.Code != 0:
		m.Fix = "point --libnvidia-ml at the driver's libnvidia-ml.so.1, or install and load the NVIDIA driver: without NVML the recorder cannot list the GPUs"
	case len(s.inv.GPUs) == 0:
		m.Fix = "check that the NVIDIA driver sees the GPUs (nvidia-smi -L), and point --libnvidia-ml at that driver's libnvidia-ml.so.1"
	case kind == store.WhyContainerVisible:
		m.Fix = "check NVIDIA_VISIBLE_DEVICES (set by the container runtime) against the host's GPUs (nvidia-smi -L)"
	case len(s.anyMIG()) > 0:
		m.Fix = s.migFix(-1)
	default:
		m.Fix = "set CUDA_DEVICE_ORDER=PCI_BUS_ID, or CUDA_VISIBLE_DEVICES=GPU-<uuid>, so CUDA's device numbers match NVML's"
		if p := s.procs[f.e.PID]; p != nil && p.AttachedLate {
			m.Fix += "; or start the recorder before the process, so the device identity it queries at start is recorded"
		}
	}
	m.What = "the GPU of the failing call is unknown: " + why
	return m
}

// unknownPeer says that the GPU of a peer context, whose aperture peer
// access maps through, is not in the record.
func unknownPeer(f *failed) *report.Missing {
	return &report.Missing{Decisive: true,
		What: fmt.Sprintf("%s maps the peer context's memory through the peer GPU's BAR1 aperture, and the record does not say which GPU the peer context (%#x) of pid %d is on", f.name, f.e.Peer, f.e.PID),
		Fix:  "start the recorder before the process creates its contexts (cuCtxCreate, cuDevicePrimaryCtxRetain), so each context's device is recorded"}
}

// noSample says why no sample could stand for the view at the failure.
func (s *state) noSample(fd *finding, t *target) *report.Missing {
	kind := store.KindFramebuffer
	var mig *int
	if fd.view == viewBAR1 {
		kind = store.KindBAR1
	} else {
		mig = fd.mig
	}
	key := kindKeyOf(kind, mig)
	var bad *store.Sample
	if t != nil {
		bad = t.ref[key]
		if bad == nil {
			if lb := t.lastBefore[key]; lb != nil && !lb.Usable() {
				bad = lb
			}
		}
	}
	switch {
	case bad != nil:
		what, fix := "failed with", "check the driver (nvidia-smi -q) and the kernel log"
		if bad.Status.Code == nvmlErrorNotSupported {
			what, fix = "is not supported here:", "none on this GPU and driver: this view cannot be read here"
		}
		return &report.Missing{Decisive: true, Fix: fix,
			What: fmt.Sprintf("%s on GPU %d %s %s: the %s view cannot be read", bad.API, fd.gpu, what, bad.Status.Name, fd.view)}
	case s.inv == nil || s.inv.Init.Code != 0:
		return &report.Missing{Decisive: true, What: fmt.Sprintf("no %s sample: NVML did not run", fd.view),
			Fix: "load the NVIDIA driver; pass --libnvidia-ml"}
	}
	return &report.Missing{Decisive: true,
		What: fmt.Sprintf("no usable %s sample of GPU %d within %s before the failure", fd.view, fd.gpu, report.Duration(s.window)),
		Fix:  "record with a shorter --interval, or --freeze-on-failure so the failure's own sample is taken"}
}

// missing is the finding's decisive missing evidence, if any.
func (fd *finding) missing(*state) *report.Missing { return fd.miss }

// evidence renders the finding as evidence rows: first the value the
// verdict compared the request with, labelled in full, then the sample as
// read, labelled for what it is, then the view's other values.
func (fd *finding) evidence(s *state) []report.Evidence {
	if fd.bar1Irrelevant {
		return []report.Evidence{{Field: "BAR1 relevance", Text: fd.notApplicable, Unit: "-",
			Source: "symbol table", Status: "decided", TimeNS: fd.failAt, Rule: ruleBAR1Path}}
	}
	out := fd.poolEvidence(s)
	if fd.sizeSource != "" {
		out = append(out, report.Evidence{Field: "mapped size", Value: ptr(fd.size), Unit: "bytes",
			Source: fd.sizeSource, Status: "recorded", TimeNS: fd.sizeAt,
			Note: "the call names no size; the import maps the whole exported allocation"})
	}
	if fd.needRange() {
		out = append(out, report.Evidence{Field: "BAR1 the grant needs", Value: ptr(fd.size), Unit: "bytes",
			Text:   fmt.Sprintf("between %s and %s", report.HumanBytes(fd.size), report.HumanBytes(fd.needMost())),
			Source: "the grant's size and access descriptors (uprobe)", Status: "recorded", TimeNS: fd.failAt, Rule: rulePeerCost,
			Note: fmt.Sprintf("the range mapped once, or once for each of its %d peers: the driver's per-peer cost is not recorded", fd.peers)})
	}
	if fd.sample == nil {
		return out
	}
	smp, g := fd.sample, fd.gpu
	src := apiOf(smp.API, smp.Struct)
	atT := smp.Start
	if fd.trigger != nil {
		atT = fd.trigger.End
	}
	// Decisive only when the request was compared with it: a request of
	// unknown size that the value could not decide rests on nothing here.
	at := report.Evidence{Field: fd.view.String() + " free at the failure", Value: ptr(fd.lo), Unit: "bytes", Source: src,
		Status: smp.Status.Name, TimeNS: atT, GPU: &g, Scope: smp.Scope,
		Decisive: (fd.sized || fd.capacity != report.CapUnknown) && fd.capacity != report.CapPoolExhausted, Rule: ruleReference}
	if fd.reconciled() {
		at.Source = src + ", corrected by traced calls"
		at.Rule = ruleReconcile
		at.Note, at.Brief = fd.reconcileNote(), fd.reconcileBrief()
		switch {
		case fd.openLo && fd.openHi:
			at.Value = nil
			at.Text = fd.freeText()
		case fd.openLo:
			at.Value, at.Text = ptr(fd.hi), fd.freeText()
		case fd.lo != fd.hi:
			at.Text = fd.freeText()
		}
	} else {
		at.Note, at.Brief = fd.sampleLabel(), fd.sampleBrief()
	}
	if fd.setAside != "" {
		at.Note += "; " + fd.setAside
		at.Brief = fmt.Sprintf("%s; its own sample came after pid %d's %s", at.Brief, fd.setAsideBy.pid, fd.setAsideBy.event())
	}
	out = append(out, at)
	if fd.reconciled() {
		out = append(out, report.Evidence{Field: fd.view.String() + " free as sampled", Value: ptr(fd.seen), Unit: "bytes",
			Source: src, Status: smp.Status.Name, TimeNS: smp.Start, GPU: &g, Scope: smp.Scope, Note: fd.sampleLabel(),
			Brief: fd.sampleBrief()})
	}
	return append(out, fd.viewEvidence(src, g)...)
}

// viewEvidence is the rest of the reference sample: the aperture's size
// for BAR1, reserved and used for the framebuffer.
func (fd *finding) viewEvidence(src string, g int) []report.Evidence {
	smp := fd.sample
	row := func(field string, v *uint64, note string) report.Evidence {
		return report.Evidence{Field: field, Value: v, Unit: "bytes", Source: src, Status: smp.Status.Name,
			TimeNS: smp.Start, GPU: &g, Scope: smp.Scope, Note: note, Rule: ruleViewsApart}
	}
	var out []report.Evidence
	if fd.view == viewBAR1 {
		if smp.Total != nil {
			out = append(out, row("BAR1 total (aperture size)", smp.Total, "configuration: the whole aperture, never room for allocations"))
		}
		return out
	}
	if smp.Reserved != nil {
		out = append(out, row("framebuffer reserved", smp.Reserved, "held by the driver; no allocation can use it"))
	}
	if smp.Used != nil {
		used := row("framebuffer used as sampled", smp.Used, fd.sampleLabel())
		used.Brief = fd.sampleBrief()
		out = append(out, used)
	}
	return out
}

// sampleLabel says what the reference sample is: when it was taken
// relative to the failure, and what the traced processes did in between.
func (fd *finding) sampleLabel() string {
	smp := fd.sample
	var when string
	if fd.trigger != nil {
		when = fmt.Sprintf("taken because of this failure, %s after it", report.Duration(smp.Start-fd.trigger.End))
		if fd.trigger.Frozen {
			when += ", the process held stopped"
		}
	} else {
		when = fmt.Sprintf("the nearest sample before the failure, %s before it", report.Duration(max(fd.failAt, smp.End)-smp.End))
	}
	if smp.Fallback != "" {
		when += "; v1 used because " + smp.Fallback
	}
	if o := fd.opaque; o != nil {
		side := "after"
		if fd.trigger == nil {
			side = "before"
		}
		when += fmt.Sprintf("; %s the failure, pid %d %s", side, o.pid, o.why)
	}
	if fd.deltaExact && fd.delta != 0 {
		n := report.HumanBytes(uint64(abs(fd.delta)))
		switch {
		case fd.trigger != nil && fd.delta > 0:
			when += ", after the traced processes had freed " + n
		case fd.trigger != nil:
			when += ", after the traced processes had allocated " + n + " more"
		case fd.delta > 0:
			when += "; the traced processes allocated " + n + " more before the failure"
		default:
			when += "; the traced processes freed " + n + " before the failure"
		}
	}
	return when
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// sampleBrief is sampleLabel in a few words, for the default text
// report: when the sample was taken, and what untraced release lies
// between it and the failure.
func (fd *finding) sampleBrief() string {
	smp := fd.sample
	when := fmt.Sprintf("sampled %s before the failure", report.Duration(max(fd.failAt, smp.End)-smp.End))
	if fd.trigger != nil {
		when = fmt.Sprintf("sampled %s after the failure", report.Duration(smp.Start-fd.trigger.End))
	}
	if o := fd.opaque; o != nil {
		when += fmt.Sprintf(", across pid %d's %s", o.pid, o.event())
	}
	return when
}

// reconcileBrief is reconcileNote in a few words.
func (fd *finding) reconcileBrief() string {
	what := "corrected by the traced calls in between"
	if o := fd.opaque; o != nil {
		what = fmt.Sprintf("corrected for pid %d's %s", o.pid, o.event())
	}
	smp := fd.sample
	if fd.trigger != nil {
		return fmt.Sprintf("%s; sampled %s after the failure", what, report.Duration(smp.Start-fd.trigger.End))
	}
	return fmt.Sprintf("%s; sampled %s before the failure", what, report.Duration(max(fd.failAt, smp.End)-smp.End))
}

// reconcileNote explains a reconciled value.
func (fd *finding) reconcileNote() string {
	return fmt.Sprintf("%s as sampled, %s; corrected by the traced calls in between", report.HumanBytes(fd.seen), fd.sampleLabel())
}

// usesBAR1 reports whether a failed mapping's path can use the aperture:
// always for IPC, pool imports, peer access and third-party mappings; for
// an access grant, when any granted device is not the memory's owner (or
// the record does not say).
func usesBAR1(sym *cuda.Symbol, e *store.Event) bool {
	if sym.BAR1 == cuda.BAR1Peer {
		return grantsPeer(sym, e)
	}
	return sym.UsesBAR1(e.Dev, -1)
}

// grantsPeer reports whether an access grant names a device other than
// the memory's owner (the calling context's device), or the record cannot
// tell: the descriptors were not read, or the recorder's bound cut the
// list before any peer appeared. Every descriptor read counts, not only
// the first (NCCL and PyTorch grant the owner first).
func grantsPeer(sym *cuda.Symbol, e *store.Event) bool {
	if e.Has&cuda.FieldItems == 0 {
		// A file from before descriptors were read: the first one only.
		return sym.UsesBAR1(e.Dev, peerDevice(sym, e))
	}
	if e.Flags&(store.EventArrayCut|store.EventArrayFault) != 0 || e.Dev < 0 {
		return true
	}
	for _, g := range e.Grants {
		if g.Type != cuda.LocationDevice || g.Device != e.Dev {
			return true
		}
	}
	return false
}

// grantPeersMost is the most mappings of its range an access grant may
// make through the owner's aperture: the distinct locations other than the
// owner that it grants access to (a descriptor of no access revokes and
// maps nothing), plus the descriptors the recorder did not read. It is 1
// for every other call, and for a file from before descriptors were read.
func grantPeersMost(sym *cuda.Symbol, e *store.Event) int {
	if sym.BAR1 != cuda.BAR1Peer || e.Has&cuda.FieldItems == 0 {
		return 1
	}
	seen := map[cuda.Grant]bool{}
	for _, g := range e.Grants {
		if g.Flags == 0 || (g.Type == cuda.LocationDevice && g.Device == e.Dev && e.Dev >= 0) {
			continue
		}
		seen[cuda.Grant{Type: g.Type, Device: g.Device}] = true
	}
	n := len(seen)
	if e.Flags&(store.EventArrayCut|store.EventArrayFault) != 0 && e.Has&cuda.FieldCount != 0 && e.Count > uint64(len(e.Grants)) {
		n += int(min(e.Count-uint64(len(e.Grants)), 1<<16))
	}
	return n
}

// rangedBetween reports whether a change of uncertain size (a grant to
// several peers) counts in the difference between a sample whose query
// ran from s to e and the failure.
func rangedBetween(changes []change, failure, s, e int64) bool {
	for _, c := range changes {
		if c.lo == c.hi {
			continue
		}
		before := c.end <= failure
		saw, missed := c.end < s, c.start > e
		if !(saw && before) && !(missed && !before) {
			return true
		}
	}
	return false
}

// peerDevice is the device a grant names (cuMemSetAccess), or -1 when
// the call grants none or the record lacks it.
func peerDevice(sym *cuda.Symbol, e *store.Event) int32 {
	if e.Has&cuda.FieldPeer != 0 && sym.BAR1 == cuda.BAR1Peer {
		return int32(e.Peer)
	}
	return -1
}

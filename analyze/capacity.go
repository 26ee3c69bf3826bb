package analyze

import (
	"fmt"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

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
	// The request: its size, and where the size came from when the call
	// names none (an import sized by its exporter's allocation).
	size       uint64
	sized      bool
	sizeSource string
	sizeAt     int64 // when the exporter made the allocation (0: unknown)
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
	// miss is the decisive missing evidence when capacity is unknown.
	miss *report.Missing
}

// reconciled reports whether the value at the failure differs from the
// sample as read.
func (f *finding) reconciled() bool { return f.lo != f.seen || f.hi != f.seen }

// capacity judges a failed request against the one view that can hold it.
func (s *state) capacity(f *failed, attribution report.Attribution) finding {
	fd := finding{capacity: report.CapNotApplicable, gpu: -1, failAt: f.e.End}
	if attribution == report.AttrNotMemory {
		fd.notApplicable = "the code says the failure is not about memory"
		return fd
	}
	fd.gpu, fd.mig, fd.method = s.gpuOfDev(f.e.PID, f.e.Dev)
	fd.size, fd.sized = f.e.Size, f.e.Has&cuda.FieldSize != 0
	switch f.sym.Op {
	case cuda.OpHostAllocation:
		fd.notApplicable = "it is a host allocation; no GPU memory view holds it"
		return fd
	case cuda.OpOther, cuda.OpFree:
		fd.notApplicable = "the call allocates and maps nothing"
		return fd
	case cuda.OpMapping:
		s.mappingRequest(f, &fd)
		if !usesBAR1(f.sym, &f.e) {
			fd.notApplicable = "this mapping's path does not use the BAR1 aperture (" + f.sym.Family + ")"
			fd.bar1Irrelevant = true
			return fd
		}
		fd.view, fd.mig = viewBAR1, nil // BAR1 is whole-GPU
	default:
		// Device allocation or context creation: the framebuffer of its
		// GPU (of its MIG instance when it runs on one).
		fd.view = viewFramebuffer
	}
	s.judgeView(f, &fd)
	return fd
}

// mappingRequest finds what an import maps: the exporter's GPU aperture
// and, when the call names no size, the exporter's allocation size.
func (s *state) mappingRequest(f *failed, fd *finding) {
	if len(f.e.Key) == 0 {
		return
	}
	ref, ok := s.replay.exportKeys[string(f.e.Key)]
	if !ok {
		return
	}
	if g, _, _ := s.gpuOfDev(ref.pid, ref.dev); g >= 0 {
		fd.gpu = g
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
}

// judgeView picks the reference sample, reconciles it, and compares.
func (s *state) judgeView(f *failed, fd *finding) {
	if fd.gpu < 0 {
		fd.capacity = report.CapUnknown
		fd.miss = s.unknownGPU(f, fd.method)
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
		xlo, xhi := between(s.replay.changes[vk], f.e.End, smp.Start, smp.End)
		// free at the failure = free seen - (traced at failure - traced seen)
		clamp := func(v int64) uint64 { return uint64(max(v, 0)) }
		out = append(out, candidate{smp: smp, lo: clamp(int64(*smp.Free) - xhi), hi: clamp(int64(*smp.Free) - xlo),
			xlo: xlo, xhi: xhi, relation: relation})
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
		return exhausted
	case fd.size <= fd.lo:
		return hadRoom
	}
	return report.CapUnknown
}

// undecided says why a sample with values could not decide capacity.
func (fd *finding) undecided(name string) *report.Missing {
	if !fd.sized {
		return &report.Missing{Decisive: true,
			What: fmt.Sprintf("%s has no request size (an import whose exporter was not recorded, or a peer grant)", name),
			Fix:  "record the exporting process too (forensic record --all)"}
	}
	return &report.Missing{Decisive: true,
		What: fmt.Sprintf("the %s sample overlapped traced calls: free at the failure was between %s and %s, and %s were requested",
			fd.view, report.HumanBytes(fd.lo), report.HumanBytes(fd.hi), report.HumanBytes(fd.size)),
		Fix: "record with --freeze-on-failure, so the failure's own sample is taken before the process moves on"}
}

// unknownGPU says why the failing call's GPU is unknown.
func (s *state) unknownGPU(f *failed, method string) *report.Missing {
	why := method
	if p := s.procs[f.e.PID]; p != nil {
		for _, d := range p.Devices {
			if d.Ordinal == f.e.Dev && d.Why != "" {
				why = d.Why
			}
		}
	}
	if f.e.Dev < 0 {
		why = "no current context was seen for the thread"
	}
	return &report.Missing{Decisive: true, What: "the GPU of the failing call is unknown: " + why,
		Fix: "set CUDA_DEVICE_ORDER=PCI_BUS_ID or CUDA_VISIBLE_DEVICES=GPU-<uuid>, or start the recorder before the process creates its context"}
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
	var out []report.Evidence
	if fd.sizeSource != "" {
		out = append(out, report.Evidence{Field: "mapped size", Value: ptr(fd.size), Unit: "bytes",
			Source: fd.sizeSource, Status: "recorded", TimeNS: fd.sizeAt,
			Note: "the call names no size; the import maps the whole exported allocation"})
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
	at := report.Evidence{Field: fd.view.String() + " free at the failure", Value: ptr(fd.lo), Unit: "bytes", Source: src,
		Status: smp.Status.Name, TimeNS: atT, GPU: &g, Scope: smp.Scope, Decisive: true, Rule: ruleReference}
	if fd.reconciled() {
		at.Source = src + ", corrected by traced calls"
		at.Rule = ruleReconcile
		at.Note = fd.reconcileNote()
		if fd.lo != fd.hi {
			at.Text = fmt.Sprintf("between %s and %s", report.HumanBytes(fd.lo), report.HumanBytes(fd.hi))
		}
	} else {
		at.Note = fd.sampleLabel()
	}
	out = append(out, at)
	if fd.reconciled() {
		out = append(out, report.Evidence{Field: fd.view.String() + " free as sampled", Value: ptr(fd.seen), Unit: "bytes",
			Source: src, Status: smp.Status.Name, TimeNS: smp.Start, GPU: &g, Scope: smp.Scope, Note: fd.sampleLabel()})
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
		out = append(out, row("framebuffer used as sampled", smp.Used, fd.sampleLabel()))
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

// peerDevice is the device a grant names (cuMemSetAccess), or -1 when
// the call grants none or the record lacks it.
func peerDevice(sym *cuda.Symbol, e *store.Event) int32 {
	if e.Has&cuda.FieldPeer != 0 && sym.BAR1 == cuda.BAR1Peer {
		return int32(e.Peer)
	}
	return -1
}

package analyze

import (
	"fmt"
	"strings"
	"time"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

func (s *state) miss(what, fix string, decisive bool) {
	s.rep.Missing = append(s.rep.Missing, Missing{What: what, Fix: fix, Decisive: decisive})
}

func (s *state) evidence(e Evidence) { s.rep.Evidence = append(s.rep.Evidence, e) }

func (s *state) rel(t int64) string {
	return fmt.Sprintf("+%.3fs", float64(t-s.run.ClockStart)/1e9)
}

func capStr(c string) *string { return &c }

// attributionOf is the verdict rule for a first failure: the operation
// class and what the result code means (cuda.Results). It is the only
// place where the two meet.
func attributionOf(sym *cuda.Symbol, m cuda.Meaning) string {
	switch m {
	case cuda.MeaningNotMemory, cuda.MeaningSuccess:
		return AttrNotMemory
	case cuda.MeaningSticky, cuda.MeaningUnknown:
		return AttrMissingEvidence
	}
	switch sym.Op {
	case cuda.OpAllocation, cuda.OpHostAllocation, cuda.OpContext:
		return AttrAllocation
	case cuda.OpMapping:
		return AttrMapping
	case cuda.OpFree:
		// A failed release belongs to the side that created what it
		// primarily releases (cuMemFree: allocations; cuMemUnmap: mappings).
		if len(sym.Releases) > 0 && sym.Releases[0].CreatedBy() == cuda.OpMapping {
			return AttrMapping
		}
		return AttrAllocation
	}
	if m == cuda.MeaningResource {
		return AttrAllocation
	}
	return AttrNotMemory
}

// verdict decides attribution and capacity, and says what was missing.
func (s *state) verdict(sp *samplesPass, tr *traced) {
	rep := s.rep
	s.generalGaps()
	f := s.first
	if f == nil {
		rep.Attribution = AttrNone
		reasons := s.hidingGaps(0)
		if len(reasons) > 0 {
			rep.Attribution = AttrMissingEvidence
		}
		n := uint64(0)
		for _, c := range rep.Calls {
			n += c.Calls
		}
		if rep.Attribution == AttrNone {
			rep.Verdict = fmt.Sprintf("No recorded call failed: %d hooked calls from %d processes, with no evidence lost.", n, len(rep.Processes))
		} else {
			rep.Verdict = fmt.Sprintf("No recorded call failed (%d hooked calls), but the record cannot rule a failure out: %s.", n, strings.Join(reasons, "; "))
		}
		return
	}
	res := cuda.LookupResult(f.e.Result)
	rep.Attribution = attributionOf(f.sym, res.Meaning)
	gaps := s.hidingGaps(f.e.End)
	if len(gaps) > 0 {
		rep.Attribution = AttrMissingEvidence
	}
	s.evidence(Evidence{Field: "result", Text: res.Name, Unit: "CUresult", Source: f.name + " return value (uretprobe)",
		Status: "recorded", TimeNS: f.e.End, Note: res.Cause})
	if f.e.Has&cuda.FieldSize != 0 {
		s.evidence(Evidence{Field: "request size", Value: ptr(f.e.Size), Unit: "bytes", Source: f.name + " arguments (uprobe)",
			Status: "recorded", TimeNS: f.e.Start})
	}
	switch res.Meaning {
	case cuda.MeaningNotMemory:
		s.notMemoryCause(f, res)
	case cuda.MeaningSticky:
		s.miss(res.Name+" is a sticky error left by an earlier asynchronous fault (a kernel, ECC, NVLink) that forensic does not trace; "+
			f.name+" only reported it", "rerun with CUDA_LAUNCH_BLOCKING=1 (and compute-sanitizer) to find the faulting kernel; check the kernel log for Xid lines", true)
		for _, k := range rep.KernelLog {
			if k.Xid != nil {
				x := uint64(*k.Xid)
				s.evidence(Evidence{Field: "Xid", Value: &x, Text: k.Text, Unit: "Xid code", Source: "/dev/kmsg (NVRM)",
					Status: "recorded", TimeNS: k.TimeNS, Note: k.Position + " the first failure"})
			}
		}
	case cuda.MeaningUnknown:
		s.miss(fmt.Sprintf("%s (%d) says nothing about the cause", res.Name, res.Code),
			"check the kernel log and the driver's own logs (nvidia-bug-report.sh)", true)
	}
	capacity := s.capacity(f, sp, tr, rep.Attribution, res)
	rep.Capacity = capStr(capacity)
	s.liveEvidence(f, sp, tr)
	rep.NearestSamples = sp.nearest
	rep.Verdict = s.story(f, res, capacity, gaps, sp) + s.recoveryNote(f)
}

// recoveryNote says when the first failure was survived, and names the
// failure the run did not recover from.
func (s *state) recoveryNote(f *event) string {
	if f.e.Flags&flagRecovered == 0 {
		return ""
	}
	note := " The process recovered from it (the same operation later succeeded for at least the same size)"
	for i := len(s.failures) - 1; i >= 0; i-- {
		g := s.failures[i]
		if g.e.Flags&flagRecovered == 0 && g.sym.Op.Primary() {
			what := g.name
			if g.e.Has&cuda.FieldSize != 0 {
				what += " of " + HumanBytes(g.e.Size)
			}
			return note + fmt.Sprintf("; the last unrecovered failure is %s by pid %d at %s (%s).",
				what, g.e.PID, s.rel(g.e.End), cuda.LookupResult(g.e.Result).Name)
		}
	}
	return note + "."
}

// generalGaps lists evidence missing regardless of the verdict.
func (s *state) generalGaps() {
	if s.inv == nil {
		s.miss("no platform inventory was recorded", "let the recorder run until it has attached (it writes the inventory first)", false)
	} else if s.inv.Init.Code != 0 {
		what := fmt.Sprintf("NVML did not initialize (%s from %s): no framebuffer or BAR1 samples", s.inv.Init.Name, s.inv.Library)
		if s.inv.InitError != "" {
			what += ": " + s.inv.InitError
		}
		s.miss(what, "load the NVIDIA kernel driver, or point --libnvidia-ml at the driver's libnvidia-ml.so.1", false)
	}
	if s.stop == nil {
		s.miss(fmt.Sprintf("the recorder did not stop cleanly (killed, crashed or out of disk before its stop record); the record ends at %s", s.rel(s.rep.Run.EndNS)),
			"stop the recorder with SIGINT or SIGTERM, on a filesystem with room", false)
	} else if s.stop.Reason == "disk-full" || s.stop.Reason == "write-error" {
		s.miss("the recorder stopped writing early: "+s.stop.Error, "record on a filesystem with more free space", false)
	}
	if s.rep.Loss.Unmatched > 0 {
		s.miss(fmt.Sprintf("%d calls were already in progress when the probes attached", s.rep.Loss.Unmatched),
			"start the recorder before the workload", false)
	}
	if s.rep.Loss.LostProc > 0 {
		s.miss(fmt.Sprintf("%d process lifecycle records were lost (ring buffer full)", s.rep.Loss.LostProc),
			"record with a bigger --ring-size", false)
	}
	if len(s.rep.Sampling.Unsupported) > 0 {
		s.miss("NVML queries not supported here: "+strings.Join(s.rep.Sampling.Unsupported, ", "),
			"none on this GPU and driver: these values cannot be read here", false)
	}
	for _, l := range s.rep.Coverage {
		if l.Error != "" {
			s.miss("attaching to "+l.Path+" failed in part: "+l.Error, "check the library path and the kernel's uprobe support", false)
		}
		if len(l.Unknown) > 0 {
			s.miss(fmt.Sprintf("%s exports %d hooked-family symbols forensic has no row for (%s): calls through them are not recorded",
				l.Path, len(l.Unknown), strings.Join(l.Unknown, ", ")), "update forensic's symbol table for this driver", false)
		}
	}
}

// hidingGaps lists what could hide a failure before t (t = 0: anywhere).
func (s *state) hidingGaps(t int64) []string {
	var out []string
	loss := s.rep.Loss
	before := func(x int64) bool { return t == 0 || (x != 0 && x <= t) }
	if loss.LostCalls > 0 && before(loss.LostFirstNS) {
		r := fmt.Sprintf("%d calls were lost (ring buffer full) from %s on", loss.LostCalls, s.rel(loss.LostFirstNS))
		if t != 0 {
			r += ", before the first recorded failure: an earlier failure may be among them"
		}
		out = append(out, r)
		s.miss(r, "record with a bigger --ring-size (or fewer traced processes)", true)
	}
	if loss.LostInflight+loss.TooDeep > 0 {
		r := fmt.Sprintf("%d calls could not be tracked (in-flight table full or nesting too deep)", loss.LostInflight+loss.TooDeep)
		out = append(out, r)
		s.miss(r, "fewer concurrent threads per recording", true)
	}
	if s.first != nil && t != 0 {
		if p := s.procs[s.first.e.PID]; p != nil && p.AttachedLate {
			r := fmt.Sprintf("process %d already had libcuda loaded when recording started: calls it made earlier are not in the record", p.PID)
			out = append(out, r)
			s.miss(r, "start the recorder before the workload: forensic record -o run.db -- CMD", true)
		}
	} else if t == 0 {
		for _, p := range s.procs {
			if p.AttachedLate {
				r := fmt.Sprintf("process %d already had libcuda loaded when recording started", p.PID)
				out = append(out, r)
				s.miss(r+": calls it made earlier are not in the record", "start the recorder before the workload", true)
			}
		}
	}
	for _, pid := range s.abnormal {
		p := s.procs[pid]
		if p.Exit == nil || (t != 0 && p.Exit.Time > t) {
			continue
		}
		sig := "a signal"
		if x := exitOf(p.Exit); x != nil && x.Name != "" {
			sig = x.Name
		}
		r := fmt.Sprintf("process %d died of %s with no failed call recorded", pid, sig)
		out = append(out, r)
		s.miss(r+": its failure happened outside the traced calls", "inspect its core dump and the kernel log; record with --stacks", true)
	}
	if t == 0 && s.stop == nil {
		out = append(out, "the recording ended abruptly")
	}
	return out
}

// notMemoryCause names what the record shows behind a not-memory failure:
// the earliest failed call before it in the same process.
func (s *state) notMemoryCause(f *event, res cuda.Result) {
	for _, g := range s.failures {
		if g.e.PID == f.e.PID && g.e.End < f.e.End {
			gr := cuda.LookupResult(g.e.Result)
			s.rep.Cause = &Cause{Symbol: g.name, Result: g.e.Result, ResultName: gr.Name, PID: g.e.PID, TimeNS: g.e.End,
				Text: fmt.Sprintf("%s failed earlier with %s: %s", g.name, gr.Name, gr.Cause)}
			s.evidence(Evidence{Field: "earlier failure", Text: g.name + " " + gr.Name, Unit: "CUresult",
				Source: g.name + " return value (uretprobe)", Status: "recorded", TimeNS: g.e.End, Note: gr.Cause})
			return
		}
	}
	s.rep.Cause = &Cause{Result: f.e.Result, ResultName: res.Name, PID: f.e.PID, TimeNS: f.e.End, Text: res.Cause}
}

// capacity judges the request against the one view that can hold it.
func (s *state) capacity(f *event, sp *samplesPass, tr *traced, attribution string, res cuda.Result) string {
	if attribution == AttrNotMemory {
		return CapNotApplicable
	}
	gpu, mig, method := s.gpuOfDev(f.e.PID, f.e.Dev)
	size, sized := f.e.Size, f.e.Has&cuda.FieldSize != 0
	switch f.sym.Op {
	case cuda.OpHostAllocation, cuda.OpOther, cuda.OpFree:
		return CapNotApplicable
	case cuda.OpMapping:
		owner := f.e.Dev
		if ref, ok := s.exportKeys[string(f.e.Key)]; ok && len(f.e.Key) > 0 {
			// An import maps the exporter's memory: its GPU's aperture.
			if g, _, _ := s.gpuOfDev(ref.pid, ref.dev); g >= 0 {
				gpu, owner = g, ref.dev
			}
			if sz, ok := s.exportSize[string(f.e.Key)]; ok && !sized {
				size, sized = sz, true
				s.evidence(Evidence{Field: "mapped size (from the exporter's allocation)", Value: ptr(sz), Unit: "bytes",
					Source: fmt.Sprintf("export by pid %d (traced)", ref.pid), Status: "recorded", TimeNS: f.e.End})
			}
		}
		if !f.sym.UsesBAR1(owner, peerDevice(f.sym, &f.e)) {
			s.evidence(Evidence{Field: "BAR1 relevance", Text: "this mapping's path does not use the BAR1 aperture",
				Unit: "-", Source: "symbol table (" + f.sym.Family + ")", Status: "rule 7", TimeNS: f.e.End})
			return CapNotApplicable
		}
		return s.judge(f, sp, tr, gpu, nil, method, store.KindBAR1, size, sized, CapBAR1Exhausted, CapBAR1HadRoom)
	}
	// Device allocation or context creation: the framebuffer of its GPU
	// (of its MIG instance when it runs on one).
	return s.judge(f, sp, tr, gpu, mig, method, store.KindFramebuffer, size, sized, CapFBExhausted, CapFBHadRoom)
}

// peerDevice is the device a grant names (cuMemSetAccess), or -1 when
// the call grants none or the record lacks it.
func peerDevice(sym *cuda.Symbol, e *store.Event) int32 {
	if e.Has&cuda.FieldPeer != 0 && sym.BAR1 == cuda.BAR1Peer {
		return int32(e.Peer)
	}
	return -1
}

func (s *state) judge(f *event, sp *samplesPass, tr *traced, gpu int, mig *int, method, kind string, size uint64, sized bool,
	exhausted, hadRoom string) string {
	view := "framebuffer"
	if kind == store.KindBAR1 {
		view = "BAR1"
	}
	if gpu < 0 {
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
		s.miss("the GPU of the failing call is unknown: "+why,
			"set CUDA_DEVICE_ORDER=PCI_BUS_ID or CUDA_VISIBLE_DEVICES=GPU-<uuid>, or start the recorder before the process creates its context", true)
		return CapUnknown
	}
	var keyMIG *int // BAR1 is whole-GPU
	if kind == store.KindFramebuffer {
		keyMIG = mig
	}
	key := kindKeyOf(kind, keyMIG)
	vk := viewKey{gpu, -1, cuda.ViewFramebuffer}
	if kind == store.KindBAR1 {
		vk.view = cuda.ViewBAR1
	} else if mig != nil {
		vk.mig = *mig
	}

	// Candidates: the sample the failure triggered, and the nearest usable
	// one before it within the window. Each is reconciled with what the
	// recorded processes allocated and released between it and the
	// failure; the one that reconciles exactly (no traced call overlapping
	// its query) best reflects the state at the failure.
	type cand struct {
		smp    *store.Sample
		lo, hi uint64 // free at the failure
		note   string
	}
	var cands []cand
	consider := func(smp *store.Sample, what string) {
		if smp == nil || !smp.Usable() || smp.Free == nil {
			return
		}
		xlo, xhi := tr.between(vk, f.e.End, smp.Start, smp.End)
		// free at the failure = free seen - (traced at failure - traced seen)
		clamp := func(v int64) uint64 { return uint64(max(v, 0)) }
		cands = append(cands, cand{smp: smp, lo: clamp(int64(*smp.Free) - xhi), hi: clamp(int64(*smp.Free) - xlo), note: what})
	}
	triggered := sp.ref[key]
	if triggered != nil {
		if _, ok := triggeredBy(triggered, f); !ok {
			triggered = nil // ref is the nearest before; considered below
		}
	}
	consider(triggered, "taken because of this failure")
	if lb := sp.lastBefore[key]; lb != nil && f.e.End-lb.End <= s.window {
		consider(lb, "the nearest sample before the failure")
	}
	if len(cands) == 0 {
		ref, lb := sp.ref[key], sp.lastBefore[key]
		switch {
		case ref != nil || (lb != nil && !lb.Usable()):
			bad := ref
			if bad == nil {
				bad = lb
			}
			what, fix := "failed with", "check the driver (nvidia-smi -q) and the kernel log"
			if bad.Status.Code == nvmlErrorNotSupported {
				what, fix = "is not supported here:", "none on this GPU and driver: this view cannot be read here"
			}
			s.miss(fmt.Sprintf("%s on GPU %d %s %s: the %s view cannot be read", bad.API, gpu, what, bad.Status.Name, view), fix, true)
		case s.inv == nil || s.inv.Init.Code != 0:
			s.miss(fmt.Sprintf("no %s sample: NVML did not run", view), "load the NVIDIA driver; pass --libnvidia-ml", true)
		default:
			s.miss(fmt.Sprintf("no usable %s sample of GPU %d within %v before the failure", view, gpu, time.Duration(s.window)),
				"record with a shorter --interval, or --freeze-on-failure so the failure's own sample is taken", true)
		}
		return CapUnknown
	}
	best := cands[0]
	for _, c := range cands[1:] {
		if c.hi-c.lo < best.hi-best.lo {
			best = c
		}
	}
	ref := best.smp
	src := apiOf(ref.API, ref.Struct)
	note := best.note
	if t, ok := triggeredBy(ref, f); ok {
		note += fmt.Sprintf(", %v after it", time.Duration(ref.Start-t.End))
		if t.Frozen {
			note += ", the process held stopped"
		}
	} else {
		note += fmt.Sprintf(", %v before it", time.Duration(f.e.End-ref.End))
	}
	if ref.Fallback != "" {
		note += "; v1 used because " + ref.Fallback
	}
	g := gpu
	s.evidence(Evidence{Field: view + " free", Value: ref.Free, Unit: "bytes", Source: src, Status: ref.Status.Name,
		TimeNS: ref.Start, GPU: &g, Scope: ref.Scope, Note: note})
	if kind == store.KindFramebuffer {
		if ref.Reserved != nil {
			s.evidence(Evidence{Field: "framebuffer reserved", Value: ref.Reserved, Unit: "bytes", Source: src, Status: ref.Status.Name,
				TimeNS: ref.Start, GPU: &g, Scope: ref.Scope, Note: "held by the driver; no allocation can use it"})
		}
		if ref.Used != nil {
			s.evidence(Evidence{Field: "framebuffer used", Value: ref.Used, Unit: "bytes", Source: src, Status: ref.Status.Name,
				TimeNS: ref.Start, GPU: &g, Scope: ref.Scope})
		}
	} else if ref.Total != nil {
		s.evidence(Evidence{Field: "BAR1 total (aperture size)", Value: ref.Total, Unit: "bytes", Source: src,
			Status: ref.Status.Name, TimeNS: ref.Start, GPU: &g, Scope: ref.Scope})
	}
	lo, hi := best.lo, best.hi
	if lo != *ref.Free || hi != *ref.Free {
		// What the recorded processes did between the sample and the
		// failure is known from their traced calls (same view only).
		val := lo
		text := ""
		if lo != hi {
			text = fmt.Sprintf("between %s and %s", HumanBytes(lo), HumanBytes(hi))
		}
		s.evidence(Evidence{Field: view + " free at the failure (reconciled)", Value: &val, Text: text, Unit: "bytes",
			Source: src + " corrected by traced calls", Status: ref.Status.Name, TimeNS: f.e.End, GPU: &g, Scope: ref.Scope,
			Note: fmt.Sprintf("sample value %s, corrected by what the recorded processes allocated and released on this GPU between the sample and the failure", HumanBytes(*ref.Free))})
	}
	if !sized {
		if hi == 0 {
			return exhausted
		}
		s.miss(fmt.Sprintf("%s has no request size (an import whose exporter was not recorded, or a peer grant)", f.name),
			"record the exporting process too (forensic record --all)", true)
		return CapUnknown
	}
	switch {
	case size > hi:
		return exhausted
	case size <= lo:
		return hadRoom
	}
	s.miss(fmt.Sprintf("the %s sample overlapped traced calls: free at the failure was between %s and %s, and %s were requested",
		view, HumanBytes(lo), HumanBytes(hi), HumanBytes(size)),
		"record with --freeze-on-failure, so the failure's own sample is taken before the process moves on", true)
	return CapUnknown
}

// liveEvidence adds what the traced calls and per-process samples say
// about who held memory on the failure's GPU.
func (s *state) liveEvidence(f *event, sp *samplesPass, tr *traced) {
	gpu, _, _ := s.gpuOfDev(f.e.PID, f.e.Dev)
	for _, lb := range s.rep.LiveAtFailure {
		if lb.GPU == nil || *lb.GPU != gpu || lb.View != cuda.ViewFramebuffer.String() {
			continue
		}
		who := "this process"
		if lb.PID != f.e.PID {
			who = fmt.Sprintf("process %d", lb.PID)
		}
		g := gpu
		s.evidence(Evidence{Field: "traced device allocations of " + who, Value: ptr(lb.Bytes), Unit: "bytes",
			Source: "traced calls (allocations minus frees)", Status: "recorded", TimeNS: f.e.End, GPU: &g,
			Note: fmt.Sprintf("%d allocations", lb.Count)})
	}
	for _, p := range sp.procUse {
		if p.Used == nil {
			continue
		}
		who := fmt.Sprintf("process %d", p.PID)
		if p.PID == f.e.PID {
			who = "this process"
		} else if s.procs[p.PID] == nil {
			who += " (not recorded)"
		}
		g := gpu
		ref := sp.ref[store.KindProcesses]
		s.evidence(Evidence{Field: "NVML usage of " + who, Value: p.Used, Unit: "bytes", Source: apiOf(ref.API, ref.Struct),
			Status: ref.Status.Name, TimeNS: ref.Start, GPU: &g, Scope: "process"})
	}
}

// story writes the verdict in two or three sentences.
func (s *state) story(f *event, res cuda.Result, capacity string, gaps []string, sp *samplesPass) string {
	var b strings.Builder
	what := f.name
	if f.e.Has&cuda.FieldSize != 0 {
		what += " of " + HumanBytes(f.e.Size)
	}
	gpu, _, _ := s.gpuOfDev(f.e.PID, f.e.Dev)
	where := "on an unknown GPU"
	if gpu >= 0 {
		where = fmt.Sprintf("on GPU %d", gpu)
	}
	exe := ""
	if p := s.procs[f.e.PID]; p != nil && p.Exe != "" {
		exe = " (" + baseName(p.Exe) + ")"
	}
	fmt.Fprintf(&b, "The first failed operation is %s by pid %d%s %s at %s, returning %s. ",
		what, f.e.PID, exe, where, s.rel(f.e.End), res.Name)
	switch s.rep.Attribution {
	case AttrMissingEvidence:
		if len(gaps) > 0 {
			fmt.Fprintf(&b, "The record cannot establish it as the first failure: %s.", strings.Join(gaps, "; "))
		} else {
			fmt.Fprintf(&b, "Its code does not say what went wrong (%s), so the cause is missing from the record.", res.Cause)
		}
		return b.String()
	case AttrNotMemory:
		b.WriteString("This is not a memory problem")
		if s.rep.Cause != nil {
			b.WriteString(": " + s.rep.Cause.Text + ".")
		} else {
			b.WriteString(".")
		}
		return b.String()
	}
	kind := "an allocation problem"
	if s.rep.Attribution == AttrMapping {
		kind = "a mapping problem"
	}
	fmt.Fprintf(&b, "It is %s. ", kind)
	free := findEvidence(s.rep.Evidence, "framebuffer free at the failure (reconciled)")
	if free == nil {
		free = findEvidence(s.rep.Evidence, "framebuffer free")
	}
	bfree := findEvidence(s.rep.Evidence, "BAR1 free at the failure (reconciled)")
	if bfree == nil {
		bfree = findEvidence(s.rep.Evidence, "BAR1 free")
	}
	switch capacity {
	case CapFBExhausted:
		fmt.Fprintf(&b, "The framebuffer was exhausted: %s free < %s requested.", evBytes(free), HumanBytes(f.e.Size))
	case CapFBHadRoom:
		fmt.Fprintf(&b, "The framebuffer had room (%s free >= %s requested), so the limit was elsewhere: %s.",
			evBytes(free), HumanBytes(f.e.Size), s.elsewhere(f, res))
	case CapBAR1Exhausted:
		fmt.Fprintf(&b, "The BAR1 aperture was exhausted (%s free); framebuffer free is a different view and does not help a mapping.", evBytes(bfree))
	case CapBAR1HadRoom:
		fmt.Fprintf(&b, "The BAR1 aperture had room (%s free), so the mapping failed for another reason: %s.", evBytes(bfree), res.Cause)
	case CapNotApplicable:
		if f.sym.Op == cuda.OpHostAllocation {
			fmt.Fprintf(&b, "It is a host allocation; no GPU memory view applies: %s.", res.Cause)
		} else {
			fmt.Fprintf(&b, "Its path does not use the BAR1 aperture, so neither BAR1 nor framebuffer free explains it: %s.", res.Cause)
		}
	case CapUnknown:
		b.WriteString("Capacity cannot be judged: " + firstDecisive(s.rep.Missing) + ".")
	}
	return b.String()
}

// elsewhere says what the evidence shows when an allocation failed with
// room to spare.
func (s *state) elsewhere(f *event, res cuda.Result) string {
	var parts []string
	if ev := findEvidence(s.rep.Evidence, "framebuffer reserved"); ev != nil && ev.Value != nil && *ev.Value > 0 {
		parts = append(parts, HumanBytes(*ev.Value)+" reserved by the driver")
	}
	for _, e := range s.rep.Evidence {
		if strings.HasPrefix(e.Field, "NVML usage of process") && e.Value != nil {
			parts = append(parts, strings.TrimPrefix(e.Field, "NVML usage of ")+" held "+HumanBytes(*e.Value))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "the driver refused it although the samples show free memory (fragmentation, a per-process limit, or an injected fault)")
	}
	return strings.Join(parts, "; ")
}

func findEvidence(ev []Evidence, field string) *Evidence {
	for i := range ev {
		if ev[i].Field == field {
			return &ev[i]
		}
	}
	return nil
}

func evBytes(e *Evidence) string {
	if e == nil || e.Value == nil {
		return "unknown"
	}
	return HumanBytes(*e.Value)
}

func firstDecisive(ms []Missing) string {
	for _, m := range ms {
		if m.Decisive {
			return m.What
		}
	}
	return "the evidence is missing"
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// HumanBytes formats bytes in binary units (MiB = 2^20 bytes).
func HumanBytes(v uint64) string {
	switch {
	case v >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(v)/(1<<30))
	case v >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(v)/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(v)/(1<<10))
	}
	return fmt.Sprintf("%d B", v)
}

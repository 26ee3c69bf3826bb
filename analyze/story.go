package analyze

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// bar1Explained is the one sentence that says what BAR1 is, wherever a
// verdict judges it.
const bar1Explained = "BAR1 is the PCIe window through which the CPU and other GPUs reach this GPU's memory: a separate, usually much smaller space than the framebuffer, never room for allocations."

// story writes a judgement's verdict in two or three sentences, from the
// judgement alone, then where in the user's code the call was made.
func (s *state) story(j *judgement) string {
	text := s.storyText(j)
	if where := report.CalledFrom(s.stack(j.f)); where != "" {
		text += " It was " + where + "."
	}
	return text
}

// storyText is the verdict's account of the failure itself.
func (s *state) storyText(j *judgement) string {
	f := j.f
	var b strings.Builder
	gpu, mig, method := s.gpuOfCall(&f.e)
	own := true
	if j.cap.gpu >= 0 && j.cap.gpu != gpu && j.cap.apertureOf != aperturePeer {
		// An import is judged on the exporter's GPU, not the caller's.
		// (Peer access runs on the caller's GPU; callWhat names the peer.)
		gpu, mig, own = j.cap.gpu, nil, false
	}
	where := "on an unknown GPU"
	switch {
	case method == noContext && gpu < 0:
		where = "on no GPU (the thread had no current context)"
	case gpu >= 0 && mig != nil:
		where = fmt.Sprintf("on GPU %d MIG instance %d", gpu, *mig)
	case gpu >= 0 && own && s.migOn(gpu):
		where = fmt.Sprintf("on GPU %d (an unknown MIG instance of it)", gpu)
	case gpu >= 0:
		where = fmt.Sprintf("on GPU %d", gpu)
	}
	exe := ""
	if p := s.procs[f.e.PID]; p != nil && p.Exe != "" {
		exe = " (" + baseName(p.Exe) + ")"
	}
	lead := "The " + s.firstName()
	if f == s.unrecovered {
		lead = "The first failure the process did not recover from"
	}
	fmt.Fprintf(&b, "%s is %s by pid %d%s %s at %s, returning %s. ", lead, s.callWhat(f, &j.cap), f.e.PID, exe, where,
		s.rel(f.e.End), j.res.Name)
	switch j.attribution {
	case report.AttrMissingEvidence:
		switch {
		case len(j.hidden) > 0 && capacityEvidenced(j.cap.capacity):
			// The numbers are sound; only its place as the first failure is
			// not: the numbers first, then the one uncertain thing.
			fmt.Fprintf(&b, "%s %s", s.capacitySentence(j), s.doubt(f, j.hidden))
		case len(j.hidden) > 0:
			fmt.Fprintf(&b, "The record cannot establish it as the first failure: %s.", whats(j.hidden))
		case j.res.Meaning == cuda.MeaningSticky:
			fmt.Fprintf(&b, "That is a sticky error (%s): an earlier fault, which forensic does not trace, left it on the context, and this call only reported it. Free memory does not explain it, so capacity is not judged; the cause is missing from the record.", j.res.Cause)
		default:
			fmt.Fprintf(&b, "Its code does not say what went wrong (%s), so the cause is missing from the record.", j.res.Cause)
		}
		return b.String()
	case report.AttrNotMemory:
		b.WriteString("This is not a memory problem")
		if j.cause != nil {
			b.WriteString(": " + j.cause.Text)
		}
		b.WriteString(".")
		return b.String()
	}
	kind := "an allocation problem"
	switch {
	case j.attribution == report.AttrMapping:
		kind = "a mapping problem"
	case f.sym.Creates.View() == cuda.ViewHost:
		kind = "an allocation problem of page-locked (pinned) host memory"
	}
	fmt.Fprintf(&b, "It is %s. %s", kind, s.capacitySentence(j))
	return b.String()
}

// doubt is the one uncertain thing of a failure whose numbers are sound:
// what could hide an earlier failure. A process attached late is said in
// its few words, with the attach's time ("calls before the attach at
// +0.8 s are not recorded"); any other gap as the missing list says it.
func (s *state) doubt(f *failed, hidden []report.Missing) string {
	late := lateWhat(f.e.PID)
	items := make([]string, 0, len(hidden))
	for _, m := range hidden {
		if m.What != late {
			items = append(items, m.What)
			continue
		}
		said := "calls before the recorder attached are not recorded"
		if at := s.attachedAt(f.e.PID); at != 0 {
			said = "calls before the attach at " + s.rel(at) + " are not recorded"
		}
		items = append(items, said)
	}
	return "This may not be the job's first failure: " + sentences(items) + "."
}

// capacityEvidenced reports whether a capacity finding rests on a
// compared value (a view exhausted or with room), not on a gap.
func capacityEvidenced(c report.Capacity) bool {
	switch c {
	case report.CapFBExhausted, report.CapFBHadRoom, report.CapBAR1Exhausted, report.CapBAR1HadRoom:
		return true
	}
	return false
}

// firstName names what the first failure is: the first failed operation;
// when another call (an initialization, an identity query, a free) failed
// before it, it is not the first failed call, and is named for its class:
// the first failed allocation, mapping or context call.
func (s *state) firstName() string {
	if s.firstAny == nil || s.first == nil || s.firstAny.e.End >= s.first.e.End {
		return "first failed operation"
	}
	switch s.first.sym.Op {
	case cuda.OpAllocation:
		return "first failed allocation"
	case cuda.OpHostAllocation:
		return "first failed host allocation"
	case cuda.OpMapping:
		return "first failed mapping"
	}
	return "first failed context call"
}

// callWhat names the failed call with its size, and for an access grant
// the devices it grants.
func (s *state) callWhat(f *failed, fd *finding) string {
	what := f.name
	if fd.sized {
		what += " of " + report.HumanBytes(fd.size)
	}
	if peers := s.grantedPeers(f); peers != "" {
		what += " granting " + peers
	}
	if fd.apertureOf == aperturePeer {
		if fd.gpu >= 0 {
			what += fmt.Sprintf(" (access to GPU %d's memory, through its BAR1 aperture)", fd.gpu)
		} else {
			what += " (access to a peer context's memory, on a GPU the record does not name)"
		}
	}
	return what
}

// capacitySentence says what the one view that can hold the request says.
func (s *state) capacitySentence(j *judgement) string {
	fd := &j.cap
	free := fd.freeText()
	switch fd.capacity {
	case report.CapFBExhausted:
		return fmt.Sprintf("The %s was exhausted: %s free at the failure, %s requested.", fd.fbName(), free, report.HumanBytes(fd.size))
	case report.CapFBHadRoom:
		return fmt.Sprintf("The %s had room: %s free at the failure, %s requested. %s",
			fd.fbName(), free, report.HumanBytes(fd.size), s.elsewhere(j))
	case report.CapBAR1Exhausted:
		return s.bar1Sentence(fd, "The mapping did not fit in the aperture. ") + " " + bar1Explained + " Framebuffer free does not help a mapping."
	case report.CapBAR1HadRoom:
		return s.bar1Sentence(fd, "The aperture had room, so the mapping failed for another reason: "+j.res.Cause+". ") + " " + bar1Explained
	case report.CapPoolExhausted:
		p := fd.pool
		return fmt.Sprintf("The %s was at its limit: maxSize %s, %s in use by traced allocations, %s requested. The pool's limit refused it, not the framebuffer (%s free).",
			p.name(s), report.HumanBytes(p.maxSize), report.HumanBytes(p.inUse), report.HumanBytes(fd.size), free)
	case report.CapNotApplicable:
		if j.f.sym.Creates.View() == cuda.ViewHost {
			return "Host memory is neither framebuffer nor BAR1, so no GPU memory view explains it: " + j.res.Cause + "."
		}
		switch j.f.sym.Op {
		case cuda.OpFree, cuda.OpOther:
			return "It allocates and maps nothing, so no memory view explains it: " + j.res.Cause + "."
		}
		return "Its path does not use the BAR1 aperture, so neither BAR1 nor framebuffer free explains it: " + j.res.Cause + "."
	}
	return "Capacity cannot be judged: " + decisiveWhat(j.missing) + "."
}

// fbName names the framebuffer a request was judged against.
func (fd *finding) fbName() string {
	if fd.mig != nil {
		return fmt.Sprintf("framebuffer of MIG instance %d", *fd.mig)
	}
	return "framebuffer"
}

// bar1Sentence states the aperture's numbers for a judged mapping.
func (s *state) bar1Sentence(fd *finding, lead string) string {
	need := "an unknown size"
	if fd.needRange() {
		need = fmt.Sprintf("between %s (the range mapped once) and %s (once for each of %d peers)",
			report.HumanBytes(fd.size), report.HumanBytes(fd.needMost()), fd.peers)
	} else if fd.sized {
		need = report.HumanBytes(fd.size)
	}
	total := "of an aperture of unknown size"
	if t := fd.apertureTotal(); t != nil {
		total = "of " + report.HumanBytes(*t)
		if fd.sized && fd.size > *t && !fd.needRange() {
			return lead + fmt.Sprintf("It needed %s of GPU %d's BAR1 aperture, which is only %s in all: it can never succeed on this GPU.",
				need, fd.gpu, report.HumanBytes(*t))
		}
	}
	return lead + fmt.Sprintf("It needed %s of GPU %d's BAR1 aperture, which had %s free %s.", need, fd.gpu, fd.freeText(), total)
}

// apertureTotal is the BAR1 size: from the reference sample, else the
// inventory.
func (fd *finding) apertureTotal() *uint64 {
	if fd.sample != nil && fd.sample.Total != nil {
		return fd.sample.Total
	}
	return nil
}

// freeText is the free space at the failure, as a value or a range.
func (fd *finding) freeText() string {
	switch {
	case fd.sample == nil || (fd.openLo && fd.openHi):
		return "an unknown amount"
	case fd.openHi:
		return "at least " + report.HumanBytes(fd.lo)
	case fd.openLo:
		return "at most " + report.HumanBytes(fd.hi)
	}
	if fd.lo != fd.hi {
		return "between " + report.HumanBytes(fd.lo) + " and " + report.HumanBytes(fd.hi)
	}
	return report.HumanBytes(fd.lo)
}

// elsewhere says what can refuse an allocation that the framebuffer had
// room for. Not the driver's reserved memory nor other processes' usage:
// NVML's free already leaves both out.
func (s *state) elsewhere(j *judgement) string {
	limit := "" // the next steps name the usual per-process limits
	if p := s.procs[j.f.e.PID]; p != nil && p.Env["CUDA_MPS_PIPE_DIRECTORY"] != "" {
		limit = "The process is an MPS client (CUDA_MPS_PIPE_DIRECTORY is set), and MPS can cap each client's memory; a framework's pool or a container's limit can too."
	}
	return "NVML's free already leaves out the driver's reserved memory and other processes' usage. " +
		strings.TrimSpace("So the limit was elsewhere: fragmentation of the free memory, a per-process limit, or an injected fault. "+limit)
}

// grantedPeers lists, for an access grant, the granted devices other than
// the owner: "CUDA device 1 (GPU 1)", "CUDA devices 2, 3 (GPUs 2, 3)".
func (s *state) grantedPeers(f *failed) string {
	grants, cut := s.grants(f)
	var devs, gpus, each []string
	for _, g := range grants {
		if !g.Peer {
			continue
		}
		p := fmt.Sprintf("CUDA device %d", g.CUDADevice)
		devs = append(devs, strconv.Itoa(int(g.CUDADevice)))
		if g.GPU != nil {
			p += fmt.Sprintf(" (GPU %d)", *g.GPU)
			gpus = append(gpus, strconv.Itoa(*g.GPU))
		}
		each = append(each, p)
	}
	if len(each) == 0 {
		return ""
	}
	out := strings.Join(each, ", ")
	if len(each) > 1 && len(gpus) == len(devs) {
		// Every peer's GPU is known: one list of each, shorter to read.
		out = fmt.Sprintf("CUDA devices %s (GPUs %s)", strings.Join(devs, ", "), strings.Join(gpus, ", "))
	}
	out += " access to its memory"
	if cut {
		out += " (and more devices than the recorder keeps)"
	}
	return out
}

func decisiveWhat(ms []report.Missing) string {
	for _, m := range ms {
		if m.Decisive {
			return m.What
		}
	}
	return "the evidence is missing"
}

// liveEvidence adds what the traced calls and per-process samples say
// about who held memory on the failure's GPU.
func (s *state) liveEvidence(j *judgement) []report.Evidence {
	f := j.f
	if j.cap.view != viewFramebuffer || j.cap.gpu < 0 {
		return nil
	}
	gpu := j.cap.gpu
	var out []report.Evidence
	live := f.held // a later failure: what its own process held then
	if f == s.first {
		live = s.rep.LiveAtFailure // every process's, at the first failure
	}
	for _, lb := range live {
		if lb.GPU == nil || *lb.GPU != gpu || lb.View != cuda.ViewFramebuffer.String() {
			continue
		}
		who := "this process"
		if lb.PID != f.e.PID {
			who = fmt.Sprintf("process %d", lb.PID)
		}
		out = append(out, report.Evidence{Field: "traced device allocations of " + who, Value: ptr(lb.Bytes), Unit: "bytes",
			Source: "traced calls (allocations minus frees)", Status: "recorded", TimeNS: f.e.End, GPU: optInt(gpu),
			Note: report.Plural(lb.Count, "allocation")})
	}
	t := s.samples.targetOf(f)
	if t == nil {
		return out
	}
	ref := t.ref[store.KindProcesses]
	for _, p := range t.procUse() {
		if p.Used == nil {
			continue
		}
		who := fmt.Sprintf("process %d", p.PID)
		if p.PID == f.e.PID {
			who = "this process"
		} else if s.procs[p.PID] == nil {
			who += " (not recorded)"
		}
		out = append(out, report.Evidence{Field: "NVML usage of " + who, Value: p.Used, Unit: "bytes", Source: apiOf(ref.API, ref.Struct),
			Status: ref.Status.Name, TimeNS: ref.Start, GPU: optInt(gpu), Scope: "process"})
	}
	return out
}

package analyze

import (
	"fmt"
	"strings"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// failure converts a failed call into a reported failure.
func (s *state) failure(f *failed) report.Failure {
	res := cuda.LookupResult(f.e.Result)
	out := report.Failure{RunPath: s.r.Path(), Rank: s.rankOf(f.e.PID), Symbol: f.name, Operation: f.sym.Op.String(), Result: f.e.Result, ResultName: res.Name,
		Meaning: res.Meaning.String(), PID: f.e.PID, TID: f.e.TID, TimeNS: f.e.End, StartNS: f.e.Start,
		Wall: s.wall(f.e.End), CUDADevice: f.e.Dev, Context: f.e.Ctx, Frozen: f.e.Flags&store.EventFrozen != 0,
		Recovered: f.recovered, Phase: s.phaseOf(f.e.End)}
	if p := s.processAt(f.e.PID, f.e.End); p != nil {
		if name := p.ThreadName(f.e.TID); name != "" {
			out.ThreadName = &name
		}
	}
	if f.e.Has&cuda.FieldSize != 0 {
		out.Size = ptr(f.e.Size)
	}
	if f.e.Has&cuda.FieldFlags != 0 {
		out.Flags = ptr(f.e.Fields.Flags)
	}
	gpu, mig, method := s.gpuOfCall(&f.e)
	out.GPUMapping = method
	if method == noContext {
		out.CUDADevice = -1 // the recorder's guess of the only GPU's ordinal
	}
	if gpu >= 0 {
		out.GPUIndex = optInt(gpu)
		out.MIGIndex = mig
		if u, ok := s.gpuUUID[gpu]; ok {
			out.GPU = &u
		}
	}
	s.mappingFacts(f, &out, gpu)
	out.PossibleConsequence = s.consequence(f)
	return out
}

// mappingFacts adds what the analysis knows of a mapping: the size of an
// import (from its exporter), the aperture's GPU, and granted devices.
func (s *state) mappingFacts(f *failed, out *report.Failure, gpu int) {
	if f.sym.Op != cuda.OpMapping {
		return
	}
	var fd finding
	fd.sized = f.e.Has&cuda.FieldSize != 0
	s.mappingRequest(f, &fd)
	if fd.sizeSource != "" {
		out.Size, out.SizeSource = ptr(fd.size), fd.sizeSource
	}
	if ap := s.apertureOf(f); ap.who != "" && (ap.gpu != gpu || ap.who == aperturePeer) {
		out.ApertureGPU, out.ApertureOf = optInt(ap.gpu), ap.who
	}
	out.Grants, out.GrantsCut = s.grants(f)
}

// grants lists the devices an access call grants, in call order, and
// whether the recorder's bound cut the list.
func (s *state) grants(f *failed) ([]report.Grant, bool) {
	if f.sym.BAR1 != cuda.BAR1Peer {
		return nil, false
	}
	list := f.e.Grants
	if f.e.Has&cuda.FieldItems == 0 && f.e.Has&cuda.FieldPeer != 0 {
		// A file from before descriptors were read: the first one.
		list = []cuda.Grant{{Type: cuda.LocationDevice, Device: int32(f.e.Peer), Flags: uint32(f.e.Fields.Flags)}}
	}
	var out []report.Grant
	for _, g := range list {
		rg := report.Grant{Location: locationName(g.Type), CUDADevice: g.Device, Access: accessName(uint64(g.Flags))}
		if g.Type == cuda.LocationDevice {
			gpu, _, _ := s.gpuOfDev(f.e.PID, g.Device)
			rg.GPU = optInt(gpu)
			rg.Peer = g.Device != f.e.Dev
		}
		out = append(out, rg)
	}
	return out, f.e.Flags&store.EventArrayCut != 0
}

// locationName names a CUmemLocationType.
func locationName(t uint32) string {
	if t == cuda.LocationDevice {
		return "device"
	}
	return fmt.Sprintf("location type %d", t)
}

// accessName names CUmemAccess_flags.
func accessName(flags uint64) string {
	switch flags {
	case 0:
		return "none"
	case 1:
		return "read"
	case 3:
		return "read-write"
	}
	return "unknown"
}

// consequence reports whether a failure came after the failure that
// matters (the first unrecovered one) in its process and context, so it
// may follow from it. A recovered failure has no consequences.
func (s *state) consequence(f *failed) bool {
	a := s.anchor()
	return a != nil && f != a && !a.recovered && f.e.PID == a.e.PID && f.e.Ctx == a.e.Ctx && f.e.End > a.e.End
}

// failureList lists every failure, in time order, and the first failure
// with its stack.
func (s *state) failureList() {
	stacks := 0
	var ff *report.Failure
	for _, f := range s.failures {
		fl := s.failure(f)
		if stacks < s.opts.MaxStacks {
			if fl.Stack = s.stack(f); fl.Stack != nil {
				stacks++
			}
		}
		s.rep.Failures = append(s.rep.Failures, fl)
		if f == s.first {
			c := fl
			ff = &c
		}
	}
	if s.first == nil {
		return
	}
	// The first failure is listed unless the list was truncated; its
	// stack is symbolized even past MaxStacks.
	if ff == nil {
		c := s.failure(s.first)
		ff = &c
	}
	if ff.Stack == nil {
		ff.Stack = s.stack(s.first)
	}
	s.rep.FirstFailure = ff
	p := s.procs[ff.PID]
	if m := pythonGap(ff, p != nil && !p.AttachedLate); m != nil {
		s.rep.Missing = append(s.rep.Missing, *m)
	}
}

// noCapture is the Python status of a CPython process's call whose stack
// was not captured: its Python frames are read only with a capture.
const noCapture = "no-capture"

// pythonGap says that the first failure's stack lacks Python frames its
// process had (a CPython process whose frames were not read, or only in
// part), so that a report without them is never taken for one of a
// program that is no Python; nil when nothing is missing. fromStart says
// the process was recorded from its start (not attached late): then an
// interpreter located too late means the recorder was behind, and
// recording from the start is no advice.
func pythonGap(ff *report.Failure, fromStart bool) *report.Missing {
	st := ff.Stack
	if st == nil || st.PythonStatus == "" || st.PythonStatus == string(store.PyOK) {
		return nil
	}
	const native = "The native frames show how CUDA was called; the Python line that asked is not known"
	fix := "t" + strings.TrimPrefix(native, "T") // the advice's first words
	switch store.PyStatus(st.PythonStatus) {
	case store.PyNotCaptured, store.PyNotLocated:
		fix = "record the program from its start (forensic record -- CMD), or attach before it loads CUDA. " +
			"Its interpreter was found only after this call. " + native
		if fromStart {
			fix = "record again on a less busy machine: the recorder fell behind and found its interpreter only after this call. " + native
		}
	case store.PyNotRead:
		fix = "this CPython's frames are not read (supported: 3.10 to 3.13, release builds). " + native
	case store.PyTruncated:
		fix = "the innermost frames are shown; the outermost were beyond what the probe reads"
	}
	return &report.Missing{What: fmt.Sprintf("Python frames of the first failure's stack (pid %d): %s", ff.PID, pythonText(st.Python)), Fix: fix}
}

// stack returns a failure's user stack: its capture unwound (with its
// Python frames), else the kernel's frame-pointer walk symbolized; nil
// when neither was recorded.
func (s *state) stack(f *failed) *report.Stack {
	st := s.rawStack(f)
	if st != nil {
		st.UserFrame = userFrame(st.Frames)
	}
	return st
}

// rawStack is stack without the user's frame marked.
func (s *state) rawStack(f *failed) *report.Stack {
	if st := s.capturedStack(f); st != nil {
		return st
	}
	if f.e.Stack < 0 {
		return nil
	}
	frames, err := s.r.Stack(f.e.Stack)
	if err != nil || len(frames) == 0 {
		return &report.Stack{Frames: []report.Frame{}, Partial: true, Note: "stack not stored"}
	}
	var maps []store.Mapping
	p := s.processAt(f.e.PID, f.e.End)
	if p != nil {
		maps = p.Maps
	}
	st := s.opts.Symbolizer.Symbolize(frames, s.files(), maps)
	st.Method = "frame-pointers"
	if p != nil && p.Python != nil {
		// A CPython process: its Python frames are read only with a
		// capture, which this call has not.
		st.Python, st.PythonStatus = noCapture, noCapture
		st.PythonVersion, st.PythonBuild, st.PythonFile = pythonBuild(p.Python)
	}
	for i := range st.Frames {
		if st.Frames[i].Language == "" {
			st.Frames[i].Language = report.LangNative
		}
	}
	if why := s.noCaptureWhy(); why != "" {
		st.Note = strings.TrimPrefix(st.Note+"; "+why, "; ")
	}
	return st
}

// noCaptureWhy says why a failure of a run that captures stacks has only
// the frame-pointer walk.
func (s *state) noCaptureWhy() string {
	if s.caps == nil || s.stop == nil {
		return ""
	}
	st := s.stop.Stats
	switch {
	case st.StackSkipped > 0 && st.StackLost > 0:
		return fmt.Sprintf("no registers and stack were captured at this call: %d captures were skipped by their rate limit and %d lost", st.StackSkipped, st.StackLost)
	case st.StackSkipped > 0:
		return fmt.Sprintf("no registers and stack were captured at this call: %d captures were skipped by their rate limit", st.StackSkipped)
	case st.StackLost > 0:
		return fmt.Sprintf("no registers and stack were captured at this call: %s %s lost", report.Plural(int(st.StackLost), "capture"), report.Were(int(st.StackLost)))
	}
	return ""
}

// files lists every file the run saw, for resolving build ids: the files
// processes had mapped, their executables, and the attached libraries.
func (s *state) files() []File {
	if s.fileList != nil {
		return s.fileList
	}
	seen := map[string]bool{}
	add := func(f File) {
		if f.Path != "" && !seen[f.Path+"\x00"+f.Open] {
			seen[f.Path+"\x00"+f.Open] = true
			s.fileList = append(s.fileList, f)
		}
	}
	for _, p := range s.procList {
		for _, m := range p.Maps {
			add(File{Path: m.Path, Open: m.Host, BuildID: m.BuildID})
		}
		add(File{Path: p.Exe})
	}
	for _, l := range s.libs {
		add(File{Path: l.Path, Open: l.HostPath, BuildID: l.BuildID})
	}
	// The files the recorder resolved each stored stack's build ids to,
	// when it stored the stack: they do not depend on the process still
	// being there when its maps were read.
	if resolved, err := s.r.Files(); err == nil {
		for _, f := range resolved {
			add(File{Path: f.Path, Open: f.Open, BuildID: f.BuildID})
		}
	}
	if s.fileList == nil {
		s.fileList = []File{}
	}
	return s.fileList
}

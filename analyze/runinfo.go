package analyze

import (
	"fmt"
	"sort"
	"time"

	"github.com/retrivium/forensic/jobenv"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// runInfo fills what the report says about the recording itself.
func (s *state) runInfo() {
	ri := report.RunInfo{Path: s.r.Path(), ID: s.run.ID, Mode: s.run.Mode, Command: s.run.Command, TargetPID: s.run.TargetPID,
		Scope: s.run.Scope, Host: s.run.Hostname, Kernel: s.run.Kernel, Clock: s.run.Clock, StartNS: s.run.ClockStart,
		WallStart: s.run.WallStart.UTC().Format(time.RFC3339Nano), Interval: int64(s.run.Interval),
		Freeze: s.run.FreezeOnFailure, Schema: s.r.Schema(), Version: s.run.Version}
	ri.EndNS = max(s.lastTime, s.lastRecord)
	if s.stop != nil {
		ri.EndNS = s.stop.Time
		ri.Ended = "clean"
		ri.StopReason = s.stop.Reason
		ri.StopError = s.stop.Error
		if s.stop.Workload != nil {
			ri.WorkloadExit = exitOf(s.stop.Workload)
		}
		ri.Events = s.stop.Stats.Events
	} else {
		ri.Ended = "abrupt" // Events is counted by the event pass
	}
	if ri.EndNS > ri.StartNS {
		ri.DurationNS = ri.EndNS - ri.StartNS
	}
	ri.Interrupted = s.interruption(ri.WorkloadExit)
	s.identity(&ri)
	s.rep.Run = ri
}

// identity fills what the run recorded about its host, job and clock: at
// the stop when there is one (the run's whole bound), else at the start.
func (s *state) identity(ri *report.RunInfo) {
	ri.WallStartNS = s.run.WallStart.UnixNano()
	var ids []*store.Identity
	if s.stop != nil && s.stop.Identity != nil {
		ids = append(ids, s.stop.Identity)
	}
	if s.run.Identity != nil {
		ids = append(ids, s.run.Identity)
	}
	for _, id := range ids {
		if ri.BootID == "" {
			ri.BootID = id.BootID
		}
		if j := id.Job; j != nil && ri.Rank == nil && ri.WorldSize == nil {
			ri.Rank, ri.WorldSize, ri.JobID = j.Rank, j.WorldSize, j.JobID
		}
		if c := id.Clock; c != nil && ri.ClockErrorNS == nil {
			ri.ClockErrorNS = c.ErrorNS
		}
	}
	if id := s.run.Identity; id != nil && id.Clock != nil {
		ri.WallStartNS = id.Clock.RealtimeNS + (s.run.ClockStart - id.Clock.MonotonicNS)
	}
}

// rankOf is a process's rank: from its own environment, else the run's.
func (s *state) rankOf(pid uint32) *int {
	if p := s.procs[pid]; p != nil {
		if r := jobenv.Parse(p.Env).Rank; r != nil {
			return r
		}
	}
	return s.rep.Run.Rank
}

// interruption names the signal by which the user or forensic stopped the
// run: the recorder stopped on a signal, or the workload died of one of
// the signals people and supervisors stop jobs with.
func (s *state) interruption(workload *report.Exit) string {
	if workload != nil && workload.Signal != nil && interruptSignal(*workload.Signal) {
		return workload.Name
	}
	if s.stop == nil || s.stop.Reason != "signal" {
		return ""
	}
	switch {
	case workload != nil && workload.Name != "":
		return workload.Name
	case s.stop.Signal != "":
		return s.stop.Signal
	}
	return "a signal to forensic"
}

// Signal numbers (Linux) the analysis names.
const (
	sigHUP  = 1
	sigINT  = 2
	sigKILL = 9
	sigTERM = 15
)

// interruptSignal reports whether dying of sig is how a job is stopped on
// purpose (Ctrl-C, a supervisor's SIGTERM, a closed terminal), not a crash.
func interruptSignal(sig int) bool {
	return sig == sigINT || sig == sigTERM || sig == sigHUP
}

var signalNames = map[int]string{1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
	7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM",
	24: "SIGXCPU", 25: "SIGXFSZ", 31: "SIGSYS"}

func exitOf(e *store.Exit) *report.Exit {
	if e == nil {
		return nil
	}
	x := &report.Exit{Code: e.Code, Signal: e.Signal, TimeNS: e.Time, Core: e.Core}
	if e.Signal != nil {
		x.Name = signalNames[*e.Signal]
		if x.Name == "" {
			x.Name = fmt.Sprintf("signal %d", *e.Signal)
		}
	}
	return x
}

// runRecords fills what the run.db says of the recording besides its
// calls and samples: processes, coverage, kernel log, markers and loss.
func (s *state) runRecords() error {
	s.processes()
	var err error
	if s.libs, err = s.r.Libraries(); err != nil {
		return err
	}
	for _, l := range s.libs {
		lib := report.Library{Path: l.Path, BuildID: l.BuildID, Hooked: l.Attached, Absent: l.Absent, Unknown: l.Unknown, Error: l.Error}
		for _, p := range []*[]string{&lib.Hooked, &lib.Absent, &lib.Unknown} {
			if *p == nil {
				*p = []string{}
			}
		}
		s.rep.Coverage = append(s.rep.Coverage, lib)
	}
	if err := s.kernelLog(); err != nil {
		return err
	}
	ms, err := s.r.Markers()
	if err != nil {
		return err
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Time < ms[j].Time })
	for _, m := range ms {
		s.rep.Markers = append(s.rep.Markers, report.Marker{TimeNS: m.Time, Label: m.Label})
	}
	return s.loss()
}

// processes lists every recorded process record, oldest first.
func (s *state) processes() {
	for _, p := range s.procList {
		pi := report.ProcessInfo{PID: p.PID, PPID: p.PPID, Exe: p.Exe, Args: p.Args, ArgsCut: p.ArgsCut, Root: p.Root, StartNS: p.Start,
			Exit: exitOf(p.Exit), Cgroup: p.Cgroup, AttachedLate: p.AttachedLate, Env: p.Env, Devices: []report.DeviceMap{}}
		if pi.Args == nil {
			pi.Args = []string{}
		}
		if p.Pod != nil {
			pi.Pod = &report.Pod{UID: p.Pod.UID, Namespace: p.Pod.Namespace, Name: p.Pod.Name}
		}
		for _, t := range p.Threads {
			pi.Threads = append(pi.Threads, report.ThreadInfo{TID: t.TID, Name: t.Name})
		}
		for _, d := range p.Devices {
			dm := report.DeviceMap{Ordinal: d.Ordinal, UUID: d.UUID, Method: d.Method, Why: d.Why}
			if d.GPU >= 0 {
				g := d.GPU
				dm.GPU = &g
				if dm.UUID == "" {
					dm.UUID = s.gpuUUID[g]
				}
			}
			pi.Devices = append(pi.Devices, dm)
		}
		s.rep.Processes = append(s.rep.Processes, pi)
	}
}

func (s *state) kernelLog() error {
	kl, err := s.r.KernelLog()
	if err != nil {
		return err
	}
	for _, l := range kl {
		k := report.KernelLine{TimeNS: l.Time, Text: l.Text, Xid: l.Xid}
		if s.first != nil {
			k.Position = "before"
			if l.Time > s.first.e.End {
				k.Position = "after"
			}
		}
		s.rep.KernelLog = append(s.rep.KernelLog, k)
	}
	return nil
}

// loss reports the recorder's loss counters: from the stop record, else
// from its last periodic reading (a recorder killed, or a flight
// recording still being written), which counts nothing after it.
func (s *state) loss() error {
	var st store.Stats
	l := report.Loss{CountersFrom: report.CountersNone}
	if s.stop != nil {
		st, l.Known, l.CountersFrom = s.stop.Stats, true, report.CountersStop
	} else if drops, err := s.r.Drops(); err == nil && len(drops) > 0 {
		d := drops[len(drops)-1]
		st, l.Known, l.CountersFrom, l.CountersAtNS = d.Stats, true, report.CountersReading, d.Time
	}
	l.Calls, l.Events, l.LostCalls, l.LostFirstNS = st.Calls, st.Events, st.LostCalls, st.LostFirst
	l.LostInflight, l.TooDeep, l.Unmatched, l.LostProc = st.LostInflight, st.TooDeep, st.Unmatched, st.LostProc
	l.DecodeErrors, l.Untracked, l.LostHolds = st.DecodeErrors, st.Untracked, st.LostHolds
	l.StackSkipped, l.StackLost = st.StackSkipped, st.StackLost
	if s.first != nil {
		l.BeforeFailure = (st.LostCalls > 0 && st.LostFirst != 0 && st.LostFirst <= s.first.e.End) ||
			st.LostInflight > 0 || st.TooDeep > 0
	}
	s.rep.Loss = l
	return nil
}

// countersShort says, as decisive missing evidence, when the loss
// counters do not reach a failure at t (t = 0: the last call recorded):
// never read, or last read before it. Calls lost after the reading are
// counted nowhere, so an earlier failure may be among them.
func (s *state) countersShort(t int64) []report.Missing {
	l := &s.rep.Loss
	what := "the failure"
	if t == 0 {
		t, what = s.lastTime, "the last call recorded"
	}
	var m report.Missing
	switch {
	case l.CountersFrom == report.CountersNone && s.rep.Run.Events > 0:
		m.What = "the recorder's loss counters were never read: calls lost (ring buffer full) are not counted, so a failure may be among them"
	case l.CountersFrom == report.CountersReading && l.CountersAtNS < t:
		m.What = fmt.Sprintf("the recorder's loss counters were last read at %s, before %s (%s): calls lost after that reading are not counted, so a failure may be among them",
			s.rel(l.CountersAtNS), what, s.rel(t))
	default:
		return nil
	}
	m.Decisive = true
	m.Fix = "stop the recorder with SIGINT or SIGTERM, so that its stop record counts every call"
	if s.rep.Run.Ended == "recording" {
		m.Fix = "analyze the recording again after the recorder's next reading of its counters (about a second later), or once it stops"
	}
	return []report.Missing{m}
}

// phases splits the run at the markers; without markers, at its own
// landmarks (first allocation, first failure). A phase runs from its start
// (included) to its end (excluded): a marker or the first allocation
// belongs to the phase it starts. Two ends are included: "up to first
// failure" includes the failure that ends it, and the last phase the run's
// end (phaseSet.index).
func (s *state) phases() {
	start, end := s.run.ClockStart, s.rep.Run.EndNS
	if end < start {
		end = start
	}
	var cuts []report.Phase
	upToFailure := -1
	if len(s.rep.Markers) > 0 {
		s.rep.PhasesFrom = "markers"
		prev := report.Phase{Label: "before " + s.rep.Markers[0].Label, StartNS: start}
		for _, m := range s.rep.Markers {
			prev.EndNS = m.TimeNS
			cuts = append(cuts, prev)
			prev = report.Phase{Label: m.Label, StartNS: m.TimeNS}
		}
		prev.EndNS = end
		cuts = append(cuts, prev)
	} else {
		s.rep.PhasesFrom = phasesFromLandmarks
		t := start
		if s.firstAlloc >= 0 {
			cuts = append(cuts, report.Phase{Label: "before first allocation", StartNS: t, EndNS: s.firstAlloc})
			t = s.firstAlloc
		}
		if s.first != nil && s.first.e.End >= t {
			upToFailure = len(cuts)
			cuts = append(cuts, report.Phase{Label: "up to first failure", StartNS: t, EndNS: s.first.e.End})
			t = s.first.e.End
			cuts = append(cuts, report.Phase{Label: "after first failure", StartNS: t, EndNS: end})
		} else {
			cuts = append(cuts, report.Phase{Label: "rest of run", StartNS: t, EndNS: end})
		}
	}
	s.rep.Phases = cuts
	s.phaseSet = newPhaseSet(cuts, upToFailure)
}

// phasesFromLandmarks is the report's PhasesFrom for a run without
// markers.
const phasesFromLandmarks = "landmarks: no markers were recorded"

// phaseSet says which phase a time falls in.
type phaseSet struct {
	phases []report.Phase
	// endIn marks the phases that include their end time: the one the
	// first failure ends, and the last.
	endIn []bool
}

// newPhaseSet makes the set of phases; endIn is the index of a phase
// other than the last that includes its end (-1: none).
func newPhaseSet(phases []report.Phase, endIn int) *phaseSet {
	ps := &phaseSet{phases: phases, endIn: make([]bool, len(phases))}
	if endIn >= 0 && endIn < len(phases) {
		ps.endIn[endIn] = true
	}
	if n := len(phases); n > 0 {
		ps.endIn[n-1] = true
	}
	return ps
}

// next reports whether time t lies after phase i.
func (ps *phaseSet) next(i int, t int64) bool {
	if i >= len(ps.phases)-1 {
		return false
	}
	end := ps.phases[i].EndNS
	return t > end || (t == end && !ps.endIn[i])
}

// index is the phase t falls in, searching forward from phase from (times
// mostly arrive in order); a time that does not lie after the phase before
// from searches from the first phase. A time before the run falls in the first phase, one after
// it in the last. -1 when there are no phases.
func (ps *phaseSet) index(t int64, from int) int {
	if len(ps.phases) == 0 {
		return -1
	}
	if from < 0 || from >= len(ps.phases) || (from > 0 && !ps.next(from-1, t)) {
		from = 0
	}
	for ps.next(from, t) {
		from++
	}
	return from
}

// phaseOf names the phase a time falls in.
func (s *state) phaseOf(t int64) string {
	if s.phaseSet == nil {
		return ""
	}
	if i := s.phaseSet.index(t, 0); i >= 0 {
		return s.phaseSet.phases[i].Label
	}
	return ""
}

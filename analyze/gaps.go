package analyze

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// generalGaps lists evidence missing whatever the verdict: none of these
// can hide a failed call, but each leaves a question the record cannot
// answer.
func (s *state) generalGaps() []report.Missing {
	var out []report.Missing
	add := func(what, fix string) { out = append(out, report.Missing{What: what, Fix: fix}) }
	switch {
	case s.inv == nil:
		add("no platform inventory was recorded", "let the recorder run until it has attached (it writes the inventory first)")
	case s.inv.Init.Code != 0:
		what := fmt.Sprintf("NVML did not initialize (%s from %s): no framebuffer or BAR1 samples", s.inv.Init.Name, s.inv.Library)
		if s.inv.InitError != "" {
			what += ": " + s.inv.InitError
		}
		add(what, "load the NVIDIA kernel driver, or point --libnvidia-ml at the driver's libnvidia-ml.so.1")
	}
	out = append(out, s.flightGoesOn()...)
	switch {
	case s.stop == nil && s.rep.Run.Ended == "recording":
		// A flight recording read while it is written: said above.
	case s.stop == nil && s.endLost():
		// Its last segment, with the stop record, is lost: the segment
		// gaps say so.
	case s.stop == nil:
		add(fmt.Sprintf("the recorder did not stop cleanly (killed, crashed or out of disk before its stop record); the record ends at %s", s.rel(s.rep.Run.EndNS)),
			"stop the recorder with SIGINT or SIGTERM, on a filesystem with room")
	case s.stop.Reason == "disk-full" || s.stop.Reason == "write-error":
		add("the recorder stopped writing early: "+s.stop.Error, "record on a filesystem with more free space")
	}
	if n := s.rep.Loss.Unmatched; n > 0 {
		add(report.Plural(int(n), "call")+" "+report.Were(int(n))+" already in progress when the probes attached", "start the recorder before the workload")
	}
	if n := s.rep.Loss.LostProc; n > 0 {
		add(report.Plural(int(n), "process lifecycle record")+" "+report.Were(int(n))+" lost (ring buffer full)", "record with a bigger --ring-size")
	}
	if len(s.rep.Sampling.Unsupported) > 0 {
		add("NVML queries not supported here: "+strings.Join(s.rep.Sampling.Unsupported, ", "),
			"none on this GPU and driver: these values cannot be read here")
	}
	out = append(out, s.segmentsAfterFailures()...)
	for _, l := range s.rep.Coverage {
		if l.Error != "" {
			add("attaching to "+l.Path+" failed in part: "+l.Error, "check the library path and the kernel's uprobe support")
		}
		if len(l.Unknown) > 0 {
			// The names are under COVERAGE (and in --json's coverage): a
			// list of them here would be a sentence nobody reads.
			add(fmt.Sprintf("%s exports %s of the call families forensic traces with no row in its table (see COVERAGE). Calls through them are not recorded",
				l.Path, report.Plural(len(l.Unknown), "symbol")), "update forensic's symbol table for this driver")
		}
	}
	return out
}

// hiding lists what could hide a failure before t (t = 0: anywhere in the
// run). Each is decisive: with any of them, the record cannot establish
// the first failure.
func (s *state) hiding(t int64) []report.Missing {
	var out []report.Missing
	add := func(what, fix string) { out = append(out, report.Missing{What: what, Fix: fix, Decisive: true}) }
	before := func(x int64) bool { return t == 0 || (x != 0 && x <= t) }
	loss := s.rep.Loss
	if loss.LostCalls > 0 && before(loss.LostFirstNS) {
		what := fmt.Sprintf("%s %s lost (ring buffer full) from %s on", report.Plural(int(loss.LostCalls), "call"), report.Were(int(loss.LostCalls)), s.rel(loss.LostFirstNS))
		if t != 0 {
			what += ", before the failure: an earlier failure may be among them"
		}
		add(what, "record with a bigger --ring-size (or fewer traced processes)")
	}
	if n := loss.LostInflight + loss.TooDeep; n > 0 {
		add(report.Plural(int(n), "call")+" could not be followed (too many calls in progress at once, or nested too deeply in the library)",
			"record fewer concurrent threads per recording")
	}
	if n := loss.Untracked; n > 0 {
		add(report.Plural(int(n), "process")+" could not be followed (the recorder's table of tracked processes was full): their calls are not in the record",
			"record fewer processes at once (forensic record --pid of the job rather than --all)")
	}
	if n := loss.LostHolds; n > 0 {
		// Two sentences: the verdict quotes the first after its own
		// clause and must stay within the reading bound.
		add(fmt.Sprintf("a libcuda mapping did not hold its process until the probes were in (%s). Calls through it before then are not in the record",
			report.Plural(int(n), "time")), "record again, with no other forensic recorder running on the host (one continues the processes it holds); if it repeats, report it")
	}
	for _, p := range s.lateProcs(t) {
		add(lateWhat(p), "start the recorder before the workload: forensic record -o run.db -- CMD")
	}
	for _, m := range s.unexplainedExits(0, t) {
		add(m.What, m.Fix)
	}
	out = append(out, s.untraced(t)...)
	out = append(out, s.segmentGaps(t)...)
	if t == 0 {
		if s.stop == nil && s.rep.Run.Ended == "abrupt" {
			add("the recording ended abruptly", "stop the recorder with SIGINT or SIGTERM")
		}
	}
	out = append(out, s.flightUnaccounted()...)
	out = append(out, s.countersShort(t)...)
	return out
}

// lateWhat says what is missing of a process attached late; the verdict
// tells this item from the other gaps by it.
func lateWhat(pid uint32) string {
	return fmt.Sprintf("process %d already had libcuda loaded when recording started: calls it made earlier are not in the record", pid)
}

// attachedAt is when the probes went in on the libcuda process pid had
// mapped (the earliest attached library when its mappings name none of
// them), 0 when the record does not say.
func (s *state) attachedAt(pid uint32) int64 {
	var mine, first int64
	p := s.procs[pid]
	for _, l := range s.libs {
		if len(l.Attached) == 0 || l.Time == 0 {
			continue
		}
		if first == 0 || l.Time < first {
			first = l.Time
		}
		if p != nil && mapsLibrary(p, &l) && (mine == 0 || l.Time < mine) {
			mine = l.Time
		}
	}
	if mine != 0 {
		return mine
	}
	return first
}

// mapsLibrary reports whether one of p's mappings is the library's file.
func mapsLibrary(p *store.Process, l *store.Library) bool {
	for _, m := range p.Maps {
		if (m.Inode != 0 && m.Inode == l.Inode) || (m.BuildID != "" && m.BuildID == l.BuildID) || (m.Path != "" && m.Path == l.Path) {
			return true
		}
	}
	return false
}

// lateProcs lists the processes attached late that matter at t: the
// failing process for a failure (t != 0), every one otherwise.
func (s *state) lateProcs(t int64) []uint32 {
	var out []uint32
	if t != 0 {
		for _, f := range []*failed{s.first, s.unrecovered} {
			if f != nil && f.e.End == t {
				if p := s.procs[f.e.PID]; p != nil && p.AttachedLate {
					out = append(out, p.PID)
				}
				return out
			}
		}
		return out
	}
	for _, p := range s.procList {
		if p.AttachedLate && s.inSubject(p.PID) {
			out = append(out, p.PID)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// coreSignals are the signals whose default action dumps core.
var coreSignals = map[int]bool{3: true, 4: true, 5: true, 6: true, 7: true, 8: true, 11: true, 24: true, 25: true, 31: true}

// A badEnd is a process that ended badly with no unrecovered failed call
// of its own recorded: how says how it ended ("exited with status 1",
// "died of SIGSEGV").
type badEnd struct {
	p   store.Process
	how string
}

// badEnds lists the processes that ended badly after from and by to
// (to = 0: no bound) with no unrecovered failed call of theirs recorded:
// killed by a signal nobody sent on purpose, or (for a process that used
// the GPU) exiting non-zero. Their failure happened outside the traced
// calls; a failure the process recovered from did not end it.
func (s *state) badEnds(from, to int64) []badEnd {
	var out []badEnd
	for _, p := range s.procList {
		x := p.Exit
		if x == nil || x.Time <= from || (to != 0 && x.Time > to) || s.explainedBy(p.PID) || !s.inSubject(p.PID) {
			continue
		}
		switch {
		case x.Signal != nil && !interruptSignal(*x.Signal):
			out = append(out, badEnd{p, "died of " + exitOf(x).Name})
		case x.Code != nil && *x.Code != 0 && s.usedGPU(p):
			out = append(out, badEnd{p, fmt.Sprintf("exited with status %d", *x.Code)})
		}
	}
	return out
}

// unexplainedExits says, as missing evidence, what is not in the record
// of each process that ended badly after from and by to (see badEnds).
func (s *state) unexplainedExits(from, to int64) []report.Missing {
	return s.exitGaps(s.badEnds(from, to))
}

// exitGaps says what is not in the record of each bad end.
func (s *state) exitGaps(ends []badEnd) []report.Missing {
	var out []report.Missing
	for _, b := range ends {
		p := b.p
		why := " with no failed call recorded"
		if s.failedPIDs[p.PID] {
			why = " after it recovered from each of its failed calls, so what ended it is not in the record"
		}
		if p.Exit.Signal != nil {
			out = append(out, s.signalGap(p, why))
			continue
		}
		// A process whose calls were traced reached the driver through a
		// libcuda the probes were on: an untraced one is no likely cause.
		const pool = "a framework's memory pool may have run out without a failed driver call (JAX preallocation, a PyTorch memory fraction)"
		causes := "Its own code may have failed, " + pool + ", or it used an untraced libcuda"
		again := s.againWithoutLibcuda("record again without --libcuda so the libcuda it maps is found; ")
		if s.replay.procCalls[p.PID] != nil {
			causes, again = "Its own code may have failed, or "+pool, ""
		}
		out = append(out, report.Missing{Decisive: true,
			What: fmt.Sprintf("process %d (%s) %s%s. %s", p.PID, exeName(&p), b.how, why, causes),
			Fix: "read the process's own error output; " + again +
				"for JAX set XLA_PYTHON_CLIENT_PREALLOCATE=false, for PyTorch check set_per_process_memory_fraction"})
	}
	return out
}

// explainedBy reports whether a process has a failed call it did not
// recover from, which may be what ended it. When the failure list was
// cut short, any failed call of its counts.
func (s *state) explainedBy(pid uint32) bool {
	if s.failedOutside(pid) {
		return true
	}
	if !s.failedPIDs[pid] {
		return false
	}
	if s.rep.FailuresTruncated > 0 {
		return true
	}
	for _, f := range s.failures {
		if f.e.PID == pid && !f.recovered {
			return true
		}
	}
	return false
}

// signalGap explains a death by signal, with advice that fits the signal.
func (s *state) signalGap(p store.Process, why string) report.Missing {
	x := exitOf(p.Exit)
	what := fmt.Sprintf("process %d (%s) died of %s%s. Its failure happened outside the traced calls", p.PID, exeName(&p), x.Name, why)
	var fix string
	switch {
	case x.Core:
		fix = "inspect its core dump (coredumpctl debug, or the core file) and the kernel log"
	case coreSignals[*x.Signal]:
		fix = "enable core dumps (ulimit -c unlimited) and run it again to get one; check the kernel log"
	case *x.Signal == sigKILL:
		fix = "check the kernel log for the out-of-memory killer (host memory) and who else sends SIGKILL (a supervisor's timeout)"
	default:
		fix = "find who sent " + x.Name + " (a supervisor, a timeout) and check the kernel log"
	}
	return report.Missing{What: what, Fix: fix, Decisive: true}
}

// usedGPU reports whether a process is one whose failure matters here: the
// workload itself (unless it never loaded libcuda), or one that made
// traced calls or held GPU memory.
func (s *state) usedGPU(p store.Process) bool {
	if (p.Root && !s.libcudaNeverLoaded()) || s.replay.procCalls[p.PID] != nil {
		return true
	}
	return s.nvmlUse(p.PID) > 0
}

// nvmlUse is the most GPU memory NVML ever attributed to pid.
func (s *state) nvmlUse(pid uint32) uint64 {
	var peak uint64
	if s.samples == nil {
		return 0
	}
	for k, a := range s.samples.fields {
		if k.pid == pid && a.peak.ok {
			peak = max(peak, a.peak.v)
		}
	}
	return peak
}

// nvmlUseBefore reports whether NVML saw pid holding GPU memory at or
// before the first failure.
func (s *state) nvmlUseBefore(pid uint32) bool {
	if s.samples == nil {
		return false
	}
	for k, a := range s.samples.fields {
		if k.pid == pid && a.beforePeak.ok && a.beforePeak.v > 0 {
			return true
		}
	}
	return false
}

// untraced lists what says calls were made that the record does not have
// (before t; t = 0: anywhere): a recorded process NVML saw holding GPU
// memory with no traced call, and a workload with no traced call at all.
func (s *state) untraced(t int64) []report.Missing {
	var out []report.Missing
	for _, p := range s.procList {
		if s.replay.procCalls[p.PID] != nil || (t != 0 && !s.nvmlUseBefore(p.PID)) {
			continue
		}
		if use := s.nvmlUse(p.PID); use > 0 {
			why := "it used a libcuda forensic did not attach to, or allocated before recording started"
			if p.AttachedLate {
				why = "it was already running when recording started, so its memory was allocated before"
			}
			out = append(out, report.Missing{Decisive: true,
				What: fmt.Sprintf("NVML shows process %d (%s) holding %s of GPU memory, but no traced call from it was recorded: %s",
					p.PID, exeName(&p), report.HumanBytes(use), why),
				Fix: s.untracedFix()})
		}
	}
	if t == 0 && s.run.Mode != "all" && len(s.replay.procCalls) == 0 && len(s.procList) > 0 {
		out = append(out, s.noCallsGap())
	}
	return out
}

func exeName(p *store.Process) string {
	if p.Exe != "" {
		return baseName(p.Exe)
	}
	if p.Comm != "" {
		return p.Comm
	}
	return "unknown"
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// segmented is a Source made of a flight recording's segments, some of
// which retention deleted (gaps) or that could not be read (skipped).
type segmented interface {
	Gaps() []store.Gap
	Skipped() []store.Skipped
}

// endLost reports whether the recording's last segment, which its recorder
// closed, is lost (a flight recording whose last file is gone).
func (s *state) endLost() bool {
	e, ok := s.r.(interface{ EndLost() bool })
	return ok && e.EndLost()
}

// segmentGaps lists what a flight recording does not have before t (t = 0:
// anywhere): stretches retention deleted, never read as "nothing
// happened", and segments that could not be read. A segment the index
// places after t cannot hide a failure before it; neither can the live
// one, locked by its recorder, the newest.
func (s *state) segmentGaps(t int64) []report.Missing {
	seg, ok := s.r.(segmented)
	if !ok {
		return nil
	}
	var out []report.Missing
	for _, g := range seg.Gaps() {
		if t != 0 && g.From > t {
			continue
		}
		what := fmt.Sprintf("flight mode deleted the recording from %s to %s (%s, %s) to stay within its size bound",
			s.rel(g.From), s.rel(g.To), report.Plural(int(g.Calls), "call"), report.Plural(int(g.Failures), "failed call"))
		if g.Reason == store.GapWindowCut {
			what += ", cutting into the window kept around a failure"
		}
		// The recorder counted the failed calls of what it deleted: a
		// stretch with none cannot hide a failure, only the calls that
		// led up to one.
		decisive := g.Failures > 0
		if !decisive {
			what += "; none of its calls failed, but what they allocated and released is not in the record"
		}
		out = append(out, report.Missing{Decisive: decisive, What: what,
			Fix: "give flight mode a larger --max-size, or take a snapshot (forensic snapshot) when an alert fires"})
	}
	skipped := seg.Skipped()
	for i, sk := range skipped {
		if t != 0 && (errors.Is(sk.Err, store.ErrLocked) || (sk.Segment != nil && sk.Segment.From > t)) {
			continue // newer than the failure: segmentsAfterFailures says so
		}
		m := s.skippedSegment(sk, i == len(skipped)-1 && s.endLost())
		// The index counted the failed calls of the segment: one with
		// none cannot hide a failure.
		m.Decisive = sk.Segment == nil || sk.Segment.Failures > 0
		out = append(out, m)
	}
	return out
}

// segmentsAfterFailures lists the segments that could not be read but
// that come after every failure judged: they hide no earlier failure, but
// they are gaps in the record.
func (s *state) segmentsAfterFailures() []report.Missing {
	seg, ok := s.r.(segmented)
	if !ok || s.first == nil {
		return nil
	}
	last := s.first.e.End
	if s.unrecovered != nil {
		last = max(last, s.unrecovered.e.End)
	}
	var out []report.Missing
	skipped := seg.Skipped()
	for i, sk := range skipped {
		if errors.Is(sk.Err, store.ErrLocked) || (sk.Segment != nil && sk.Segment.From > last) {
			out = append(out, s.skippedSegment(sk, i == len(skipped)-1 && s.endLost()))
		}
	}
	return out
}

// skippedSegment says what a segment that could not be read takes from
// the record, and what to do: a closed segment whose file is gone lost its
// records (with the recording's end when it was the last: end); the live
// one is held by its recorder; another did not read.
func (s *state) skippedSegment(sk store.Skipped, end bool) report.Missing {
	info := sk.Segment
	var held string
	if info != nil {
		held = fmt.Sprintf(" (from %s to %s: %s, %s)", s.rel(info.From), s.rel(info.To),
			report.Plural(int(info.Calls), "call"), report.Plural(int(info.Failures), "failed call"))
	}
	switch {
	case sk.Lost():
		what := fmt.Sprintf("segment %d is missing: its records are lost%s", info.Seq, held)
		if end {
			what += "; it was the last, so the recording's end and its stop record are lost with it (the index says the recorder closed it)"
		}
		return report.Missing{What: what,
			Fix: "restore " + sk.Path + " from wherever the directory was copied or backed up: the recorder deletes segments only for retention, and its index lists those as deleted stretches"}
	case errors.Is(sk.Err, store.ErrLocked):
		return report.Missing{What: "the live segment could not be read (its recorder holds it): " + sk.Path,
			Fix: "take a snapshot of the live segment (forensic snapshot DIR), or stop the recorder first"}
	case info != nil && info.Live:
		return report.Missing{What: "the live segment could not be read: " + oneLine(sk.Err),
			Fix: "take a snapshot of the live segment (forensic snapshot DIR) while its recorder runs"}
	case info != nil:
		return report.Missing{What: fmt.Sprintf("segment %d could not be read: %s; its records are not in the analysis%s", info.Seq, oneLine(sk.Err), held),
			Fix: "restore an intact copy of " + sk.Path + " (a copy taken while the recorder was writing may be torn)"}
	}
	return report.Missing{What: "a segment of the recording could not be read: " + oneLine(sk.Err),
		Fix: "restore an intact copy of " + sk.Path}
}

// oneLine keeps an error's text on one line.
func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

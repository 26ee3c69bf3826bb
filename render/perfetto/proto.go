package perfetto

import (
	"bufio"
	"cmp"
	"io"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/retrivium/forensic/report"
)

// Trace writes a run in Perfetto's protobuf trace format (a .pftrace file,
// opened by ui.perfetto.dev and trace_processor):
//
//   - a process track per process, named by its executable, and under it a
//     thread track per thread, with a slice per call named by symbol (its
//     category the operation: alloc, free, map, ...). A successful call
//     keeps its size; a failed call keeps its result, code and every
//     decoded argument, and an instant "FAILED symbol: result" follows it;
//   - per GPU, a track "GPU N NVML samples" with one counter track (bytes)
//     per view and field: "GPU 0 framebuffer used", "GPU 0 BAR1 free", ...
//     Framebuffer and BAR1 are never one counter, so nothing stacks or adds
//     them. A query that failed or is unsupported is an instant naming its
//     status on the GPU's track, never a zero;
//   - a "Kernel log" track and a "Markers" track of instants.
//
// Times are the run's CLOCK_MONOTONIC nanoseconds (the trace's primary
// clock). To stay small each thread writes its own packet sequence whose
// defaults name its track and an incremental clock, so a timestamp is the
// delta since the thread's previous event, and event, category and
// argument names are interned per sequence. Trace is a report.Observer:
// pass it to the analysis, then call Finish with the report. It streams:
// memory grows with the number of threads, not of calls.
type Trace struct {
	pw      *packetWriter
	main    *sequence // descriptors, kernel log, markers
	samples *sequence // NVML counters
	threads map[[2]uint32]*thread
	names   threadNames
	last    *thread // the thread of the previous call
	procs   map[uint32]bool
	gpus    map[int]bool
	// counters are the counter tracks by GPU, MIG instance, view and
	// field; lastStatus the status last written per GPU, MIG and kind.
	counters   map[counterKey]uint64
	lastStatus map[counterKey]string
	start      int64
}

// thread is one recorded thread: its packet sequence (started at its
// first event) and the nested calls held until their caller returns.
type thread struct {
	pid, tid uint32
	seq      *sequence
	held     []report.Call
}

type counterKey struct {
	gpu, mig    int // mig -1: the whole GPU
	kind, field string
}

// Track uuids: a kind in the low three bits, so no two tracks share one,
// and counter tracks (named in every counter packet) keep short varints.
const (
	uuidProcess = 1
	uuidThread  = 2
	uuidGPU     = 3
	uuidCounter = 4
	uuidKernel  = 1<<3 | 5
	uuidMarkers = 2<<3 | 5
)

func processUUID(pid uint32) uint64     { return uint64(pid)<<3 | uuidProcess }
func threadUUID(pid, tid uint32) uint64 { return (uint64(pid)<<24|uint64(tid))<<3 | uuidThread }
func gpuUUID(gpu int) uint64            { return uint64(uint32(gpu))<<3 | uuidGPU }
func counterUUID(n int) uint64          { return uint64(n)<<3 | uuidCounter }

// maxHeld bounds the nested calls a thread holds for their caller; past it
// they are written as they are.
const maxHeld = 256

// NewTrace returns a writer of a Perfetto protobuf trace to w.
func NewTrace(w io.Writer) *Trace {
	return &Trace{pw: newPacketWriter(bufio.NewWriterSize(w, 256<<10)), threads: map[[2]uint32]*thread{},
		procs: map[uint32]bool{}, gpus: map[int]bool{}, counters: map[counterKey]uint64{}, lastStatus: map[counterKey]string{}}
}

// Bytes is the size of the trace written so far.
func (t *Trace) Bytes() int64 { return t.pw.bytes }

// Begin writes the clock, the processes, the kernel log and the markers.
func (t *Trace) Begin(rep *report.Report) error {
	t.start = rep.Run.StartNS
	t.names = namesOf(rep)
	var err error
	if t.main, err = t.pw.newSequence(t.start, 0, false, true); err != nil {
		return err
	}
	for _, pr := range rep.Processes {
		if err := t.process(pr.PID, processName(&pr), pr.Args); err != nil {
			return err
		}
	}
	if err := t.instantTrack(uuidKernel, "Kernel log", len(rep.KernelLog)); err != nil {
		return err
	}
	for _, k := range rep.KernelLog {
		name := "kernel: " + clip(k.Text, 80)
		args := []annotation{{name: "text", kind: fAnnString, s: k.Text}}
		if k.Xid != nil {
			name = "Xid " + strconv.Itoa(*k.Xid) + ": " + clip(k.Text, 80)
			args = append(args, annotation{name: "xid", kind: fAnnInt, u: uint64(int64(*k.Xid))})
		}
		if err := t.instant(t.main, uuidKernel, k.TimeNS, name, "kernel", args); err != nil {
			return err
		}
	}
	if err := t.instantTrack(uuidMarkers, "Markers", len(rep.Markers)); err != nil {
		return err
	}
	for _, m := range rep.Markers {
		args := []annotation{{name: "label", kind: fAnnString, s: m.Label}}
		if err := t.instant(t.main, uuidMarkers, m.TimeNS, "mark: "+m.Label, "marker", args); err != nil {
			return err
		}
	}
	return nil
}

// processName names a process's track by its command line (shortened in
// the middle past maxTrackName runes), or "pid N" when none was recorded:
// three python3.11 processes read as the scripts they ran.
func processName(pr *report.ProcessInfo) string {
	name := pr.CommandLine()
	if base := filepath.Base(name); name == "" || base == "." || base == "/" {
		return "pid " + strconv.FormatUint(uint64(pr.PID), 10)
	}
	return report.ClipMiddle(name, maxTrackName)
}

// threadNames are the recorded threads' names by (pid, tid).
type threadNames map[[2]uint32]string

// namesOf collects the names the report's processes give their threads.
func namesOf(rep *report.Report) threadNames {
	out := threadNames{}
	for _, pr := range rep.Processes {
		for _, th := range pr.Threads {
			out[[2]uint32{pr.PID, th.TID}] = th.Name
		}
	}
	return out
}

// maxTrackName is the longest track name, in runes.
const maxTrackName = 80

// process writes a process track once.
func (t *Trace) process(pid uint32, name string, cmdline []string) error {
	if t.procs[pid] {
		return nil
	}
	t.procs[pid] = true
	pd := appendVarintField(nil, fProcessPID, uint64(pid))
	pd = appendStringField(pd, fProcessName, name)
	for _, a := range cmdline {
		pd = appendStringField(pd, fProcessCmdline, a)
	}
	d := appendVarintField(nil, fTrackUUIDDesc, processUUID(pid))
	d = appendBytesField(d, fTrackProcess, pd)
	return t.pw.descriptor(t.main, d)
}

// instantTrack names a global track of instants when it will have any.
func (t *Trace) instantTrack(uuid uint64, name string, n int) error {
	if n == 0 {
		return nil
	}
	d := appendVarintField(nil, fTrackUUIDDesc, uuid)
	d = appendStringField(d, fTrackName, name)
	return t.pw.descriptor(t.main, d)
}

// instant writes an instant event with a plain (not interned) name,
// category and arguments on track (0: the sequence's default track).
func (t *Trace) instant(s *sequence, track uint64, at int64, name, cat string, args []annotation) error {
	p := t.pw.startPacket(s, at)
	ev := t.pw.ev[:0]
	ev = appendVarintField(ev, fType, typeInstant)
	if track != 0 {
		ev = appendVarintField(ev, fTrackUUID, track)
	}
	ev = appendStringField(ev, fName, name)
	ev = appendStringField(ev, fCategories, cat)
	for i := range args {
		ev = appendAnnotation(ev, &args[i])
	}
	t.pw.ev = ev
	return t.pw.finishPacket(p, fTrackEvent, ev)
}

// Finish writes the calls still held and flushes the trace.
func (t *Trace) Finish(rep *report.Report) error {
	ths := make([]*thread, 0, len(t.threads))
	for _, th := range t.threads {
		ths = append(ths, th)
	}
	slices.SortFunc(ths, func(a, b *thread) int {
		return cmp.Or(cmp.Compare(a.pid, b.pid), cmp.Compare(a.tid, b.tid))
	})
	for _, th := range ths {
		if err := t.flushHeld(th, nil); err != nil {
			return err
		}
	}
	return t.pw.w.Flush()
}

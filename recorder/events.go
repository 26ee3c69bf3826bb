package recorder

import (
	"cmp"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

// pollInterval is how often the reader drains the ring when nothing woke
// it: successful calls are submitted without a wake-up, so this bounds how
// long they wait (the flush interval adds the rest).
const pollInterval = 25 * time.Millisecond

// idlePollInterval is how often the reader drains the ring once it has
// found nothing for idleAfter polls in a row: a recorder left running
// while nothing calls CUDA wakes rarely. A call burst still wakes it (the
// probes force a wake-up every so many calls) and a failure at once.
const (
	idlePollInterval = 250 * time.Millisecond
	idleAfter        = 40
)

// pollAfter is the next poll's wait after quiet empty polls in a row.
func pollAfter(quiet int) time.Duration {
	if quiet >= idleAfter {
		return idlePollInterval
	}
	return pollInterval
}

// recordSource is where ring records come from: a *ringbuf.Reader while
// recording, a list of synthetic records in tests.
type recordSource interface {
	ReadInto(*ringbuf.Record) error
	SetDeadline(time.Time)
}

// stackSource reads a stack id's frames from the probes' stack map.
type stackSource interface {
	Stack(id int32) ([]bpf.StackFrame, error)
}

// handler turns ring records into run.db records: it decodes calls through
// the symbol table, follows process lifecycles and CUDA contexts, stores
// stacks with the files their frames resolve to, and asks the sampler for
// a round at each failure. The session sets it up; once Start runs it,
// the event reader goroutine alone uses it.
type handler struct {
	q       *queue
	stacks  stackSource
	proc    string // /proc
	gpus    []gpuID
	trigger chan<- triggerReq
	freeze  *freezer
	files   *fileIndex
	ids     *buildIDCache
	py      *pythonFinder // nil: Python frames are not read
	// execs is told of each exec record read (nil: nobody waits for it);
	// execDelay lengthens the reading of each (tests: a reader behind).
	execs     execMarks
	execDelay time.Duration
	// pyWait bounds each libpython watch (libpythonWait); watches counts
	// the watches' goroutines, waited for when reading ends.
	pyWait  time.Duration
	watches sync.WaitGroup

	procs      map[uint32]*procState
	late       map[uint32]bool // had libcuda mapped before its probes were in
	stacksSeen map[int32]bool
	rootPID    uint32
	rootExited chan struct{} // closed when the root process exits
	rootDone   bool
	// evict: forget a process once its exit is published (flight mode,
	// where processes come and go for days). epoch is the queue's segment
	// number the processes were last published for. tracked counts the
	// processes known, for the metrics.
	evict   bool
	epoch   uint64
	tracked atomic.Int64
	// exited, when set, is told that a process was forgotten (sweep.go).
	exited *atomic.Bool
	// failedCall, when set, is told of each failed application call.
	failedCall func(e *store.Event, sym *cuda.Symbol, gpu int, p *store.Process)

	vmas *bpf.VMAs // the mappings record of the capture whose stack comes next
	// pyst is the Python frames record of the capture whose stack comes
	// next; namer, when set, names each capture (naming.go); keepBytes
	// stores the raw captures too (--keep-stack-bytes).
	pyst      *store.PyStack
	namer     chan<- nameJob
	keepBytes bool
	raw       cuda.Raw // scratch: decoding one call
	call      bpf.Call
	pr        bpf.Proc
}

func newHandler(q *queue, stacks stackSource, gpus []gpuID, trigger chan<- triggerReq, fz *freezer, files *fileIndex, ids *buildIDCache) *handler {
	return &handler{q: q, stacks: stacks, proc: "/proc", gpus: gpus, trigger: trigger, freeze: fz, files: files, ids: ids,
		procs: map[uint32]*procState{}, late: map[uint32]bool{}, stacksSeen: map[int32]bool{},
		rootExited: make(chan struct{}), pyWait: libpythonWait}
}

// run reads records until the ring is flushed and empty after the probes
// were detached (or the reader is closed).
func (h *handler) run(src recordSource) {
	var rec ringbuf.Record
	rec.RawSample = make([]byte, 0, 1024)
	// The deadline is set once per poll interval, not per record: a
	// deadline already past makes a read of an empty ring return at once,
	// and process records are published every interval even when a
	// failure storm keeps the ring busy (a deadline pushed forward on
	// every record would never expire then).
	src.SetDeadline(time.Now().Add(pollInterval))
	quiet := 0 // polls in a row that found nothing
	for {
		err := src.ReadInto(&rec)
		switch {
		case err == nil:
			h.handle(rec.RawSample)
			quiet = -1
		case errors.Is(err, os.ErrDeadlineExceeded):
			h.publish()
			quiet++
			src.SetDeadline(time.Now().Add(pollAfter(quiet)))
		default:
			// ringbuf.ErrFlushed: everything submitted before the flush
			// has been read and the probes are detached, so nothing more
			// will come. Any other error ends reading too.
			h.endWatches()
			h.publish()
			return
		}
	}
}

// handle decodes and handles one ring record.
func (h *handler) handle(raw []byte) {
	if bpf.IsStackRecord(raw) {
		h.onStack(raw)
		return
	}
	if len(raw) > 0 && raw[0] == bpf.KindThread {
		h.onThread(raw)
		return
	}
	kind, err := bpf.Decode(raw, &h.call, &h.pr)
	if err != nil {
		h.q.decodeError()
		return
	}
	switch kind {
	case bpf.KindCall:
		h.onCall(&h.call)
	case bpf.KindProc:
		h.onProc(&h.pr)
	}
}

// onCall decodes one call through the symbol table, attributes it to a
// context and device, and queues it. A failure triggers an immediate NVML
// sample of its GPU.
func (h *handler) onCall(c *bpf.Call) {
	if int(c.Symbol) >= len(cuda.Symbols) {
		h.q.decodeError()
		return
	}
	sym := &cuda.Symbols[c.Symbol]
	e := h.event(c, sym)
	p := h.process(c.Pid, int64(c.TsEntry))
	p.annotate(&e, sym, h.gpus)
	if p.rec.AttachedLate {
		e.Flags |= store.EventLateAttach
	}
	if e.Result != 0 && e.Depth == 0 {
		// The sample first: reading /proc and ELF files for the stack
		// below can take milliseconds (the loader cache is an exec), and
		// every one of them puts the sample further from the failure.
		h.failed(&e, sym, p)
	}
	if p.mapsAt == 0 || (e.Result != 0 && e.Stack >= 0 && e.End-p.mapsAt > int64(time.Second)) {
		// Executable mappings, for symbolizing stacks at analysis time:
		// at the first call (libcuda is loaded by then), and again at a
		// failure with a stack (a library loaded since), at most once a
		// second per process: a failure storm must not make the reader
		// re-read /proc and every ELF file.
		h.readMaps(p, c.Pid)
		p.mapsAt = e.End
	}
	frames, files := h.stack(&e, p)
	if !h.q.addCall(&e, frames, files, false) {
		// A new segment of a flight recording: its stacks are stored again.
		clear(h.stacksSeen)
		frames, files = h.stack(&e, p)
		h.q.addCall(&e, frames, files, true)
	}
}

// maxThreadNames bounds the thread names one process record keeps: a
// process whose every thread fails names its first ones.
const maxThreadNames = 1024

// onThread keeps the name of a thread at its first failed call in its
// process's record; later failures of the same thread keep the first name.
func (h *handler) onThread(raw []byte) {
	var th bpf.Thread
	if err := bpf.DecodeThread(raw, &th); err != nil {
		h.q.decodeError()
		return
	}
	p := h.process(th.Pid, int64(th.TsExit))
	if th.Name == "" || len(p.rec.Threads) >= maxThreadNames || p.rec.ThreadName(th.Tid) != "" {
		return
	}
	p.rec.Threads = append(p.rec.Threads, store.Thread{TID: th.Tid, Name: th.Name, Time: int64(th.TsExit)})
	p.dirty = true
}

// event converts a call record into an event (fields decoded, flags
// translated).
func (h *handler) event(c *bpf.Call, sym *cuda.Symbol) store.Event {
	// h.raw is reused: Decode hands it to the symbol's SizeFrom, which
	// would make a local escape to the heap on every event. Decode copies
	// what it keeps (the key).
	h.raw = c.Raw()
	// The probes' call flags are the stored flags, bit for bit (forensic.h).
	e := store.Event{
		Symbol: c.Symbol, PID: c.Pid, TID: c.Tid, Start: int64(c.TsEntry), End: int64(c.TsExit),
		Result: c.Result, Depth: c.Depth, Flags: c.Flags, Fields: sym.Decode(&h.raw), Dev: -1, Stack: c.StackId,
	}
	if e.Stack < 0 {
		e.Stack = -1
	}
	return e
}

// readMaps reads a process's executable mappings into its record (merged
// with those seen before, see mergeMaps) and the file index, and looks
// for a CPython interpreter among them; a process already gone keeps what
// it had.
func (h *handler) readMaps(p *procState, pid uint32) []store.Mapping {
	// The root first: a process that exits while its mappings are read
	// leaves paths through it that still open.
	p.openRoot(h.proc, pid)
	via := p.opener(h.proc, pid)
	maps := readMappings(h.proc, pid, h.ids, via.held)
	if maps != nil {
		p.rec.Maps = mergeMaps(p.rec.Maps, maps)
		p.dirty = true
		h.files.addMaps(maps, "seen", via)
		h.py.locate(p, pid, h.proc)
	}
	return maps
}

// stack returns the frames of an event's stack when it is new, and the
// files its build ids resolve to that are not stored yet. Frames are build
// id + file offset; they are resolved now, while the process may still be
// alive, from the files recorded processes were seen to map, the
// process's current mappings, and the loader cache.
func (h *handler) stack(e *store.Event, p *procState) ([]store.Frame, []store.File) {
	if e.Stack < 0 || h.stacksSeen[e.Stack] {
		return nil, nil
	}
	fs, err := h.stacks.Stack(e.Stack)
	if err != nil {
		return nil, nil
	}
	h.stacksSeen[e.Stack] = true
	frames := framesOf(fs)
	maps := func() []store.Mapping {
		// A build id no recorded mapping had: a library loaded since the
		// mappings were last read. (Runs under the index's lock: it must
		// not call back into the index.)
		if p.mapsAt == e.End {
			return nil // read for this very call
		}
		p.mapsAt = e.End
		ms := readMappings(h.proc, e.PID, h.ids, p.heldRoot())
		if ms != nil {
			p.rec.Maps, p.dirty = ms, true
		}
		return ms
	}
	return frames, h.files.resolve(frames, maps)
}

// failed handles a failed application call: a frozen process is noted
// for continuing, and the sampler is asked for a round now.
func (h *handler) failed(e *store.Event, sym *cuda.Symbol, p *procState) {
	t := store.Trigger{PID: e.PID, TID: e.TID, Symbol: sym.Name, End: e.End, Frozen: e.Flags&store.EventFrozen != 0}
	if t.Frozen {
		h.freeze.froze(e.PID, e.End)
	}
	gpu := gpuOf(p, e.Dev)
	if h.failedCall != nil {
		h.failedCall(e, sym, gpu, &p.rec)
	}
	select {
	case h.trigger <- triggerReq{t, gpu}:
	default:
		// The sampler is far behind; this failure is served by the
		// next round like the ones queued before it.
	}
}

// gpuOf returns the NVML index of a process's CUDA ordinal, or -1.
func gpuOf(p *procState, dev int32) int {
	if dev < 0 {
		return -1
	}
	for _, d := range p.rec.Devices {
		if d.Ordinal == dev {
			return d.GPU
		}
	}
	return -1
}

// process returns the state of a process, creating it from /proc when a
// record arrives from a process not seen before (--all mode, or a process
// tracked before its fork record was read).
func (h *handler) process(pid uint32, t int64) *procState {
	if p, ok := h.procs[pid]; ok {
		h.adoptWatch(p, pid)
		return p
	}
	pi := readProc(h.proc, pid)
	st := store.Process{PID: pid, PPID: pi.PPID, Start: t, Exe: pi.Exe, Args: pi.Args, Cgroup: pi.Cgroup, Env: pi.Env,
		Pod: pi.Pod, AttachedLate: h.late[pid]}
	p := newProcState(st)
	h.procs[pid] = p
	return p
}

// addRunning records processes that were running when recording started,
// from /proc, as of t; those already known keep their records, and those
// gone meanwhile get none (they hold nothing any more).
func (h *handler) addRunning(pids []uint32, t int64) {
	for _, pid := range pids {
		if _, ok := h.procs[pid]; ok {
			continue
		}
		if _, alive := readPPID(h.proc, pid); !alive {
			continue
		}
		p := h.process(pid, t)
		p.rec.Comm = readComm(h.proc, pid)
		h.readMaps(p, pid)
	}
}

// addRoot registers the spawned command or --pid target before any of its
// records can be read.
func (h *handler) addRoot(p store.Process) {
	p.Root = true
	h.rootPID = p.PID
	h.procs[p.PID] = newProcState(p)
}

// onProc follows the lifecycle of tracked processes.
func (h *handler) onProc(e *bpf.Proc) {
	ts := int64(e.Ts)
	switch e.What {
	case bpf.ProcFork:
		h.forked(e, ts)
	case bpf.ProcExec, bpf.ProcFirstCall:
		h.executed(e, ts)
	case bpf.ProcExit:
		p := h.process(e.Pid, ts)
		p.rec.Exit = store.ExitFromWaitStatus(ts, e.ExitCode)
		p.dirty = true
		p.closeRoot() // its captures' files were found before this record
		p.stopWatch()
		h.name(nameJob{forget: e.Pid})
		h.freeze.resume(e.Pid)
		if e.Pid == h.rootPID && !h.rootDone {
			h.rootDone = true
			close(h.rootExited)
		}
	}
}

// forked records a new process; fork copies the parent's environment.
func (h *handler) forked(e *bpf.Proc, ts int64) {
	if old, ok := h.procs[e.Pid]; ok && old.rec.Exit == nil && old.rec.Root {
		return // the spawned root: keep its record
	}
	st := store.Process{PID: e.Pid, PPID: e.Ppid, Start: ts, Comm: bpf.CString(e.Comm[:]), CgroupID: e.CgroupId}
	if parent := h.procs[e.Ppid]; parent != nil {
		h.adoptWatch(parent, e.Ppid)
		st.Env = parent.rec.Env
		st.Exe, st.Args = parent.rec.Exe, parent.rec.Args
		st.Cgroup, st.Pod = parent.rec.Cgroup, parent.rec.Pod
		// The same program in a copy of the parent's address space: the
		// probes gave the child the parent's interpreter too.
		st.Python = parent.rec.Python
		h.py.inherit(e.Pid, st.Python)
	}
	h.procs[e.Pid] = newProcState(st)
}

// executed records an exec (or, with --all, an untracked process's first
// call) with what BPF captured and what /proc still shows.
func (h *handler) executed(e *bpf.Proc, ts int64) {
	p := h.process(e.Pid, ts)
	exe := e.Exe()
	if e.What == bpf.ProcExec {
		// A new program: neither the name nor the arguments of the one
		// before (the parent's, copied at fork) describe it.
		p.rec.Exe, p.rec.Args, p.rec.ArgsCut = exe, nil, false
	} else if exe != "" {
		p.rec.Exe = exe
	}
	if e.Flags&bpf.ProcArgsFault == 0 && e.ArgsLen > 0 {
		p.rec.Args, p.rec.ArgsCut = e.Argv(), e.Flags&bpf.ProcArgsCut != 0
	}
	p.rec.Comm = bpf.CString(e.Comm[:])
	p.rec.CgroupID = e.CgroupId
	// The executable is mapped now: keep its mappings (and build ids) for
	// symbolizing its stacks. Those of the program before the exec, and
	// its interpreter, are gone. First of all that is read here: a Python
	// program can fail its first CUDA call tens of milliseconds after its
	// exec, and its frames are read only once its interpreter is located.
	if e.What == bpf.ProcExec {
		time.Sleep(h.execDelay)
		p.rec.Maps, p.rec.Python = nil, nil
		p.closeRoot()
		p.stopWatch()
	}
	h.readMaps(p, e.Pid)
	watching := false
	if e.What == bpf.ProcExec {
		watching = h.watchLibpython(p, e.Pid, fileKey{e.ExeDev, e.ExeIno}, e.Ts)
	}
	if pi := readProc(h.proc, e.Pid); pi.Readable {
		if sameProgram(h.proc, e) {
			if exe == "" || e.Flags&bpf.ProcFilenameCut != 0 {
				p.rec.Exe = cmp.Or(pi.Exe, p.rec.Exe)
			}
			if (p.rec.Args == nil || p.rec.ArgsCut) && extendsArgs(pi.Args, p.rec.Args) {
				p.rec.Args, p.rec.ArgsCut = pi.Args, false
			}
		}
		p.rec.Cgroup, p.rec.Pod = pi.Cgroup, pi.Pod
		if pi.EnvRead {
			// exec may change the environment; a process already exiting
			// keeps the one it inherited.
			p.rec.Env = pi.Env
			p.vis = visibilityOf(pi.Env)
		}
	}
	if p.rec.PPID == 0 {
		// The probe read the parent as the record was made: a process
		// gone before its record is read has no /proc to ask.
		p.rec.PPID = e.Ppid
	}
	if e.What == bpf.ProcFirstCall {
		p.rec.AttachedLate = h.late[e.Pid]
	}
	if p.root != nil {
		// A chroot'ed program's file as it named it, not under the
		// chroot directory (see mappedPath).
		if root, err := os.Readlink(filepath.Join(h.proc, strconv.FormatUint(uint64(e.Pid), 10), "root")); err == nil {
			p.rec.Exe, _ = mappedPath("", root, p.rec.Exe)
		}
	}
	p.dirty = true
	if e.What == bpf.ProcExec && !watching {
		h.markRead(e.Pid, e.Ts) // a hold at a libcuda mapping waits for this
	}
}

// sameProgram says whether /proc/PID/exe still names the file the record
// says the process runs: a process that exits or execs again before its
// record is read shows another program there, or none. A record that
// names no file (inode 0) trusts /proc.
func sameProgram(procRoot string, e *bpf.Proc) bool {
	return runsFile(procRoot, e.Pid, fileKey{e.ExeDev, e.ExeIno})
}

// extendsArgs says whether full is the argument list cut (or empty)
// begins: what /proc shows of the same program, uncut, unless the process
// rewrote its arguments since.
func extendsArgs(full, cut []string) bool {
	if len(full) < len(cut) {
		return false
	}
	for i, a := range cut {
		if i == len(cut)-1 {
			return strings.HasPrefix(full[i], a)
		}
		if full[i] != a {
			return false
		}
	}
	return len(full) > 0
}

// publish queues the records of processes that changed.
func (h *handler) publish() {
	h.segmentBegun()
	var out []store.Process
	for pid, p := range h.procs {
		h.adoptWatch(p, pid)
		if p.dirty {
			rec := p.rec
			rec.Devices = append([]store.DeviceMap(nil), p.rec.Devices...)
			rec.Contexts = append([]store.Context(nil), p.rec.Contexts...)
			out = append(out, rec)
			p.dirty = false
		} else if h.evict && p.rec.Exit != nil {
			h.forget(pid) // its exit was published by an earlier call
		}
	}
	h.tracked.Store(int64(len(h.procs)))
	if len(out) > 0 {
		h.q.addProcesses(out)
	}
}

// framesOf converts kernel stack frames for storage.
func framesOf(fs []bpf.StackFrame) []store.Frame {
	out := make([]store.Frame, 0, len(fs))
	for _, f := range fs {
		switch f.Status {
		case bpf.StackBuildID:
			out = append(out, store.Frame{BuildID: hex.EncodeToString(f.BuildID[:]), Offset: f.Value})
		case bpf.StackIP:
			out = append(out, store.Frame{IP: f.Value})
		}
	}
	return out
}

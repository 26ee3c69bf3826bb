package recorder

import (
	"encoding/hex"
	"errors"
	"os"
	"syscall"
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

// maxPending bounds the events waiting for the writer. When the writer
// falls behind, the reader stops reading, the ring fills, and the probes
// count what they could not deliver: memory stays flat and losses are
// counted, never silent.
const maxPending = 1 << 20

// readEvents reads the ring buffer until it is flushed and empty after the
// probes were detached.
func (r *rec) readEvents() {
	var (
		rec  ringbuf.Record
		call bpf.Call
		proc bpf.Proc
	)
	rec.RawSample = make([]byte, 0, 1024)
	// The deadline is set once per poll interval, not per record: a
	// deadline already past makes a read of an empty ring return at once,
	// and process records are published every interval even when a
	// failure storm keeps the ring busy (a deadline pushed forward on
	// every record would never expire then).
	r.reader.SetDeadline(time.Now().Add(pollInterval))
	for {
		err := r.reader.ReadInto(&rec)
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			r.publishProcesses()
			r.reader.SetDeadline(time.Now().Add(pollInterval))
			continue
		default:
			// ringbuf.ErrFlushed: everything submitted before the flush
			// has been read and the probes are detached, so nothing more
			// will come. Any other error ends reading too.
			r.publishProcesses()
			return
		}
		kind, err := bpf.Decode(rec.RawSample, &call, &proc)
		if err != nil {
			r.mu.Lock()
			r.stats.DecodeErrors++
			r.mu.Unlock()
			continue
		}
		switch kind {
		case bpf.KindCall:
			r.onCall(&call)
		case bpf.KindProc:
			r.onProc(&proc)
		}
	}
}

// onCall decodes one call through the symbol table, attributes it to a
// context and device, and queues it. A failure triggers an immediate NVML
// sample of its GPU.
func (r *rec) onCall(c *bpf.Call) {
	if int(c.Symbol) >= len(cuda.Symbols) {
		r.mu.Lock()
		r.stats.DecodeErrors++
		r.mu.Unlock()
		return
	}
	sym := &cuda.Symbols[c.Symbol]
	// r.raw is reused: Decode hands it to the symbol's SizeFrom, which
	// would make a local escape to the heap on every event. Decode copies
	// what it keeps (the key).
	r.raw = c.Raw()
	e := store.Event{
		Symbol: c.Symbol, PID: c.Pid, TID: c.Tid, Start: int64(c.TsEntry), End: int64(c.TsExit),
		Result: c.Result, Depth: c.Depth, Flags: c.Flags, Fields: sym.Decode(&r.raw), Dev: -1, Stack: c.StackId,
	}
	if e.Stack < 0 {
		e.Stack = -1
	}
	p := r.proc(c.Pid, int64(c.TsEntry))
	p.annotate(&e, sym, r.gpus)
	if p.rec.AttachedLate {
		e.Flags |= store.EventLateAttach
	}
	if p.mapsAt == 0 || (e.Result != 0 && e.Stack >= 0 && e.End-p.mapsAt > int64(time.Second)) {
		// Executable mappings, for symbolizing stacks at analysis time:
		// at the first call (libcuda is loaded by then), and again at a
		// failure with a stack (a library loaded since), at most once a
		// second per process: stacks are stored as build id and offset, so
		// this is only to know which files to look in, and a failure storm
		// must not make the reader re-read /proc and every ELF file.
		if maps := readMappings("/proc", c.Pid, r.buildIDs); maps != nil {
			p.rec.Maps = maps
			p.dirty = true
		}
		p.mapsAt = e.End
	}
	var frames []store.Frame
	if e.Stack >= 0 && !r.stacksSeen[e.Stack] {
		if fs, err := r.objs.Stack(e.Stack); err == nil {
			frames = framesOf(fs)
			r.stacksSeen[e.Stack] = true
		}
	}

	r.mu.Lock()
	for len(r.pending.Events) >= maxPending && r.writeErr == nil {
		r.room.Wait()
	}
	r.pending.Events = append(r.pending.Events, e)
	r.stats.Events++
	if frames != nil {
		r.pending.Stacks[e.Stack] = frames
	}
	if e.Result != 0 && e.Depth == 0 {
		t := store.Trigger{PID: e.PID, TID: e.TID, Symbol: sym.Name, End: e.End, Frozen: e.Flags&store.EventFrozen != 0}
		if t.Frozen {
			r.frozen[e.PID] = &frozenProc{callEnd: e.End}
			limit := r.cfg.FreezeLimit
			pid := e.PID
			time.AfterFunc(limit-time.Duration(now()-e.End), func() { r.resume(pid) })
		}
		gpu := r.gpuOf(p, e.Dev)
		r.mu.Unlock()
		select {
		case r.triggers <- triggerReq{t, gpu}:
		default:
			// The sampler is far behind; this failure is served by the
			// next round like the ones queued before it.
		}
		return
	}
	r.mu.Unlock()
}

// gpuOf returns the NVML index of a process's CUDA ordinal, or -1.
func (r *rec) gpuOf(p *procState, dev int32) int {
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

// proc returns the state of a process, creating it from /proc when a call
// arrives from a process not seen before (--all mode, or a process tracked
// before its fork record was read).
func (r *rec) proc(pid uint32, t int64) *procState {
	r.mu.Lock()
	p, ok := r.procs[pid]
	r.mu.Unlock()
	if ok {
		return p
	}
	pi := readProc("/proc", pid)
	st := store.Process{PID: pid, PPID: pi.PPID, Start: t, Exe: pi.Exe, Args: pi.Args, Cgroup: pi.Cgroup, Env: pi.Env}
	st.AttachedLate = r.lateAtStart[pid]
	p = newProcState(st)
	r.mu.Lock()
	r.procs[pid] = p
	r.mu.Unlock()
	return p
}

// onProc follows the lifecycle of tracked processes.
func (r *rec) onProc(e *bpf.Proc) {
	ts := int64(e.Ts)
	switch e.What {
	case bpf.ProcFork:
		r.mu.Lock()
		parent := r.procs[e.Ppid]
		r.mu.Unlock()
		st := store.Process{PID: e.Pid, PPID: e.Ppid, Start: ts, Comm: bpf.CString(e.Comm[:]), CgroupID: e.CgroupId}
		if parent != nil {
			// fork copies the environment; exec may change it.
			st.Env = parent.rec.Env
			st.Exe, st.Args = parent.rec.Exe, parent.rec.Args
		}
		p := newProcState(st)
		r.mu.Lock()
		if old, ok := r.procs[e.Pid]; ok && old.rec.Exit == nil && old.rec.Root {
			p = old // the spawned root: keep its record
		} else {
			r.procs[e.Pid] = p
		}
		r.mu.Unlock()
	case bpf.ProcExec, bpf.ProcFirstCall:
		p := r.proc(e.Pid, ts)
		if fn := bpf.CString(e.Filename[:]); fn != "" {
			p.rec.Exe = fn
		}
		if args := bpf.Args(e.Args[:]); len(args) > 0 {
			p.rec.Args = args
		}
		p.rec.Comm = bpf.CString(e.Comm[:])
		p.rec.CgroupID = e.CgroupId
		pi := readProc("/proc", e.Pid)
		if pi.Readable {
			if pi.Exe != "" {
				p.rec.Exe = pi.Exe
			}
			p.rec.Cgroup = pi.Cgroup
			p.rec.Env = pi.Env
			p.vis = visibilityOf(pi.Env)
			if p.rec.PPID == 0 {
				p.rec.PPID = pi.PPID
			}
		}
		if e.What == bpf.ProcFirstCall {
			p.rec.AttachedLate = r.lateAtStart[e.Pid]
		}
		// The executable is mapped now and the process is surely alive:
		// keep its mappings (and build ids) for symbolizing its stacks.
		if maps := readMappings("/proc", e.Pid, r.buildIDs); maps != nil {
			p.rec.Maps = maps
		}
		p.dirty = true
	case bpf.ProcExit:
		p := r.proc(e.Pid, ts)
		p.rec.Exit = store.ExitFromWaitStatus(ts, e.ExitCode)
		p.dirty = true
		r.resume(e.Pid)
		if e.Pid == r.rootPID {
			r.rootOnce.Do(func() { close(r.rootExited) })
		}
	}
}

// publishProcesses queues the records of processes that changed.
func (r *rec) publishProcesses() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.procs {
		if p.dirty {
			rec := p.rec
			rec.Devices = append([]store.DeviceMap(nil), p.rec.Devices...)
			rec.Contexts = append([]store.Context(nil), p.rec.Contexts...)
			r.pending.Processes = append(r.pending.Processes, rec)
			p.dirty = false
		}
	}
}

// resume continues a process stopped by --freeze-on-failure, once.
func (r *rec) resume(pid uint32) {
	r.mu.Lock()
	f := r.frozen[pid]
	if f == nil || f.resumed {
		r.mu.Unlock()
		return
	}
	f.resumed = true
	f.resumeAt = now()
	r.mu.Unlock()
	syscall.Kill(int(pid), syscall.SIGCONT)
}

// resumeAll continues every process still frozen (at shutdown).
func (r *rec) resumeAll() {
	r.mu.Lock()
	var pids []uint32
	for pid, f := range r.frozen {
		if !f.resumed {
			pids = append(pids, pid)
		}
	}
	r.mu.Unlock()
	for _, pid := range pids {
		r.resume(pid)
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

// Package recorder records a reproduction: it attaches forensic's eBPF
// probes to libcuda, follows the workload's processes, samples NVML, reads
// the kernel log, and writes everything to a run.db through package store.
//
// Run is the whole job. Its goroutines each own one thing: the event
// reader owns the ring buffer and the process/context trackers, the sampler
// owns NVML, the writer owns the bbolt file. They meet in one pending batch
// that the writer commits every FlushInterval.
package recorder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/recorder/sampler"
	"github.com/retrivium/forensic/store"
)

// Version is forensic's version, stored with every run.
var Version = "0.1.0-dev"

// Errors a CLI maps to one line.
var (
	ErrNotRoot   = errors.New("recording needs root (CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN): run it with sudo")
	ErrNoCommand = errors.New("nothing to record: give -- CMD, --pid PID or --all")
)

// Config says what to record and how.
type Config struct {
	// Output is the run.db to create; Force replaces an existing finished
	// run (never a live one or another kind of file).
	Output string
	Force  bool
	// Invoker, when set, is the user who ran forensic through sudo: run.db
	// is theirs, the marker socket accepts them besides root, and the
	// workload runs as them unless AsRoot.
	Invoker *Invoker
	AsRoot  bool
	// Exactly one of Command (spawn mode), PID or All.
	Command []string
	PID     int
	All     bool
	// LibCUDA lists libcuda files to attach to; empty: search.
	LibCUDA []string
	// NVML is the libnvidia-ml path ("" = the loader's libnvidia-ml.so.1).
	NVML string
	// Interval is the NVML sampling period (default 100 ms).
	Interval time.Duration
	// FlushInterval bounds how long a record waits before it is committed
	// (default 100 ms).
	FlushInterval time.Duration
	// RingBytes sizes the ring buffer (default 16 MiB).
	RingBytes int
	// Stacks captures the user stack of every device allocation, not only
	// of failures.
	Stacks bool
	// Freeze stops a process at a failed call until its GPUs are sampled,
	// for at most FreezeLimit (default 50 ms).
	Freeze      bool
	FreezeLimit time.Duration
	// Duration stops recording after this long (0: until the workload
	// exits or a signal arrives).
	Duration time.Duration
	// NoKmsg skips the kernel log.
	NoKmsg bool
	// SampleBudget bounds periodic sample rounds kept at each thinning
	// rate (default 36000: an hour at 100 ms before thinning starts).
	SampleBudget int
	// DiskReserve is the free space below which the recorder stops writing
	// (default store.DefaultReserve).
	DiskReserve uint64
	// Stdin, Stdout, Stderr are the workload's (default: the recorder's).
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Log receives the recorder's own one-line messages (default stderr).
	Log io.Writer
	// Signals, when set, are the recorder's stop requests: the first stops
	// recording (and is passed on to the workload unless it is SIGINT,
	// which a terminal already sent to the workload's process group); a
	// second makes Run return at once.
	Signals <-chan os.Signal
	// Ready, when set, is called once probes are attached, before the
	// workload starts.
	Ready func()
}

// Result is how a recording ended.
type Result struct {
	Path string
	// ExitCode is the spawned workload's exit status (128+signal when a
	// signal killed it); 0 in --pid and --all modes.
	ExitCode int
	Stop     store.StopInfo
}

func (c *Config) defaults() error {
	modes := 0
	if len(c.Command) > 0 {
		modes++
	}
	if c.PID != 0 {
		modes++
	}
	if c.All {
		modes++
	}
	if modes == 0 {
		return ErrNoCommand
	}
	if modes > 1 {
		return errors.New("give only one of -- CMD, --pid and --all")
	}
	if c.Output == "" {
		return errors.New("no output file: give -o run.db")
	}
	if c.Interval == 0 {
		c.Interval = 100 * time.Millisecond
	}
	if c.Interval < time.Millisecond {
		return fmt.Errorf("--interval %v is below 1ms", c.Interval)
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = 100 * time.Millisecond
	}
	if c.FreezeLimit == 0 {
		c.FreezeLimit = 50 * time.Millisecond
	}
	if c.SampleBudget == 0 {
		c.SampleBudget = 36000
	}
	if c.DiskReserve == 0 {
		c.DiskReserve = store.DefaultReserve
	}
	if c.RingBytes == 0 {
		c.RingBytes = bpf.DefaultRingBytes
	}
	if c.Stdin == nil {
		c.Stdin = os.Stdin
	}
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	if c.Log == nil {
		c.Log = os.Stderr
	}
	return nil
}

// now reads the run clock.
func now() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// CheckPrivileges reports ErrNotRoot unless the process can load and
// attach tracing programs.
func CheckPrivileges() error {
	if os.Geteuid() == 0 {
		return nil
	}
	var hdr unix.CapUserHeader
	var data [2]unix.CapUserData
	hdr.Version = unix.LINUX_CAPABILITY_VERSION_3
	if err := unix.Capget(&hdr, &data[0]); err == nil {
		has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
		if has(unix.CAP_SYS_ADMIN) || (has(unix.CAP_BPF) && has(unix.CAP_PERFMON)) {
			return nil
		}
	}
	return ErrNotRoot
}

type frozenProc struct {
	callEnd  int64
	resumed  bool
	resumeAt int64
}

// rec is one recording in progress.
type rec struct {
	cfg   Config
	objs  *bpf.Objects
	w     *store.Writer
	smp   *sampler.Sampler
	gpus  []gpuID
	start int64

	// linkMu guards probeLinks and attached: the library watcher attaches
	// while the main goroutine may detach.
	linkMu     sync.Mutex
	probeLinks []link.Link
	attached   map[[2]uint64]bool
	detached   bool
	lifeLinks  []link.Link
	reader     *ringbuf.Reader

	// mu guards pending, stats and frozen.
	mu      sync.Mutex
	pending store.Batch
	spare   store.Batch
	stats   store.Stats
	delays  []int64
	frozen  map[uint32]*frozenProc
	// room is signalled when the writer takes the pending batch.
	room *sync.Cond

	countersAt int64 // when flush last read the loss counters (writer goroutine)

	round uint64 // sample rounds taken (the sampler goroutine owns it after the first)
	// triggers asks the sampler for a round now, for a failed call on a GPU.
	triggers chan triggerReq
	// stopWriting is closed when the writer gives up (disk full, I/O
	// error); writeErr says why.
	stopWriting chan struct{}
	writeOnce   sync.Once
	writeErr    error
	stopInfo    store.StopInfo
	identity    *store.Identity // read at the start, for the stop's clock bound
	closers     []func()
	// kmsgOffset is the kernel log clock's offset from the run clock, and
	// kmsgError its uncertainty (-1: not measured).
	kmsgOffset, kmsgError int64
	// buildIDs is the event reader's cache of ELF build ids.
	buildIDs buildIDCache

	// event-reader state
	raw         cuda.Raw // scratch for decoding one call
	procs       map[uint32]*procState
	lateAtStart map[uint32]bool
	stacksSeen  map[int32]bool
	rootPID     uint32
	rootExited  chan struct{}
	rootOnce    sync.Once
	// stopSignal names the signal that stopped the recording.
	stopSignal string
}

// Run records until the workload exits (spawn mode), the target exits
// (--pid), Duration passes, ctx is cancelled or a signal arrives.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if err := CheckPrivileges(); err != nil {
		return nil, err
	}
	if len(cfg.Command) > 0 {
		if _, err := LookCommand(cfg.Command[0], cfg.workloadUser()); err != nil {
			return nil, err
		}
	}
	if cfg.PID != 0 {
		if err := syscall.Kill(cfg.PID, 0); err != nil && !errors.Is(err, syscall.EPERM) {
			return nil, fmt.Errorf("--pid %d: no such process", cfg.PID)
		}
	}
	find := FindOptions{Explicit: cfg.LibCUDA, LibraryPath: os.Getenv("LD_LIBRARY_PATH"), All: cfg.All}
	if cfg.PID != 0 {
		find.PIDs = append([]uint32{uint32(cfg.PID)}, descendants("/proc", uint32(cfg.PID))...)
	}
	libs, err := FindLibCUDA(find)
	if err != nil {
		return nil, err
	}

	r := &rec{cfg: cfg, frozen: map[uint32]*frozenProc{}, triggers: make(chan triggerReq, 4096),
		stopWriting: make(chan struct{}), procs: map[uint32]*procState{},
		stacksSeen: map[int32]bool{}, rootExited: make(chan struct{}), buildIDs: buildIDCache{}}
	r.room = sync.NewCond(&r.mu)
	r.pending.Stacks = map[int32][]store.Frame{}
	r.spare.Stacks = map[int32][]store.Frame{}

	host, _ := os.Hostname()
	var uts unix.Utsname
	unix.Uname(&uts)
	r.start = now()
	run := store.RunInfo{
		ID: fmt.Sprintf("%d-%d", time.Now().Unix(), os.Getpid()), Version: Version,
		Clock: store.ClockName, ClockStart: r.start, WallStart: time.Now().UTC(),
		Hostname: host, Kernel: unix.ByteSliceToString(uts.Release[:]),
		Command: cfg.Command, RecorderPID: os.Getpid(), Interval: cfg.Interval,
		FlushInterval: cfg.FlushInterval, RingBytes: cfg.RingBytes, Stacks: cfg.Stacks,
		FreezeOnFailure: cfg.Freeze, NVMLLibrary: cfg.NVML,
	}
	if cfg.Freeze {
		run.FreezeLimit = cfg.FreezeLimit
	}
	run.Identity = startIdentity(ctx, cfg)
	r.identity = run.Identity
	switch {
	case len(cfg.Command) > 0:
		run.Mode = "spawn"
		run.Env = FilterEnv(os.Environ())
	case cfg.PID != 0:
		run.Mode, run.TargetPID = "pid", uint32(cfg.PID)
	default:
		run.Mode = "all"
	}
	names := make([]string, len(cuda.Symbols))
	for i, s := range cuda.Symbols {
		names[i] = s.Name
	}
	r.w, err = store.Create(cfg.Output, store.CreateOptions{Force: cfg.Force, Owner: cfg.Invoker.Owner()}, run, names)
	if err != nil {
		return nil, err
	}
	r.w.Reserve = cfg.DiskReserve
	// Everything acquired from here is released once, in reverse order:
	// at shutdown (before waiting for a workload that outlives the
	// recording, so run.db is readable and no probe stays), or on an early
	// error return.
	defer r.release()
	r.onRelease(func() { r.w.Close() })

	r.objs, err = bpf.Load(bpf.Options{TraceAll: cfg.All, FreezeOnFailure: cfg.Freeze,
		RingBytes: cfg.RingBytes, StackAll: cfg.Stacks})
	if err != nil {
		return nil, err
	}
	r.onRelease(func() { r.objs.Close() })
	r.reader, err = r.objs.NewReader()
	if err != nil {
		return nil, fmt.Errorf("ring buffer reader: %w", err)
	}
	r.onRelease(func() { r.reader.Close() })
	if r.lifeLinks, err = r.objs.AttachLifecycle(); err != nil {
		return nil, err
	}
	r.onRelease(func() { closeLinks(&r.lifeLinks) })
	r.onRelease(r.detachProbes)
	if run.Mode == "pid" {
		// Before any probe: a thread decides at its first call whether it
		// is recorded, and keeps that answer.
		r.trackExisting(uint32(cfg.PID))
	}
	attached := 0
	r.attached = map[[2]uint64]bool{}
	for _, lf := range libs {
		lib := r.attach(lf)
		attached += len(lib.Attached)
		r.attached[[2]uint64{lf.Dev, lf.Ino}] = true
		r.pending.Libraries = append(r.pending.Libraries, lib)
	}
	if attached == 0 {
		return nil, fmt.Errorf("no symbol of the table could be attached in %s", libs[0].HostPath)
	}

	// NVML before the workload, so the first sample precedes its calls.
	r.smp = sampler.Open(cfg.NVML, now)
	r.onRelease(r.smp.Close)
	inv := r.smp.Inventory()
	r.pending.Inventory = &inv
	for _, g := range inv.GPUs {
		id := gpuID{Index: g.Index}
		if g.UUID.Value != nil {
			id.UUID = *g.UUID.Value
		}
		if g.PCIBusID.Value != nil {
			id.BusID = *g.PCIBusID.Value
		}
		if g.Name.Value != nil {
			id.Name = *g.Name.Value
		}
		for _, m := range g.MIG {
			u := ""
			if m.UUID.Value != nil {
				u = *m.UUID.Value
			}
			id.MIG = append(id.MIG, u)
		}
		r.gpus = append(r.gpus, id)
	}
	if !r.smp.OK() {
		fmt.Fprintf(cfg.Log, "forensic: NVML did not start (%s from %s): recording calls without memory samples\n",
			inv.Init.Name, inv.Library)
	}

	var wg sync.WaitGroup
	eventsDone := make(chan struct{})
	go func() { defer close(eventsDone); r.readEvents() }()
	writerStop := make(chan struct{})
	wg.Add(1)
	go func() { defer wg.Done(); r.writeLoop(writerStop) }()
	samplerStop := make(chan struct{})
	samplerDone := make(chan struct{})
	// The first round is taken before the workload runs, so every run has a
	// sample of the state it started from.
	r.firstRound()
	go func() { defer close(samplerDone); r.sampleLoop(samplerStop) }()

	watchStop := make(chan struct{})
	watchDone := make(chan struct{})
	if len(cfg.LibCUDA) == 0 {
		go func() { defer close(watchDone); r.watchLibraries(watchStop) }()
	} else {
		close(watchDone)
	}
	defer func() {
		select {
		case <-watchStop:
		default:
			close(watchStop)
		}
		<-watchDone
	}()

	var kmsg *os.File
	if !cfg.NoKmsg {
		if kmsg, err = openKmsg("/dev/kmsg"); err != nil {
			fmt.Fprintf(cfg.Log, "forensic: kernel log not recorded: %v\n", err)
		} else {
			keep := func(l store.KernelLog) {
				r.mu.Lock()
				r.pending.Kmsg = append(r.pending.Kmsg, l)
				r.stats.KernelLines++
				r.mu.Unlock()
			}
			note := fmt.Sprintf("forensic[%d]: recording %s (run %s); this line aligns the kernel log's clock",
				os.Getpid(), cfg.Output, run.ID)
			offset, unc, before, err := calibrateKmsg(kmsg, note)
			if err != nil {
				fmt.Fprintf(cfg.Log, "forensic: kernel log times not aligned with the run clock (%v); they may be off by milliseconds\n", err)
				offset, unc = 0, -1
			}
			for _, rec := range before {
				if l, ok := parseKmsg(rec); ok {
					l.Printk, l.Time = l.Time, l.Time-offset
					keep(l)
				}
			}
			r.kmsgOffset, r.kmsgError = offset, unc
			go readKmsg(kmsg, offset, keep)
		}
	}
	var ctl net.Listener
	if addr, err := ControlAddress(cfg.Output); err == nil {
		if ctl, err = net.Listen("unix", addr); err != nil {
			fmt.Fprintf(cfg.Log, "forensic: markers unavailable: %v\n", err)
		} else {
			go control{start: r.start, allow: cfg.Invoker.MayControl, mark: r.mark}.serve(ctl)
		}
	}

	res := &Result{Path: cfg.Output}
	var cmd *exec.Cmd
	var waitErr chan error
	switch run.Mode {
	case "spawn":
		if cfg.Ready != nil {
			cfg.Ready()
		}
		cmd, err = r.spawn()
		if err != nil {
			r.shutdown(ctl, kmsg, samplerStop, samplerDone, eventsDone, writerStop, &wg, "error", err, nil)
			return nil, err
		}
		waitErr = make(chan error, 1)
		go func() { waitErr <- cmd.Wait() }()
	case "pid":
		if cfg.Ready != nil {
			cfg.Ready()
		}
	case "all":
		_, r.lateAtStart = mappedLibCUDA("/proc")
		if cfg.Ready != nil {
			cfg.Ready()
		}
	}

	var timeout <-chan time.Time
	if cfg.Duration > 0 {
		t := time.NewTimer(cfg.Duration)
		defer t.Stop()
		timeout = t.C
	}
	reason := ""
	var workloadExit *store.Exit
	var sig os.Signal
	stopW := r.stopWriting
	pidPoll := time.NewTicker(250 * time.Millisecond)
	defer pidPoll.Stop()
	for reason == "" {
		select {
		case err := <-waitErr:
			workloadExit, res.ExitCode = exitOf(cmd, err)
			reason = "workload-exited"
		case <-r.rootExited:
			if run.Mode == "pid" {
				reason = "target-exited"
			}
		case <-pidPoll.C:
			if run.Mode == "pid" && syscall.Kill(cfg.PID, 0) == syscall.ESRCH {
				reason = "target-exited"
			}
		case <-timeout:
			reason = "duration"
		case <-ctx.Done():
			reason = "cancelled"
		case sig = <-cfg.Signals:
			reason = "signal"
		case <-stopW:
			// Keep the workload running; stop costing it anything.
			r.mu.Lock()
			werr := r.writeErr
			r.mu.Unlock()
			fmt.Fprintf(cfg.Log, "forensic: %s: %v: recording stopped, what was committed is kept; the workload continues\n",
				cfg.Output, werr)
			r.detachProbes()
			stopW = nil
			if waitErr == nil {
				reason = "write-error"
			}
		}
	}
	stopReason := reason
	if reason == "cancelled" || reason == "duration" {
		stopReason = "stopped"
	}
	if sig != nil {
		r.stopSignal = unix.SignalName(sig.(syscall.Signal))
	}
	r.shutdown(ctl, kmsg, samplerStop, samplerDone, eventsDone, writerStop, &wg, stopReason, nil, workloadExit)
	if cmd != nil && workloadExit == nil {
		// Stopped by a signal or cancellation while the workload runs:
		// pass a termination on, then wait for it unless told again.
		if sig != nil && sig != os.Interrupt {
			cmd.Process.Signal(sig)
		}
		if ctx.Err() != nil {
			cmd.Process.Signal(syscall.SIGTERM)
		}
		select {
		case err := <-waitErr:
			_, res.ExitCode = exitOf(cmd, err)
		case <-cfg.Signals:
			res.ExitCode = 130
		}
	}
	res.Stop = r.stopInfo
	return res, nil
}

func closeLinks(ls *[]link.Link) {
	bpf.CloseLinks(*ls)
	*ls = nil
}

// detachProbes removes every uprobe; libraries found later are not
// attached any more.
func (r *rec) detachProbes() {
	r.linkMu.Lock()
	links := r.probeLinks
	r.probeLinks, r.detached = nil, true
	r.linkMu.Unlock()
	bpf.CloseLinks(links)
}

// exitOf converts a workload's wait result into an exit record and the
// status forensic itself exits with.
func exitOf(cmd *exec.Cmd, err error) (*store.Exit, int) {
	ps := cmd.ProcessState
	if ps == nil {
		return nil, 127
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok {
		return nil, ps.ExitCode()
	}
	e := store.ExitFromWaitStatus(now(), int32(ws))
	if ws.Signaled() {
		return e, 128 + int(ws.Signal())
	}
	return e, ws.ExitStatus()
}

// gateScript holds the workload until the recorder has put its pid in the
// tracked set, so its first call is recorded. If the recorder dies first,
// the workload does not run unrecorded.
const gateScript = `read -r _ <&3 || exit 125; exec 3<&-; exec "$@"`

func (r *rec) spawn() (*exec.Cmd, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	cmd := exec.Command("/bin/sh", append([]string{"-c", gateScript, "forensic-gate"}, r.cfg.Command...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r.cfg.Stdin, r.cfg.Stdout, r.cfg.Stderr
	cmd.ExtraFiles = []*os.File{pr}
	cmd.SysProcAttr, cmd.Env = r.cfg.workloadUser().procAttr(os.Environ())
	if err := cmd.Start(); err != nil {
		pw.Close()
		return nil, fmt.Errorf("start %s: %w", r.cfg.Command[0], err)
	}
	pid := uint32(cmd.Process.Pid)
	r.addRoot(pid, r.cfg.Command)
	if err := r.objs.Track(pid); err != nil {
		pw.Close()
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("track workload: %w", err)
	}
	_, err = pw.Write([]byte("go\n"))
	pw.Close()
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("release workload: %w", err)
	}
	return cmd, nil
}

// addRoot registers the spawned command or --pid target before any of its
// events can arrive.
func (r *rec) addRoot(pid uint32, args []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rootPID = pid
	p := store.Process{PID: pid, Start: now(), Root: true, Args: args}
	if len(args) > 0 {
		p.Exe = args[0]
	}
	if r.cfg.PID == 0 {
		p.Env = FilterEnv(os.Environ())
	}
	r.procs[pid] = newProcState(p)
}

// trackExisting starts recording a running process and its descendants.
// Each was running before the recorder: calls it made earlier are not in
// the record, which the analyzer reports.
func (r *rec) trackExisting(pid uint32) {
	pids := append([]uint32{pid}, descendants("/proc", pid)...)
	for i, p := range pids {
		pi := readProc("/proc", p)
		// A process that already maps libcuda may have allocated before
		// the recorder was there.
		_, late := libCUDAOf("/proc", p)
		st := store.Process{PID: p, PPID: pi.PPID, Start: now(), Root: i == 0, Exe: pi.Exe, Args: pi.Args,
			Cgroup: pi.Cgroup, Env: pi.Env, AttachedLate: late}
		r.mu.Lock()
		if i == 0 {
			r.rootPID = p
		}
		r.procs[p] = newProcState(st)
		r.mu.Unlock()
		r.objs.Track(p)
	}
}

// attach puts the probes on every symbol of the table a library exports and
// records which were attached and which were absent.
func (r *rec) attach(lf LibFile) store.Library {
	lib := store.Library{Path: lf.Path, HostPath: lf.HostPath, BuildID: lf.BuildID, Device: lf.Dev, Inode: lf.Ino, Time: now()}
	cov, err := CoverageOf(lf.HostPath)
	if err != nil {
		lib.Error = err.Error()
		return lib
	}
	lib.Absent, lib.Unknown = cov.Absent, cov.Unknown
	ids := make([]int, 0, len(cov.Attach))
	for id := range cov.Attach {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	byOffset := map[uint64]string{}
	var attach []int
	var offsets []uint64
	for _, id := range ids {
		off := cov.Attach[id]
		name := cuda.Symbols[id].Name
		if other, dup := byOffset[off]; dup {
			// Two names for one function: probing both would record each
			// call twice.
			lib.Absent = append(lib.Absent, name+" (alias of "+other+")")
			continue
		}
		byOffset[off] = name
		attach = append(attach, id)
		offsets = append(offsets, off)
	}
	links, err := r.objs.Attach(lf.HostPath, attach, offsets)
	if err != nil {
		lib.Error = err.Error()
		return lib
	}
	r.linkMu.Lock()
	if r.detached {
		r.linkMu.Unlock()
		bpf.CloseLinks(links)
		lib.Error = "recording stopped while attaching"
		return lib
	}
	r.probeLinks = append(r.probeLinks, links...)
	r.linkMu.Unlock()
	for _, id := range attach {
		lib.Attached = append(lib.Attached, cuda.Symbols[id].Name)
	}
	return lib
}

// mark adds a marker (forensic mark).
func (r *rec) mark(label string) (int64, error) {
	t := now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending.Markers = append(r.pending.Markers, store.Marker{Time: t, Label: label})
	return t, nil
}

// shutdown stops everything in order: sampler (final round), probes,
// ring drain, kernel log, control socket, final commit and stop record.
func (r *rec) shutdown(ctl net.Listener, kmsg *os.File, samplerStop, samplerDone, eventsDone, writerStop chan struct{},
	wg *sync.WaitGroup, reason string, runErr error, workload *store.Exit) {
	// No new calls; the reader drains what is left (queuing samples for
	// failures among it), then the sampler serves those and takes the last
	// round.
	r.detachProbes()
	closeLinks(&r.lifeLinks)
	r.reader.Flush()
	<-eventsDone
	close(samplerStop)
	<-samplerDone
	if kmsg != nil {
		kmsg.Close()
	}
	if ctl != nil {
		ctl.Close()
	}
	r.resumeAll()
	st, err := r.objs.Stats()
	r.mu.Lock()
	t := now()
	r.readCounters(st, err, t)
	stats := r.stats
	delays := append([]int64(nil), r.delays...)
	r.mu.Unlock()
	close(writerStop)
	wg.Wait()
	r.stopInfo = store.StopInfo{Time: t, Wall: time.Now().UTC(), Reason: reason, Workload: workload,
		Stats: stats, TriggerDelay: delayStats(delays), KmsgOffset: r.kmsgOffset, KmsgOffsetError: r.kmsgError,
		Signal: r.stopSignal}
	r.stopInfo.Identity = stopIdentity(context.Background(), r.cfg, r.identity, r.processRecords())
	if runErr != nil {
		r.stopInfo.Error = runErr.Error()
	}
	if r.writeErr != nil {
		r.stopInfo.Reason = "write-error"
		r.stopInfo.Error = r.writeErr.Error()
		if errors.Is(r.writeErr, store.ErrDiskFull) {
			r.stopInfo.Reason = "disk-full"
		}
	}
	if err := r.w.Stop(r.stopInfo); err != nil {
		fmt.Fprintf(r.cfg.Log, "forensic: %s: could not write the stop record: %v\n", r.cfg.Output, err)
	}
	r.release()
}

// onRelease registers a cleanup for release.
func (r *rec) onRelease(f func()) { r.closers = append(r.closers, f) }

// release runs the cleanups once, newest first.
func (r *rec) release() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
	r.closers = nil
}

func delayStats(d []int64) store.DelayStats {
	if len(d) == 0 {
		return store.DelayStats{}
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return store.DelayStats{Count: len(d), Median: d[len(d)/2], Max: d[len(d)-1]}
}

// writeLoop commits the pending batch every FlushInterval until stop,
// then once more.
func (r *rec) writeLoop(stop chan struct{}) {
	t := time.NewTicker(r.cfg.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			r.flush()
		case <-stop:
			r.flush()
			return
		}
	}
}

// readCounters takes the probes' loss counters into r.stats and queues a
// reading, so a run whose recorder is killed (no stop record) still has
// them. Called with r.mu held, with the counters read just before.
func (r *rec) readCounters(st bpf.Stats, err error, t int64) {
	if err != nil {
		return
	}
	st.Store(&r.stats)
	r.pending.Drops = append(r.pending.Drops, store.Drops{Time: t, Stats: r.stats})
}

// countersEvery is how often the loss counters are read during a run.
const countersEvery = time.Second

func (r *rec) flush() {
	var st bpf.Stats
	var stErr error
	t := now()
	reading := t-r.countersAt >= int64(countersEvery)
	if reading {
		st, stErr = r.objs.Stats()
		r.countersAt = t
	}
	r.mu.Lock()
	if reading {
		// In the same critical section as taking the batch: the reading's
		// event count is what this commit brings the file to.
		r.readCounters(st, stErr, t)
	}
	b := r.pending
	r.pending = r.spare
	r.spare = store.Batch{}
	if r.pending.Stacks == nil {
		r.pending.Stacks = map[int32][]store.Frame{}
	}
	r.room.Broadcast()
	failed := r.writeErr != nil
	r.mu.Unlock()
	if failed {
		return // after a write error, records are dropped (the stop record says why)
	}
	if err := r.w.Commit(&b); err != nil {
		r.mu.Lock()
		r.writeErr = err
		r.mu.Unlock()
		r.writeOnce.Do(func() { close(r.stopWriting) })
		return
	}
	b.Reset()
	r.mu.Lock()
	r.spare = b
	r.mu.Unlock()
}

// Inventory takes the platform inventory through NVML without recording
// (forensic inventory). An NVML that does not start is reported in it.
func Inventory(nvmlPath string) store.Inventory {
	s := sampler.Open(nvmlPath, now)
	defer s.Close()
	return s.Inventory()
}

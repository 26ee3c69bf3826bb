package recorder

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/metrics"
	"github.com/retrivium/forensic/recorder/sampler"
	"github.com/retrivium/forensic/store"
)

// Session is one recording: New prepares it, Start starts it, Wait waits
// for a reason to stop, Stop ends it. A Session is driven from one
// goroutine.
type Session struct {
	cfg  Config
	run  store.RunInfo
	objs *bpf.Objects
	// events is the ring of calls and lifecycle records, holdRing the map
	// hook's; lifeLinks and hook are the tracepoint programs' links.
	events, holdRing *ringbuf.Reader
	lifeLinks        []link.Link
	hook             link.Link
	// scope limits --all to some cgroups (nil: none).
	scope *scope

	q        *queue
	att      *attacher
	fz       *freezer
	ids      *buildIDCache
	files    *fileIndex
	h        *handler  // the event reader's, once started
	hl       *holder   // the holder's, once started
	smp      *sampling // the sampler's, once started
	wr       *writer   // the writer's, once started
	triggers chan triggerReq

	snapMu                sync.Mutex // one snapshot at a time
	sw                    *sweeper   // flight mode with the map hook
	sweepCh, sweepDone    chan struct{}
	metrics               *metrics.Metrics
	metricsLn             net.Listener
	xid                   func(code int) // told of each Xid line, when set
	eventsFailed          bool           // an event line could not be written (event reader only)
	kmsg                  *os.File
	kmsgOffset, kmsgError int64
	ctl                   net.Listener
	closers               []func()

	// Set by Start.
	workload   *exec.Cmd
	waitErr    chan error
	startErr   error
	samplerCh  chan struct{} // closed to stop the sampler
	writerCh   chan struct{} // closed to stop the writer
	eventsDone chan struct{}
	// namerCh carries stack captures from the event reader to the
	// goroutine that names them (naming.go); closed after the reader ends.
	namerCh    chan nameJob
	namerDone  chan struct{}
	holdsDone  chan struct{}
	smpDone    chan struct{}
	writerDone chan struct{}

	// Set by Wait.
	ctx      context.Context
	reason   string
	sig      os.Signal
	exit     *store.Exit
	exitCode int

	result *Result // set by Stop

	// held is the held-process file the holder and the freezer share.
	held *heldFile
}

// testDelay is the duration in the environment variable name, 0 when it
// is unset or not a duration. The end-to-end tests lengthen, with
// FORENSIC_TEST_HOLD_DELAY, every hold (to kill the recorder while it
// holds a process) and, with FORENSIC_TEST_EXEC_READ_DELAY, the event
// reader's reading of every exec record (a reader behind its ring). Never
// set in production.
func testDelay(name string) time.Duration {
	d, err := time.ParseDuration(os.Getenv(name))
	if err != nil || d < 0 {
		return 0
	}
	return d
}

// New validates cfg and prepares a recording: it creates run.db, loads
// and attaches the BPF programs, finds the processes and libcuda files
// already there (which processes were attached late is decided here,
// before any event is read), opens NVML and takes the first sample round,
// aligns the kernel log's clock and opens the control socket. Nothing runs
// in the background until Start.
func New(cfg Config) (*Session, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	// Processes a killed recorder left stopped on this output run again.
	held := heldPath(cfg.Output, cfg.Flight != nil)
	resumeLeftHeld(held, "/proc", cfg.Log)
	s := &Session{cfg: cfg, q: newQueue(), fz: newFreezer(cfg.FreezeLimit), ids: newBuildIDCache(),
		triggers: make(chan triggerReq, 4096), ctx: context.Background(), held: newHeldFile(held, "/proc")}
	s.fz.held, s.fz.log = s.held, cfg.Log
	s.files = newFileIndex(s.ids)
	for _, step := range []func() error{s.resolveScope, s.createRun, s.loadProbes, s.openNVML, s.openKmsg, s.listen, s.listenMetrics, s.attachStart} {
		if err := step(); err != nil {
			s.release()
			return nil, err
		}
	}
	return s, nil
}

// check refuses what cannot be recorded.
func (c *Config) check() error {
	warnings, err := CheckCapabilities(nil, c.All || c.PID != 0)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		c.Log.Warn(w)
	}
	if len(c.Command) > 0 {
		if _, err := LookCommand(c.Command[0], c.workloadUser()); err != nil {
			return err
		}
	}
	if c.PID != 0 {
		if err := syscall.Kill(c.PID, 0); err != nil && !errors.Is(err, syscall.EPERM) {
			return fmt.Errorf("--pid %d: no such process", c.PID)
		}
	}
	return nil
}

// onRelease registers a cleanup for release.
func (s *Session) onRelease(f func()) { s.closers = append(s.closers, f) }

// release runs the cleanups once, newest first.
func (s *Session) release() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// createRun creates run.db with the run record and the symbol names.
func (s *Session) createRun() error {
	cfg := &s.cfg
	host, _ := os.Hostname()
	var uts unix.Utsname
	unix.Uname(&uts)
	start := now()
	s.run = store.RunInfo{
		ID: fmt.Sprintf("%d-%d", time.Now().Unix(), os.Getpid()), Version: cfg.Build.Version,
		Clock: store.ClockName, ClockStart: start, WallStart: time.Now().UTC(),
		Hostname: host, Kernel: unix.ByteSliceToString(uts.Release[:]),
		Command: cfg.Command, RecorderPID: os.Getpid(), Interval: cfg.Interval,
		FlushInterval: cfg.FlushInterval, RingBytes: cfg.RingBytes, Stacks: cfg.Stacks, KeepStackBytes: cfg.KeepStackBytes,
		FreezeOnFailure: cfg.Freeze, NVMLLibrary: cfg.NVML,
	}
	if cfg.Freeze {
		s.run.FreezeLimit = cfg.FreezeLimit
	}
	s.run.Identity = startIdentity(context.Background(), *cfg)
	switch {
	case len(cfg.Command) > 0:
		s.run.Mode = "spawn"
		s.run.Env = FilterEnv(os.Environ())
	case cfg.PID != 0:
		s.run.Mode, s.run.TargetPID = "pid", uint32(cfg.PID)
	default:
		s.run.Mode = "all"
		s.run.Scope = s.scope.paths()
	}
	names := make([]string, len(cuda.Symbols))
	for i, sym := range cuda.Symbols {
		names[i] = sym.Name
	}
	s.wr = &writer{q: s.q, every: cfg.FlushInterval, log: cfg.Log, path: cfg.Output, failed: make(chan struct{}),
		rotated: s.rotatedStop}
	if cfg.Flight != nil {
		return s.createFlight(names)
	}
	w, err := store.Create(cfg.Output, store.CreateOptions{Force: cfg.Force, Owner: cfg.Invoker.Owner()}, s.run, names)
	if err != nil {
		return err
	}
	w.Reserve = cfg.DiskReserve
	s.wr.w = w
	s.onRelease(s.wr.close)
	return nil
}

// resolveScope resolves --cgroup and --pod before anything is created: a
// pod not on the node is an error with nothing left behind.
func (s *Session) resolveScope() error {
	sc, err := resolveScope("/proc", "/proc/self/mountinfo", s.cfg.Cgroups, s.cfg.Pods)
	s.scope = sc
	return err
}

// loadProbes loads the BPF programs, opens both rings and attaches the
// lifecycle tracepoints. No uprobe is attached yet.
func (s *Session) loadProbes() error {
	sc := s.scope
	objs, err := bpf.Load(bpf.Options{TraceAll: s.cfg.All, FreezeOnFailure: s.cfg.Freeze,
		RingBytes: s.cfg.RingBytes, StackAll: s.cfg.Stacks, Scope: sc.cgroups(), NamedFilesOnly: s.namedFilesOnly()})
	if err != nil {
		return err
	}
	if sc != nil {
		s.cfg.Log.Info("--all limited to cgroup " + sc.describe() + " and the cgroups below")
	}
	s.objs = objs
	s.onRelease(func() { objs.Close() })
	s.wr.counters = objs
	s.att = newAttacher(objs)
	if s.events, err = objs.NewReader(); err != nil {
		return fmt.Errorf("ring buffer reader: %w", err)
	}
	s.onRelease(func() { s.events.Close() })
	if s.holdRing, err = objs.NewHoldReader(); err != nil {
		return fmt.Errorf("holds ring reader: %w", err)
	}
	s.onRelease(func() { s.holdRing.Close() })
	if s.lifeLinks, err = objs.AttachLifecycle(); err != nil {
		return err
	}
	s.onRelease(func() { bpf.CloseLinks(s.lifeLinks); s.lifeLinks = nil })
	s.onRelease(s.att.detach)
	return nil
}

// openNVML opens NVML, takes the inventory and the first sample round
// (before the workload, so every run has a sample of the state it started
// from), and sets up the event handler and the holder, which need the
// GPUs.
func (s *Session) openNVML() error {
	smp := sampler.Open(s.cfg.NVML, now)
	s.onRelease(smp.Close)
	inv := smp.Inventory()
	s.q.setInventory(&inv)
	gpus := gpusOf(&inv)
	if !smp.OK() {
		s.cfg.Log.Warn(fmt.Sprintf("NVML did not start (%s from %s): recording calls without memory samples",
			inv.Init.Name, inv.Library))
	}
	s.smp = &sampling{smp: smp, q: s.q, freeze: s.fz, triggers: s.triggers, interval: s.cfg.Interval,
		th: thinner{budget: s.cfg.SampleBudget}, names: &neighbourNamer{proc: "/proc", passwd: []string{"/proc/1/root/etc/passwd", "/etc/passwd"}}}
	s.smp.first()
	s.h = newHandler(s.q, s.objs, gpus, s.triggers, s.fz, s.files, s.ids)
	s.h.evict = s.cfg.Flight != nil
	s.h.py = newPythonFinder(s.objs)
	s.h.keepBytes = s.cfg.KeepStackBytes
	s.namerCh = make(chan nameJob, namerQueue)
	s.h.namer = s.namerCh
	s.h.execs = s.objs
	s.h.execDelay = testDelay("FORENSIC_TEST_EXEC_READ_DELAY")
	s.hl = &holder{att: s.att, q: s.q, files: s.files, ids: s.ids, proc: "/proc", log: s.cfg.Log, cont: sigcont,
		held: s.held, delay: testDelay("FORENSIC_TEST_HOLD_DELAY"), execs: s.objs, namedOnly: s.namedFilesOnly()}
	return nil
}

// gpusOf lists the inventory's GPUs for matching CUDA devices.
func gpusOf(inv *store.Inventory) []gpuID {
	var gpus []gpuID
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
		id.MIGOn = g.MIGMode.Value != nil && *g.MIGMode.Value == migEnabled
		for _, m := range g.MIG {
			u := ""
			if m.UUID.Value != nil {
				u = *m.UUID.Value
			}
			id.MIG = append(id.MIG, u)
		}
		gpus = append(gpus, id)
	}
	return gpus
}

// openKmsg opens the kernel log and measures its clock's offset from the
// run clock; a kernel log that cannot be read is said in one line.
func (s *Session) openKmsg() error {
	s.kmsgError = -1
	if s.cfg.NoKmsg {
		return nil
	}
	f, err := openKmsg("/dev/kmsg")
	if err != nil {
		s.cfg.Log.Warn(fmt.Sprintf("kernel log not recorded: %v", err))
		return nil
	}
	s.kmsg = f
	s.onRelease(func() { f.Close() })
	note := fmt.Sprintf("forensic[%d]: recording %s (run %s); this line aligns the kernel log's clock",
		os.Getpid(), s.cfg.Output, s.run.ID)
	offset, unc, before, err := calibrateKmsg(f, note)
	if err != nil {
		s.cfg.Log.Warn(fmt.Sprintf("kernel log times not aligned with the run clock (%v); they may be off by milliseconds", err))
		offset, unc = 0, -1
	}
	for _, rec := range before {
		if l, ok := parseKmsg(rec); ok {
			l.Printk, l.Time = l.Time, l.Time-offset
			s.q.addKmsg(l)
		}
	}
	s.kmsgOffset, s.kmsgError = offset, unc
	return nil
}

// listen opens the control socket `forensic mark` talks to.
func (s *Session) listen() error {
	addr, err := ControlAddress(s.cfg.Output)
	if err != nil {
		return nil
	}
	ctl, err := net.Listen("unix", addr)
	if err != nil {
		s.cfg.Log.Warn(fmt.Sprintf("markers unavailable: %v", err))
		return nil
	}
	s.ctl = ctl
	s.onRelease(func() { ctl.Close() })
	return nil
}

// mark adds a marker (forensic mark).
func (s *Session) mark(label string) (int64, error) {
	t := now()
	s.q.addMarker(store.Marker{Time: t, Label: label})
	return t, nil
}

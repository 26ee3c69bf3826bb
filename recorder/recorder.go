// Package recorder records a reproduction: it attaches forensic's eBPF
// probes to the libcuda files the recorded processes map, follows the
// workload's processes, samples NVML, reads the kernel log, and writes
// everything to a run.db through package store.
//
// A recording is a Session: New prepares everything that can fail or that
// decides how events are read (run.db, BPF programs, the processes and
// libraries already there, NVML and its first sample, the kernel log's
// clock, the control socket) before any goroutine starts; Start starts the
// goroutines and the workload; Wait waits for a reason to stop; Stop stops
// in order and writes the stop record. Run does all four.
//
// Each goroutine owns one thing: the event reader owns the ring buffer and
// the process/context trackers, the holder the holds ring and attaching,
// the sampler NVML, the writer the bbolt file. They meet in one queue (the
// pending batch and the counters) that the writer commits every
// FlushInterval.
//
// In flight mode (Config.Flight) the writer keeps the recording as
// segments in a directory (package flight), closing one and starting the
// next by size and age, each standing alone (segment.go, flight.go); the
// event reader forgets exited processes, a sweeper takes the probes off
// libcuda files no process maps any more (sweep.go), and the control
// socket also serves snapshots and copies of the live segment
// (snapshot.go). Config.MetricsAddr serves package metrics (metrics.go).
package recorder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/eventlog"
	"github.com/retrivium/forensic/internal/buildinfo"
	"github.com/retrivium/forensic/logging"
	"github.com/retrivium/forensic/recorder/sampler"
	"github.com/retrivium/forensic/store"
)

// Errors a CLI maps to one line.
var (
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
	// Cgroups and Pods limit All to the processes of these cgroup v2
	// cgroups (a path, absolute or relative to the cgroup v2 mount) and
	// Kubernetes pods (NAMESPACE/NAME), and of the cgroups below them;
	// other processes are neither recorded nor held.
	Cgroups []string
	Pods    []string
	// LibCUDA lists the libcuda files to attach to, and only those; empty:
	// the files the recorded processes map, attached as they map them.
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
	// KeepStackBytes keeps the raw stack captures (registers, the copy of
	// the thread's stack, the Python frames and code objects as read) in
	// run.db beside the stacks the recorder named, for debugging the
	// unwinder. They hold whatever the program had on its stack: request
	// text, tokens, keys. Off, no byte of a process's memory is stored.
	KeepStackBytes bool
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
	// Log receives the recorder's own messages (default: text on
	// stderr, package logging).
	Log *slog.Logger
	// Events, when set, receives one JSON line per failed call (the
	// --events stream, package eventlog).
	Events *eventlog.Writer
	// Signals, when set, are the recorder's stop requests: the first stops
	// recording (and is passed on to the workload unless it is SIGINT,
	// which a terminal already sent to the workload's process group); a
	// second makes Run return at once.
	Signals <-chan os.Signal
	// Ready, when set, is called once recording has started (probes on
	// the libraries already mapped, the map hook in), before the workload
	// starts.
	Ready func()
	// Flight, when set, records in flight mode into the directory Output
	// (see FlightConfig).
	Flight *FlightConfig
	// MetricsAddr, when set, is the address the recorder serves its
	// metrics on (/metrics and /healthz; package metrics).
	MetricsAddr string
	// Snapshots, when set, are requests for a snapshot of the live
	// segment into the flight recording's snapshots directory (SIGUSR1).
	Snapshots <-chan os.Signal
	// Build is forensic's build, its version stored with every run and
	// shown in the metrics (default: the running binary's, package
	// buildinfo).
	Build buildinfo.Info
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
	if (len(c.Cgroups) > 0 || len(c.Pods) > 0) && !c.All {
		return errors.New("--cgroup and --pod limit --all: give --all too")
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
		c.Log = logging.New(os.Stderr, logging.Options{Format: logging.Text})
	}
	if c.Build.Version == "" {
		c.Build = buildinfo.Read()
	}
	return nil
}

// now reads the run clock.
func now() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// Run records until the workload exits (spawn mode), the target exits
// (--pid), Duration passes, ctx is cancelled or a signal arrives: New,
// Start, Wait and Stop.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Start(); err != nil {
		s.Stop()
		return nil, err
	}
	s.Wait(ctx)
	return s.Stop()
}

// Inventory takes the platform inventory through NVML without recording
// (forensic inventory). An NVML that does not start is reported in it.
func Inventory(nvmlPath string) store.Inventory {
	s := sampler.Open(nvmlPath, now)
	defer s.Close()
	return s.Inventory()
}

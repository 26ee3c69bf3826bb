package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/eventlog"
	"github.com/retrivium/forensic/recorder"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

const recordLong = `Records COMMAND and every process it starts (or a running process with
--pid, or every process that uses libcuda with --all) into a new run.db:
each call of libcuda's allocation, mapping, release and context functions,
NVML samples of framebuffer and BAR1 (periodically and at each failure),
and the NVRM/Xid lines of the kernel log. --cgroup and --pod limit --all to
the processes of some cgroups or Kubernetes pods (and the cgroups below).

Flags come before COMMAND: everything from COMMAND's name on is COMMAND's,
with or without --. Recording needs root (CAP_BPF and CAP_PERFMON,
and CAP_KILL for other users' processes; each one missing is named at
start). Under sudo, COMMAND runs as the user who ran sudo (their
uid, groups, HOME, USER and LOGNAME) unless --as-root is given, and run.db
is theirs, mode 0600. sudo resets PATH and the environment: use sudo -E or
sudo --preserve-env=PATH,... for conda and virtualenv environments, or
start the job normally and attach to it with --pid.

The first SIGINT or SIGTERM stops recording cleanly (SIGTERM is passed on
to COMMAND); a second one exits at once. What was committed is kept.

--flight records until stopped into a directory of segments, within
--max-size, keeping --keep-before and --keep-after around every failure
(docs/flight.md). SIGUSR1 or "forensic snapshot DIR" copies the live
segment; "forensic analyze DIR" reads the recording, even while it runs.`

const recordExit = `  126  COMMAND was found but cannot be run
  127  COMMAND was not found
  N    COMMAND's own exit status (128+N when signal N killed it); 0 for
       --pid and --all when recording stopped as asked
  1    recording failed (not root, no libcuda, an output that exists, ...),
       or stopped by itself under --pid or --all (the disk full, even
       after deleting what flight mode may delete)
  2    the command line is wrong
`

// recordFlags are record's flags, in recorder.Config's units.
type recordFlags struct {
	cfg         recorder.Config
	ring        uint64
	reserve     uint64
	keepSamples int
	flight      flightFlags
	logFormat   string
	events      string
	fs          *pflag.FlagSet
}

func (c *cli) recordCommand() *cobra.Command {
	cmd, _ := c.recordCommandFlags()
	return cmd
}

// recordCommandFlags builds the record command and the flags it parses
// into.
func (c *cli) recordCommandFlags() (*cobra.Command, *recordFlags) {
	f := &recordFlags{ring: uint64(bpf.DefaultRingBytes), reserve: store.DefaultReserve, keepSamples: 36000}
	f.cfg.Interval, f.cfg.FlushInterval, f.cfg.FreezeLimit = 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
	cmd := &cobra.Command{
		Use:   "record [flags] -o FILE -- COMMAND [ARGS...]",
		Short: "record a workload's CUDA calls and GPU memory (root)",
		Long:  recordLong,
		Annotations: map[string]string{
			"synopsis": "record [flags] -o FILE --pid PID\nrecord [flags] -o FILE --all [--cgroup PATH]... [--pod NS/NAME]...",
			"exit":     recordExit,
		},
		Example: `  sudo forensic record -o run.db -- python train.py --batch 64
  sudo -E forensic record -o run.db --ring-size 64MiB -- ./serve.sh
  sudo forensic record -o run.db --pid 4242 --duration 10m
  sudo forensic record --all --flight -o /var/lib/forensic/flight`,
		RunE: work(func(cmd *cobra.Command, args []string) error { return c.record(f, args) }),
	}
	fs := cmd.Flags()
	// Everything after the command's name is the command's.
	fs.SetInterspersed(false)
	cfg := &f.cfg
	fs.StringVarP(&cfg.Output, "output", "o", "", "the run.db `FILE` to create (mode 0600); with --flight, the directory (0700)")
	fs.BoolVarP(&cfg.Force, "force", "f", false, "replace an existing run.db (never a live recording, a directory or a file that is not a run)")
	fs.IntVarP(&cfg.PID, "pid", "p", 0, "record this running process (`PID`) and the children it starts")
	fs.BoolVarP(&cfg.All, "all", "a", false, "record every process on the host that maps a libcuda")
	fs.StringArrayVar(&cfg.Cgroups, "cgroup", nil, "with --all, record only the processes of this cgroup v2 `PATH` and the cgroups below it (repeatable; relative to the cgroup v2 mount)")
	fs.StringArrayVar(&cfg.Pods, "pod", nil, "with --all, record only the processes of this Kubernetes pod, `NAMESPACE/NAME`, running on this node (repeatable)")
	fs.BoolVar(&cfg.AsRoot, "as-root", false, "under sudo, run COMMAND as root instead of the invoking user")
	fs.StringArrayVar(&cfg.LibCUDA, "libcuda", nil, "libcuda `FILE` to attach to (repeatable; default: search)")
	fs.StringVar(&cfg.NVML, "libnvidia-ml", "", "libnvidia-ml.so.1 `FILE` to sample through (default: the loader's)")
	fs.VarP(durationFlag{v: &cfg.Interval, min: time.Millisecond}, "interval", "i", "NVML sampling period")
	fs.Var(durationFlag{v: &cfg.FlushInterval, min: time.Millisecond}, "flush", "longest a record waits before it is committed to run.db")
	fs.Var(sizeFlag{v: &f.ring, check: ringSize}, "ring-size", "ring buffer size: a power of two of at least a page (4KiB)")
	fs.BoolVar(&cfg.Stacks, "stacks", false, "capture the user stack of every device allocation (failures always)")
	fs.BoolVar(&cfg.KeepStackBytes, "keep-stack-bytes", false,
		"also keep the raw stack copies in run.db, for debugging the unwinder (SENSITIVE: they hold whatever the program had on its stack)")
	fs.BoolVar(&cfg.Freeze, "freeze-on-failure", false, "stop a process at a failed call until its GPUs are sampled")
	fs.Var(durationFlag{v: &cfg.FreezeLimit, min: time.Millisecond}, "freeze-limit", "longest a process is held by --freeze-on-failure")
	fs.VarP(durationFlag{v: &cfg.Duration, zeroOK: true}, "duration", "d", "stop after this long (0: when COMMAND exits or on SIGINT)")
	fs.BoolVar(&cfg.NoKmsg, "no-kmsg", false, "do not record NVRM/Xid kernel log lines")
	fs.Var(sizeFlag{v: &f.reserve, check: diskReserve}, "disk-reserve", "stop writing when the output's filesystem has less free space, keeping room for the stop record (0: write until it is full)")
	fs.IntVar(&f.keepSamples, "keep-samples", f.keepSamples, "periodic sample `ROUNDS` kept before long runs thin them (first, last and those around failures are always kept)")
	fs.StringVar(&f.logFormat, "log-format", "text", "`FORMAT` of the recorder's messages on stderr: text, or json (one JSON object a line: time, level, msg, ...)")
	fs.StringVar(&f.events, "events", "", "append one JSON line per failed call to `FILE` (- for stdout), for log shippers (docs/flight.md)")
	f.flight.add(fs)
	f.fs = fs
	return cmd, f
}

// config checks what flags alone cannot and completes the recorder's
// configuration.
func (c *cli) config(f *recordFlags, command []string) (recorder.Config, error) {
	cfg := f.cfg
	cfg.Build = c.build
	switch {
	case cfg.Output == "":
		return cfg, usageErr("give the run.db to create with -o FILE")
	case cfg.PID < 0:
		return cfg, usageErr("--pid %d is not a process id", cfg.PID)
	case cfg.PID != 0 && cfg.All:
		return cfg, usageErr("give only one of --pid and --all")
	case (cfg.PID != 0 || cfg.All) && len(command) > 0:
		return cfg, usageErr("a command cannot be combined with --pid or --all")
	case cfg.PID == 0 && !cfg.All && len(command) == 0:
		return cfg, usageErr("nothing to record: give -- COMMAND, --pid PID or --all")
	case (len(cfg.Cgroups) > 0 || len(cfg.Pods) > 0) && !cfg.All:
		return cfg, usageErr("--cgroup and --pod limit --all: give --all too")
	case f.fs.Changed("keep-previous") && len(command) > 0 && isCount(command[0]):
		return cfg, usageErr("give the count as --keep-previous=%s (%s would be the command to run)", command[0], command[0])
	case f.keepSamples < 1:
		return cfg, usageErr("--keep-samples %d: keep at least 1", f.keepSamples)
	}
	for _, p := range cfg.Pods {
		if _, _, err := recorder.ParsePod(p); err != nil {
			return cfg, usageErr("%v", err)
		}
	}
	for _, p := range cfg.Cgroups {
		if p == "" {
			return cfg, usageErr("--cgroup: give a cgroup's path")
		}
	}
	if err := outputNotDir(cfg.Output, f.flight.on); err != nil {
		return cfg, err
	}
	cfg.Command = command
	cfg.RingBytes = int(f.ring)
	cfg.DiskReserve = f.reserve
	if f.reserve == 0 {
		cfg.DiskReserve = 1 // 0 means the default in recorder.Config
	}
	cfg.SampleBudget = f.keepSamples
	if err := f.flight.config(&cfg, f.fs); err != nil {
		return cfg, err
	}
	inv, err := recorder.SudoInvoker(c.getenv, os.Geteuid())
	if err != nil {
		return cfg, err
	}
	cfg.Invoker = inv
	return cfg, nil
}

// outputNotDir refuses a directory as the run.db to create, whether or
// not --force is given: only flight mode records into a directory; and
// an existing file as a flight recording's directory (a failure, not a
// usage error: the command line is well formed).
func outputNotDir(out string, flight bool) error {
	st, err := os.Stat(out)
	switch {
	case err != nil:
	case st.IsDir() && !flight:
		return fmt.Errorf("%s is a directory: give the run.db file to create, for example %s (only --flight records into a directory)",
			out, filepath.Join(out, "run.db"))
	case !st.IsDir() && flight:
		return fmt.Errorf("%s is a file: --flight records into a directory: give a new one", out)
	}
	return nil
}

func (c *cli) record(f *recordFlags, command []string) error {
	cfg, err := c.config(f, command)
	if err != nil {
		return err
	}
	log, err := c.recordLog(f.logFormat)
	if err != nil {
		return err
	}
	events, closeEvents, err := c.openEvents(f.events)
	if err != nil {
		return err
	}
	defer closeEvents()
	cfg.Events = events
	cfg.Signals = c.stopSignals(cfg.Output, log)
	if cfg.Flight != nil {
		cfg.Snapshots = snapshotSignals()
	}
	cfg.Log = log
	cfg.Stdout, cfg.Stderr = c.stdout, c.stderr
	cfg.Ready = func() {
		log.Info(fmt.Sprintf("recording %s into %s (SIGINT stops)", recordingWhat(cfg), cfg.Output), "output", cfg.Output)
	}
	res, err := recorder.Run(context.Background(), cfg)
	if err != nil {
		return err
	}
	c.summary(log, res)
	if res.ExitCode != 0 {
		return exitError{res.ExitCode}
	}
	if len(cfg.Command) == 0 && !cleanStop(res.Stop.Reason) {
		return exitError{1} // nobody asked --pid or --all to stop like this
	}
	return nil
}

// cleanStop reports whether a recording with no command of its own ended
// as asked (a signal, --duration, the target's exit), not because writing
// failed.
func cleanStop(reason string) bool {
	switch reason {
	case "write-error", "disk-full", "error":
		return false
	}
	return true
}

// isCount reports whether s is a number: a COMMAND that is one follows
// --keep-previous given its count with a space.
func isCount(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil
}

func recordingWhat(cfg recorder.Config) string {
	u := ""
	if cfg.Invoker != nil && !cfg.AsRoot {
		u = " as " + cfg.Invoker.Name
	}
	switch {
	case cfg.PID != 0:
		return fmt.Sprintf("pid %d", cfg.PID)
	case cfg.All && len(cfg.Cgroups)+len(cfg.Pods) > 0:
		return "every process using libcuda in " + strings.Join(append(slices.Clone(cfg.Cgroups), cfg.Pods...), ", ")
	case cfg.All:
		return "every process using libcuda"
	}
	return cfg.Command[0] + u
}

// stopSignals turns the first SIGINT or SIGTERM into a stop request; a
// second one exits at once (what was committed is already safe).
func (c *cli) stopSignals(output string, log *slog.Logger) <-chan os.Signal {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	stop := make(chan os.Signal, 1)
	go func() {
		stop <- <-sigs
		sig := <-sigs
		log.Warn(fmt.Sprintf("second %v: exiting now; what was committed to %s is kept", sig, output))
		os.Exit(130)
	}()
	return stop
}

// summary says on log what was recorded and how to look at it.
func (c *cli) summary(log *slog.Logger, res *recorder.Result) {
	st := res.Stop.Stats
	extra := ""
	if procs, start, err := runFacts(res.Path); err == nil {
		extra = ", " + count(uint64(procs), "process", "processes")
		if res.Stop.Time > start {
			extra += " in " + human(time.Duration(res.Stop.Time-start))
		}
	}
	stopped := slog.LevelInfo
	if res.Stop.Error != "" {
		stopped = slog.LevelError // disk full, a write error, a failed start
	}
	log.Log(context.Background(), stopped, fmt.Sprintf("recorded %s, %s%s; stopped: %s", count(st.Events, "call", "calls"),
		count(st.Samples, "sample", "samples"), extra, res.Stop.Reason), "reason", res.Stop.Reason)
	// Each kind of loss on its own, in the words analyze uses.
	if lost := (&report.Loss{LostCalls: st.LostCalls, LostInflight: st.LostInflight, TooDeep: st.TooDeep,
		Unmatched: st.Unmatched, LostProc: st.LostProc, Untracked: st.Untracked, DecodeErrors: st.DecodeErrors}).Lost(); len(lost) > 0 {
		log.Warn("not in the record: " + strings.Join(lost, ", "))
	}
	if d := res.Stop.TriggerDelay; d.Count > 0 {
		log.Info(fmt.Sprintf("%s, delay from failure to sample: median %s, max %s",
			count(uint64(d.Count), "failure-triggered sample", "failure-triggered samples"),
			human(time.Duration(d.Median)), human(time.Duration(d.Max))))
	}
	log.Info("to see what happened: forensic analyze " + shellQuote(res.Path))
}

// runFacts reads how many processes a finished run recorded and when it
// started (run clock).
func runFacts(path string) (procs int, start int64, err error) {
	r, err := store.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer r.Close()
	ps, err := r.Processes()
	return len(ps), r.Run().ClockStart, err
}

// openEvents opens the --events stream: FILE appended to (created mode
// 0600), or stdout for "-"; none when not asked for. done closes it.
func (c *cli) openEvents(path string) (w *eventlog.Writer, done func(), err error) {
	switch path {
	case "":
		return nil, func() {}, nil
	case "-":
		return eventlog.New(c.stdout), func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("--events: %w", err)
	}
	return eventlog.New(f), func() { f.Close() }, nil
}

// Command forensic records CUDA memory failures and explains them.
//
//	sudo forensic record -o run.db -- CMD [ARGS...]
//	forensic analyze [--json] run.db
//	forensic report run.db -o report.html
//	forensic export [--format perfetto|chrome-json] run.db [-o trace.pftrace]
//
// The command is thin: it parses flags and calls packages recorder and
// analyze. Every error is one line on stderr and a non-zero exit.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/retrivium/forensic/analyze"
	"github.com/retrivium/forensic/recorder"
	"github.com/retrivium/forensic/render/html"
	"github.com/retrivium/forensic/render/perfetto"
	"github.com/retrivium/forensic/render/text"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

const usage = `forensic: record and explain GPU memory failures

usage:
  forensic record -o run.db [flags] -- CMD [ARGS...]   record CMD and its descendants (root)
  forensic record -o run.db --pid PID [flags]          record a running process (root)
  forensic record -o run.db --all [flags]              record every process using libcuda (root)
  forensic analyze [--json] run.db                     first failure, attribution, memory views
  forensic report run.db -o report.html                the analysis as one self-contained HTML page
  forensic export run.db [-o trace.pftrace]           calls, samples and failures for ui.perfetto.dev
                                                       (--format chrome-json: trace-event JSON)
  forensic inventory [--json]                          GPUs, memory views, BAR1, driver (NVML)
  forensic mark [--run run.db] LABEL                   add a phase marker to a live recording
  forensic version

Run 'forensic COMMAND -h' for a command's flags.
`

// exitError carries an exit status without printing anything more.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command and returns the exit status. A panic anywhere
// becomes one line, never a stack trace.
func run(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(stderr, "forensic: internal error: %v\n", p)
			code = 70
		}
	}()
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "record":
		err = cmdRecord(args[1:], stdout, stderr)
	case "analyze":
		err = cmdAnalyze(args[1:], stdout)
	case "report":
		err = cmdReport(args[1:], stdout)
	case "export":
		err = cmdExport(args[1:], stdout)
	case "inventory":
		err = cmdInventory(args[1:], stdout)
	case "mark":
		err = cmdMark(args[1:], stdout)
	case "version", "--version":
		fmt.Fprintf(stdout, "forensic %s (run.db schema %d)\n", recorder.Version, store.SchemaVersion)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "forensic: unknown command %q\n%s", args[0], usage)
		return 2
	}
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "forensic %s: %v\n", args[0], oneLine(err))
		return 2
	}
	fmt.Fprintf(stderr, "forensic %s: %v\n", args[0], oneLine(err))
	return 1
}

var errUsage = errors.New("usage")

func usageErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

// oneLine keeps an error on one line.
func oneLine(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, errUsage.Error()+": ")
	return strings.Join(strings.Fields(s), " ")
}

// parse parses flags that may come before or after positional arguments
// (forensic analyze run.db --json) and returns the positionals.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("forensic "+name, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	return fs
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func cmdRecord(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("record")
	var cfg recorder.Config
	var libs multi
	var ringMiB int
	fs.StringVar(&cfg.Output, "o", "", "run.db to create")
	fs.BoolVar(&cfg.Force, "force", false, "overwrite an existing output file")
	fs.IntVar(&cfg.PID, "pid", 0, "record this running process and the children it starts")
	fs.BoolVar(&cfg.All, "all", false, "record every process on the host that maps a libcuda")
	fs.Var(&libs, "libcuda", "libcuda file to attach to (repeatable; default: search)")
	fs.StringVar(&cfg.NVML, "libnvidia-ml", "", "libnvidia-ml.so.1 to sample through (default: the loader's)")
	fs.DurationVar(&cfg.Interval, "interval", 100*time.Millisecond, "NVML sampling period")
	fs.DurationVar(&cfg.FlushInterval, "flush", 100*time.Millisecond, "longest a record waits before it is committed to run.db")
	fs.IntVar(&ringMiB, "ring-size", 16, "ring buffer size in MiB (power of two)")
	fs.BoolVar(&cfg.Stacks, "stacks", false, "capture the user stack of every device allocation (failures always)")
	fs.BoolVar(&cfg.Freeze, "freeze-on-failure", false, "stop a process at a failed call until its GPUs are sampled (see README)")
	fs.DurationVar(&cfg.FreezeLimit, "freeze-limit", 50*time.Millisecond, "longest a process is held by --freeze-on-failure")
	fs.DurationVar(&cfg.Duration, "duration", 0, "stop after this long (default: when the workload exits or on SIGINT)")
	fs.BoolVar(&cfg.NoKmsg, "no-kmsg", false, "do not record NVRM/Xid kernel log lines")
	var reserveMiB int
	fs.IntVar(&reserveMiB, "disk-reserve", 8, "stop writing when the output's filesystem has less free space than this (MiB), keeping room for the stop record")
	fs.IntVar(&cfg.SampleBudget, "keep-samples", 36000, "periodic sample rounds kept before long runs thin them (first, last and those around failures are always kept)")
	command, err := parse(fs, args)
	if err != nil {
		return err
	}
	if cfg.PID == 0 && !cfg.All {
		cfg.Command = command
	} else if len(command) > 0 {
		return usageErr("a command cannot be combined with --pid or --all")
	}
	cfg.LibCUDA = libs
	cfg.RingBytes = ringMiB << 20
	cfg.DiskReserve = uint64(reserveMiB) << 20
	if reserveMiB == 0 {
		cfg.DiskReserve = 1 // 0 means the default in recorder.Config
	}
	// The first SIGINT or SIGTERM stops recording cleanly; a second one
	// exits at once (what was committed is already safe in run.db).
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	stop := make(chan os.Signal, 1)
	go func() {
		first := true
		for sig := range sigs {
			if first {
				first = false
				stop <- sig
				continue
			}
			fmt.Fprintf(stderr, "forensic: second %v: exiting now; what was committed to %s is kept\n", sig, cfg.Output)
			os.Exit(130)
		}
	}()
	cfg.Signals = stop
	cfg.Log = stderr
	cfg.Stdout, cfg.Stderr = stdout, stderr
	cfg.Ready = func() {
		what := "the workload"
		switch {
		case cfg.PID != 0:
			what = fmt.Sprintf("pid %d", cfg.PID)
		case cfg.All:
			what = "every process using libcuda"
		}
		fmt.Fprintf(stderr, "forensic: recording %s into %s (SIGINT stops)\n", what, cfg.Output)
	}
	res, err := recorder.Run(context.Background(), cfg)
	if err != nil {
		return err
	}
	st := res.Stop.Stats
	fmt.Fprintf(stderr, "forensic: %s: %d calls recorded, %d lost, %d samples; stopped: %s\n",
		res.Path, st.Events, st.LostCalls, st.Samples, res.Stop.Reason)
	if d := res.Stop.TriggerDelay; d.Count > 0 {
		fmt.Fprintf(stderr, "forensic: %d failure-triggered samples, delay from failure to sample: median %v, max %v\n",
			d.Count, time.Duration(d.Median), time.Duration(d.Max))
	}
	if res.ExitCode != 0 {
		return exitError{res.ExitCode}
	}
	return nil
}

func openRun(path string) (*store.Reader, error) {
	if path == "" {
		return nil, usageErr("give the run.db to read")
	}
	return store.Open(path)
}

func analyzeFile(path string) (*report.Report, error) {
	r, err := openRun(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return analyze.Analyze(r, analyze.Options{})
}

func onePath(pos []string) (string, error) {
	switch len(pos) {
	case 0:
		return "", usageErr("give the run.db to read")
	case 1:
		return pos[0], nil
	}
	return "", usageErr("one run.db at a time (got %d arguments)", len(pos))
}

func cmdAnalyze(args []string, stdout io.Writer) error {
	fs := newFlags("analyze")
	asJSON := fs.Bool("json", false, "write the JSON report (the documented contract)")
	noColor := fs.Bool("no-color", false, "never colour the output")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	path, err := onePath(pos)
	if err != nil {
		return err
	}
	rep, err := analyzeFile(path)
	if err != nil {
		return err
	}
	if *asJSON {
		return report.WriteJSON(stdout, rep)
	}
	color := false
	if f, ok := stdout.(*os.File); ok && !*noColor && os.Getenv("NO_COLOR") == "" {
		color = term.IsTerminal(int(f.Fd()))
	}
	return text.Write(stdout, rep, text.Options{Color: color})
}

// readWrite parses a command that reads one run.db and writes one file
// given with -o, and opens the run.
func readWrite(fs *flag.FlagSet, out *string, args []string, example string) (*store.Reader, error) {
	pos, err := parse(fs, args)
	if err != nil {
		return nil, err
	}
	path, err := onePath(pos)
	if err != nil {
		return nil, err
	}
	if *out == "" {
		return nil, usageErr("give the file to write with -o (%s)", example)
	}
	if err := notTheInput(path, *out); err != nil {
		return nil, err
	}
	return openRun(path)
}

func cmdReport(args []string, stdout io.Writer) error {
	fs := newFlags("report")
	out := fs.String("o", "", "HTML file to write (- for standard output)")
	r, err := readWrite(fs, out, args, "forensic report run.db -o report.html")
	if err != nil {
		return err
	}
	defer r.Close()
	rep, err := analyze.Analyze(r, analyze.Options{})
	if err != nil {
		return err
	}
	return writeOutput(*out, stdout, func(w io.Writer) error { return html.Write(w, rep) })
}

// exportFormat returns a format of forensic export: the file written
// without -o and its writer, which observes the analysis pass.
func exportFormat(name string) (file string, newExporter func(io.Writer) exporter, ok bool) {
	switch name {
	case "perfetto":
		return "trace.pftrace", func(w io.Writer) exporter { return perfetto.NewTrace(w) }, true
	case "chrome-json":
		return "trace.json", func(w io.Writer) exporter { return perfetto.NewChromeJSON(w) }, true
	}
	return "", nil, false
}

// exporter is a per-call export: it observes the analysis pass, then
// finishes with the report.
type exporter interface {
	report.Observer
	Finish(*report.Report) error
}

func cmdExport(args []string, stdout io.Writer) error {
	fs := newFlags("export")
	format := fs.String("format", "perfetto", "output format: perfetto (Perfetto's protobuf trace, for ui.perfetto.dev and trace_processor) "+
		"or chrome-json (Chrome trace-event JSON, also read by chrome://tracing; about six times larger)")
	out := fs.String("o", "", "file to write (- for standard output; default trace.pftrace, or trace.json for chrome-json)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	file, newExporter, ok := exportFormat(*format)
	if !ok {
		return usageErr("unknown format %q (known: perfetto, chrome-json)", *format)
	}
	path, err := onePath(pos)
	if err != nil {
		return err
	}
	if *out == "" {
		*out = file
	}
	if err := notTheInput(path, *out); err != nil {
		return err
	}
	r, err := openRun(path)
	if err != nil {
		return err
	}
	defer r.Close()
	return writeOutput(*out, stdout, func(w io.Writer) error {
		tr := newExporter(w)
		rep, err := analyze.Analyze(r, analyze.Options{Observer: tr, NoTimeline: true})
		if err != nil {
			return err
		}
		return tr.Finish(rep)
	})
}

// notTheInput refuses an output path that names the run.db being read.
func notTheInput(in, out string) error {
	if out == "-" {
		return nil
	}
	ai, err1 := filepath.Abs(in)
	ao, err2 := filepath.Abs(out)
	same := err1 == nil && err2 == nil && ai == ao
	if si, err := os.Stat(in); err == nil {
		if so, err := os.Stat(out); err == nil && os.SameFile(si, so) {
			same = true
		}
	}
	if same {
		return usageErr("the output %s is the run.db being read; choose another file", out)
	}
	return nil
}

// writeOutput creates out (or uses stdout for "-"), lets write fill it and
// reports "wrote PATH". A failed write removes the partial file.
func writeOutput(out string, stdout io.Writer, write func(io.Writer) error) error {
	if out == "-" {
		return write(stdout)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(out)
		return fmt.Errorf("writing %s: %w", out, err)
	}
	fmt.Fprintf(stdout, "wrote %s\n", out)
	return nil
}

func cmdInventory(args []string, stdout io.Writer) error {
	fs := newFlags("inventory")
	asJSON := fs.Bool("json", false, "write JSON")
	lib := fs.String("libnvidia-ml", "", "libnvidia-ml.so.1 to query (default: the loader's)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("inventory takes no arguments")
	}
	inv := recorder.Inventory(*lib)
	write := analyze.WriteInventoryText
	if *asJSON {
		write = analyze.WriteInventoryJSON
	}
	if err := write(stdout, inv); err != nil {
		return err
	}
	if inv.Init.Code != 0 {
		// The inventory says why; the exit status lets scripts notice.
		return fmt.Errorf("NVML did not initialize: %s (%s)", inv.Init.Name, inv.Library)
	}
	return nil
}

func cmdMark(args []string, stdout io.Writer) error {
	fs := newFlags("mark")
	runPath := fs.String("run", "", "run.db of the recording (default: the only live one)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageErr("give a label")
	}
	t, err := recorder.Mark(*runPath, strings.Join(pos, " "))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "marked %q at %d ns\n", strings.Join(pos, " "), t)
	return nil
}

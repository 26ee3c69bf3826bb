package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/retrivium/forensic/analyze"
	"github.com/retrivium/forensic/parquetexport"
	"github.com/retrivium/forensic/recorder"
	"github.com/retrivium/forensic/render/html"
	"github.com/retrivium/forensic/render/perfetto"
	"github.com/retrivium/forensic/render/text"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/runpaths"
	"github.com/retrivium/forensic/store"
)

// Exit statuses of the commands that read a run.db.
const readExit = `  0    done
  1    the file is not a readable run (missing, not a run.db, still being
       recorded, written by a newer forensic), or the output failed
  2    the command line is wrong
`

const analyzeExit = `  0    done (with --exit-code: no call failed and nothing is missing)
  3    with --exit-code: the attribution is not "none" (a call failed, or
       evidence is missing)
  1    the file is not a readable run (missing, not a run.db, still being
       recorded, written by a newer forensic), or --job, --pid or --pod
       matches no job of it
  2    the command line is wrong
`

func (c *cli) analyzeCommand() *cobra.Command {
	var asJSON, noColor, exitCode, explain bool
	var jf jobFlags
	var nearMiss float64
	cmd := &cobra.Command{
		Use:   "analyze [flags] RUN.DB... | DIR",
		Short: "the first failure, its attribution and the memory views",
		Long: `Explains the first failed operation of a recorded run: its attribution
(allocation, mapping, not-memory, missing-evidence or none), the capacity
judged against the one memory view that can hold the request, the evidence,
and the memory views around it. --json writes the documented contract
(docs/analyze-json.md).

Several runs of one job (a run.db per rank or node, a directory of them, or
a quoted glob) are analyzed together: the first failure across them,
ordered by their clocks' error bounds, the failures that followed it and
what ties each to it, and the ranks with no run (docs/multi-run.md). Runs
are one job when they name the same job id (TORCHELASTIC_RUN_ID,
SLURM_JOB_ID) or, naming none, were recorded at overlapping times; runs of
several jobs get one report per job (--json refuses them: give one job).

The text report opens with the verdict and a summary (what failed, the
numbers compared, who held the memory, which process, the first step);
--explain adds the full account behind each short tag.

Every run gets its headroom: the least free memory of each GPU's
framebuffer and BAR1 at any moment, from the samples corrected by the
traced calls between them. A run with no failure whose least free
framebuffer was under --near-miss percent of the total is a near miss.

A recording of a shared node (record --all) may hold several jobs: process
trees, containers, pods, or processes naming a job id. The report lists
each job's first failure and says whose failure the verdict is about;
--job, --pid or --pod gives one job's verdict, the other jobs' processes
then being neighbours (docs/analyze-json.md, "jobs").

Colour is used on a terminal unless --no-color or NO_COLOR is set; text
wraps to the terminal (COLUMNS overrides; 100 when not a terminal).`,
		Annotations: map[string]string{"exit": analyzeExit},
		Example: `  forensic analyze run.db
  forensic analyze --json run.db | jq .attribution
  forensic analyze --exit-code run.db || echo "something failed"
  forensic analyze runs/            # every rank's run.db of one job
  forensic analyze --job tree:4242 node.db   # one job of a shared node`,
		Args: someRuns,
		RunE: work(func(cmd *cobra.Command, args []string) error {
			if !(nearMiss > 0 && nearMiss < 100) {
				return usageErr("--near-miss %g: give a percentage above 0 and below 100", nearMiss)
			}
			opts := analyze.Options{NearMissPercent: nearMiss}
			var reps []*report.Report
			sel, err := jf.selector(args)
			if err != nil {
				return err
			}
			opts.Job = sel
			if asJSON {
				var rep *report.Report
				if rep, err = c.analyzeRuns(args, opts); err != nil {
					return withHint(err, "; or analyze without --json for each job's report")
				}
				reps, err = []*report.Report{rep}, report.WriteJSON(c.stdout, rep)
			} else {
				reps, err = c.analyzeText(args, opts, text.Options{
					Color:   !noColor && c.getenv("NO_COLOR") == "" && isTerminal(c.stdout),
					Width:   textWidth(c.stdout, c.getenv),
					Input:   inputLabel(args),
					Explain: explain,
				})
			}
			if err == nil && exitCode && slices.ContainsFunc(reps, func(r *report.Report) bool { return r.Attribution != report.AttrNone }) {
				return exitError{exitVerdict}
			}
			return err
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "write the JSON report (the documented contract)")
	cmd.Flags().BoolVar(&noColor, "no-color", false, "never colour the output")
	cmd.Flags().BoolVar(&explain, "explain", false, "add the full accounts behind the short tags: how values were reconciled, the legends, every run of a job")
	cmd.Flags().BoolVar(&exitCode, "exit-code", false, "exit with status 3 when the attribution is not \"none\"")
	jf.add(cmd)
	cmd.Flags().Float64Var(&nearMiss, "near-miss", analyze.DefaultNearMissPercent,
		"call a run with no failure a near miss when its least free framebuffer was under `PERCENT` of the total")
	return cmd
}

func (c *cli) reportCommand() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "report [flags] RUN.DB... -o FILE",
		Short: "the analysis as one self-contained HTML page",
		Long: `Writes the analysis, with timelines of the memory views, as one HTML page
that needs no network. It names processes and their arguments: it is
written mode 0600 (under sudo, owned by the user who ran sudo).`,
		Annotations: map[string]string{"exit": readExit},
		Example:     `  forensic report run.db -o report.html`,
		Args:        someRuns,
		RunE: work(func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(args, out); err != nil {
				return err
			}
			rep, err := c.analyzeRuns(args, analyze.Options{})
			if err != nil {
				return withHint(err, "; or forensic analyze (text) for each job's report")
			}
			return c.writeOutput(out, func(w io.Writer) error { return html.Write(w, rep) })
		}),
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "HTML `FILE` to write (- for standard output)")
	return cmd
}

func (c *cli) exportCommand() *cobra.Command {
	var out, format string
	var force bool
	cmd := &cobra.Command{
		Use:   "export [flags] RUN.DB [-o FILE]",
		Short: "calls and samples as a Perfetto trace, or Parquet for a fleet",
		Long: `Writes a run as a trace for ui.perfetto.dev: Perfetto's protobuf trace
(--format perfetto, the default: trace.pftrace), or Chrome trace-event JSON
(--format chrome-json: trace.json, also read by chrome://tracing, about six
times larger). Framebuffer and BAR1 are separate counters, never added.

--format parquet -o DIR writes one or more runs as Hive-partitioned Parquet
(DIR/<table>/host=<host>/run=<run_id>/part-0.parquet) for DuckDB, Spark,
Trino or ClickHouse (docs/parquet.md); a run exported before is refused
unless --force.

Exports name processes and their arguments: files are written mode 0600
(under sudo, owned by the user who ran sudo).`,
		Annotations: map[string]string{"exit": readExit,
			"synopsis": "export --format parquet [flags] -o DIR RUN.DB... | DIR"},
		Example: `  forensic export run.db                       # trace.pftrace
  forensic export --format chrome-json run.db -o trace.json
  forensic export --format parquet -o fleet/ runs/*.db`,
		Args: someRuns,
		RunE: work(func(cmd *cobra.Command, args []string) error {
			if format == "parquet" {
				return c.exportParquet(cmd.Context(), args, out, force)
			}
			file, newExporter, ok := traceFormat(format)
			if !ok {
				return usageErr("unknown format %q (known: perfetto, chrome-json, parquet)", format)
			}
			in, err := oneRun(args)
			if err != nil {
				return err
			}
			if out == "" {
				out = file
			}
			r, done, err := c.openForOutput(in, out)
			if err != nil {
				return err
			}
			defer done()
			return c.writeOutput(out, func(w io.Writer) error {
				tr := newExporter(w)
				rep, err := analyze.Analyze(r, analyze.Options{Observer: tr, NoTimeline: true})
				if err != nil {
					return err
				}
				return tr.Finish(rep)
			})
		}),
	}
	cmd.Flags().StringVar(&format, "format", "perfetto", "`FORMAT` of the output: perfetto (protobuf trace), chrome-json, or parquet")
	cmd.Flags().StringVarP(&out, "output", "o", "", "`FILE` to write (- for standard output), or the DIR for parquet")
	cmd.Flags().BoolVarP(&force, "force", "f", false, "parquet: replace the partitions of a run exported before")
	return cmd
}

// traceFormat names a trace export: its default file and its writer.
func traceFormat(name string) (file string, newExporter func(io.Writer) exporter, ok bool) {
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

// exportParquet writes runs as Hive-partitioned Parquet into dir.
func (c *cli) exportParquet(ctx context.Context, args []string, dir string, force bool) error {
	if dir == "" {
		return usageErr("give the directory to write with -o DIR")
	}
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return fmt.Errorf("%s is a file: --format parquet writes a directory (a new one, or one exported to before)", dir)
	}
	paths, err := runpaths.Expand(args)
	if err != nil {
		return err
	}
	for _, p := range paths {
		if store.IsFlightDir(p) {
			return fmt.Errorf("%s: a flight recording is not exported to Parquet (its segments share one run id); export a snapshot or a run.db", p)
		}
	}
	if err := parquetexport.Write(ctx, dir, paths, parquetexport.Options{Overwrite: force, Version: c.build.Version}); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "wrote %s (%s)\n", dir, report.Plural(len(paths), "run"))
	return nil
}

// inputLabel names what the user asked to analyze, as they typed it: a
// directory stays the directory, a glob the glob, with the files they
// stand for ("runs/ (4 files)", "runs/ (runs/rank2.db)").
func inputLabel(args []string) string {
	label := strings.Join(args, " ")
	if len(args) > 3 {
		label = strings.Join(args[:2], " ") + " ..."
	}
	paths, err := runpaths.Expand(args)
	switch {
	case err != nil || (slices.Equal(paths, args) && len(args) <= 3):
	case len(paths) == 1:
		label += " (" + paths[0] + ")"
	default:
		label += " (" + report.Plural(len(paths), "file") + ")"
	}
	return label
}

// oneRun returns the one run args name: a run.db, a flight recording's
// directory, or a directory or glob that holds exactly one run.db. A trace
// is one run's; several are refused, saying which.
func oneRun(args []string) (string, error) {
	if len(args) == 0 {
		return "", usageErr("give the run.db to read")
	}
	paths, err := runpaths.Expand(args)
	if err != nil {
		return "", err
	}
	if len(paths) == 1 {
		return paths[0], nil
	}
	return "", usageErr("%s: %s; a trace holds one run: give one (--format parquet -o DIR exports several)",
		strings.Join(args, " "), runsFound(paths))
}

// runsFound says which runs an expansion found: "3 runs (a.db, b.db,
// c.db)", the names cut after a few.
func runsFound(paths []string) string {
	const shown = 3
	names := make([]string, 0, shown+1)
	for i, p := range paths {
		if i == shown {
			names = append(names, "...")
			break
		}
		names = append(names, p)
	}
	return fmt.Sprintf("%s (%s)", report.Plural(len(paths), "run"), strings.Join(names, ", "))
}

// someRuns accepts one or more runs (files, directories, globs).
func someRuns(_ *cobra.Command, args []string) error {
	if len(args) == 0 {
		return usageErr("give the run.db to read (or several, or a directory of them)")
	}
	return nil
}

// analyzeRuns analyzes the runs args name: one alone, several together.
// A flight recording's directory is one run.
func (c *cli) analyzeRuns(args []string, opts analyze.Options) (*report.Report, error) {
	paths, err := runpaths.Expand(args)
	if err != nil {
		return nil, err
	}
	if len(paths) > 1 {
		opts.Open = c.openRun
		return analyze.AnalyzeMany(paths, opts)
	}
	r, done, err := c.openRun(paths[0])
	if err != nil {
		return nil, err
	}
	defer done()
	return analyze.Analyze(r, opts)
}

// analyzeText writes the text report of the runs args name and returns
// the reports written: one alone; several of one job together; runs of
// several jobs each job on its own, after the list of jobs.
func (c *cli) analyzeText(args []string, opts analyze.Options, o text.Options) ([]*report.Report, error) {
	paths, err := runpaths.Expand(args)
	if err != nil {
		return nil, err
	}
	if len(paths) == 1 {
		rep, err := c.analyzeRuns(paths, opts)
		if err != nil {
			return nil, err
		}
		return []*report.Report{rep}, text.Write(c.stdout, rep, o)
	}
	opts.Open = c.openRun
	jobs, err := analyze.AnalyzeJobs(paths, opts)
	if err != nil {
		return nil, err
	}
	if len(jobs.Reports) == 1 {
		return jobs.Reports, text.Write(c.stdout, jobs.Reports[0], o)
	}
	names := make([]string, len(jobs.Groups))
	for i, g := range jobs.Groups {
		names[i] = g.Describe(jobs.Runs)
	}
	return jobs.Reports, text.WriteJobs(c.stdout, names, jobs.Reports, o)
}

// withHint adds a hint to a refusal of runs that are not one job.
func withHint(err error, hint string) error {
	var notOne *analyze.NotOneJobError
	if errors.As(err, &notOne) {
		return fmt.Errorf("%w%s", err, hint)
	}
	return err
}

// checkOutput checks the -o of a command that writes a file from runs.
func checkOutput(ins []string, out string) error {
	if out == "" {
		return usageErr("give the file to write with -o FILE")
	}
	for _, in := range ins {
		if err := notTheInput(in, out); err != nil {
			return err
		}
	}
	return nil
}

// openForOutput checks the -o of a command that writes a file from a run,
// then opens the run (see openRun).
func (c *cli) openForOutput(in, out string) (analyze.Source, func() error, error) {
	if err := checkOutput([]string{in}, out); err != nil {
		return nil, nil, err
	}
	return c.openRun(in)
}

func (c *cli) inventoryCommand() *cobra.Command {
	var asJSON bool
	var lib string
	cmd := &cobra.Command{
		Use:   "inventory [flags]",
		Short: "GPUs, memory views, BAR1 and driver, as NVML sees them",
		Long: `Lists what NVML reports about this machine: driver and NVML versions, and
for each GPU its framebuffer, BAR1 aperture, MIG, persistence and compute
modes, and PCIe link. Framebuffer and BAR1 are listed as the separate views
they are.`,
		Annotations: map[string]string{"exit": `  0    NVML answered
  1    NVML did not initialize (the inventory says why)
  2    the command line is wrong
`},
		Args: noArgs,
		RunE: work(func(cmd *cobra.Command, args []string) error {
			inv := recorder.Inventory(lib)
			write := analyze.WriteInventoryText
			if asJSON {
				write = analyze.WriteInventoryJSON
			}
			if err := write(c.stdout, inv); err != nil {
				return err
			}
			if inv.Init.Code != 0 {
				return fmt.Errorf("NVML did not initialize: %s (%s)", inv.Init.Name, inv.Library)
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "write JSON")
	cmd.Flags().StringVar(&lib, "libnvidia-ml", "", "libnvidia-ml.so.1 `FILE` to query (default: the loader's)")
	return cmd
}

func (c *cli) markCommand() *cobra.Command {
	var runPath string
	cmd := &cobra.Command{
		Use:   "mark [flags] LABEL...",
		Short: "add a phase marker to a live recording",
		Long: `Adds a marker to a recording in progress; markers split the memory views
into phases. Only root and the user who started the recording may add one.
The words of LABEL are joined with spaces.`,
		Annotations: map[string]string{"exit": `  0    marked
  1    no recorder answered, or it refused
  2    the command line is wrong
`},
		Example: `  forensic mark "warmup done"
  forensic mark --run run.db serving`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErr("give a label")
			}
			return nil
		},
		RunE: work(func(cmd *cobra.Command, args []string) error {
			label := strings.Join(args, " ")
			m, err := recorder.Mark(runPath, label)
			if err != nil {
				return err
			}
			if m.Since < 0 {
				fmt.Fprintf(c.stdout, "marked %q at %d ns on the run clock\n", label, m.Time)
				return nil
			}
			fmt.Fprintf(c.stdout, "marked %q at +%.3f s into the recording\n", label, m.Since.Seconds())
			return nil
		}),
	}
	cmd.Flags().StringVar(&runPath, "run", "", "the run.db `FILE` (or flight directory) being recorded (default: the only live recording)")
	return cmd
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && termFd(f)
}

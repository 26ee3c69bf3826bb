package main

import (
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/retrivium/forensic/analyze"
	"github.com/retrivium/forensic/render/html"
	"github.com/retrivium/forensic/render/text"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/rundiff"
	"github.com/retrivium/forensic/runpaths"
)

// diffExit are diff's exit statuses.
const diffExit = `  0    done
  1    a run is not readable (missing, not a run.db, still being recorded,
       written by a newer forensic), no run failed, several failed and the
       last did not, or the output failed
  2    the command line is wrong (fewer than two runs)
`

func (c *cli) diffCommand() *cobra.Command {
	var asJSON, noColor bool
	var out string
	cmd := &cobra.Command{
		Use:   "diff [flags] GOOD.DB... BAD.DB",
		Short: "what a failing run has that good runs of the same job do not",
		Long: `Compares a failing run with one or more good runs of the same job and
ranks the differences that can explain the failure: processes only the
failing run has (a neighbour, with its memory), the first call where a
process's allocations depart (an extra or larger allocation, named with its
size, phase and stack), the least free memory and the traced peak per GPU
and view, growth per phase, the platform, and phase durations. What no good
run has comes first (docs/diff.md).

Runs are files, directories of them or flight recordings' directories. The
failing run is the last one given; when it has no failed call, the one run
that has one, else the one whose verdict is missing evidence (several
failing runs, none of them last, or none failing or missing evidence, are
refused). --json writes the documented contract; -o FILE writes an HTML
page (with --json, the JSON).`,
		Annotations: map[string]string{"exit": diffExit},
		Example: `  forensic diff good.db bad.db
  forensic diff good1.db good2.db good3.db bad.db
  forensic diff --json good.db bad.db | jq '.differences[0]'
  forensic diff good.db bad.db -o diff.html`,
		Args: someRuns,
		RunE: work(func(cmd *cobra.Command, args []string) error {
			if out != "" {
				if err := checkOutput(args, out); err != nil {
					return err
				}
			}
			d, err := c.diffRuns(args)
			if err != nil {
				return err
			}
			switch {
			case out != "" && asJSON:
				return c.writeOutput(out, func(w io.Writer) error { return report.WriteDiffJSON(w, d) })
			case out != "":
				return c.writeOutput(out, func(w io.Writer) error { return html.WriteDiff(w, d) })
			case asJSON:
				return report.WriteDiffJSON(c.stdout, d)
			}
			return text.WriteDiff(c.stdout, d, text.Options{
				Color: !noColor && c.getenv("NO_COLOR") == "" && isTerminal(c.stdout),
				Width: textWidth(c.stdout, c.getenv)})
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "write the JSON diff (the documented contract)")
	cmd.Flags().BoolVar(&noColor, "no-color", false, "never colour the output")
	cmd.Flags().StringVarP(&out, "output", "o", "", "HTML `FILE` to write (with --json, JSON; - for standard output)")
	return cmd
}

// diffRuns reads every run args name and compares the failing one with
// the others; the runs stay open until the departing calls' stacks are
// read.
func (c *cli) diffRuns(args []string) (*report.Diff, error) {
	paths, err := runpaths.Expand(args)
	if err != nil {
		return nil, err
	}
	if len(paths) < 2 {
		return nil, usageErr("diff compares at least two runs, and %s is one: give a good run and the failing one", strings.Join(args, " "))
	}
	srcs := make([]analyze.Source, len(paths))
	for i, p := range paths {
		src, done, err := c.openRun(p)
		if err != nil {
			return nil, err
		}
		defer done()
		srcs[i] = src
	}
	runs, err := rundiff.ReadAll(srcs, rundiff.Options{})
	if err != nil {
		return nil, err
	}
	return rundiff.Diff(runs)
}

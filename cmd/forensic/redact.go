package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/retrivium/forensic/redact"
)

func (c *cli) redactCommand() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "redact [flags] RUN.DB | DIR",
		Short: "a copy of a recording that is safe to attach to a ticket",
		Long: `Writes a copy of a run.db (or of a flight recording's directory) with
process arguments and user paths replaced by placeholders (<arg-1>,
<path-2>, <dir-3>: the same original always gets the same one), the host
name, machine id and boot id replaced by hashes, and raw stack bytes left
out. Calls, sizes, results, times, samples and GPUs are unchanged:
"forensic analyze" of the copy gives the same verdict and numbers. Paths
under /usr, /lib, /bin, /etc and the like are the system's and are kept,
as are function names, the environment allowlist's values and GPU UUIDs.
The original is only read; the copy is a new file
(default: RUN.redacted.db, or DIR-redacted), mode 0600.`,
		Annotations: map[string]string{"exit": readExit},
		Example: `  forensic redact run.db                 # run.redacted.db
  forensic redact -o ticket.db run.db
  forensic redact /var/lib/forensic/flight -o flight-redacted`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("give one run.db or flight recording directory")
			}
			return nil
		},
		RunE: work(func(cmd *cobra.Command, args []string) error {
			return c.redact(args[0], out)
		}),
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the copy's `PATH` (a new file, or a new directory for a flight recording)")
	return cmd
}

// redact writes the copy and says what it replaced.
func (c *cli) redact(src, out string) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	var sum redact.Summary
	if st.IsDir() {
		if out == "" {
			out = strings.TrimSuffix(filepath.Clean(src), string(filepath.Separator)) + "-redacted"
		}
		sum, err = redact.Dir(src, out)
	} else {
		if out == "" {
			out = strings.TrimSuffix(src, filepath.Ext(src)) + ".redacted.db"
		}
		sum, err = redact.File(src, out)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "wrote %s\n", out)
	fmt.Fprintf(c.stderr, "replaced %d paths, %d arguments, %d host identities", sum.Paths, sum.Args, sum.Hosts)
	if sum.Users > 0 {
		fmt.Fprintf(c.stderr, ", %d user names", sum.Users)
	}
	if sum.RawStacks > 0 {
		fmt.Fprintf(c.stderr, "; left out %d raw stack records", sum.RawStacks)
	}
	if sum.Named > 0 {
		fmt.Fprintf(c.stderr, "; named %d stacks from them with this machine's files", sum.Named)
	}
	fmt.Fprintln(c.stderr)
	for _, l := range sum.LeftOut {
		fmt.Fprintf(c.stderr, "left out %s (not known to be safe)\n", l)
	}
	return nil
}

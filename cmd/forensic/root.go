package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/retrivium/forensic/store"
)

// helpWidth is the width every help text fits in.
const helpWidth = 80

const rootLong = `forensic records the CUDA driver calls of a workload with eBPF, samples GPU
memory through NVML, and explains the first failed operation: an allocation
problem, a mapping problem, not a memory problem, or missing evidence.
Framebuffer (device memory) and BAR1 (the PCIe aperture) are judged apart.`

const rootExit = `  0    success
  1    the work failed (a file that is not a run, a recorder error, ...)
  2    the command line is wrong
  3    analyze --exit-code: a call failed or evidence is missing
  126  record: the command was found but cannot be run
  127  record: the command was not found
  N    record: otherwise the workload's own status (128+N for signal N)
`

// rootCommand builds the command tree.
func (c *cli) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:                   "forensic COMMAND [ARGS...]",
		Short:                 "record and explain GPU memory failures",
		Long:                  rootLong,
		Version:               fmt.Sprintf("%s (run.db schema %d)", c.build.Version, store.SchemaVersion),
		Annotations:           map[string]string{"exit": rootExit},
		DisableFlagsInUseLine: true,
		SilenceErrors:         true,
		// "recrod" is two edits from "record".
		SuggestionsMinimumDistance: 2,
		SilenceUsage:               true,
		Args:                       cobra.ArbitraryArgs,
		CompletionOptions:          cobra.CompletionOptions{DisableDefaultCmd: true},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				writeHelp(c.stderr, cmd)
				return exitError{exitUsage}
			}
			hint := ""
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				hint = " (did you mean " + strings.Join(s, " or ") + "?)"
			}
			return usageErr("unknown command %q%s", args[0], hint)
		},
	}
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetVersionTemplate("forensic {{.Version}}\n")
	root.SetHelpFunc(func(cmd *cobra.Command, _ []string) { writeHelp(cmd.OutOrStdout(), cmd) })
	root.SetHelpCommand(helpCommand(root))
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr("%s", flagError(err)) })
	root.AddCommand(c.recordCommand(), c.analyzeCommand(), c.reportCommand(), c.exportCommand(),
		c.diffCommand(), c.redactCommand(), c.inventoryCommand(), c.markCommand(), c.snapshotCommand(),
		c.versionCommand(), completionCommand(root))
	return root
}

// writeHelp prints a command's help: what it does, how it is called, its
// flags, exit status and examples, within helpWidth columns.
func writeHelp(w io.Writer, cmd *cobra.Command) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s - %s\n\nUsage:\n  %s\n", cmd.CommandPath(), cmd.Short, cmd.UseLine())
	for _, s := range strings.Split(cmd.Annotations["synopsis"], "\n") {
		if s != "" {
			fmt.Fprintf(&b, "  %s %s\n", cmd.Parent().CommandPath(), s)
		}
	}
	if cmd.Long != "" {
		fmt.Fprintf(&b, "\n%s\n", strings.TrimSpace(cmd.Long))
	}
	if cmd.HasAvailableSubCommands() {
		b.WriteString("\nCommands:\n")
		for _, sub := range cmd.Commands() {
			if sub.IsAvailableCommand() || sub.Name() == "help" {
				fmt.Fprintf(&b, "  %-11s %s\n", sub.Name(), sub.Short)
			}
		}
	}
	if fs := cmd.LocalFlags(); fs.HasAvailableFlags() {
		fmt.Fprintf(&b, "\nFlags:\n%s", fs.FlagUsagesWrapped(helpWidth))
	}
	if exit := cmd.Annotations["exit"]; exit != "" {
		fmt.Fprintf(&b, "\nExit status:\n%s", exit)
	}
	if cmd.Example != "" {
		fmt.Fprintf(&b, "\nExamples:\n%s\n", strings.TrimRight(cmd.Example, "\n"))
	}
	if !cmd.HasParent() {
		b.WriteString("\nRun 'forensic help COMMAND' for a command's flags and exit status.\n")
	}
	io.WriteString(w, b.String())
}

// helpCommand is `forensic help [COMMAND]`: help on stdout, and a usage
// error for a command that does not exist.
func helpCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:                   "help [COMMAND]",
		DisableFlagsInUseLine: true,
		Short:                 "help about any command",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErr("help explains one command at a time (got %s)", quoteArgs(args))
			}
			return nil
		},
		ValidArgsFunction: func(_ *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
			var names []string
			for _, sub := range root.Commands() {
				if sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), prefix) {
					names = append(names, sub.Name())
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			target, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 || (len(args) > 0 && target == root) {
				return usageErr("no help for %q: not a command", strings.Join(args, " "))
			}
			writeHelp(cmd.OutOrStdout(), target)
			return nil
		},
	}
}

// completionCommand writes a shell's completion script.
func completionCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:                   "completion bash|zsh|fish",
		DisableFlagsInUseLine: true,
		Short:                 "shell completion script",
		Long: `Writes a completion script for the shell to standard output. To load it:

  bash:  source <(forensic completion bash)
  zsh:   forensic completion zsh > "${fpath[1]}/_forensic"
  fish:  forensic completion fish | source`,
		ValidArgs: []string{"bash", "zsh", "fish"},
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return usageErr("give the shell: bash, zsh or fish")
			case len(args) > 1:
				return usageErr("give one shell, not %d: bash, zsh or fish", len(args))
			case args[0] != "bash" && args[0] != "zsh" && args[0] != "fish":
				return usageErr("%s is not supported: the shells with completion are bash, zsh and fish", args[0])
			}
			return nil
		},
		RunE: work(func(cmd *cobra.Command, args []string) error {
			w := cmd.OutOrStdout()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(w, true)
			case "zsh":
				return root.GenZshCompletion(w)
			}
			return root.GenFishCompletion(w, true)
		}),
	}
}

func (c *cli) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:                   "version",
		DisableFlagsInUseLine: true,
		Short:                 "forensic's version and run.db schema",
		Args:                  noArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "forensic %s\n", cmd.Root().Version)
		},
	}
}

// noArgs refuses arguments to a command that takes none.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErr("%s takes no arguments (got %s)", cmd.Name(), quoteArgs(args))
	}
	return nil
}

// quoteArgs writes arguments as they could be typed again.
func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// flagError says in words what is wrong with a flag, where pflag's own
// message is Go's ("strconv.ParseInt: parsing ...").
func flagError(err error) string {
	var inv *pflag.InvalidValueError
	var req *pflag.ValueRequiredError
	var unknown *pflag.NotExistError
	switch {
	case errors.As(err, &unknown) && unknown.GetSpecifiedShortnames() != "":
		s := fmt.Sprintf("unknown flag -%c", unknown.GetSpecifiedName()[0])
		if len(unknown.GetSpecifiedShortnames()) > 1 {
			s += " (in -" + unknown.GetSpecifiedShortnames() + ")"
		}
		return s
	case errors.As(err, &unknown):
		return "unknown flag --" + unknown.GetSpecifiedName()
	case errors.As(err, &inv):
		return flagName(inv.GetFlag()) + ": " + valueError(inv.GetFlag(), inv.GetValue(), errors.Unwrap(err))
	case errors.As(err, &req):
		name := "--" + req.GetSpecifiedName()
		if req.GetSpecifiedShortnames() != "" {
			name = "-" + req.GetSpecifiedName()
		}
		return name + " needs a value"
	}
	return err.Error()
}

// flagName is a flag as a user types it: --name.
func flagName(f *pflag.Flag) string { return "--" + f.Name }

// valueError says why value is not one a flag takes.
func valueError(f *pflag.Flag, value string, cause error) string {
	var ne *strconv.NumError
	if !errors.As(cause, &ne) {
		return cause.Error()
	}
	switch {
	case f.Value.Type() == "bool":
		return fmt.Sprintf("%q is not true or false", value)
	case errors.Is(ne.Err, strconv.ErrRange):
		return fmt.Sprintf("%q is out of range", value)
	}
	return fmt.Sprintf("%q is not a whole number", value)
}

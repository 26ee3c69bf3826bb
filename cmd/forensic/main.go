// Command forensic records CUDA memory failures and explains them.
//
//	sudo forensic record -o run.db -- CMD [ARGS...]
//	forensic analyze [--json] run.db
//	forensic report run.db -o report.html
//	forensic export --format perfetto run.db -o trace.json
//
// The command is thin: it parses flags (spf13/cobra) and calls packages
// recorder, store and analyze. Every error is one line on stderr and a
// non-zero exit: 2 for usage errors, 126/127 for a workload that cannot be
// run, 1 for anything else.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/retrivium/forensic/internal/buildinfo"
	"github.com/retrivium/forensic/recorder"
)

// Exit statuses besides a workload's own.
const (
	exitOK       = 0
	exitFailure  = 1
	exitUsage    = 2
	exitVerdict  = 3 // analyze --exit-code: something failed or is missing
	exitInternal = 70
	exitCannot   = 126 // the command was found but cannot be run
	exitNotFound = 127
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// cli is what commands share: where they write and the environment they
// read.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// terminal, when set, says whether a writer is a terminal (tests);
	// nil: asks the operating system.
	terminal func(io.Writer) bool
	// build is this binary's: its version is shown by --version and
	// stored with what it writes.
	build buildinfo.Info
}

// run executes one command line and returns the exit status. A panic
// anywhere becomes one line, never a stack trace.
func run(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(stderr, "forensic: internal error: %v\n", p)
			code = exitInternal
		}
	}()
	c := &cli{stdout: stdout, stderr: stderr, getenv: os.Getenv, build: buildinfo.Read()}
	root := c.rootCommand()
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	return c.exitStatus(cmd, err)
}

// usageError is a command line that cannot be run as given.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usageErr(format string, a ...any) error {
	return usageError{fmt.Sprintf(format, a...)}
}

// failure is an error from doing the work (not from the command line).
type failure struct{ err error }

func (e failure) Error() string { return e.err.Error() }
func (e failure) Unwrap() error { return e.err }

// exitError ends a command with a status and nothing more to print (the
// workload's status; analyze --exit-code).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// work marks the errors of a command's run function as failures, so that
// every other error (cobra's, pflag's, usageErr's) is a usage error.
func work(f func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := f(cmd, args)
		var ue usageError
		var ee exitError
		if err == nil || errors.As(err, &ue) || errors.As(err, &ee) {
			return err
		}
		return failure{err}
	}
}

// exitStatus prints err as one line and returns the status it means.
func (c *cli) exitStatus(cmd *cobra.Command, err error) int {
	var ee exitError
	var fe failure
	var ce *recorder.CommandError
	name := "forensic"
	if cmd != nil {
		name = cmd.CommandPath()
	}
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ce):
		fmt.Fprintf(c.stderr, "%s: %s\n", name, oneLine(err))
		if ce.NotFound {
			return exitNotFound
		}
		return exitCannot
	case errors.As(err, &fe):
		fmt.Fprintf(c.stderr, "%s: %s\n", name, oneLine(err))
		return exitFailure
	}
	fmt.Fprintf(c.stderr, "%s: %s\nRun '%s --help' for usage.\n", name, oneLine(err), name)
	return exitUsage
}

// oneLine keeps an error on one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/spf13/pflag"
)

// The command line without recording: exit statuses and the shape of
// errors (the recording paths are end-to-end tests, e2e/cli_test.go).
func TestRunExitStatus(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	file := filepath.Join(t.TempDir(), "run.db")
	if err := os.WriteFile(file, []byte("a run.db"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args   []string
		code   int
		stderr string // a substring of the first line
	}{
		{[]string{"version"}, 0, ""},
		{[]string{"--version"}, 0, ""},
		{[]string{"help", "record"}, 0, ""},
		{[]string{}, 2, "Usage:"},
		{[]string{"recrod"}, 2, `unknown command "recrod" (did you mean record?)`},
		{[]string{"analyze"}, 2, "give the run.db to read"},
		{[]string{"analyze", "a.db", "b.db"}, 1, "a.db: no such file"},
		{[]string{"analyze", "--bogus", "a.db"}, 2, "unknown flag --bogus"},
		{[]string{"analyze", missing}, 1, "no such file"},
		{[]string{"report", missing}, 2, "give the file to write with -o FILE"},
		{[]string{"report", missing, "-o", missing}, 1, "is the run.db being read"},
		{[]string{"export", "--format", "svg", missing, "-o", "x"}, 2, `unknown format "svg"`},
		{[]string{"record", "-o", "x.db"}, 2, "nothing to record"},
		{[]string{"record", "--ring-size", "16", "-o", "x.db", "true"}, 2, "did you mean 16MiB?"},
		{[]string{"record", "-o", "x.db", "--pid", "-3"}, 2, "not a process id"},
		{[]string{"record", "-o", "x.db", "--pid", "3", "--all"}, 2, "only one of --pid and --all"},
		{[]string{"record", "-o", "x.db", "--keep-samples", "0", "true"}, 2, "keep at least 1"},
		{[]string{"record", "-true"}, 2, "unknown flag -t (in -true)"},
		{[]string{"record", "-o", dir, "true"}, 1, dir + " is a directory: give the run.db file to create"},
		{[]string{"record", "-f", "-o", dir, "true"}, 1, dir + " is a directory"},
		{[]string{"record", "--ring-size", "1000", "-o", "x.db", "true"}, 2, "did you mean 512MiB or 1GiB?"},
		{[]string{"record", "--pid", "abc", "-o", "x.db"}, 2, `--pid: "abc" is not a whole number`},
		{[]string{"record", "-o"}, 2, "-o needs a value"},
		{[]string{"analyze", "--json=maybe", "a.db"}, 2, `--json: "maybe" is not true or false`},
		{[]string{"export", dir}, 1, dir + ": no *.db file in this directory"},
		{[]string{"export", "a.db", "b.db"}, 2, "a.db b.db: 2 runs (a.db, b.db); a trace holds one run"},
		{[]string{"help", "record", "extra"}, 2, "help explains one command at a time (got record extra)"},
		{[]string{"version", "x"}, 2, "version takes no arguments (got x)"},
		{[]string{"record", "-o", "x.db", "--max-size", "4GiB", "--all"}, 2, "--max-size is a flight mode flag: give --flight too"},
		{[]string{"record", "-o", "x.db", "--keep-previous", "--all"}, 2, "--keep-previous is a flight mode flag"},
		{[]string{"record", "--flight", "-o", "d", "--max-size", "8MiB", "--all"}, 2, "8MiB is below 16MiB (two segments of 8MiB)"},
		{[]string{"record", "--flight", "-o", "d", "--keep-after", "-1s", "--all"}, 2, "must be more than 0"},
		{[]string{"record", "--flight", "-f", "-o", "d", "--all"}, 2, "--force does not apply to --flight"},
		{[]string{"record", "--flight", "-o", "d", "--keep-previous", "5", "true"}, 2, "give the count as --keep-previous=5"},
		{[]string{"record", "--flight", "-o", "d", "--keep-previous=-1", "--all"}, 2, "--keep-previous=-1: give a count of 0 or more"},
		{[]string{"snapshot"}, 2, "give the flight recording's directory"},
		{[]string{"snapshot", dir}, 1, "not a readable flight recording index"},
		{[]string{"mark"}, 2, "give a label"},
		{[]string{"inventory", "extra"}, 2, "inventory takes no arguments (got extra)"},
		{[]string{"help", "nosuch"}, 2, `no help for "nosuch"`},
		{[]string{"completion"}, 2, "give the shell"},
		{[]string{"completion", "tcsh"}, 2, "tcsh is not supported: the shells with completion are bash, zsh and fish"},
		{[]string{"completion", "bash", "zsh"}, 2, "give one shell, not 2"},
		{[]string{"record", "--flight", "-o", file, "--all"}, 1, file + " is a file: --flight records into a directory"},
		{[]string{"export", "--format", "parquet", missing, "-o", file}, 1, file + " is a file: --format parquet writes a directory"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tt.args, &out, &errb)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tt.code, errb.String())
			}
			if !strings.Contains(errb.String(), tt.stderr) {
				t.Errorf("stderr %q, want %q", errb.String(), tt.stderr)
			}
			lines := strings.Split(strings.TrimRight(errb.String(), "\n"), "\n")
			if tt.code == exitUsage && len(tt.args) > 0 && (len(lines) != 2 || !strings.HasSuffix(lines[1], "--help' for usage.")) {
				t.Errorf("a usage error is one line and a hint, got %q", errb.String())
			}
		})
	}
}

// A panic in a command is one line and status 70, never a stack trace.
func TestRunPanic(t *testing.T) {
	var errb bytes.Buffer
	// A writer that panics stands in for a bug anywhere below run.
	code := run([]string{"version"}, panicWriter{}, &errb)
	if code != exitInternal || strings.Count(errb.String(), "\n") != 1 || !strings.Contains(errb.String(), "internal error") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

type panicWriter struct{}

func (panicWriter) Write([]byte) (int, error) { panic("boom") }

func TestWriteOutput(t *testing.T) {
	dir := t.TempDir()
	c := &cli{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	at := func(n string) string { return filepath.Join(dir, n) }
	// Replacing a file readable by all leaves a private one.
	os.WriteFile(at("old.html"), []byte("old"), 0o644)
	if err := c.writeOutput(at("old.html"), func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(at("old.html")); string(b) != "new" {
		t.Errorf("content %q", b)
	}
	if st, _ := os.Stat(at("old.html")); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	// A failed write keeps the old file and leaves no temporary one.
	err := c.writeOutput(at("old.html"), func(w io.Writer) error { io.WriteString(w, "partial"); return errors.New("disk on fire") })
	if err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("failed write: %v", err)
	}
	if b, _ := os.ReadFile(at("old.html")); string(b) != "new" {
		t.Errorf("a failed write changed the file: %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left behind: %v", ents)
	}
	// Devices are written in place; a directory is refused.
	if err := c.writeOutput(os.DevNull, func(w io.Writer) error { _, err := io.WriteString(w, "x"); return err }); err != nil {
		t.Errorf("/dev/null: %v", err)
	}
	if err := c.writeOutput(dir, func(io.Writer) error { return nil }); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("a directory: %v", err)
	}
}

// An output that cannot be written is named as the user gave it, never by
// the temporary file it is written through.
func TestWriteOutputErrorsNameTheOutput(t *testing.T) {
	dir := t.TempDir()
	c := &cli{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	var tmp string
	full := func(w io.Writer) error {
		tmp = w.(*os.File).Name()
		return fmt.Errorf("html report: %w", &os.PathError{Op: "write", Path: tmp, Err: syscall.ENOSPC})
	}
	tests := []struct {
		name, out string
		write     func(io.Writer) error
		want      string
	}{
		{"missing directory", filepath.Join(dir, "nonexistent", "x.html"), nil, "does not exist"},
		{"disk full", filepath.Join(dir, "x.html"), full, "no space left on device"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmp = ""
			write := tt.write
			if write == nil {
				write = func(io.Writer) error { return nil }
			}
			err := c.writeOutput(tt.out, write)
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.out) || !strings.Contains(msg, tt.want) {
				t.Errorf("%q: want it to name %s and say %q", msg, tt.out, tt.want)
			}
			if strings.Contains(msg, "."+filepath.Base(tt.out)) || (tmp != "" && strings.Contains(msg, tmp)) {
				t.Errorf("%q names the temporary file", msg)
			}
		})
	}
}

func TestShellQuote(t *testing.T) {
	tests := map[string]string{
		"run.db":          "run.db",
		"/tmp/a-b_c.db":   "/tmp/a-b_c.db",
		"my run.db":       "'my run.db'",
		"it's.db":         `'it'\''s.db'`,
		"$HOME/x.db":      "'$HOME/x.db'",
		"":                "''",
		"/data/run 1.db":  "'/data/run 1.db'",
		"a;rm -rf /.db":   "'a;rm -rf /.db'",
		"ok=1,2:3@host+x": "ok=1,2:3@host+x",
	}
	for in, want := range tests {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestTextWidth(t *testing.T) {
	env := func(cols string) func(string) string {
		return func(k string) string {
			if k == "COLUMNS" {
				return cols
			}
			return ""
		}
	}
	var buf bytes.Buffer
	tests := []struct {
		cols string
		want int
	}{{"", 100}, {"132", 132}, {"0", 100}, {"wide", 100}, {"-3", 100}}
	for _, tt := range tests {
		if got := textWidth(&buf, env(tt.cols)); got != tt.want {
			t.Errorf("COLUMNS=%q: %d, want %d", tt.cols, got, tt.want)
		}
	}
}

// Every flag that takes a value names it with a placeholder in capitals
// (FILE, SIZE, FORMAT), never with its Go type (string, int).
func TestFlagPlaceholders(t *testing.T) {
	c := &cli{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	root := c.rootCommand()
	for _, cmd := range append(root.Commands(), root) {
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			name, _ := pflag.UnquoteUsage(f)
			if f.Value.Type() == "bool" || f.Hidden {
				return
			}
			if name == "" || name != strings.ToUpper(name) {
				t.Errorf("%s --%s: placeholder %q, want a word in capitals", cmd.Name(), f.Name, name)
			}
		})
	}
}

// analyze's header names the input as typed: a directory stays the
// directory, with how many files it holds.
func TestInputLabel(t *testing.T) {
	dir := t.TempDir()
	one, many := filepath.Join(dir, "one"), filepath.Join(dir, "many")
	os.MkdirAll(one, 0o755)
	os.MkdirAll(many, 0o755)
	os.WriteFile(filepath.Join(one, "rank2.db"), []byte("x"), 0o600)
	for _, n := range []string{"a.db", "b.db", "c.db"} {
		os.WriteFile(filepath.Join(many, n), []byte("x"), 0o600)
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"run.db"}, "run.db"},
		{[]string{many}, many + " (3 files)"},
		{[]string{one}, one + " (" + filepath.Join(one, "rank2.db") + ")"},
		{[]string{filepath.Join(many, "*.db")}, filepath.Join(many, "*.db") + " (3 files)"},
		{[]string{"a.db", "b.db"}, "a.db b.db"},
		{[]string{"a.db", "b.db", "c.db", "d.db"}, "a.db b.db ... (4 files)"},
	}
	for _, tt := range tests {
		if got := inputLabel(tt.args); got != tt.want {
			t.Errorf("inputLabel(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}

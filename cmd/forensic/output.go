package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/term"

	"github.com/retrivium/forensic/recorder"
)

// notTheInput refuses an output path that names the run.db being read (a
// failure, not a usage error: the command line is well formed).
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
		return fmt.Errorf("the output %s is the run.db being read; choose another file", out)
	}
	return nil
}

// writeOutput lets write fill out ("-": standard output) and says "wrote
// PATH". A file is written beside out and renamed over it when complete,
// mode 0600 and, under sudo, owned by the user who ran sudo: it names
// processes and their arguments. A failed write leaves out as it was.
// Devices and pipes (/dev/null, a FIFO) are written in place.
func (c *cli) writeOutput(out string, write func(io.Writer) error) error {
	if out == "-" {
		return write(c.stdout)
	}
	if st, err := os.Stat(out); err == nil && !st.Mode().IsRegular() {
		if st.IsDir() {
			return fmt.Errorf("%s is a directory", out)
		}
		return c.writeInPlace(out, write)
	}
	owner, err := recorder.SudoInvoker(c.getenv, os.Geteuid())
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
	if err != nil {
		return outputError{out: out, tmp: filepath.Join(filepath.Dir(out), "."+filepath.Base(out)), err: err}
	}
	tmp := f.Name()
	err = write(f)
	if o := owner.Owner(); err == nil && o != nil {
		err = f.Chown(o.UID, o.GID)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, out)
	}
	if err != nil {
		os.Remove(tmp)
		return outputError{out: out, tmp: tmp, err: err}
	}
	fmt.Fprintf(c.stdout, "wrote %s\n", out)
	return nil
}

// outputError is a failure to write the output file out through the
// temporary file tmp beside it. It names out, the path the user gave:
// the temporary file is gone, and its name means nothing to them.
type outputError struct {
	out, tmp string
	err      error
}

func (e outputError) Error() string {
	msg := e.err.Error()
	var pe *os.PathError
	var le *os.LinkError
	switch {
	case errors.As(e.err, &le) && le.Old == e.tmp:
		msg = le.Err.Error() // the rename: out is named below
	case errors.As(e.err, &pe) && strings.HasPrefix(pe.Path, e.tmp):
		msg = pe.Err.Error()
		if errors.Is(pe.Err, fs.ErrNotExist) {
			msg = "its directory " + filepath.Dir(e.out) + " does not exist"
		}
	}
	return "writing " + e.out + ": " + strings.ReplaceAll(msg, e.tmp, e.out)
}

func (e outputError) Unwrap() error { return e.err }

func (c *cli) writeInPlace(out string, write func(io.Writer) error) error {
	f, err := os.OpenFile(out, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return nil
}

// shellQuote quotes s for a POSIX shell when it needs it, so a printed
// command can be pasted.
func shellQuote(s string) string {
	safe := s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@%+=,", r))
	}) < 0
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// textWidth is the width the text report wraps to: COLUMNS when set,
// else the terminal's when w is one, else 100.
func textWidth(w io.Writer, getenv func(string) string) int {
	if n, err := strconv.Atoi(getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	if f, ok := w.(*os.File); ok {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
			return cols
		}
	}
	return 100
}

// termFd reports whether f is a terminal.
func termFd(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

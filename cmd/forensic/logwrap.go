package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/retrivium/forensic/logging"
	"github.com/retrivium/forensic/report"
)

// maxLogWidth is the widest a message line is wrapped to.
const maxLogWidth = 80

// logIndent starts the continuation lines of a "forensic: ..." message,
// under its first word, so every message begins at the left margin.
const logIndent = "          " // len("forensic: ")

// logWriter wraps the messages the recorder and the record command write
// to a terminal: each line longer than width is broken at spaces, its
// continuation lines indented. Writes from several goroutines stay whole.
// Messages are written as they come, one Write each.
type logWriter struct {
	mu    sync.Mutex
	w     io.Writer
	width int
}

func (l *logWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b bytes.Buffer
	rest := string(p)
	for rest != "" {
		line, nl, _ := strings.Cut(rest, "\n")
		rest = nl
		for i, part := range report.Wrap(line, l.width, logIndent) {
			if i > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(part)
		}
		if len(rest) > 0 || strings.HasSuffix(string(p), "\n") {
			b.WriteByte('\n')
		}
	}
	if _, err := l.w.Write(b.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// messages is where the notes of the commands people run by hand
// (analyze saying how it read a flight recording, ...) go: stderr,
// wrapped to the terminal (at most maxLogWidth columns) when stderr is
// one or COLUMNS is set, as their output on stdout is. Otherwise each
// note stays one line.
func (c *cli) messages() io.Writer {
	width := 0
	if n, err := strconv.Atoi(c.getenv("COLUMNS")); err == nil && n > 0 {
		width = n
	} else if c.stderrTerminal() {
		width = textWidth(c.stderr, c.getenv)
	}
	if width <= 0 {
		return c.stderr
	}
	return &logWriter{w: c.stderr, width: min(width, maxLogWidth)}
}

// logOutput is where the recorder's log goes: stderr, wrapped to the
// terminal's width (COLUMNS, or the terminal's own; at most maxLogWidth
// columns) only when stderr is a terminal. A recorder's log in a file,
// journald or a pipe is read by machines: each message stays one line,
// whatever COLUMNS says.
func (c *cli) logOutput() io.Writer {
	if !c.stderrTerminal() {
		return c.stderr
	}
	return &logWriter{w: c.stderr, width: min(textWidth(c.stderr, c.getenv), maxLogWidth)}
}

// stderrTerminal reports whether stderr is a terminal.
func (c *cli) stderrTerminal() bool {
	if c.terminal != nil {
		return c.terminal(c.stderr)
	}
	f, ok := c.stderr.(*os.File)
	return ok && termFd(f)
}

// recordLog is the record command's logger: text (wrapped on a terminal,
// with times and levels elsewhere) or JSON lines, on stderr.
func (c *cli) recordLog(format string) (*slog.Logger, error) {
	f, err := logging.ParseFormat(format)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	term := c.stderrTerminal()
	w := c.stderr
	if f == logging.Text {
		w = c.logOutput()
	}
	return logging.New(w, logging.Options{Format: f, Terminal: term}), nil
}

// note writes one message (not an error) on stderr, wrapped as the
// recorder's are: to the terminal, or left one line for a log.
func (c *cli) note(format string, a ...any) {
	fmt.Fprintf(c.messages(), format+"\n", a...)
}

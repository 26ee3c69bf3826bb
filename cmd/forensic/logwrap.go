package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

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

// messages is where the record command's own messages and the
// recorder's go: stderr, wrapped to the terminal (at most maxLogWidth
// columns) when stderr is one or COLUMNS is set. Otherwise (a log file,
// journald, a pipe) each message stays one line, for grep and log
// collectors.
func (c *cli) messages() io.Writer {
	width := 0
	if n, err := strconv.Atoi(c.getenv("COLUMNS")); err == nil && n > 0 {
		width = n
	} else if f, ok := c.stderr.(*os.File); ok && termFd(f) {
		width = textWidth(f, c.getenv)
	}
	if width <= 0 {
		return c.stderr
	}
	return &logWriter{w: c.stderr, width: min(width, maxLogWidth)}
}

// note writes one message (not an error) on stderr, wrapped as the
// recorder's are: to the terminal, or left one line for a log.
func (c *cli) note(format string, a ...any) {
	fmt.Fprintf(c.messages(), format+"\n", a...)
}

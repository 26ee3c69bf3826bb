// Package logging builds the recorder's logger (log/slog): text for people
// and line-oriented logs, or JSON lines for log collectors. Text on a
// terminal reads as forensic's messages always did ("forensic: ...",
// warnings and errors named as such); text elsewhere (a file, journald, a
// pipe) starts each line with the time and the level, one line per record
// whatever its length. Text is the message alone: the messages say in
// words what their attributes hold. JSON is slog's: "time", "level", "msg"
// and the record's attributes (library, pid, reason, ...), one object per
// line.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
)

// Format is how records are written.
type Format string

// The formats of --log-format.
const (
	Text Format = "text"
	JSON Format = "json"
)

// ParseFormat returns the format a --log-format value names.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case Text, JSON:
		return f, nil
	}
	return "", fmt.Errorf("--log-format %q: give text or json", s)
}

// Options adjust New.
type Options struct {
	Format Format
	// Terminal: the writer is a person's terminal (text leaves out the
	// time and the info level).
	Terminal bool
	// Level is the least level written (default info).
	Level slog.Level
}

// New returns a logger writing to w.
func New(w io.Writer, o Options) *slog.Logger {
	if o.Format == JSON {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: o.Level}))
	}
	return slog.New(&textHandler{out: &output{w: w}, terminal: o.Terminal, level: o.Level})
}

// Discard is a logger that writes nothing (tests, library callers).
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// output serializes writes of several handlers (WithAttrs shares it).
type output struct {
	mu sync.Mutex
	w  io.Writer
}

// textHandler writes "[TIME LEVEL ]forensic: [warning: |error: ]msg".
type textHandler struct {
	out      *output
	terminal bool
	level    slog.Level
}

// timeFormat is the text format's time: RFC 3339 in UTC, milliseconds.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

func (h *textHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *textHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	if !h.terminal {
		if !r.Time.IsZero() {
			b.WriteString(r.Time.UTC().Format(timeFormat))
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%-5s ", r.Level.String())
	}
	b.WriteString("forensic: ")
	if h.terminal {
		switch {
		case r.Level >= slog.LevelError:
			b.WriteString("error: ")
		case r.Level >= slog.LevelWarn:
			b.WriteString("warning: ")
		}
	}
	b.WriteString(oneLine(r.Message))
	b.WriteByte('\n')
	h.out.mu.Lock()
	defer h.out.mu.Unlock()
	_, err := io.WriteString(h.out.w, b.String())
	return err
}

// WithAttrs and WithGroup return the handler itself: text shows the
// message alone.
func (h *textHandler) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h *textHandler) WithGroup(string) slog.Handler { return h }

// oneLine keeps a message on one line: a log line is one record.
func oneLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if !strings.ContainsAny(s, "\n\r") {
		return s
	}
	return strings.NewReplacer("\r\n", "; ", "\n", "; ", "\r", "; ").Replace(s)
}

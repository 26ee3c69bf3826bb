// Package logging builds the recorder's logger (log/slog): text for people
// and line-oriented logs, or JSON lines for log collectors. Text on a
// terminal reads as forensic's messages always did ("forensic: ...",
// warnings and errors named as such); text elsewhere (a file, journald, a
// pipe) starts each line with the time and the level, one line per record
// whatever its length. JSON is slog's: "time", "level", "msg" and the
// record's attributes, one object per line.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
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

// textHandler writes "[TIME LEVEL ]forensic: [warning: |error: ]msg k=v".
type textHandler struct {
	out      *output
	terminal bool
	level    slog.Level
	attrs    []slog.Attr
	group    string
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
	for _, a := range h.attrs {
		writeAttr(&b, "", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		writeAttr(&b, h.group, a)
		return true
	})
	b.WriteByte('\n')
	h.out.mu.Lock()
	defer h.out.mu.Unlock()
	_, err := io.WriteString(h.out.w, b.String())
	return err
}

func (h *textHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), qualify(h.group, as)...)
	return &c
}

func (h *textHandler) WithGroup(name string) slog.Handler {
	c := *h
	if c.group != "" {
		name = c.group + "." + name
	}
	c.group = name
	return &c
}

// qualify prefixes attribute keys with a group's name.
func qualify(group string, as []slog.Attr) []slog.Attr {
	if group == "" {
		return as
	}
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = slog.Attr{Key: group + "." + a.Key, Value: a.Value}
	}
	return out
}

// writeAttr writes " key=value", quoting a value with spaces, quotes or
// an equals sign.
func writeAttr(b *strings.Builder, group string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	key := a.Key
	if group != "" {
		key = group + "." + key
	}
	if a.Value.Kind() == slog.KindGroup {
		for _, g := range a.Value.Group() {
			writeAttr(b, key, g)
		}
		return
	}
	v := a.Value.String()
	if a.Value.Kind() == slog.KindTime {
		v = a.Value.Time().UTC().Format(time.RFC3339Nano)
	}
	b.WriteByte(' ')
	b.WriteString(key)
	b.WriteByte('=')
	if v == "" || strings.ContainsAny(v, " \t\"=\n") {
		fmt.Fprintf(b, "%q", v)
	} else {
		b.WriteString(v)
	}
}

// oneLine keeps a message on one line: a log line is one record.
func oneLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if !strings.ContainsAny(s, "\n\r") {
		return s
	}
	return strings.NewReplacer("\r\n", "; ", "\n", "; ", "\r", "; ").Replace(s)
}

package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// The recorder's messages are wrapped at word boundaries, under the
// message's first word; short lines and a path longer than a line are
// left whole.
func TestLogWriter(t *testing.T) {
	long := "forensic: warning: no libcuda call was seen from the workload (simwork): it may use a libcuda forensic did not attach to, or have failed before calling the driver (a framework that could not start)\n"
	path := "/opt/a/path/" + strings.Repeat("x", 80) + "/libcuda.so.1"
	tests := []struct {
		name, in string
	}{
		{"short", "forensic: recording simwork into run.db (SIGINT stops)\n"},
		{"long", long},
		{"two messages in one write", long + "forensic: short\n"},
		{"a path", "forensic: attached " + path + " (build id 98e097af214a, 76 symbols)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			lw := &logWriter{w: &out, width: 80}
			n, err := lw.Write([]byte(tt.in))
			if err != nil || n != len(tt.in) {
				t.Fatalf("Write = %d, %v", n, err)
			}
			got := out.String()
			if strings.Join(strings.Fields(got), " ") != strings.Join(strings.Fields(tt.in), " ") || !strings.HasSuffix(got, "\n") {
				t.Errorf("words changed:\n%s", got)
			}
			for _, l := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
				if utf8.RuneCountInString(l) > 80 && !strings.Contains(l, path) {
					t.Errorf("%d columns: %q", utf8.RuneCountInString(l), l)
				}
				if !strings.HasPrefix(l, "forensic: ") && !strings.HasPrefix(l, logIndent) {
					t.Errorf("%q: neither a message nor its continuation", l)
				}
			}
			if want := strings.Count(tt.in, "\n"); len(tt.in) <= 81 && strings.Count(got, "\n") != want {
				t.Errorf("a line that fits was wrapped: %q", got)
			}
		})
	}
}

// Messages are wrapped for a terminal, or where COLUMNS asks for it; in a
// log file or journald each stays one line.
func TestMessagesWidth(t *testing.T) {
	for _, tc := range []struct {
		columns string
		width   int // 0: not wrapped
	}{{"", 0}, {"60", 60}, {"200", 80}, {"x", 0}} {
		var errb bytes.Buffer
		c := &cli{stderr: &errb, getenv: func(k string) string {
			if k == "COLUMNS" {
				return tc.columns
			}
			return ""
		}}
		w := c.messages()
		lw, wrapped := w.(*logWriter)
		switch {
		case tc.width == 0 && wrapped:
			t.Errorf("COLUMNS=%q: wrapped at %d, want plain stderr", tc.columns, lw.width)
		case tc.width != 0 && (!wrapped || lw.width != tc.width):
			t.Errorf("COLUMNS=%q: %T, want wrapped at %d", tc.columns, w, tc.width)
		}
	}
}

// analyze's notes on stderr (how a flight recording was read) wrap like
// record's messages at a terminal's width, and stay one line in a log.
func TestNoteWraps(t *testing.T) {
	msg := "forensic: /tmp/r2/fl: read 1 segment, the live one from a copy its recorder made now"
	for _, columns := range []string{"", "80", "60"} {
		var errb bytes.Buffer
		c := &cli{stderr: &errb, getenv: func(k string) string {
			if k == "COLUMNS" {
				return columns
			}
			return ""
		}}
		c.note("forensic: %s: read %s", "/tmp/r2/fl", "1 segment, the live one from a copy its recorder made now")
		lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
		if strings.Join(strings.Fields(errb.String()), " ") != msg {
			t.Errorf("COLUMNS=%q: %q, want the words of %q", columns, errb.String(), msg)
		}
		for _, l := range lines {
			if n, _ := strconv.Atoi(columns); n > 0 && len(l) > n {
				t.Errorf("COLUMNS=%s: %d columns: %q", columns, len(l), l)
			}
		}
		if columns == "" && len(lines) != 1 {
			t.Errorf("without a terminal the note is %d lines, want 1", len(lines))
		}
	}
}

// The recorder's log is wrapped only on a terminal (at COLUMNS when set,
// at most 80 columns); in a file, a pipe or journald each message stays
// one line whatever COLUMNS says, and JSON is never wrapped.
func TestRecordLogWrapsOnlyATerminal(t *testing.T) {
	long := strings.Repeat("word ", 30)
	for _, tc := range []struct {
		columns, format string
		terminal        bool
		width           int // 0: one line
	}{
		{"", "text", false, 0},
		{"40", "text", false, 0},
		{"40", "json", false, 0},
		{"40", "text", true, 40},
		{"200", "text", true, 80},
		{"40", "json", true, 0},
	} {
		var errb bytes.Buffer
		c := &cli{stderr: &errb, getenv: func(k string) string {
			if k == "COLUMNS" {
				return tc.columns
			}
			return ""
		}, terminal: func(io.Writer) bool { return tc.terminal }}
		log, err := c.recordLog(tc.format)
		if err != nil {
			t.Fatal(err)
		}
		log.Info(long)
		lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
		name := fmt.Sprintf("COLUMNS=%q %s terminal=%v", tc.columns, tc.format, tc.terminal)
		if tc.width == 0 && len(lines) != 1 {
			t.Errorf("%s: %d lines, want one", name, len(lines))
		}
		for _, l := range lines {
			if tc.width > 0 && utf8.RuneCountInString(l) > tc.width {
				t.Errorf("%s: %d columns: %q", name, utf8.RuneCountInString(l), l)
			}
		}
		if tc.width > 0 && len(lines) < 2 {
			t.Errorf("%s: not wrapped", name)
		}
	}
}

// A --log-format that is neither text nor json is a usage error.
func TestRecordLogFormat(t *testing.T) {
	c := &cli{stderr: io.Discard, getenv: func(string) string { return "" }}
	for _, tc := range []struct {
		format string
		ok     bool
	}{{"text", true}, {"json", true}, {"logfmt", false}, {"", false}} {
		_, err := c.recordLog(tc.format)
		var u usageError
		if (err == nil) != tc.ok || (err != nil && !errors.As(err, &u)) {
			t.Errorf("--log-format %q: %v", tc.format, err)
		}
	}
}

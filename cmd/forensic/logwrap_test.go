package main

import (
	"bytes"
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

// Messages are wrapped for a terminal, at COLUMNS when it is set; in a
// log file, a pipe or journald each stays one line, whatever COLUMNS says.
func TestMessagesWidth(t *testing.T) {
	for _, tc := range []struct {
		columns  string
		terminal bool
		width    int // 0: not wrapped
	}{
		{"", false, 0}, {"60", false, 0}, {"200", false, 0},
		{"60", true, 60}, {"200", true, 80}, {"x", true, 80}, {"", true, 80},
	} {
		var errb bytes.Buffer
		c := &cli{stderr: &errb, getenv: func(k string) string {
			if k == "COLUMNS" {
				return tc.columns
			}
			return ""
		}, terminal: func(io.Writer) bool { return tc.terminal }}
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
		}, terminal: func(io.Writer) bool { return columns != "" }}
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

package logging

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"regexp"
	"strings"
	"testing"
)

// Text for a terminal reads as forensic's messages; text for a log has
// the time and the level first; JSON is one object a line with time,
// level and message. Every record is one line.
func TestFormats(t *testing.T) {
	stamp := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z`
	for _, tc := range []struct {
		name     string
		opts     Options
		level    slog.Level
		msg      string
		attrs    []any
		wantLine string // a regexp of the whole line (text formats)
	}{
		{"info on a terminal", Options{Format: Text, Terminal: true}, slog.LevelInfo,
			"attached /lib/libcuda.so.1", nil, `^forensic: attached /lib/libcuda\.so\.1$`},
		{"an error on a terminal", Options{Format: Text, Terminal: true}, slog.LevelError,
			"run.db: disk full: recording stopped", []any{"reason", "disk-full"},
			`^forensic: error: run\.db: disk full: recording stopped$`},
		{"a warning on a terminal", Options{Format: Text, Terminal: true}, slog.LevelWarn,
			"markers unavailable", nil, `^forensic: warning: markers unavailable$`},
		{"info in a log", Options{Format: Text}, slog.LevelInfo,
			"attached x", []any{"library", "/a b/libcuda.so"}, `^` + stamp + ` INFO  forensic: attached x$`},
		{"an error in a log", Options{Format: Text}, slog.LevelError,
			"disk full", nil, `^` + stamp + ` ERROR forensic: disk full$`},
		{"a message of two lines stays one", Options{Format: Text}, slog.LevelWarn,
			"first\nsecond", nil, `^` + stamp + ` WARN  forensic: first; second$`},
		{"json", Options{Format: JSON}, slog.LevelError, "disk full", []any{"reason", "disk-full"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			New(&b, tc.opts).Log(t.Context(), tc.level, tc.msg, tc.attrs...)
			out := b.String()
			if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
				t.Fatalf("not one line: %q", out)
			}
			line := strings.TrimSuffix(out, "\n")
			if tc.opts.Format == Text {
				if !regexp.MustCompile(tc.wantLine).MatchString(line) {
					t.Errorf("%q does not match %s", line, tc.wantLine)
				}
				return
			}
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("%v: %q", err, line)
			}
			for k, v := range map[string]any{"level": "ERROR", "msg": tc.msg, "reason": "disk-full"} {
				if rec[k] != v {
					t.Errorf("%s = %v, want %v", k, rec[k], v)
				}
			}
			if _, ok := rec["time"].(string); !ok {
				t.Errorf("no time: %q", line)
			}
		})
	}
}

// Records below the level are left out.
func TestLevel(t *testing.T) {
	for _, format := range []Format{Text, JSON} {
		var b bytes.Buffer
		log := New(&b, Options{Format: format, Level: slog.LevelWarn})
		log.Info("quiet")
		log.Warn("loud")
		if strings.Contains(b.String(), "quiet") || !strings.Contains(b.String(), "loud") {
			t.Errorf("%s: %q", format, b.String())
		}
	}
}

func TestParseFormat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Format
		ok   bool
	}{{"text", Text, true}, {"json", JSON, true}, {"JSON", "", false}, {"", "", false}, {"logfmt", "", false}} {
		got, err := ParseFormat(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseFormat(%q) = %q, %v", tc.in, got, err)
		}
	}
}

// Text is the message alone, attributes or not; JSON carries them.
func TestAttributes(t *testing.T) {
	for _, tc := range []struct {
		format Format
		want   string
	}{
		{Text, "forensic: sampled\n"},
		{JSON, `"msg":"sampled","run":"r1","gpu":{"index":0}}` + "\n"},
	} {
		var b bytes.Buffer
		New(&b, Options{Format: tc.format, Terminal: true}).With("run", "r1").WithGroup("gpu").Info("sampled", "index", 0)
		if !strings.HasSuffix(b.String(), tc.want) {
			t.Errorf("%s: %q, want it to end in %q", tc.format, b.String(), tc.want)
		}
	}
}

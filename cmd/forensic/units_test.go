package main

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr string
	}{
		{"4096", 4096, ""},
		{"4KiB", 4 << 10, ""},
		{"4MiB", 4 << 20, ""},
		{"16mib", 16 << 20, ""},
		{"2G", 2 << 30, ""},
		{"1 GiB", 1 << 30, ""},
		{"0", 0, ""},
		{"8MB", 0, "ambiguous; write MiB"},
		{"1kb", 0, "write KiB"},
		{"4XiB", 0, "unknown unit"},
		{"MiB", 0, "not a size"},
		{"-4MiB", 0, "not a size"},
		{"1.5GiB", 0, "unknown unit"},
		{"99999999999999999999", 0, "out of range"},
		{"17000000TiB", 0, "too large"},
	}
	for _, tt := range tests {
		got, err := parseSize(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseSize(%q) = %d, %v; want an error saying %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestFormatSizeRoundTrip(t *testing.T) {
	for _, n := range []uint64{0, 1, 4095, 4096, 16 << 20, 3 << 30, 1<<40 + 1<<20} {
		s := formatSize(n)
		back, err := parseSize(s)
		if err != nil || back != n {
			t.Errorf("formatSize(%d) = %q, which reads back as %d, %v", n, s, back, err)
		}
	}
	if s := formatSize(16 << 20); s != "16MiB" {
		t.Errorf("formatSize(16MiB) = %q", s)
	}
}

func TestSizeChecks(t *testing.T) {
	tests := []struct {
		check   func(uint64) error
		in      string
		wantErr string
	}{
		{ringSize, "4KiB", ""},
		{ringSize, "16MiB", ""},
		{ringSize, "1GiB", ""},
		{ringSize, "16", "did you mean 16MiB?"},
		{ringSize, "3MiB", "3MiB is not a power of two"},
		{ringSize, "1000", "did you mean 512MiB or 1GiB?"},
		{ringSize, "2KiB", "at least a page"},
		{ringSize, "0", "not a power of two"},
		{diskReserve, "0", ""},
		{diskReserve, "8MiB", ""},
		{diskReserve, "8", "did you mean 8MiB?"},
	}
	for _, tt := range tests {
		var v uint64 = 7
		err := sizeFlag{v: &v, check: tt.check}.Set(tt.in)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%q: %v", tt.in, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%q: %v, want an error saying %q", tt.in, err, tt.wantErr)
		case tt.wantErr != "" && v != 7:
			t.Errorf("%q: a refused value was stored (%d)", tt.in, v)
		}
	}
}

// Every size a refused --ring-size suggests is itself accepted.
func TestRingSizeHintsAreAccepted(t *testing.T) {
	mean := regexp.MustCompile(`did you mean (\S+?)(?: or (\S+?))?\?`)
	for _, in := range []string{"1", "16", "1000", "1023", "1025", "3000", "5000", "3MiB", "1000MiB", "2KiB", "17179869183"} {
		n, err := parseSize(in)
		if err != nil {
			t.Fatal(err)
		}
		err = ringSize(n)
		if err == nil {
			t.Errorf("%s: accepted", in)
			continue
		}
		m := mean.FindStringSubmatch(err.Error())
		if m == nil {
			t.Errorf("%s: %v suggests nothing", in, err)
			continue
		}
		for _, s := range m[1:] {
			if s == "" {
				continue
			}
			v, perr := parseSize(s)
			if perr != nil || ringSize(v) != nil {
				t.Errorf("%s: suggests %s, which is refused: %v %v", in, s, perr, ringSize(v))
			}
		}
	}
}

func TestDurationFlag(t *testing.T) {
	tests := []struct {
		in      string
		zeroOK  bool
		want    time.Duration
		wantErr string
	}{
		{"50ms", false, 50 * time.Millisecond, ""},
		{"2s", false, 2 * time.Second, ""},
		{"1m30s", true, 90 * time.Second, ""},
		{"0", true, 0, ""},
		{"0", false, 0, "must be more than 0"},
		{"0s", false, 0, "must be more than 0"},
		{"-5ms", true, 0, "must be more than 0"},
		{"500us", false, 0, "below the smallest allowed, 1ms"},
		{"50", false, 0, "has no unit"},
		{"soon", false, 0, "not a duration"},
	}
	for _, tt := range tests {
		v := time.Hour
		err := durationFlag{v: &v, min: time.Millisecond, zeroOK: tt.zeroOK}.Set(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || v != time.Hour {
				t.Errorf("%q: %v (value %v), want an error saying %q", tt.in, err, v, tt.wantErr)
			}
			continue
		}
		if err != nil || v != tt.want {
			t.Errorf("%q = %v, %v; want %v", tt.in, v, err, tt.want)
		}
	}
}

func TestHumanAndCount(t *testing.T) {
	durations := []struct {
		d    time.Duration
		want string
	}{
		{425906 * time.Nanosecond, "0.43 ms"},
		{12500 * time.Microsecond, "12.5 ms"},
		{340 * time.Millisecond, "340 ms"},
		{3210 * time.Millisecond, "3.2 s"},
		{245 * time.Second, "4 min 05 s"},
		{2*time.Hour + 3*time.Minute, "2 h 03 min"},
		{-2 * time.Millisecond, "-2.00 ms"},
	}
	for _, tt := range durations {
		if got := human(tt.d); got != tt.want {
			t.Errorf("human(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
	counts := []struct {
		n    uint64
		want string
	}{{0, "0 processes"}, {1, "1 process"}, {2, "2 processes"}}
	for _, tt := range counts {
		if got := count(tt.n, "process", "processes"); got != tt.want {
			t.Errorf("count(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

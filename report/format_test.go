package report

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestWrap(t *testing.T) {
	long := "/a/very/long/path/that/does/not/fit/on/one/line/of/forty/columns/libcuda.so.1"
	tests := []struct {
		name, in string
		width    int
		want     []string
	}{
		{"fits", "forensic: short", 40, []string{"forensic: short"}},
		{"words", "forensic: no libcuda attached yet: each one the workload maps is attached as it maps it", 40,
			[]string{"forensic: no libcuda attached yet: each", "    one the workload maps is attached as", "    it maps it"}},
		{"a path overhangs, uncut", "forensic: attached " + long + " (76 symbols)", 40,
			[]string{"forensic: attached", "    " + long, "    (76 symbols)"}},
		{"inner spacing kept", "  framebuffer total     16.00 GiB  [nvmlDeviceGetMemoryInfo_v2]", 40,
			[]string{"  framebuffer total     16.00 GiB", "    [nvmlDeviceGetMemoryInfo_v2]"}},
		{"no width", "a b c", 0, []string{"a b c"}},
		{"one word", long, 10, []string{long}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Wrap(tt.in, tt.width, "    ")
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("Wrap:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if strings.Join(strings.Fields(strings.Join(got, " ")), " ") != strings.Join(strings.Fields(tt.in), " ") {
				t.Errorf("words changed: %q", got)
			}
			for _, l := range got {
				if n := utf8.RuneCountInString(l); tt.width > 0 && n > tt.width && !strings.Contains(l, long) {
					t.Errorf("%q: %d columns", l, n)
				}
			}
		})
	}
}

// Sizes read in the largest binary unit they fill, up to TiB: a 100 TiB
// request is "100.00 TiB", not "102400.00 GiB".
func TestHumanBytesUnits(t *testing.T) {
	tests := []struct {
		v    uint64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1 << 10, "1.0 KiB"},
		{1 << 20, "1.0 MiB"},
		{3 << 29, "1.50 GiB"},
		{1<<40 - 1<<30, "1023.00 GiB"},
		{1 << 40, "1.00 TiB"},
		{100 << 40, "100.00 TiB"},
		{1<<64 - 1, "16777216.00 TiB"},
	}
	for _, tt := range tests {
		if got := HumanBytes(tt.v); got != tt.want {
			t.Errorf("HumanBytes(%d) = %q, want %q", tt.v, got, tt.want)
		}
	}
}

func TestRanks(t *testing.T) {
	tests := []struct {
		ranks []int
		want  string
	}{
		{[]int{3}, "rank 3"},
		{[]int{1, 4}, "ranks 1, 4"},
		{[]int{0, 2, 7}, "ranks 0, 2, 7"},
	}
	for _, tt := range tests {
		if got := Ranks(tt.ranks); got != tt.want {
			t.Errorf("Ranks(%v) = %q, want %q", tt.ranks, got, tt.want)
		}
	}
}

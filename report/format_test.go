package report

import "testing"

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

package pystack

import (
	"errors"
	"testing"
)

// A recorded interpreter is rebuilt from its version; a version without a
// layout, or no version at all, is refused as Locate refuses it.
func TestNewTarget(t *testing.T) {
	for _, tt := range []struct {
		version string
		minor   int
		micro   int
		err     error
	}{
		{"3.11.2", 11, 2, nil},
		{"3.13", 13, -1, nil},
		{"3.9.18", 0, 0, ErrUnsupported},
		{"3", 0, 0, ErrUnsupported},
		{"3.x.1", 0, 0, ErrUnsupported},
		{"", 0, 0, ErrUnsupported},
	} {
		got, err := NewTarget(tt.version, "/usr/bin/python3", 0x1000, 0x2000)
		if !errors.Is(err, tt.err) {
			t.Errorf("%q: %v, want %v", tt.version, err, tt.err)
			continue
		}
		if err != nil {
			continue
		}
		if got.Layout.Minor != tt.minor || got.Version.Micro != tt.micro || got.Runtime != 0x1000 || got.CodeType != 0x2000 {
			t.Errorf("%q: %+v (layout 3.%d)", tt.version, got, got.Layout.Minor)
		}
		if got.Layout.IntInstr() != (tt.minor == 10) {
			t.Errorf("%q: IntInstr %v", tt.version, got.Layout.IntInstr())
		}
	}
}

package main

import (
	"testing"

	"github.com/retrivium/forensic/store"
)

// The stderr summary names each deleted stretch by the index's reason.
func TestGapsText(t *testing.T) {
	ret, cut := store.Gap{Reason: store.GapRetention}, store.Gap{Reason: store.GapWindowCut}
	tests := []struct {
		gaps []store.Gap
		want string
	}{
		{nil, ""},
		{[]store.Gap{ret, ret}, "; 2 stretches deleted by retention"},
		{[]store.Gap{cut}, "; 1 stretch deleted from failure windows (the windows alone exceeded --max-size)"},
		{[]store.Gap{ret, cut}, "; 1 stretch deleted by retention; 1 stretch deleted from failure windows (the windows alone exceeded --max-size)"},
	}
	for _, tt := range tests {
		if got := gapsText(tt.gaps); got != tt.want {
			t.Errorf("gapsText(%v) = %q, want %q", tt.gaps, got, tt.want)
		}
	}
}

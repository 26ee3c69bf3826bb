package main

import "testing"

// Under --pid and --all, only a stop someone asked for ends with status 0.
func TestCleanStop(t *testing.T) {
	for _, tt := range []struct {
		reason string
		clean  bool
	}{
		{"stopped", true},
		{"signal", true},
		{"target-exited", true},
		{"disk-full", false},
		{"write-error", false},
		{"error", false},
	} {
		if got := cleanStop(tt.reason); got != tt.clean {
			t.Errorf("cleanStop(%q) = %v, want %v", tt.reason, got, tt.clean)
		}
	}
}

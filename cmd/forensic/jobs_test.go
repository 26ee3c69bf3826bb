package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Job selection is one flag, of one recording; anything else is a usage
// error (exit status 2), and no flag selects nothing.
func TestJobFlagsSelector(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		f       jobFlags
		args    []string
		want    string // "" no selector, "usage" a usage error, else the selector
		wantErr bool
	}{
		{"no flag", jobFlags{}, []string{a}, "", false},
		{"--job", jobFlags{id: "tree:7"}, []string{a}, "--job tree:7", false},
		{"--pid", jobFlags{pid: 7}, []string{a}, "--pid 7", false},
		{"--pod", jobFlags{pod: "ml/serve-0"}, []string{a}, "--pod ml/serve-0", false},
		{"two flags", jobFlags{id: "tree:7", pid: 7}, []string{a}, "usage", true},
		{"--pod without a namespace", jobFlags{pod: "serve-0"}, []string{a}, "usage", true},
		{"--pod with an empty name", jobFlags{pod: "ml/"}, []string{a}, "usage", true},
		{"several recordings", jobFlags{pid: 7}, []string{a, b}, "usage", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := tt.f.selector(tt.args)
			var u usageError
			switch {
			case tt.wantErr:
				if !errors.As(err, &u) {
					t.Errorf("got %v, %v; want a usage error", sel, err)
				}
			case err != nil:
				t.Fatal(err)
			case tt.want == "" && sel != nil, tt.want != "" && (sel == nil || sel.String() != tt.want):
				t.Errorf("selector %v, want %q", sel, tt.want)
			}
		})
	}
}

package main

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"
)

// --cgroup and --pod are repeatable, reach the recorder's configuration
// as given, and only limit --all.
func TestRecordScopeFlags(t *testing.T) {
	tests := []struct {
		args          []string
		cgroups, pods []string
		err           string // a substring of the usage error, "" for none
	}{
		{args: []string{"--all", "--cgroup", "a", "--cgroup", "/sys/fs/cgroup/b"}, cgroups: []string{"a", "/sys/fs/cgroup/b"}},
		{args: []string{"--all", "--pod", "ml/trainer-0", "--pod", "ml/trainer-1"}, pods: []string{"ml/trainer-0", "ml/trainer-1"}},
		{args: []string{"--all", "--cgroup", "a", "--pod", "ml/x"}, cgroups: []string{"a"}, pods: []string{"ml/x"}},
		{args: []string{"--all"}},
		{args: []string{"--cgroup", "a", "--", "true"}, err: "--cgroup and --pod limit --all: give --all too"},
		{args: []string{"--pid", "1", "--pod", "ml/x"}, err: "give --all too"},
		{args: []string{"--all", "--pod", "trainer-0"}, err: `--pod "trainer-0": give NAMESPACE/NAME`},
		{args: []string{"--all", "--pod", "ml/"}, err: "give NAMESPACE/NAME"},
		{args: []string{"--all", "--pod", "a/b/c"}, err: "give NAMESPACE/NAME"},
		{args: []string{"--all", "--cgroup", ""}, err: "--cgroup: give a cgroup's path"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			c := &cli{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
			cmd, f := c.recordCommandFlags()
			if err := cmd.ParseFlags(append([]string{"-o", "x.db"}, tt.args...)); err != nil {
				t.Fatal(err)
			}
			cfg, err := c.config(f, cmd.Flags().Args())
			switch {
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("error %v, want %q", err, tt.err)
			case tt.err != "":
				return
			case err != nil:
				t.Fatal(err)
			}
			if !slices.Equal(cfg.Cgroups, tt.cgroups) || !slices.Equal(cfg.Pods, tt.pods) {
				t.Errorf("cgroups %q pods %q, want %q %q", cfg.Cgroups, cfg.Pods, tt.cgroups, tt.pods)
			}
		})
	}
}

// The scope errors are usage errors: status 2, one line and a hint.
func TestRecordScopeUsageStatus(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"record", "-o", "x.db", "--pod", "ml/x", "--", "true"}, &out, &errb); code != exitUsage {
		t.Fatalf("exit %d, want %d; stderr %q", code, exitUsage, errb.String())
	}
	if !strings.Contains(errb.String(), "give --all too") || strings.Count(errb.String(), "\n") != 2 {
		t.Errorf("stderr %q, want the scope error and a hint", errb.String())
	}
}

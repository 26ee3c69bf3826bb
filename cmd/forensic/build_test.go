package main

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/retrivium/forensic/internal/buildinfo"
	"github.com/retrivium/forensic/store"
)

// The build the command line is given is the one --version shows and the
// one it hands the recorder, to store with the run.
func TestBuildReachesVersionAndRecorder(t *testing.T) {
	for _, b := range []buildinfo.Info{
		{Version: "v1.2.3"},
		{Version: buildinfo.Fallback + "+0123456789ab.dirty", Revision: "0123456789abcdef", Modified: true},
	} {
		t.Run(b.Version, func(t *testing.T) {
			var out bytes.Buffer
			c := &cli{stdout: &out, stderr: io.Discard, getenv: func(string) string { return "" }, build: b}
			root := c.rootCommand()
			root.SetArgs([]string{"--version"})
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("forensic %s (run.db schema %d)\n", b.Version, store.SchemaVersion); out.String() != want {
				t.Errorf("--version printed %q, want %q", out.String(), want)
			}
			cmd, f := c.recordCommandFlags()
			if err := cmd.ParseFlags([]string{"-o", "x.db", "--", "true"}); err != nil {
				t.Fatal(err)
			}
			cfg, err := c.config(f, cmd.Flags().Args())
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Build != b {
				t.Errorf("recorder given build %+v, want %+v", cfg.Build, b)
			}
		})
	}
}

package recorder

import (
	"testing"

	"github.com/retrivium/forensic/internal/buildinfo"
)

// The build a recording stores and its metrics show is the one it is
// given; a caller that gives none gets the running binary's.
func TestRecorderBuildIsGivenOrThisBinarys(t *testing.T) {
	given := buildinfo.Info{Version: "v1.2.3", Revision: "0123456789abcdef", Modified: true}
	for _, tt := range []struct {
		name  string
		given buildinfo.Info
		want  buildinfo.Info
	}{
		{"given", given, given},
		{"none given", buildinfo.Info{}, buildinfo.Read()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Command: []string{"true"}, Output: "x.db", Build: tt.given}
			if err := cfg.defaults(); err != nil {
				t.Fatal(err)
			}
			if cfg.Build != tt.want {
				t.Errorf("build %+v, want %+v", cfg.Build, tt.want)
			}
			o := metricsOptions(nil, cfg.Build)
			if o.Version != tt.want.Version || o.Revision != tt.want.Revision || o.Modified != tt.want.Modified {
				t.Errorf("metrics show %q %q %v, want %+v", o.Version, o.Revision, o.Modified, tt.want)
			}
		})
	}
}

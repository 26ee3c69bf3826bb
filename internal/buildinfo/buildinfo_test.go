package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestVersionFromTheBuildStamp(t *testing.T) {
	rev := "2ca4451b60a7514692381bc87b48ac338549b971"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev},
			{Key: "vcs.modified", Value: modified}}
	}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want Info
	}{
		{"no build information", nil, Info{Version: Fallback}},
		{"no stamp", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, Info{Version: Fallback}},
		{"a release tag", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"}, Settings: vcs("false")},
			Info{Version: "v1.2.0", Revision: rev}},
		{"a pseudo-version of a tree with changes",
			&debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261201193432-2ca4451b60a7+dirty"}, Settings: vcs("true")},
			Info{Version: "v0.0.0-20261201193432-2ca4451b60a7+dirty", Revision: rev, Modified: true}},
		{"a stamp without a module version", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("true")},
			Info{Version: Fallback + "+2ca4451b60a7.dirty", Revision: rev, Modified: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Of(tc.bi); got != tc.want {
				t.Errorf("Of = %+v, want %+v", got, tc.want)
			}
		})
	}
}

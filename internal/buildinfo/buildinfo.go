// Package buildinfo reads what a forensic binary knows of its own build:
// the module version and the VCS stamp (commit, whether the tree had
// changes) that `go build` records in a binary built from a git checkout.
package buildinfo

import "runtime/debug"

// Fallback is the version of a build without a VCS stamp or module
// version (built outside a git checkout, or with -buildvcs=false).
const Fallback = "0.1.0-dev"

// Info is a binary's build.
type Info struct {
	// Version is the module's version: a release tag (v1.2.0), a
	// pseudo-version naming the commit (v0.0.0-20261201193432-2ca4451b60a7,
	// "+dirty" when the tree had changes), or Fallback when the build
	// recorded neither; then, with a VCS stamp, "+" and the commit's
	// first 12 hex digits.
	Version string
	// Revision is the commit the binary was built from ("" unknown).
	Revision string
	// Modified: the tree had changes the commit does not hold.
	Modified bool
}

// Read returns the running binary's build.
func Read() Info {
	bi, _ := debug.ReadBuildInfo()
	return Of(bi)
}

// Of returns the build a binary's build information describes (nil: none).
func Of(bi *debug.BuildInfo) Info {
	var in Info
	if bi == nil {
		in.Version = Fallback
		return in
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	switch v := bi.Main.Version; {
	case v != "" && v != "(devel)":
		in.Version = v
	case in.Revision != "":
		in.Version = Fallback + "+" + in.Revision[:min(12, len(in.Revision))]
		if in.Modified {
			in.Version += ".dirty"
		}
	default:
		in.Version = Fallback
	}
	return in
}

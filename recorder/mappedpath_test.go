package recorder

import (
	"testing"

	"github.com/retrivium/forensic/store"
)

func TestMappedPathIsThePathTheProcessUsed(t *testing.T) {
	for _, c := range []struct {
		name, root, shown string
		seen, host        string
	}{
		{"same root", "/", "/usr/lib/libc.so.6", "/usr/lib/libc.so.6", "/proc/7/root/usr/lib/libc.so.6"},
		{"chroot", "/srv/trixie", "/srv/trixie/usr/bin/python3.13", "/usr/bin/python3.13", "/srv/trixie/usr/bin/python3.13"},
		{"chroot, a file outside it", "/srv/trixie", "/opt/lib/x.so", "/opt/lib/x.so", "/proc/7/root/opt/lib/x.so"},
		{"chroot, a sibling directory of the same prefix", "/srv/trixie", "/srv/trixie2/lib/x.so", "/srv/trixie2/lib/x.so", "/proc/7/root/srv/trixie2/lib/x.so"},
		{"another mount namespace", "/", "/usr/bin/python3.13", "/usr/bin/python3.13", "/proc/7/root/usr/bin/python3.13"},
		{"root unreadable", "", "/usr/bin/python3", "/usr/bin/python3", "/proc/7/root/usr/bin/python3"},
	} {
		seen, host := mappedPath("/proc/7/root", c.root, c.shown)
		if seen != c.seen || host != c.host {
			t.Errorf("%s: (%q, %q), want (%q, %q)", c.name, seen, host, c.seen, c.host)
		}
	}
}

func TestUnlocatedNamesAnInterpreterTheRecorderNeverLocated(t *testing.T) {
	for _, c := range []struct {
		name string
		maps []store.Mapping
		path string // "" when the process is no Python process
	}{
		{"shared libpython by the probe's name", []store.Mapping{{Name: "simwork"}, {Name: "libpython3.13.so.1.0"}}, "libpython3.13.so.1.0"},
		{"an executable interpreter resolved", []store.Mapping{{Path: "/usr/bin/python3.11"}}, "/usr/bin/python3.11"},
		{"no interpreter", []store.Mapping{{Path: "/usr/bin/simwork"}, {Name: "libc.so.6"}}, ""},
	} {
		py := unlocated(c.maps)
		switch {
		case c.path == "" && py != nil:
			t.Errorf("%s: %+v, want nil", c.name, py)
		case c.path != "" && (py == nil || py.Path != c.path || py.Error == "" || py.Version != ""):
			t.Errorf("%s: %+v, want an error record for %s", c.name, py, c.path)
		}
	}
}

package recorder

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/retrivium/forensic/store"
)

// A library a process in another root loaded after its mappings were
// read is found under its held root by the name and inode the probe
// listed, and named by the path the process used.
func TestInRootFindsLateLibraryByNameAndInode(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"usr/lib/libffi.so.8.1.4", "usr/lib/libother.so.1", "usr/bin/python3.13"} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(f)), 0o755)
		if err := os.WriteFile(filepath.Join(root, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rf, err := os.OpenFile(root, os.O_RDONLY|unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := newProcState(store.Process{Maps: []store.Mapping{{Path: "/usr/bin/python3.13"}, {Path: "/usr/lib/libc.so.6"}}})
	p.root = rf
	defer p.closeRoot()
	k, _ := statKey(filepath.Join(root, "usr/lib/libffi.so.8.1.4"))
	other, _ := statKey(filepath.Join(root, "usr/lib/libother.so.1"))
	for _, c := range []struct {
		name string
		key  fileKey
		file string
		seen string // "" when not found
	}{
		{"name and inode", k, "libffi.so.8.1.4", "/usr/lib/libffi.so.8.1.4"},
		{"name cut by the probe", k, "libffi.so", "/usr/lib/libffi.so.8.1.4"},
		{"another file's inode", other, "libffi.so.8.1.4", ""},
		{"a name with a slash", k, "lib/libffi.so.8.1.4", ""},
		{"no file of that name", k, "libnone.so", ""},
	} {
		seen, host, ok := p.inRoot(c.key, c.file)
		if seen != c.seen || ok != (c.seen != "") {
			t.Errorf("%s: (%q, %v), want %q", c.name, seen, ok, c.seen)
		}
		if ok {
			if hk, _ := statKey(host); hk != c.key {
				t.Errorf("%s: host path %q is not the file", c.name, host)
			}
		}
	}
	p.closeRoot()
	if _, _, ok := p.inRoot(k, "libffi.so.8.1.4"); ok {
		t.Error("found without a held root")
	}
}

// A process in another root that exits while its mappings are read: its
// /proc/PID/root no longer opens, the root held open does. The mapping
// keeps the /proc/PID/root path (what run.db stores) and has the file's
// build id read through the held root; without a held root it has none,
// and never the build id of the file of the same path on this machine.
func TestMappingsOfAnExitedProcessReadThroughTheHeldRoot(t *testing.T) {
	lib, err := filepath.EvalSymlinks("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	want := newBuildIDCache().get(lib)
	if want == "" {
		t.Skip("the test binary has no GNU build id")
	}
	const shown = "/opt/only-in-the-container/libx.so"
	root := t.TempDir() // the process's root, held open
	os.MkdirAll(filepath.Join(root, filepath.Dir(shown)), 0o755)
	data, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, shown), data, 0o755); err != nil {
		t.Fatal(err)
	}
	proc := t.TempDir() // its /proc/7: maps readable, root gone
	os.MkdirAll(filepath.Join(proc, "7"), 0o755)
	line := "7f0000000000-7f0000100000 r-xp 00000000 08:01 1234 " + shown + "\n"
	if err := os.WriteFile(filepath.Join(proc, "7", "maps"), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, held, id string
	}{{"held root", root, want}, {"no held root", "", ""}} {
		maps := readMappings(proc, 7, newBuildIDCache(), c.held)
		if len(maps) != 1 {
			t.Fatalf("%s: mappings %+v, want one", c.name, maps)
		}
		m := maps[0]
		if m.Path != shown || m.Host != filepath.Join(proc, "7", "root", shown) || m.BuildID != c.id {
			t.Errorf("%s: path %q host %q build id %q, want %q, its /proc/7/root path, %q", c.name, m.Path, m.Host, m.BuildID, shown, c.id)
		}
	}
}

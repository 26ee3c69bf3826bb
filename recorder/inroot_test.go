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

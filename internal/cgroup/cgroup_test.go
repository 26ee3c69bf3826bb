package cgroup

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/retrivium/forensic/internal/e2eenv"
)

// The cgroup v2 mount is the first cgroup2 mount that is the hierarchy's
// root (it has cgroup.procs and no cgroup.type), on unified and hybrid
// hosts and in a container that mounts the host's tree beside its own;
// none is an error that says what is missing.
func TestMount(t *testing.T) {
	dir := t.TempDir()
	root := func(name string) string { // a hierarchy's root
		p := filepath.Join(dir, name)
		os.MkdirAll(p, 0o755)
		os.WriteFile(filepath.Join(p, "cgroup.procs"), nil, 0o644)
		return p
	}
	inner := func(name string) string { // a cgroup namespace's root
		p := root(name)
		os.WriteFile(filepath.Join(p, "cgroup.type"), []byte("domain\n"), 0o644)
		return p
	}
	unified, hybrid, ns, host := root("unified"), root("hybrid unified"), inner("ns"), root("host")
	tests := []struct {
		name, mountinfo, want, err string
	}{
		{"unified", "30 23 0:26 / " + unified + " rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n", unified, ""},
		{"hybrid", "25 24 0:22 / /sys/fs/cgroup ro - tmpfs tmpfs ro\n" +
			"26 25 0:23 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n" +
			"27 25 0:24 / " + strings.ReplaceAll(hybrid, " ", `\040`) + " rw - cgroup2 cgroup2 rw\n", hybrid, ""},
		{"the host's tree beside a namespace's", "40 23 0:26 / " + ns + " rw - cgroup2 cgroup2 rw\n" +
			"41 23 0:26 /../../.. " + host + " ro - cgroup2 cgroup2 rw\n", host, ""},
		{"a namespace's only", "40 23 0:26 / " + ns + " rw - cgroup2 cgroup2 rw\n", "", "mount the host's /sys/fs/cgroup"},
		{"cgroup v1 only", "26 25 0:23 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n", "", "scoping needs cgroup v2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "mountinfo")
			if err := os.WriteFile(f, []byte(tt.mountinfo), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := Mount(f)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Mount = %q, %v; want error %q", got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Mount = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// Procs lists the processes of a cgroup and of every cgroup below it.
func TestProcsIncludesDescendants(t *testing.T) {
	root := t.TempDir()
	for path, procs := range map[string]string{".": "1\n", "a": "2\n3\n", "a/b/c": "4\n", "a/b": ""} {
		os.MkdirAll(filepath.Join(root, path), 0o755)
		if err := os.WriteFile(filepath.Join(root, path, "cgroup.procs"), []byte(procs), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Procs(filepath.Join(root, "a"))
	slices.Sort(got)
	if err != nil || !slices.Equal(got, []uint32{2, 3, 4}) {
		t.Errorf("Procs = %v, %v; want [2 3 4]", got, err)
	}
	if _, err := Procs(filepath.Join(root, "gone")); err == nil {
		t.Error("Procs of a missing cgroup: no error")
	}
}

// Open gives a cgroup's id (its directory's inode) and level below the
// root, for absolute and relative paths, and refuses what is not a cgroup
// v2 directory with a line naming it.
func TestOpen(t *testing.T) {
	e2eenv.NeedRoot(t)
	mount, err := Mount("/proc/self/mountinfo")
	if err != nil {
		t.Skip(err) // no cgroup v2 here
	}
	top := filepath.Join(mount, "forensic-test-open-"+strconv.Itoa(os.Getpid()))
	child := filepath.Join(top, "child")
	for _, d := range []string{top, child} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.Remove(child); os.Remove(top) })
	ino := func(p string) uint64 {
		var st unix.Stat_t
		unix.Stat(p, &st)
		return st.Ino
	}
	tests := []struct {
		path  string
		want  Dir
		error string
	}{
		{path: mount, want: Dir{Path: mount, ID: ino(mount), Level: 0}},
		{path: top, want: Dir{Path: top, ID: ino(top), Level: 1}},
		{path: filepath.Base(top) + "/child", want: Dir{Path: child, ID: ino(child), Level: 2}},
		{path: "forensic-test-none", error: "cgroup forensic-test-none: " + filepath.Join(mount, "forensic-test-none") + ": no such file"},
		{path: filepath.Join(top, "cgroup.procs"), error: "is not a directory"},
		{path: t.TempDir(), error: "is not in a cgroup v2 hierarchy"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			got, err := Open(mount, tt.path)
			if tt.error != "" {
				if err == nil || !strings.Contains(err.Error(), tt.error) {
					t.Fatalf("Open = %+v, %v; want error %q", got, err, tt.error)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Open = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestContainerIDNamesTheRuntimesContainer(t *testing.T) {
	id := strings.Repeat("0123456789abcdef", 4)
	for _, c := range []struct{ path, want string }{
		{"/system.slice/docker-" + id + ".scope", id},
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice/cri-containerd-" + id + ".scope", id},
		{"/kubepods/besteffort/pod12/" + id, id},
		{"/machine.slice/libpod-" + id + ".scope", id},
		{"/docker/" + id, id},
		{"/user.slice/user-1000.slice/session-3.scope", ""},
		{"/system.slice/docker-" + id[:63] + ".scope", ""},
		{"", ""},
	} {
		if got := ContainerID(c.path); got != c.want {
			t.Errorf("ContainerID(%q) = %q, want %q", c.path, got, c.want)
		}
	}
}

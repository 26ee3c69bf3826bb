package bpf

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/retrivium/forensic/internal/cgroup"
	"github.com/retrivium/forensic/internal/e2eenv"
)

// newCgroup creates a cgroup v2 cgroup for the test below parent (a
// cgroup.Dir's path) and removes it at the end.
func newCgroup(t *testing.T, mount, parent, name string) cgroup.Dir {
	t.Helper()
	p := filepath.Join(parent, name)
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(p) })
	d, err := cgroup.Open(mount, p)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// startMapperIn starts a mapper child (startMapper's) untracked, moves it
// into cgroup dir, then lets it map path.
func startMapperIn(t *testing.T, dir, path string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), mapperEnv+"="+path)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	in.Write([]byte{1})
	in.Close()
	return cmd
}

// With --all scoped to a cgroup, the map hook holds a process of that
// cgroup and of a cgroup created below it after the program was loaded,
// and never one of a sibling cgroup.
func TestMapHookScope(t *testing.T) {
	e2eenv.NeedRoot(t)
	mount, err := cgroup.Mount("/proc/self/mountinfo")
	if err != nil {
		t.Skip(err) // no cgroup v2 here
	}
	base := newCgroup(t, mount, mount, "forensic-test-bpfscope-"+strconv.Itoa(os.Getpid()))
	in := newCgroup(t, mount, base.Path, "in")
	out := newCgroup(t, mount, base.Path, "out")
	o, err := Load(Options{TraceAll: true, Scope: []Cgroup{{ID: in.ID, Level: in.Level}}})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	hook, err := o.AttachMapHook()
	if err != nil {
		t.Fatal(err)
	}
	defer hook.Close()
	rd, err := o.NewHoldReader()
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	if err := os.WriteFile(lib, make([]byte, 8192), 0o755); err != nil {
		t.Fatal(err)
	}

	cmd := startMapperIn(t, out.Path, lib)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("mapper outside the scope: %v", err)
	}
	if h, ok := readHold(t, rd, 100*time.Millisecond); ok {
		t.Fatalf("a process outside the scope was held: %+v", h)
	}
	below := newCgroup(t, mount, in.Path, "below")
	for _, dir := range []string{in.Path, below.Path} {
		cmd := startMapperIn(t, dir, lib)
		h, ok := readHold(t, rd, 5*time.Second)
		if !ok {
			t.Fatalf("a process of %s was not held", dir)
		}
		if h.Pid != uint32(cmd.Process.Pid) {
			t.Errorf("held pid %d, want %d", h.Pid, cmd.Process.Pid)
		}
		cmd.Process.Kill() // SIGKILL ends a stopped process too
		cmd.Wait()
	}
}

// A scope's levels are what the probes look at; too many cgroups or one
// too deep is refused at load.
func TestScopeLevels(t *testing.T) {
	tests := []struct {
		name  string
		scope []Cgroup
		want  uint32
		err   bool
	}{
		{"none", nil, 0, false},
		{"the root", []Cgroup{{ID: 1, Level: 0}}, 1, false},
		{"two levels", []Cgroup{{ID: 7, Level: 1}, {ID: 9, Level: 3}, {ID: 11, Level: 3}}, 0b1010, false},
		{"too deep", []Cgroup{{ID: 7, Level: ScopeLevels}}, 0, true},
		{"negative", []Cgroup{{ID: 7, Level: -1}}, 0, true},
		{"too many", make([]Cgroup, MaxScopes+1), 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := scopeLevels(tt.scope)
			if (err != nil) != tt.err || got != tt.want {
				t.Errorf("scopeLevels = %#b, %v; want %#b, error %v", got, err, tt.want, tt.err)
			}
		})
	}
}

package recorder

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/retrivium/forensic/internal/cgroup"
)

// fakeProc is one process of a fake /proc tree.
type fakeProc struct {
	pid, cgroup, environ string
	// files under the process's root (/proc/PID/root), by path.
	files map[string]string
}

func writeFakeProc(t *testing.T, procRoot string, procs []fakeProc) {
	t.Helper()
	for _, p := range procs {
		dir := filepath.Join(procRoot, p.pid)
		files := map[string]string{
			"cgroup":  "0::" + p.cgroup + "\n",
			"stat":    p.pid + " (python3) S 1 " + p.pid + " " + p.pid + " 0 -1 4194560 0 0",
			"environ": p.environ,
			"cmdline": "python3\x00train.py\x00",
		}
		for name, body := range p.files {
			files[filepath.Join("root", name)] = body
		}
		for name, body := range files {
			path := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A pod is found through a process of it: by the namespace and name its
// environment, service account and /etc/hostname give, and its cgroup is
// the path up to the component naming its UID, in the systemd and the
// cgroupfs layouts, or, from another cgroup namespace, the directory named
// for the UID under the mount.
func TestPodCgroup(t *testing.T) {
	procRoot := filepath.Join(t.TempDir(), "proc")
	mount := t.TempDir()
	const (
		uidSystemd  = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
		uidCgroupfs = "6fa459ea-ee8a-3ca4-894e-db77e160355e"
		uidOtherNS  = "16fd2706-8baf-433b-82eb-8c7fada847da"
	)
	systemdPod := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(uidSystemd, "-", "_") + ".slice"
	if err := os.MkdirAll(filepath.Join(mount, "kubepods/besteffort/pod"+uidOtherNS, "ctr"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFakeProc(t, procRoot, []fakeProc{
		{pid: "10", cgroup: "/user.slice/session-1.scope", environ: "POD_NAMESPACE=ml\x00POD_NAME=trainer-0\x00"},
		{pid: "20", cgroup: systemdPod + "/cri-containerd-abc.scope",
			environ: "POD_NAMESPACE=ml\x00POD_NAME=trainer-0\x00HOME=/root\x00"},
		{pid: "30", cgroup: "/kubepods/burstable/pod" + uidCgroupfs + "/0123abcd",
			files: map[string]string{
				"var/run/secrets/kubernetes.io/serviceaccount/namespace": "ml\n",
				"etc/hostname": "trainer-1\n",
			}},
		{pid: "40", cgroup: "/../../kubepods/besteffort/pod" + uidOtherNS + "/ctr",
			environ: "POD_NAMESPACE=serve\x00POD_NAME=api-7\x00"},
	})
	tests := []struct {
		pod, want, err string
	}{
		{pod: "ml/trainer-0", want: filepath.Join(mount, systemdPod)},
		{pod: "ml/trainer-1", want: filepath.Join(mount, "kubepods/burstable/pod"+uidCgroupfs)},
		{pod: "serve/api-7", want: filepath.Join(mount, "kubepods/besteffort/pod"+uidOtherNS)},
		{pod: "ml/trainer-9", err: "--pod ml/trainer-9: no process of that pod on this node"},
		{pod: "other/trainer-0", err: "no process of that pod"},
		{pod: "trainer-0", err: `--pod "trainer-0": give NAMESPACE/NAME`},
	}
	for _, tt := range tests {
		t.Run(tt.pod, func(t *testing.T) {
			got, err := podCgroup(procRoot, mount, tt.pod)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("podCgroup = %q, %v; want one line with %q", got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("podCgroup = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// At the start, only the running processes in a scope cgroup or below
// one are kept; without a scope, all of them.
func TestScopeFilterKeepsProcessesOfItsCgroups(t *testing.T) {
	root := t.TempDir()
	for path, procs := range map[string]string{"a": "5\n6\n", "a/sub": "7\n", "b": "8\n"} {
		if err := os.MkdirAll(filepath.Join(root, path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, path, "cgroup.procs"), []byte(procs), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	scanned := func() map[uint32][]mapLine { return map[uint32][]mapLine{5: nil, 7: nil, 8: nil, 9: nil} }
	tests := []struct {
		name string
		sc   *scope
		want []uint32
	}{
		{"no scope", nil, []uint32{5, 7, 8, 9}},
		{"a and below", &scope{dirs: []cgroup.Dir{{Path: filepath.Join(root, "a")}}}, []uint32{5, 7}},
		{"a/sub and b", &scope{dirs: []cgroup.Dir{{Path: filepath.Join(root, "a/sub")}, {Path: filepath.Join(root, "b")}}}, []uint32{7, 8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scan := scanned()
			if err := tt.sc.filter(scan); err != nil {
				t.Fatal(err)
			}
			var got []uint32
			for pid := range scan {
				got = append(got, pid)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("kept %v, want %v", got, tt.want)
			}
		})
	}
}

// A scope limits --all: given without it, the configuration is refused.
func TestScopeNeedsAll(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		err  string
	}{
		{"cgroup with a command", Config{Output: "x.db", Command: []string{"true"}, Cgroups: []string{"a"}}, "give --all too"},
		{"pod with --pid", Config{Output: "x.db", PID: 1, Pods: []string{"ml/x"}}, "give --all too"},
		{"cgroup with --all", Config{Output: "x.db", All: true, Cgroups: []string{"a"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.defaults()
			if (tt.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("defaults() = %v, want %q", err, tt.err)
			}
		})
	}
}

// Without --cgroup or --pod there is no scope, and nothing is read.
func TestResolveScopeNone(t *testing.T) {
	sc, err := resolveScope("/nonexistent/proc", "/nonexistent/mountinfo", nil, nil)
	if sc != nil || err != nil || sc.cgroups() != nil || sc.paths() != nil {
		t.Errorf("resolveScope = %+v, %v; want no scope", sc, err)
	}
}

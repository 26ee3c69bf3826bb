package recorder

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/internal/cgroup"
)

// scope is what --all is limited to (--cgroup, --pod): cgroup v2 cgroups,
// each with every cgroup below it. The probes decide in the kernel, by the
// cgroup a process is in when it would start being recorded (its first
// call or its first libcuda mapping); user space only picks the processes
// already running at the start.
type scope struct {
	dirs []cgroup.Dir
}

// resolveScope resolves --cgroup paths (absolute, or relative to the
// cgroup v2 mount) and --pod NAMESPACE/NAME (the pod's cgroup, found
// through a process of it in procRoot) to cgroups; nil when neither is
// given.
func resolveScope(procRoot, mountinfo string, cgroups, pods []string) (*scope, error) {
	if len(cgroups) == 0 && len(pods) == 0 {
		return nil, nil
	}
	mount, err := cgroup.Mount(mountinfo)
	if err != nil {
		return nil, err
	}
	paths := slices.Clone(cgroups)
	for _, p := range pods {
		dir, err := podCgroup(procRoot, mount, p)
		if err != nil {
			return nil, err
		}
		paths = append(paths, dir)
	}
	sc := &scope{}
	for _, p := range paths {
		d, err := cgroup.Open(mount, p)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(sc.dirs, func(o cgroup.Dir) bool { return o.ID == d.ID }) {
			sc.dirs = append(sc.dirs, d)
		}
	}
	if len(sc.dirs) > bpf.MaxScopes {
		return nil, fmt.Errorf("%d cgroups to scope to, at most %d", len(sc.dirs), bpf.MaxScopes)
	}
	return sc, nil
}

// cgroups is the scope as the probes take it (nil: no scope).
func (sc *scope) cgroups() []bpf.Cgroup {
	if sc == nil {
		return nil
	}
	out := make([]bpf.Cgroup, len(sc.dirs))
	for i, d := range sc.dirs {
		out[i] = bpf.Cgroup{ID: d.ID, Level: d.Level}
	}
	return out
}

// filter keeps the scanned processes that are in the scope's cgroups now
// (all of them without a scope).
func (sc *scope) filter(scan map[uint32][]mapLine) error {
	if sc == nil {
		return nil
	}
	in := map[uint32]bool{}
	for _, d := range sc.dirs {
		pids, err := cgroup.Procs(d.Path)
		if err != nil {
			return fmt.Errorf("processes of cgroup %s: %w", d.Path, err)
		}
		for _, p := range pids {
			in[p] = true
		}
	}
	for pid := range scan {
		if !in[pid] {
			delete(scan, pid)
		}
	}
	return nil
}

// paths are the scope's cgroup directories (nil: no scope).
func (sc *scope) paths() []string {
	if sc == nil {
		return nil
	}
	names := make([]string, len(sc.dirs))
	for i, d := range sc.dirs {
		names[i] = d.Path
	}
	return names
}

// describe names the scope's cgroups for the log.
func (sc *scope) describe() string { return strings.Join(sc.paths(), ", ") }

// ParsePod splits --pod NAMESPACE/NAME.
func ParsePod(s string) (namespace, name string, err error) {
	ns, n, ok := strings.Cut(s, "/")
	if !ok || ns == "" || n == "" || strings.Contains(n, "/") {
		return "", "", fmt.Errorf("--pod %q: give NAMESPACE/NAME", s)
	}
	return ns, n, nil
}

// podCgroup finds the cgroup of pod NAMESPACE/NAME on this node: a process
// whose cgroup path names a pod UID (a kubelet's layout) and whose pod is
// that one (podOf: the namespace and name its environment, service account
// and /etc/hostname give), then the pod's cgroup: the path up to the
// component naming the UID, or, when the process's path is relative to
// another cgroup namespace, the directory under mount named for the UID.
func podCgroup(procRoot, mount, pod string) (string, error) {
	ns, name, err := ParsePod(pod)
	if err != nil {
		return "", err
	}
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return "", err
	}
	for _, ent := range ents {
		pid, err := strconv.ParseUint(ent.Name(), 10, 32)
		if err != nil {
			continue
		}
		cg := unifiedCgroup(filepath.Join(procRoot, ent.Name(), "cgroup"))
		if podUIDFromCgroup(cg) == "" {
			continue
		}
		pi := readProc(procRoot, uint32(pid))
		if pi.Pod == nil || pi.Pod.Namespace != ns || pi.Pod.Name != name {
			continue
		}
		if dir := podPrefix(cg); dir != "" {
			return filepath.Join(mount, dir), nil
		}
		return findPodDir(mount, pi.Pod.UID)
	}
	return "", fmt.Errorf("--pod %s: no process of that pod on this node (a pod is found through its running processes)", pod)
}

// unifiedCgroup reads a /proc/PID/cgroup file's cgroup v2 path ("0::PATH").
func unifiedCgroup(file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	return ""
}

// podPrefix cuts a cgroup path after its component naming a pod UID; ""
// when the path leaves its cgroup namespace ("/..") or names no pod.
func podPrefix(cg string) string {
	if strings.HasPrefix(cg, "/..") {
		return ""
	}
	parts := strings.Split(cg, "/")
	for i, p := range parts {
		if podUID.MatchString(p) {
			return strings.Join(parts[:i+1], "/")
		}
	}
	return ""
}

// podDirDepth is how deep below the mount a pod's cgroup is looked for:
// kubepods[.slice]/QOS/pod is at most 3 (guaranteed pods sit at 2).
const podDirDepth = 4

// findPodDir finds the directory under mount named for pod uid (cgroupfs:
// pod<uid>; systemd: kubepods-...-pod<uid with underscores>.slice).
func findPodDir(mount, uid string) (string, error) {
	want := []string{"pod" + uid, "pod" + strings.ReplaceAll(uid, "-", "_")}
	level := []string{mount}
	for depth := 0; depth < podDirDepth && len(level) > 0; depth++ {
		var next []string
		for _, dir := range level {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if !e.IsDir() {
					continue
				}
				p := filepath.Join(dir, e.Name())
				base := strings.TrimSuffix(e.Name(), ".slice")
				if strings.HasSuffix(base, want[0]) || strings.HasSuffix(base, want[1]) {
					return p, nil
				}
				next = append(next, p)
			}
		}
		level = next
	}
	return "", errors.New("pod " + uid + ": no cgroup named for it under " + mount)
}

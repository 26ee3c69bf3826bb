// Package cgroup finds cgroup v2 cgroups by path: the unified hierarchy's
// mount, a cgroup's id and level (what BPF's cgroup helpers return and
// take), and the processes in a cgroup and the cgroups below it.
package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Dir is a cgroup v2 cgroup.
type Dir struct {
	// Path is its directory, where the hierarchy is mounted.
	Path string
	// ID is the cgroup's id: its directory's inode number, what
	// bpf_get_current_cgroup_id returns for a process in it.
	ID uint64
	// Level is its depth below the hierarchy's root (level 0).
	Level int
}

// Mount returns where the host's cgroup v2 hierarchy is mounted, read
// from a mountinfo file (/proc/self/mountinfo): the first cgroup2 mount
// whose directory is the hierarchy's true root (/sys/fs/cgroup on a
// unified host, /sys/fs/cgroup/unified on a hybrid one). Inside a
// container with its own cgroup namespace, /sys/fs/cgroup is the
// container's cgroup, not the root: the host's /sys/fs/cgroup must be
// mounted somewhere too (a hostPath volume).
func Mount(mountinfo string) (string, error) {
	points, err := mountPoints(mountinfo)
	if err != nil {
		return "", err
	}
	if len(points) == 0 {
		return "", errors.New("no cgroup v2 hierarchy is mounted (scoping needs cgroup v2)")
	}
	for _, p := range points {
		if isRoot(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("the cgroup v2 mounts (%s) show a cgroup namespace, not the host's hierarchy: mount the host's /sys/fs/cgroup", strings.Join(points, ", "))
}

// isRoot says whether dir is a cgroup v2 hierarchy's root: only the root
// lacks cgroup.type (as every file the kernel keeps off the root), and
// every cgroup has cgroup.procs.
func isRoot(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join(dir, "cgroup.type"))
	return errors.Is(err, fs.ErrNotExist)
}

// mountPoints lists a mountinfo file's cgroup2 mount points, in order.
func mountPoints(mountinfo string) ([]string, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep >= 5 && sep+1 < len(fields) && fields[sep+1] == "cgroup2" {
			out = append(out, unescapeMount(fields[4]))
		}
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Open resolves a cgroup's directory: an absolute path, or one relative
// to mount (the hierarchy's mount point). The directory must be on a
// cgroup v2 file system whose mount shows the hierarchy's true root (a
// mount of a cgroup namespace's root would give wrong levels).
func Open(mount, path string) (Dir, error) {
	if path == "" {
		return Dir{}, errors.New("empty cgroup path")
	}
	p := path
	if !filepath.IsAbs(p) {
		p = filepath.Join(mount, p)
	}
	p = filepath.Clean(p)
	var sfs unix.Statfs_t
	if err := unix.Statfs(p, &sfs); err != nil {
		return Dir{}, fmt.Errorf("cgroup %s: %s: %w", path, p, err)
	}
	if sfs.Type != unix.CGROUP2_SUPER_MAGIC {
		return Dir{}, fmt.Errorf("cgroup %s: %s is not in a cgroup v2 hierarchy (mounted at %s)", path, p, mount)
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return Dir{}, fmt.Errorf("cgroup %s: %s: %w", path, p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return Dir{}, fmt.Errorf("cgroup %s: %s is not a directory", path, p)
	}
	// Up to the mount's root: the last directory on the same file system.
	level, root := 0, p
	for {
		up := filepath.Dir(root)
		var ust unix.Stat_t
		if up == root || unix.Stat(up, &ust) != nil || ust.Dev != st.Dev {
			break
		}
		root = up
		level++
	}
	if !isRoot(root) {
		return Dir{}, fmt.Errorf("cgroup %s: %s is mounted from a cgroup namespace, not the host's root: mount the host's /sys/fs/cgroup", path, root)
	}
	return Dir{Path: p, ID: st.Ino, Level: level}, nil
}

// Procs returns the processes in dir's cgroup and in every cgroup below
// it, as their cgroup.procs files list them now.
func Procs(dir string) ([]uint32, error) {
	var pids []uint32
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != dir && errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			if p != dir && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.ParseUint(f, 10, 32); err == nil {
				pids = append(pids, uint32(pid))
			}
		}
		return nil
	})
	return pids, err
}

// containerID matches the container id a runtime puts at the end of a
// cgroup path: docker-<id>.scope, cri-containerd-<id>.scope, crio-<id>,
// libpod-<id>, or a bare /docker/<id>.
var containerID = regexp.MustCompile(`(?:^|[/-])([0-9a-f]{64})(?:\.scope)?$`)

// ContainerID is the container id a cgroup path names (64 hex digits), or
// "" for a cgroup no container runtime made (a login session, a service).
func ContainerID(path string) string {
	if m := containerID.FindStringSubmatch(path); m != nil {
		return m[1]
	}
	return ""
}

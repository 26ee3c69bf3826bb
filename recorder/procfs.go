package recorder

import (
	"bytes"
	"cmp"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/internal/elfnote"
	"github.com/retrivium/forensic/store"
)

// EnvAllowlist is the only environment forensic stores: variables that
// decide which GPUs a process sees and how its allocators behave, and those
// that name its job and rank. Anything else (tokens, paths, credentials)
// never reaches run.db.
var EnvAllowlist = []string{
	"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES",
	"NVIDIA_DRIVER_CAPABILITIES", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
	"CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING", "CUDA_DEVICE_MAX_CONNECTIONS",
	"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING",
	"TF_FORCE_GPU_ALLOW_GROWTH", "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION",
	"NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE", "NCCL_CUMEM_ENABLE",
	// Job and rank identity (jobenv.Variables), so that runs of many
	// hosts can be put in order and each process says which rank it was.
	"RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID",
	"SLURM_JOB_ID", "SLURM_PROCID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_LOCALID",
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
	"JOB_COMPLETION_INDEX", "POD_NAME", "POD_NAMESPACE", "POD_UID",
}

// FilterEnv keeps the allowlisted variables of a KEY=VALUE list.
func FilterEnv(env []string) map[string]string {
	out := map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		for _, a := range EnvAllowlist {
			if k == a {
				out[k] = v
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// procInfo reads what /proc tells about a live process. Any part may be
// missing (the process may already be gone); callers keep what BPF said.
type procInfo struct {
	PPID     uint32
	Exe      string
	Args     []string
	Cgroup   string
	Env      map[string]string
	Pod      *store.Pod // the Kubernetes pod its cgroup names, if any
	Readable bool
	// EnvRead says environ had content: a process that is exiting (its
	// memory gone) reads as empty, which is not an empty environment.
	EnvRead bool
}

func readProc(procRoot string, pid uint32) procInfo {
	dir := filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10))
	var pi procInfo
	pi.PPID, pi.Readable = readPPID(procRoot, pid)
	pi.Exe, _ = os.Readlink(filepath.Join(dir, "exe"))
	if b, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
		pi.Args = bpf.Args(b) // empty arguments included
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil {
		// cgroup v2: "0::/path"; keep the unified path when present.
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if p, ok := strings.CutPrefix(line, "0::"); ok {
				pi.Cgroup = p
			}
		}
		if pi.Cgroup == "" {
			pi.Cgroup = strings.TrimSpace(string(b))
		}
	}
	// environ of a process that is exiting can read short: its memory is
	// torn down under the read. What was read then is not its environment
	// (a missing CUDA_VISIBLE_DEVICES changes which GPU a device is).
	if b, err := os.ReadFile(filepath.Join(dir, "environ")); err == nil && len(b) > 0 && !exiting(procRoot, pid) {
		pi.Env = FilterEnv(strings.Split(string(b), "\x00"))
		pi.EnvRead = true
	}
	pi.Pod = podOf(filepath.Join(dir, "root"), pi.Cgroup, pi.Env)
	return pi
}

// buildIDCache remembers the build id of files by device, inode, size and
// modification time, so a process's mappings are read without opening
// every ELF file again. The event reader and the holder share it.
type buildIDCache struct {
	mu  sync.Mutex
	ids map[[4]int64]string
	// read reads a file's build id (elfnote.Read; a test fails it).
	read func(path string) (string, error)
}

func newBuildIDCache() *buildIDCache {
	return &buildIDCache{ids: map[[4]int64]string{}, read: elfnote.Read}
}

func (c *buildIDCache) get(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return ""
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return elfnote.BuildID(path)
	}
	k := [4]int64{int64(sys.Dev), int64(sys.Ino), st.Size(), st.ModTime().UnixNano()}
	c.mu.Lock()
	id, seen := c.ids[k]
	c.mu.Unlock()
	if !seen {
		// A read that failed is not remembered: a /proc/PID/root path
		// stats, then stops opening when its process exits, and the file
		// (the same device and inode) must not read as one without a
		// build id for the rest of the recording.
		if id, err = c.read(path); err != nil {
			return ""
		}
		c.mu.Lock()
		if len(c.ids) >= maxCached {
			clear(c.ids) // files of containers long gone; read again when seen
		}
		c.ids[k] = id
		c.mu.Unlock()
	}
	return id
}

// maxCached bounds the recorder's caches of files (build ids, files seen
// mapped): a recorder that runs for days sees containers come and go, each
// with files of its own (new inodes).
const maxCached = 16384

// readMappings lists the executable file mappings of a process, for
// symbolizing its stacks later (paths through its root, build ids). held
// is a path of the process's root directory held open (procState.root),
// "" for none: paths through it, unlike /proc/PID/root, still open when
// the process exits while they are being read.
func readMappings(procRoot string, pid uint32, ids *buildIDCache, held string) []store.Mapping {
	dir := filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10))
	via := rootOpener{proc: filepath.Join(dir, "root"), held: held}
	data, err := os.ReadFile(filepath.Join(dir, "maps"))
	if err != nil {
		return nil
	}
	root, _ := os.Readlink(filepath.Join(dir, "root"))
	var out []store.Mapping
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.Contains(f[1], "x") {
			continue
		}
		ml, ok := parseMapLine(line)
		if !ok {
			continue
		}
		off, _ := strconv.ParseUint(f[2], 16, 64)
		seen, host := mappedPath(via.proc, root, ml.Path)
		if hostPathFor(seen, via.open(host)) == "" {
			host = ""
		}
		out = append(out, store.Mapping{Start: ml.Start, End: ml.End, Offset: off, Path: seen,
			Host: host, BuildID: ids.get(via.open(cmp.Or(host, seen))), Dev: ml.Key.Dev, Inode: ml.Key.Ino})
	}
	return out
}

// mappedPath returns a mapped file's path as the process sees it and a
// path the recorder opens it by, from the path /proc/PID/maps shows the
// recorder. The kernel writes that path relative to the reader's root: a
// process chroot'ed under the recorder's root (root, /proc/PID/root's
// target, is then a directory of the recorder's tree) has its files shown
// under that directory, a path the process itself never used, and that
// host path stays readable after the process exits. A process in another
// mount namespace (pivot_root, as container runtimes do) has paths
// relative to its own root, reached through rootDir (/proc/PID/root while
// it lives, or the root held open).
func mappedPath(rootDir, root, shown string) (seen, host string) {
	if root != "" && root != "/" && filepath.IsAbs(root) {
		if rel, ok := strings.CutPrefix(shown, root); ok && strings.HasPrefix(rel, "/") {
			return rel, shown
		}
	}
	return shown, filepath.Join(rootDir, shown)
}

// hostPathFor keeps the /proc/PID/root path only when it differs from the
// plain path (a container), since it stops resolving once the process
// exits.
func hostPathFor(path, host string) string {
	a, errA := os.Stat(path)
	b, errB := os.Stat(host)
	if errA == nil && errB == nil && os.SameFile(a, b) {
		return ""
	}
	return host
}

// descendants returns pid's descendants among live processes.
func descendants(procRoot string, pid uint32) []uint32 {
	children := map[uint32][]uint32{}
	ents, _ := os.ReadDir(procRoot)
	for _, ent := range ents {
		p, err := strconv.ParseUint(ent.Name(), 10, 32)
		if err != nil {
			continue
		}
		ppid, _ := readPPID(procRoot, uint32(p))
		children[ppid] = append(children[ppid], uint32(p))
	}
	var out []uint32
	queue := []uint32{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// readPPID reads a process's parent from /proc/PID/stat; ok is false when
// the process is gone or hidden.
// readComm reads a process's command name ("" when it is gone).
func readComm(procRoot string, pid uint32) string {
	b, _ := os.ReadFile(filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "comm"))
	return strings.TrimSuffix(string(b), "\n")
}

// pfExiting is the kernel's PF_EXITING task flag (include/linux/sched.h):
// set when a task begins to exit, before its memory is released.
const pfExiting = 0x4

// exiting reports whether a process has begun to exit (or cannot be
// read any more): /proc/PID/stat's state is a zombie or dead, or its
// flags have PF_EXITING.
func exiting(procRoot string, pid uint32) bool {
	stat, err := os.ReadFile(filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "stat"))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return true
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 7 || f[0] == "Z" || f[0] == "X" || f[0] == "x" {
		return true
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	return err != nil || flags&pfExiting != 0
}

func readPPID(procRoot string, pid uint32) (ppid uint32, ok bool) {
	stat, err := os.ReadFile(filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "stat"))
	if err != nil {
		return 0, false
	}
	// The command name may contain spaces and parentheses: parse after
	// the last ')'.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
		if f := strings.Fields(string(stat[i+1:])); len(f) >= 2 {
			v, _ := strconv.ParseUint(f[1], 10, 32)
			ppid = uint32(v)
		}
	}
	return ppid, true
}

// rootOpener turns a path through a process's /proc/PID/root (proc), the
// form run.db keeps, into one through its root directory held open
// (held), which still opens after the process exits. A path of the first
// form stops opening then, and one of the second means nothing outside
// the recorder, so only the first is stored.
type rootOpener struct{ proc, held string }

// open is the path that opens host now.
func (r rootOpener) open(host string) string {
	if r.held == "" || r.proc == "" {
		return host
	}
	if rest, ok := strings.CutPrefix(host, r.proc); ok && strings.HasPrefix(rest, "/") {
		return r.held + rest
	}
	return host
}

// opener is the process's rootOpener.
func (p *procState) opener(procRoot string, pid uint32) rootOpener {
	return rootOpener{proc: filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "root"), held: p.heldRoot()}
}

// heldRoot is a path of the process's root directory held open, "" when
// none is.
func (p *procState) heldRoot() string {
	if p.root == nil {
		return ""
	}
	return fdPath(p.root)
}

// openRoot holds open a process's root directory when it is not the
// recorder's (see procState.root); once per program.
func (p *procState) openRoot(procRoot string, pid uint32) {
	if p.rootRead {
		return
	}
	p.rootRead = true
	f, err := os.OpenFile(filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "root"), os.O_RDONLY|unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return
	}
	a, errA := f.Stat()
	b, errB := os.Stat("/")
	if errA != nil || errB != nil || os.SameFile(a, b) {
		f.Close()
		return
	}
	p.root = f
}

// closeRoot lets go of the process's root directory; the next program
// (exec) looks again.
func (p *procState) closeRoot() {
	if p.root != nil {
		p.root.Close()
	}
	p.root, p.rootRead = nil, false
}

// inRoot finds a file the probes listed (device, inode and the file's
// name, without its directory) under the process's own root, in the
// directories of the files it was seen to map and its CPython's
// lib-dynload: a library a process in another root loaded after its
// mappings were last read, when it has exited since. seen is the path as
// the process named it, host a path that opens it while the root is held.
func (p *procState) inRoot(k fileKey, name string) (seen, host string, ok bool) {
	if p.root == nil || name == "" || strings.ContainsRune(name, '/') {
		return "", "", false
	}
	dirs := pythonDirs(p.rec.Python)
	for _, m := range p.rec.Maps {
		if filepath.IsAbs(m.Path) && !slices.Contains(dirs, filepath.Dir(m.Path)) {
			dirs = append(dirs, filepath.Dir(m.Path))
		}
	}
	base := fdPath(p.root)
	for _, d := range dirs {
		cands, _ := filepath.Glob(filepath.Join(base, d, globEscape(name)+"*"))
		for _, c := range cands {
			if ck, ok := statKey(c); ok && ck == k {
				rel := strings.TrimPrefix(c, base)
				return rel, c, true
			}
		}
	}
	return "", "", false
}

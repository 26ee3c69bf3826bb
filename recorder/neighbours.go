package recorder

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/retrivium/forensic/internal/cgroup"
	"github.com/retrivium/forensic/store"
)

// neighbourNamer names the processes NVML lists that the recording does
// not follow: their command line, user and cgroup (container, pod), read
// from /proc once per pid (per segment), when a stored sample first lists
// them. The sampler goroutine alone uses it, after a round is queued, so
// no call waits for it.
type neighbourNamer struct {
	proc string // /proc
	// passwd are the files user names are read from, the first that
	// opens: the host's (/proc/1/root/etc/passwd: a recorder in a
	// container that shares the host's pids reaches it there), then the
	// recorder's own /etc/passwd.
	passwd []string
}

// name reads the neighbours pids, at time t on the run clock.
func (n *neighbourNamer) name(pids []uint32, t int64) []store.Neighbour {
	if len(pids) == 0 {
		return nil
	}
	users := readUsers(n.passwd)
	out := make([]store.Neighbour, 0, len(pids))
	for _, pid := range pids {
		out = append(out, n.one(pid, t, users))
	}
	return out
}

// one reads one neighbour; a process gone before the recorder looked is
// stored with why, so the budget says it could not be named.
func (n *neighbourNamer) one(pid uint32, t int64, users map[uint32]string) store.Neighbour {
	nb := store.Neighbour{PID: pid, Time: t, Comm: readComm(n.proc, pid)}
	uid, err := readUID(filepath.Join(n.proc, strconv.FormatUint(uint64(pid), 10), "status"))
	if err != nil {
		nb.Error = "not readable in /proc (the process had exited): " + err.Error()
		return nb
	}
	nb.UID, nb.User = &uid, users[uid]
	pi := readProc(n.proc, pid)
	nb.Args, nb.ArgsCut = clipArgs(pi.Args, store.MaxNeighbourArgs)
	nb.Cgroup, nb.Pod = pi.Cgroup, pi.Pod
	nb.Container = cgroup.ContainerID(pi.Cgroup)
	return nb
}

// readUID is the real user id of a /proc/PID/status file.
func readUID(status string) (uint32, error) {
	f, err := os.Open(status)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			if fs := strings.Fields(rest); len(fs) > 0 {
				v, err := strconv.ParseUint(fs[0], 10, 32)
				return uint32(v), err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, os.ErrNotExist
}

// readUsers maps user ids to names from the first passwd file that opens
// (none when none does).
func readUsers(passwd []string) map[uint32]string {
	users := map[uint32]string{}
	var f *os.File
	for _, p := range passwd {
		var err error
		if f, err = os.Open(p); err == nil {
			break
		}
	}
	if f == nil {
		return users
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// name:password:uid:gid:gecos:home:shell
		fs := strings.Split(sc.Text(), ":")
		if len(fs) < 3 || strings.HasPrefix(fs[0], "#") {
			continue
		}
		uid, err := strconv.ParseUint(fs[2], 10, 32)
		if _, dup := users[uint32(uid)]; err == nil && !dup {
			users[uint32(uid)] = fs[0]
		}
	}
	return users
}

// clipArgs keeps the arguments that fit in limit bytes (the last one
// clipped), and says whether any were left out or clipped.
func clipArgs(args []string, limit int) ([]string, bool) {
	n := 0
	for i, a := range args {
		if n+len(a) > limit {
			return append(args[:i:i], a[:limit-n]), true
		}
		n += len(a)
	}
	return args, false
}

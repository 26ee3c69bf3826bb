package store

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Owner is the user and group a new run.db is given (Create's
// CreateOptions.Owner), so that a recording made under sudo belongs to the
// user who asked for it.
type Owner struct {
	UID, GID int
}

// removeForReplace removes path so that Create may make a new run.db there
// (--force). It removes only what replacing cannot lose: a finished
// forensic run or an empty file. It refuses, naming what is there, a
// recording in progress (and the pid holding it), a directory, a link or
// device, and a file that is not a forensic run. A missing path is fine.
func removeForReplace(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	refuse := func(what string) error {
		return fmt.Errorf("%s: %w: it is %s; nothing was removed", path, ErrNotReplaced, what)
	}
	switch {
	case st.IsDir():
		return refuse("a directory")
	case st.Mode()&os.ModeSymlink != 0:
		return refuse("a symbolic link")
	case !st.Mode().IsRegular():
		return refuse("not a regular file (" + st.Mode().Type().String() + ")")
	case st.Size() == 0:
		return os.Remove(path) // nothing was recorded in it
	}
	// The reader holds bbolt's shared lock on the file until it is removed,
	// so no recorder can be writing it while it is judged and unlinked.
	r, err := Open(path)
	switch {
	case errors.Is(err, ErrLocked):
		return fmt.Errorf("%s: %w: %s", path, ErrNotReplaced, lockHolder(st))
	case errors.Is(err, ErrNewerSchema), errors.Is(err, ErrCorrupt):
		// A forensic run all the same: the user asked to replace it.
	case errors.Is(err, ErrForeign), errors.Is(err, ErrNotRunDB):
		return refuse(fmt.Sprintf("a %d-byte file that is not a forensic run", st.Size()) + notRunWhy(err))
	case err != nil:
		return err
	default:
		defer r.Close()
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// notRunWhy says why Open did not take a file for a run.
func notRunWhy(err error) string {
	if errors.Is(err, ErrForeign) {
		return " (a bbolt database of another program)"
	}
	return " (not bbolt, or truncated or corrupt)"
}

// lockHolder says who holds the lock on the file st describes, from
// /proc/locks: a recorder holds it for writing, a reader for reading.
func lockHolder(st os.FileInfo) string {
	sys, ok := st.Sys().(*syscall.Stat_t)
	data, err := os.ReadFile("/proc/locks")
	if !ok || err != nil {
		return "a running recorder holds it"
	}
	pid, kind := lockOf(string(data), uint64(sys.Dev), sys.Ino)
	switch {
	case pid == 0:
		return "a running recorder holds it"
	case kind == "WRITE":
		return fmt.Sprintf("a recording in progress (forensic pid %d is writing it); stop that recording or choose another file", pid)
	}
	return fmt.Sprintf("pid %d is reading it; try again when it has finished", pid)
}

// lockOf finds the holder of a flock on the file (dev, ino) in the text of
// /proc/locks: lines like "1: FLOCK  ADVISORY  WRITE 4242 fd:01:123456 0 EOF",
// with the device as hexadecimal major:minor. Waiters ("->") are skipped.
func lockOf(locks string, dev, ino uint64) (pid int, kind string) {
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(dev), unix.Minor(dev), ino)
	for _, line := range strings.Split(locks, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != "FLOCK" || f[5] != want {
			continue
		}
		p, err := strconv.Atoi(f[4])
		if err != nil {
			continue
		}
		return p, f[3]
	}
	return 0, ""
}

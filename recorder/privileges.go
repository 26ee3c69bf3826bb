package recorder

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"

	"github.com/retrivium/forensic/store"
)

// Recording needs root, but the workload and the files forensic writes
// belong to the person who typed `sudo forensic record -- python train.py`.
// sudo says who that is in SUDO_UID, SUDO_GID and SUDO_USER; the user
// database gives their home and supplementary groups.

// Invoker is the user who ran forensic through sudo.
type Invoker struct {
	UID, GID int
	// Groups are the supplementary groups (the video group, for one, may
	// be what opens /dev/nvidia*).
	Groups []int
	// Name is the login name; Home the home directory ("" when the user
	// database does not know the user).
	Name, Home string
}

// SudoInvoker returns the user who ran forensic through sudo, read from
// the environment through getenv, or nil when forensic runs as root
// without sudo, as a user, or through sudo by root itself. euid is the
// process's effective uid (os.Geteuid()).
func SudoInvoker(getenv func(string) string, euid int) (*Invoker, error) {
	uidS, gidS, name := getenv("SUDO_UID"), getenv("SUDO_GID"), getenv("SUDO_USER")
	if euid != 0 || uidS == "" || gidS == "" || name == "" {
		return nil, nil
	}
	uid, err1 := strconv.Atoi(uidS)
	gid, err2 := strconv.Atoi(gidS)
	if err := errors.Join(err1, err2); err != nil || uid < 0 || gid < 0 {
		return nil, fmt.Errorf("SUDO_UID=%q SUDO_GID=%q are not user and group ids", uidS, gidS)
	}
	if uid == 0 {
		return nil, nil
	}
	inv := &Invoker{UID: uid, GID: gid, Name: name, Groups: []int{gid}}
	u, err := user.LookupId(uidS)
	if err != nil {
		return inv, nil // no home or groups to add; the ids are enough
	}
	inv.Name, inv.Home = u.Username, u.HomeDir
	if ids, err := u.GroupIds(); err == nil {
		inv.Groups = inv.Groups[:0]
		for _, s := range ids {
			if g, err := strconv.Atoi(s); err == nil {
				inv.Groups = append(inv.Groups, g)
			}
		}
	}
	return inv, nil
}

// Owner is the owner files written for this invoker get (nil: leave them
// to whoever writes them).
func (u *Invoker) Owner() *store.Owner {
	if u == nil {
		return nil
	}
	return &store.Owner{UID: u.UID, GID: u.GID}
}

// Chown gives path to the invoker; nothing to do without one.
func (u *Invoker) Chown(path string) error {
	if u == nil {
		return nil
	}
	return os.Chown(path, u.UID, u.GID)
}

// MayControl reports whether a peer with this uid may add markers to a
// recording: root, the recorder's own user and the invoker.
func (u *Invoker) MayControl(uid uint32) bool {
	return uid == 0 || int(uid) == os.Geteuid() || (u != nil && int(uid) == u.UID)
}

// workloadUser is who the workload runs as: the invoker unless AsRoot
// (nil: the recorder's own user).
func (c *Config) workloadUser() *Invoker {
	if c.AsRoot {
		return nil
	}
	return c.Invoker
}

// procAttr returns what the workload is started with to run as the
// invoker: credentials, and an environment whose HOME, USER and LOGNAME are
// theirs. Without an invoker it returns nil attributes and env unchanged.
func (u *Invoker) procAttr(env []string) (*syscall.SysProcAttr, []string) {
	if u == nil {
		return nil, env
	}
	groups := make([]uint32, len(u.Groups))
	for i, g := range u.Groups {
		groups[i] = uint32(g)
	}
	// Root's HOME is never passed on: without a known home the workload
	// has none, and programs ask the user database.
	set := map[string]string{"HOME": u.Home, "USER": u.Name, "LOGNAME": u.Name}
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, replaced := set[k]; !replaced {
			out = append(out, kv)
		}
	}
	for _, k := range []string{"HOME", "USER", "LOGNAME"} {
		if v := set[k]; v != "" {
			out = append(out, k+"="+v)
		}
	}
	cred := &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID), Groups: groups}
	return &syscall.SysProcAttr{Credential: cred}, out
}

// CommandError says why a workload cannot be started: it was not found
// (a shell's status 127) or is not executable (126).
type CommandError struct {
	Name     string
	NotFound bool
	Err      error
}

// Error says which command and why, in the shell's words.
func (e *CommandError) Error() string {
	if e.NotFound {
		return fmt.Sprintf("cannot run %s: command not found", e.Name)
	}
	return fmt.Sprintf("cannot run %s: %v", e.Name, e.Err)
}

// Unwrap returns the underlying lookup or permission error.
func (e *CommandError) Unwrap() error { return e.Err }

// LookCommand finds the workload's executable the way the shell that
// starts it will, and checks that the user it runs as (u; nil: this
// process) may execute it.
func LookCommand(name string, u *Invoker) (string, error) {
	path, err := exec.LookPath(name)
	if errors.Is(err, exec.ErrDot) {
		err = nil // a bare name found in "." of PATH: the shell runs it too
	}
	if err != nil {
		var ee *exec.Error
		notFound := errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist)
		if errors.As(err, &ee) {
			err = ee.Err
		}
		return "", &CommandError{Name: name, NotFound: notFound, Err: err}
	}
	if u != nil {
		st, err := os.Stat(path)
		if err != nil {
			return "", &CommandError{Name: name, NotFound: true, Err: err}
		}
		if !u.mayExecute(st) {
			return "", &CommandError{Name: name, Err: fmt.Errorf("%s may not execute %s (%v)", u.Name, path, st.Mode().Perm())}
		}
	}
	return path, nil
}

// mayExecute applies the mode bits to the invoker: owner, then group, then
// others (access control lists are not consulted).
func (u *Invoker) mayExecute(st os.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	perm := st.Mode().Perm()
	inGroup := int(sys.Gid) == u.GID
	for _, g := range u.Groups {
		inGroup = inGroup || int(sys.Gid) == g
	}
	switch {
	case int(sys.Uid) == u.UID:
		return perm&0o100 != 0
	case inGroup:
		return perm&0o010 != 0
	}
	return perm&0o001 != 0
}

package recorder

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A live recorder listens on an abstract unix socket named after its
// run.db, so `forensic mark` can reach it while bbolt's lock keeps every
// other process out of the file. Abstract sockets leave nothing behind
// when the recorder is killed.

const controlPrefix = "forensic-run:"

// ControlAddress is the control socket of the recorder writing path.
func ControlAddress(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(abs))
	return "@" + controlPrefix + hex.EncodeToString(sum[:16]), nil
}

// ErrNoRecorder: no live recorder answers.
var ErrNoRecorder = errors.New("no running recorder found")

// liveControlAddresses lists the control sockets of live recorders
// (/proc/net/unix shows abstract names with a leading @).
func liveControlAddresses() []string {
	data, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		name := f[len(f)-1]
		if strings.HasPrefix(name, "@"+controlPrefix) && !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out
}

// Marked is a marker a live recorder added.
type Marked struct {
	// Time is the marker's time on the run clock.
	Time int64
	// Since is how far into the recording it is (negative: the recorder
	// did not say).
	Since time.Duration
}

// Mark adds a labelled marker to the live recording writing runPath ("" =
// the only live recorder).
func Mark(runPath, label string) (Marked, error) {
	if strings.ContainsAny(label, "\n\r") || label == "" {
		return Marked{}, errors.New("a marker label is one non-empty line")
	}
	addr, err := markAddress(runPath)
	if err != nil {
		return Marked{}, err
	}
	conn, err := net.DialTimeout("unix", addr, 2*time.Second)
	if err != nil {
		if runPath != "" {
			return Marked{}, fmt.Errorf("%w for %s", ErrNoRecorder, runPath)
		}
		return Marked{}, ErrNoRecorder
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(conn, "mark %s\n", label); err != nil {
		return Marked{}, err
	}
	reply, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return Marked{}, fmt.Errorf("recorder did not answer: %w", err)
	}
	return parseMarkReply(strings.TrimSpace(reply))
}

// markAddress is the control socket for runPath, or the only live one.
func markAddress(runPath string) (string, error) {
	if runPath != "" {
		return ControlAddress(runPath)
	}
	live := liveControlAddresses()
	switch len(live) {
	case 0:
		return "", ErrNoRecorder
	case 1:
		return live[0], nil
	}
	return "", fmt.Errorf("%d recorders are running: name one with --run run.db", len(live))
}

// parseMarkReply reads "ok TIME SINCE" (nanoseconds; an older recorder
// sends only TIME) or "error: why".
func parseMarkReply(reply string) (Marked, error) {
	rest, ok := strings.CutPrefix(reply, "ok ")
	if !ok {
		return Marked{}, fmt.Errorf("recorder: %s", reply)
	}
	f := strings.Fields(rest)
	m := Marked{Since: -1}
	var err error
	if len(f) == 0 || len(f) > 2 {
		return Marked{}, fmt.Errorf("recorder: unexpected answer %q", reply)
	}
	if m.Time, err = strconv.ParseInt(f[0], 10, 64); err != nil {
		return Marked{}, fmt.Errorf("recorder: unexpected answer %q", reply)
	}
	if len(f) == 2 {
		ns, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return Marked{}, fmt.Errorf("recorder: unexpected answer %q", reply)
		}
		m.Since = time.Duration(ns)
	}
	return m, nil
}

// maxRequest bounds a request line (a marker label is short).
const maxRequest = 4096

// control is what the control socket serves, for the peers allow
// accepts: markers for the recording that started at start (run clock),
// snapshots of a flight recording's live segment into its directory, and
// consistent copies of the file being written sent over the connection.
type control struct {
	start    int64
	allow    func(uid uint32) bool
	mark     func(label string) (int64, error)
	snapshot func() (string, error)
	live     func(w io.Writer) error
}

// liveTimeout bounds the sending of a copy of the live segment (at most
// flight.MaxSegmentBytes).
const liveTimeout = time.Minute

// serve answers mark requests until the listener is closed.
func (c control) serve(l net.Listener) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			c.answer(conn)
		}()
	}
}

// answer serves one connection: one request, then the peer's uid
// (SO_PEERCRED, which the kernel fills in: an abstract socket is open to
// every local user) before anything is done.
func (c control) answer(conn net.Conn) {
	line, err := bufio.NewReader(io.LimitReader(conn, maxRequest)).ReadString('\n')
	if err != nil {
		return
	}
	uid, err := peerUID(conn)
	if err != nil {
		fmt.Fprintf(conn, "error: %v\n", err)
		return
	}
	req := strings.TrimRight(line, "\n")
	if !c.allow(uid) {
		verb, _, _ := strings.Cut(req, " ")
		fmt.Fprintf(conn, "error: uid %d may not %s this recording (only root and the user who started it)\n", uid, requestVerb(verb))
		return
	}
	switch label, isMark := strings.CutPrefix(req, "mark "); {
	case isMark && label != "":
		t, err := c.mark(label)
		if err != nil {
			fmt.Fprintf(conn, "error: %v\n", err)
			return
		}
		fmt.Fprintf(conn, "ok %d %d\n", t, t-c.start)
	case req == "snapshot" && c.snapshot != nil:
		path, err := c.snapshot()
		if err != nil {
			fmt.Fprintf(conn, "error: %v\n", oneLineErr(err))
			return
		}
		fmt.Fprintf(conn, "ok %s\n", path)
	case req == "live" && c.live != nil:
		conn.SetDeadline(time.Now().Add(liveTimeout))
		if err := c.live(conn); err != nil {
			fmt.Fprintf(conn, "error: %v\n", oneLineErr(err))
		}
	default:
		fmt.Fprintln(conn, "error: unknown request")
	}
}

// requestVerb names what a request would do, for a refusal.
func requestVerb(req string) string {
	switch req {
	case "snapshot":
		return "snapshot"
	case "live":
		return "copy"
	}
	return "mark"
}

// oneLineErr keeps an error's text on one line.
func oneLineErr(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// peerUID is the uid of the process at the other end of a unix socket.
func peerUID(conn net.Conn) (uint32, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return 0, errors.New("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, fmt.Errorf("peer credentials: %w", credErr)
	}
	return cred.Uid, nil
}

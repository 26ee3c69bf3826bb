package recorder

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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

// Mark adds a labelled marker to the live recording writing runPath ("" =
// the only live recorder) and returns its time on the run clock.
func Mark(runPath, label string) (int64, error) {
	if strings.ContainsAny(label, "\n\r") || label == "" {
		return 0, errors.New("a marker label is one non-empty line")
	}
	var addr string
	if runPath != "" {
		a, err := ControlAddress(runPath)
		if err != nil {
			return 0, err
		}
		addr = a
	} else {
		live := liveControlAddresses()
		switch len(live) {
		case 0:
			return 0, ErrNoRecorder
		case 1:
			addr = live[0]
		default:
			return 0, fmt.Errorf("%d recorders are running: name one with --run run.db", len(live))
		}
	}
	conn, err := net.DialTimeout("unix", addr, 2*time.Second)
	if err != nil {
		if runPath != "" {
			return 0, fmt.Errorf("%w for %s", ErrNoRecorder, runPath)
		}
		return 0, ErrNoRecorder
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(conn, "mark %s\n", label); err != nil {
		return 0, err
	}
	reply, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("recorder did not answer: %w", err)
	}
	reply = strings.TrimSpace(reply)
	if t, ok := strings.CutPrefix(reply, "ok "); ok {
		return strconv.ParseInt(t, 10, 64)
	}
	return 0, fmt.Errorf("recorder: %s", reply)
}

// serveControl answers mark requests until the listener is closed.
func serveControl(l net.Listener, mark func(label string) (int64, error)) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			line, err := bufio.NewReader(conn).ReadString('\n')
			if err != nil {
				return
			}
			label, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "mark ")
			if !ok || label == "" {
				fmt.Fprintln(conn, "error: unknown request")
				return
			}
			t, err := mark(label)
			if err != nil {
				fmt.Fprintf(conn, "error: %v\n", err)
				return
			}
			fmt.Fprintf(conn, "ok %d\n", t)
		}()
	}
}

package recorder

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/retrivium/forensic/flight"
	"github.com/retrivium/forensic/store"
)

// ErrNotFlight: the recording is not in flight mode (a snapshot copies a
// flight recording's live segment).
var ErrNotFlight = errors.New("not a flight recording (snapshots are taken of flight mode's live segment)")

// snapshot writes a consistent copy of the live segment into the flight
// recording's snapshots directory (the oldest beyond flight.MaxSnapshots
// are deleted) and returns its path. Snapshots are taken one at a time.
func (s *Session) snapshot() (string, error) {
	if s.cfg.Flight == nil {
		return "", ErrNotFlight
	}
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	dir := filepath.Join(s.cfg.Output, flight.SnapshotDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	taken := time.Now()
	var tmp *os.File
	var name string
	_, err := s.wr.snapshot(func(seq uint64, _ int64) (io.Writer, error) {
		name = flight.SnapshotName(seq, taken)
		f, err := os.CreateTemp(dir, ".snapshot-*")
		tmp = f
		return f, err
	})
	if tmp == nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing is left to remove
	if err == nil {
		err = tmp.Sync()
	}
	if o := s.cfg.Invoker.Owner(); err == nil && o != nil {
		err = tmp.Chown(o.UID, o.GID)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	path := filepath.Join(s.cfg.Output, name)
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	return path, flight.PruneSnapshots(s.cfg.Output, flight.MaxSnapshots)
}

// sendLive writes a consistent copy of the file being written to w, after
// a line "ok SIZE SEQ TAKEN" (bytes, the live segment's sequence number, 0
// for an ordinary recording, and when the copy was taken, Unix ns).
func (s *Session) sendLive(w io.Writer) error {
	taken := time.Now()
	_, err := s.wr.snapshot(func(seq uint64, size int64) (io.Writer, error) {
		_, err := fmt.Fprintf(w, "ok %d %d %d\n", size, seq, taken.UnixNano())
		return w, err
	})
	return err
}

// snapshotOnSignal takes a snapshot for SIGUSR1 and says where it went.
func (s *Session) snapshotOnSignal() {
	path, err := s.snapshot()
	if err != nil {
		s.cfg.Log.Error(fmt.Sprintf("SIGUSR1: %v", err))
		return
	}
	s.cfg.Log.Info("snapshot of the live segment: "+path, "snapshot", path)
}

// Snapshot asks the recorder writing the flight recording dir for a
// snapshot of its live segment and returns the snapshot's path.
func Snapshot(dir string) (string, error) {
	conn, rd, err := request(dir, "snapshot", 10*time.Minute)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("recorder did not answer: %w", err)
	}
	path, ok := strings.CutPrefix(strings.TrimSpace(line), "ok ")
	if !ok {
		return "", fmt.Errorf("recorder: %s", strings.TrimSpace(line))
	}
	return path, nil
}

// CopyLive asks the recorder writing path (a flight recording's
// directory) for a consistent copy of its live segment and writes it to
// out. It returns what the copy is.
func CopyLive(path string, out io.Writer) (store.LiveCopy, error) {
	conn, rd, err := request(path, "live", liveTimeout)
	if err != nil {
		return store.LiveCopy{}, err
	}
	defer conn.Close()
	line, err := rd.ReadString('\n')
	if err != nil {
		return store.LiveCopy{}, fmt.Errorf("recorder did not answer: %w", err)
	}
	f := strings.Fields(strings.TrimSpace(line))
	if len(f) != 4 || f[0] != "ok" {
		return store.LiveCopy{}, fmt.Errorf("recorder: %s", strings.TrimSpace(line))
	}
	size, err1 := strconv.ParseInt(f[1], 10, 64)
	taken, err2 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil || size < 0 {
		return store.LiveCopy{}, fmt.Errorf("recorder: unexpected answer %q", strings.TrimSpace(line))
	}
	if _, err := io.CopyN(out, rd, size); err != nil {
		return store.LiveCopy{}, fmt.Errorf("copy of the live segment: %w", err)
	}
	return store.LiveCopy{From: store.LiveFromRecorder, Taken: time.Unix(0, taken)}, nil
}

// request dials the recorder writing path and sends one request line.
func request(path, req string, timeout time.Duration) (net.Conn, *bufio.Reader, error) {
	addr, err := ControlAddress(path)
	if err != nil {
		return nil, nil, err
	}
	conn, err := net.DialTimeout("unix", addr, 2*time.Second)
	if err != nil {
		return nil, nil, fmt.Errorf("%w for %s", ErrNoRecorder, path)
	}
	conn.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintf(conn, "%s\n", req); err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, bufio.NewReader(conn), nil
}

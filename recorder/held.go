package recorder

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// A process the recorder holds stopped (at its first mapping of a new
// libcuda, or frozen at a failed call) is continued by the recorder; a
// recorder killed before it continues one would leave it stopped for
// good. So each hold is written, with the process's start time, to a
// small file beside the recording before the recorder acts on it, and
// removed once the process is continued. The next recorder that starts
// on the same output continues the processes a dead recorder left in it,
// when they are still the same processes (same start time) and still
// stopped. The kernel stops the process before the recorder reads the
// hold: between the two (microseconds) a dead recorder leaves nothing on
// record.

// HeldFileName is the held-process file in a flight recording's
// directory; an ordinary recording's is its run.db's path with
// HeldFileSuffix.
const (
	HeldFileName   = "held.json"
	HeldFileSuffix = ".held.json"
)

// heldPath is where the held-process file of a recording into output is.
func heldPath(output string, flight bool) string {
	if flight {
		return filepath.Join(output, HeldFileName)
	}
	return output + HeldFileSuffix
}

// procRef names a process for as long as it lives: a pid is reused, a
// pid and its start time (clock ticks after boot) are not.
type procRef struct {
	PID   uint32 `json:"pid"`
	Start uint64 `json:"start_ticks"`
}

// heldRecord is the file's content.
type heldRecord struct {
	// Recorder is the recorder that holds them: while it lives, another
	// recorder leaves them alone.
	Recorder procRef   `json:"recorder"`
	Held     []procRef `json:"held"`
}

// heldFile keeps the file up to date; the holder and the freezer share
// it (mu).
type heldFile struct {
	mu   sync.Mutex
	path string
	proc string
	rec  heldRecord
}

// newHeldFile returns the held-process file of this recorder at path
// (nothing is written until a process is held).
func newHeldFile(path, proc string) *heldFile {
	self, _ := procStart(proc, uint32(os.Getpid()))
	return &heldFile{path: path, proc: proc, rec: heldRecord{Recorder: procRef{uint32(os.Getpid()), self}}}
}

// hold records pid as held before the recorder acts on its stop.
func (f *heldFile) hold(pid uint32) error {
	if f == nil {
		return nil
	}
	start, err := procStart(f.proc, pid)
	if err != nil {
		return err // gone already: nothing to continue later
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rec.Held = append(f.rec.Held, procRef{pid, start})
	return f.writeLocked()
}

// release drops pid once it is continued.
func (f *heldFile) release(pid uint32) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	kept := f.rec.Held[:0]
	for _, r := range f.rec.Held {
		if r.PID != pid {
			kept = append(kept, r)
		}
	}
	f.rec.Held = kept
	return f.writeLocked()
}

// writeLocked replaces the file (renamed into place: a reader never sees
// half of it), or removes it when nothing is held. A process killed
// leaves what it wrote in the page cache: no sync is needed for the case
// this file exists for.
func (f *heldFile) writeLocked() error {
	if len(f.rec.Held) == 0 {
		if err := os.Remove(f.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	data, err := json.Marshal(f.rec)
	if err != nil {
		return err
	}
	tmp := f.path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, f.path)
}

// resumeLeftHeld continues the processes a recorder that is gone left
// stopped in the held-process file at path, and removes the file. A
// process whose pid now names another process (another start time), or
// that is no longer stopped, is not touched. Each process continued, and
// each that could not be, is one line on log. A file whose recorder still
// runs is left alone.
func resumeLeftHeld(path, proc string, log *slog.Logger) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var rec heldRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		log.Error(fmt.Sprintf("%s is not a held-process file (%v): removed", path, err))
		return os.Remove(path)
	}
	if alive(proc, rec.Recorder) {
		return nil
	}
	var errs []error
	for _, r := range rec.Held {
		switch {
		case !alive(proc, r):
			log.Info(fmt.Sprintf("pid %d, held by a recorder that ended (pid %d), is gone or another process now: not touched", r.PID, rec.Recorder.PID))
		case !stopped(proc, r.PID):
			log.Info(fmt.Sprintf("pid %d, held by a recorder that ended (pid %d), runs already", r.PID, rec.Recorder.PID))
		default:
			if err := syscall.Kill(int(r.PID), syscall.SIGCONT); err != nil {
				log.Error(fmt.Sprintf("pid %d (%s), held by a recorder that ended (pid %d), could not be continued: %v (kill -CONT %d)",
					r.PID, readComm(proc, r.PID), rec.Recorder.PID, err, r.PID))
				errs = append(errs, fmt.Errorf("continue pid %d: %w", r.PID, err))
				continue
			}
			log.Info(fmt.Sprintf("continued pid %d (%s), left stopped by a recorder that ended without continuing it (pid %d)",
				r.PID, readComm(proc, r.PID), rec.Recorder.PID))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...) // the file stays for the next try
	}
	return os.Remove(path)
}

// alive reports whether r still names a running process.
func alive(proc string, r procRef) bool {
	start, err := procStart(proc, r.PID)
	return err == nil && start == r.Start
}

// statFields returns /proc/PID/stat's fields after the command name
// (the state is the first).
func statFields(proc string, pid uint32) ([]string, error) {
	stat, err := os.ReadFile(filepath.Join(proc, strconv.FormatUint(uint64(pid), 10), "stat"))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return nil, fmt.Errorf("pid %d: unreadable stat", pid)
	}
	return strings.Fields(string(stat[i+1:])), nil
}

// procStart reads a process's start time (stat field 22).
func procStart(proc string, pid uint32) (uint64, error) {
	f, err := statFields(proc, pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 20 {
		return 0, fmt.Errorf("pid %d: short stat", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// stillHeld reports whether a process sent SIGSTOP is stopped (or in a
// tracer's stop), or about to be (the signal pending). The state is read
// again after the pending signals: a process that takes the signal
// between the two reads shows neither in the first.
func stillHeld(proc string, pid uint32) bool {
	return notRunning(proc, pid) || stopPending(proc, pid) || notRunning(proc, pid)
}

// notRunning reports whether a process is stopped, by a signal (T) or a
// tracer (t).
func notRunning(proc string, pid uint32) bool {
	f, err := statFields(proc, pid)
	return err == nil && len(f) > 0 && (f[0] == "T" || f[0] == "t")
}

// stopPending reports whether SIGSTOP is pending for a process or one of
// its threads (/proc/PID/status: ShdPnd, SigPnd).
func stopPending(proc string, pid uint32) bool {
	status, err := os.ReadFile(filepath.Join(proc, strconv.FormatUint(uint64(pid), 10), "status"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(status), "\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok || (name != "ShdPnd" && name != "SigPnd") {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(val), 16, 64)
		if err == nil && mask&(1<<(uint(syscall.SIGSTOP)-1)) != 0 {
			return true
		}
	}
	return false
}

// stopped reports whether a process is stopped by a signal (state T).
func stopped(proc string, pid uint32) bool {
	f, err := statFields(proc, pid)
	return err == nil && len(f) > 0 && f[0] == "T"
}

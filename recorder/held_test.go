package recorder

import (
	"bytes"
	"errors"
	"github.com/retrivium/forensic/logging"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Each capability recording cannot do without is one line of the error;
// the others are one warning line each; CAP_SYS_ADMIN stands in for
// CAP_BPF and CAP_PERFMON.
func TestCheckCapabilities(t *testing.T) {
	all := []uint{unix.CAP_BPF, unix.CAP_PERFMON, unix.CAP_KILL, unix.CAP_SYS_ADMIN, unix.CAP_SYS_PTRACE, unix.CAP_DAC_READ_SEARCH, unix.CAP_SYSLOG}
	without := func(drop ...uint) func(uint) bool {
		return func(c uint) bool {
			for _, d := range drop {
				if c == d {
					return false
				}
			}
			for _, a := range all {
				if c == a {
					return true
				}
			}
			return false
		}
	}
	tests := []struct {
		name      string
		has       func(uint) bool
		others    bool
		errLines  []string
		warnLines []string
	}{
		{"everything", without(), true, nil, nil},
		{"no CAP_KILL under --all: a held process would stay stopped", without(unix.CAP_KILL), true,
			[]string{"no CAP_KILL: needed to continue (SIGCONT)"}, nil},
		{"no CAP_KILL for one's own workload: a warning", without(unix.CAP_KILL), false,
			nil, []string{"no CAP_KILL (continue (SIGCONT)"}},
		{"CAP_SYS_ADMIN stands in for BPF and PERFMON", without(unix.CAP_BPF, unix.CAP_PERFMON), true, nil, nil},
		{"neither BPF nor SYS_ADMIN", without(unix.CAP_BPF, unix.CAP_SYS_ADMIN), true,
			[]string{"no CAP_BPF: needed to load the probes"}, []string{"no CAP_SYS_ADMIN (multi-uprobe"}},
		{"only warnings", without(unix.CAP_SYSLOG, unix.CAP_SYS_PTRACE), true, nil,
			[]string{"no CAP_SYS_PTRACE (", "no CAP_SYSLOG ("}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			warn, err := CheckCapabilities(tt.has, tt.others)
			if (err != nil) != (len(tt.errLines) > 0) || (err != nil && !errors.Is(err, ErrCapabilities)) {
				t.Fatalf("err = %v, want lines %q", err, tt.errLines)
			}
			if err != nil {
				lines := strings.Split(err.Error(), "\n")
				if len(lines) != 1+len(tt.errLines) {
					t.Errorf("error %q: want a first line and one line per missing capability", err)
				}
				for i, want := range tt.errLines {
					if !strings.Contains(lines[i+1], want) {
						t.Errorf("line %d %q, want %q", i+1, lines[i+1], want)
					}
				}
			}
			if len(warn) != len(tt.warnLines) {
				t.Fatalf("warnings %q, want %q", warn, tt.warnLines)
			}
			for i, want := range tt.warnLines {
				if !strings.HasPrefix(warn[i], want) {
					t.Errorf("warning %q, want %q", warn[i], want)
				}
			}
		})
	}
}

// stoppedChild starts a process and stops it, as a hold does.
func stoppedChild(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	syscall.Kill(cmd.Process.Pid, syscall.SIGSTOP)
	for i := 0; i < 100 && !stopped("/proc", uint32(cmd.Process.Pid)); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	return cmd
}

// A held process left in the file by a recorder that is gone runs again
// at the next start; one whose pid names another process now, or whose
// recorder still runs, is not touched.
func TestResumeLeftHeld(t *testing.T) {
	tests := []struct {
		name string
		// edit makes the record's case from a true one.
		edit      func(r *heldRecord)
		continued bool
		fileGone  bool
		said      string
	}{
		{"left by a dead recorder", func(r *heldRecord) { r.Recorder = procRef{PID: r.Recorder.PID, Start: 1} }, true, true, "continued pid"},
		{"the pid is another process now", func(r *heldRecord) {
			r.Recorder.Start = 1
			r.Held[0].Start++
		}, false, true, "another process now"},
		{"its recorder still runs", func(r *heldRecord) {}, false, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			child := stoppedChild(t)
			pid := uint32(child.Process.Pid)
			path := filepath.Join(t.TempDir(), HeldFileName)
			f := newHeldFile(path, "/proc")
			if err := f.hold(pid); err != nil {
				t.Fatal(err)
			}
			tt.edit(&f.rec)
			f.mu.Lock()
			f.writeLocked()
			f.mu.Unlock()
			var log bytes.Buffer
			if err := resumeLeftHeld(path, "/proc", logging.New(&log, logging.Options{Format: logging.Text})); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
			if got := !stopped("/proc", pid); got != tt.continued {
				t.Errorf("running %v, want %v; said %q", got, tt.continued, log.String())
			}
			if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) != tt.fileGone {
				t.Errorf("file gone: %v, want %v", err, tt.fileGone)
			}
			if !strings.Contains(log.String(), tt.said) || (tt.said == "" && log.Len() > 0) {
				t.Errorf("said %q, want %q", log.String(), tt.said)
			}
		})
	}
}

// The file names a held process until it is released, and is gone when
// nothing is held.
func TestHeldFileFollowsHolds(t *testing.T) {
	path := filepath.Join(t.TempDir(), HeldFileName)
	f := newHeldFile(path, "/proc")
	self := uint32(os.Getpid())
	if err := f.hold(self); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(data), `"held":[{"pid":`) {
		t.Fatalf("held file %q %v, want the pid on record", data, err)
	}
	if err := f.release(self); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("file still there with nothing held: %v", err)
	}
}

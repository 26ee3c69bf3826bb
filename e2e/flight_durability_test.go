package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrivium/forensic/flight"
	"github.com/retrivium/forensic/store"
)

// smallDisk mounts a tmpfs of size (like "20m") in the world's directory,
// unmounted when the test ends.
func (w *world) smallDisk(size string) string {
	w.t.Helper()
	mnt := filepath.Join(w.dir, "small")
	os.MkdirAll(mnt, 0o755)
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size="+size); err != nil {
		w.t.Skipf("mount tmpfs: %v", err)
	}
	w.t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	return mnt
}

// recordingProc is a `forensic record` running in the background.
type recordingProc struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
}

// logText is what the recorder wrote so far.
func (rp *recordingProc) logText() string {
	data, _ := os.ReadFile(rp.logPath)
	return string(data)
}

// startRecording starts `forensic record args...` in dir with the world's
// environment plus env.
func (w *world) startRecording(dir string, env []string, args ...string) *recordingProc {
	w.t.Helper()
	// A file, not a pipe: a workload left stopped by a killed recorder
	// holds what it inherited, and a pipe would keep Wait waiting.
	logf, err := os.CreateTemp(w.dir, "recorder-*.log")
	if err != nil {
		w.t.Fatal(err)
	}
	defer logf.Close()
	rp := &recordingProc{cmd: binCommand(bin{w: w, env: env}, args...), logPath: logf.Name(), done: make(chan struct{})}
	rp.cmd.Dir = dir
	rp.cmd.Stdout, rp.cmd.Stderr = logf, logf
	if err := rp.cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() { rp.cmd.Wait(); close(rp.done) }()
	w.t.Cleanup(func() { rp.cmd.Process.Kill(); <-rp.done })
	return rp
}

// wait waits up to d for the recorder to exit and returns its status
// (-1: still running).
func (rp *recordingProc) wait(d time.Duration) int {
	select {
	case <-rp.done:
		return rp.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		return -1
	}
}

// failuresIn returns the failed calls of a flight recording whose return
// lies in [from, to].
func failuresIn(t *testing.T, dir string, from, to int64) int {
	t.Helper()
	set, err := flight.Open(dir)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	defer set.Close()
	n := 0
	set.Failures(func(e *store.Event) error {
		if e.End >= from && e.End <= to {
			n++
		}
		return nil
	})
	return n
}

// A filesystem smaller than --max-size fills while the node keeps
// failing: the recorder deletes the oldest history, lowers its bound,
// says so at error level and goes on; the failure after the disk filled
// is in the recording, the first one too (its window, quiet and small,
// is kept while the busier history around it goes: both windows fit in
// the lowered bound beside the live segment), and the recorder ends as
// asked, with its workload's status.
func TestFlightDiskFullDegrades(t *testing.T) {
	w := newWorld(t)
	dir := filepath.Join(w.smallDisk("20m"), "flight")
	work := t.TempDir()
	script := strings.Join([]string{
		`"$S" 'clock; init; use 0; alloc 100G; clock' > f1.txt 2>&1`,
		`sleep 2`, // the first failure's window, quiet: small segments
		`i=0; while [ $i -lt 8 ]; do "$S" 'init; use 0; stress 150000' > /dev/null; i=$((i+1)); done`,
		// The later failure's window quiet too: right after the stress,
		// its keep-before would hold as many busy segments as the machine
		// writes in a second, on a fast one more than the lowered bound,
		// and the first window would rightly be cut to make room.
		`sleep 3`,
		`"$S" 'clock; init; use 0; alloc 300G; clock' > f2.txt 2>&1`,
		`sleep 2`,
	}, "\n")
	rp := w.startRecording(work, []string{"S=" + simwork}, "record", "--flight", "-o", dir, "--max-size", "64MiB",
		"--keep-before", "1s", "--keep-after", "1s", "--segment-age", "1s", "--libcuda", simCUDA, "--libnvidia-ml", simNVML,
		"--", "/bin/sh", "-c", script)
	code := rp.wait(5 * time.Minute)
	out := rp.logText()
	if code != 0 {
		t.Fatalf("exit %d, want the workload's 0: the recording degrades, it does not fail:\n%s", code, out)
	}
	if !strings.Contains(out, "ERROR forensic: "+dir+": the filesystem filled before --max-size 64MiB") {
		t.Errorf("no error-level line says the filesystem filled:\n%s", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "ERROR ") {
			t.Log(l)
		}
	}
	if strings.Contains(out, "recording stopped") {
		t.Errorf("the recording stopped:\n%s", out)
	}
	x, err := flight.ReadIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	if x.DiskFull == 0 || x.DiskBound == 0 || x.Bound() >= x.MaxBytes || x.Bound() > 20<<20 {
		t.Errorf("index: %d disk-full events, bound %d of %d; want the bound lowered to what the filesystem holds", x.DiskFull, x.Bound(), x.MaxBytes)
	}
	f1, f2 := clockLines(filepath.Join(work, "f1.txt")), clockLines(filepath.Join(work, "f2.txt"))
	if len(f1) != 2 || len(f2) != 2 {
		t.Fatalf("the workload's failures did not run: %v %v", f1, f2)
	}
	if n := failuresIn(t, dir, f2[0], f2[1]); n != 1 {
		t.Errorf("%d failures recorded after the disk filled, want the one made then", n)
	}
	if n := failuresIn(t, dir, f1[0], f1[1]); n != 1 {
		t.Errorf("%d first failures recorded, want it kept: its window goes last", n)
	}
	rep, _ := analyzeDir(t, dir)
	firstIn(t, "after the disk filled", rep, f1)
	t.Logf("bound lowered to %d bytes after %d disk-full events; %d segments, %d dropped ranges", x.Bound(), x.DiskFull, len(x.Segments), len(x.Dropped))
}

// When not even the live segment fits, the recorder stops with one
// error line and a non-zero status: it was not asked to stop.
func TestFlightNothingFitsExitsNonZero(t *testing.T) {
	w := newWorld(t)
	dir := filepath.Join(w.smallDisk("6m"), "flight")
	rp := w.startRecording(w.dir, nil, "record", "--all", "--flight", "-o", dir, "--disk-reserve", "1MiB",
		"--libcuda", simCUDA, "--libnvidia-ml", simNVML)
	if !waitFor(20*time.Second, func() bool { return strings.Contains(rp.logText(), "recording every process") }) {
		t.Fatalf("the recorder did not start:\n%s", rp.logText())
	}
	for i := 0; i < 10 && rp.wait(0) < 0; i++ {
		cmd := exec.Command(simwork, "init; use 0; stress 150000")
		cmd.Env = w.environ()
		cmd.Run()
	}
	code := rp.wait(30 * time.Second)
	out := rp.logText()
	if code != 1 {
		t.Fatalf("exit %d, want 1 once nothing fits:\n%s", code, out)
	}
	if !strings.Contains(out, flight.ErrNoRoom.Error()) {
		t.Errorf("no line says not even the live segment fits:\n%s", out)
	}
	set, err := flight.Open(dir)
	if err != nil {
		t.Fatalf("the recording is not readable: %v", err)
	}
	stop, _ := set.Stop()
	set.Close()
	if stop == nil || stop.Reason != "disk-full" {
		t.Errorf("stop record %+v, want reason disk-full", stop)
	}
}

// procState reads a process's state letter (R, S, T, ...; "" when gone).
func procState(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(data, ')')
	if f := strings.Fields(string(data[i+1:])); i >= 0 && len(f) > 0 {
		return f[0]
	}
	return ""
}

// heldPIDs reads the pids a recorder has on record as held.
func heldPIDs(path string) []int {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var rec struct {
		Held []struct {
			PID int `json:"pid"`
		} `json:"held"`
	}
	json.Unmarshal(data, &rec)
	var out []int
	for _, h := range rec.Held {
		out = append(out, h.PID)
	}
	return out
}

// A recorder killed (SIGKILL, as an OOM kill would) while it holds a
// process at its first mapping of libcuda leaves it stopped; the next
// recorder started on the same directory continues it within a second.
// FORENSIC_TEST_HOLD_DELAY lengthens the hold so the kill lands in it;
// without --libcuda the library is attached when the workload maps it,
// and the workload is held meanwhile.
func TestFlightKilledWhileHoldingResumes(t *testing.T) {
	w := newWorld(t)
	dir := filepath.Join(w.dir, "flight")
	held := filepath.Join(dir, "held.json")
	done := filepath.Join(w.dir, "workload-done")
	args := []string{"record", "--flight", "-o", dir, "--keep-previous", "--libnvidia-ml", simNVML, "--"}
	first := w.startRecording(w.dir, []string{"FORENSIC_TEST_HOLD_DELAY=60s"},
		append(args, simwork, "init; use 0; alloc 1M; free; touch "+done)...)
	var pid int
	if !waitFor(30*time.Second, func() bool {
		if p := heldPIDs(held); len(p) == 1 {
			pid = p[0]
		}
		return pid != 0 && procState(pid) == "T"
	}) {
		t.Fatalf("the workload was not held (pids on record %v):\n%s", heldPIDs(held), first.logText())
	}
	first.cmd.Process.Signal(syscall.SIGKILL)
	<-first.done
	time.Sleep(300 * time.Millisecond)
	if s := procState(pid); s != "T" {
		t.Fatalf("after the kill the workload is %q: the test needs it left stopped", s)
	}
	start := time.Now()
	second := w.startRecording(w.dir, nil, append(args, simwork, "init; use 0; alloc 1M; free")...)
	if !waitFor(10*time.Second, func() bool { return procState(pid) != "T" }) {
		t.Fatalf("the workload is still stopped after the restart:\n%s", second.logText())
	}
	took := time.Since(start)
	if took > time.Second {
		t.Errorf("the workload ran again %v after the restart, want within a second", took)
	}
	if !waitFor(30*time.Second, func() bool { return exists(done) }) {
		t.Errorf("the workload did not finish after it was continued")
	}
	if code := second.wait(60 * time.Second); code != 0 {
		t.Errorf("the restarted recorder: exit %d:\n%s", code, second.logText())
	}
	if !strings.Contains(second.logText(), fmt.Sprintf("continued pid %d", pid)) {
		t.Errorf("the restarted recorder does not say it continued pid %d:\n%s", pid, second.logText())
	}
	if exists(held) {
		t.Errorf("held.json is still there after the held process was continued")
	}
	t.Logf("continued %v after the restart", took)
}

// Three restarts with --keep-previous: every earlier recording is kept,
// newest first, and each still reads with its own failure; each restart
// says what it moved.
func TestFlightRestartsKeepEveryRecording(t *testing.T) {
	w := newWorld(t)
	dir := filepath.Join(w.dir, "flight")
	sizes := []string{"100G", "200G", "300G", "400G"}
	var ids []string
	for i, size := range sizes {
		cmd := binCommand(bin{w: w}, "record", "--flight", "-o", dir, "--keep-previous", "--libcuda", simCUDA,
			"--libnvidia-ml", simNVML, "--", simwork, "init; use 0; alloc 1M; alloc "+size)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		if i > 0 && !strings.Contains(string(out), "kept the recording found as "+filepath.Join(dir, flight.PreviousDir)) {
			t.Errorf("restart %d does not say what it kept:\n%s", i, out)
		}
		x, err := flight.ReadIndex(dir)
		if err != nil {
			t.Fatalf("recording %d: %v\n%s", i, err, out)
		}
		ids = append(ids, x.ID)
	}
	prev := flight.Previous(dir)
	if len(prev) != 3 {
		t.Fatalf("earlier recordings %v, want 3", prev)
	}
	// Newest first: previous holds the third recording, previous.3 the first.
	for i, d := range append([]string{dir}, prev...) {
		k := len(sizes) - 1 - i
		x, err := flight.ReadIndex(d)
		if err != nil || x.ID != ids[k] {
			t.Errorf("%s: %v, want recording %d (%s)", d, err, k, ids[k])
			continue
		}
		rep, _ := analyzeDir(t, d)
		if rep.Run.Ended != "clean" || rep.FirstFailure == nil || rep.FirstFailure.Symbol != "cuMemAlloc_v2" {
			t.Errorf("%s: ended %q, first failure %+v: want a clean recording of the failed allocation", d, rep.Run.Ended, rep.FirstFailure)
		}
	}
}

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrivium/forensic/internal/cgroup"
	"github.com/retrivium/forensic/store"
)

// testCgroup creates a cgroup v2 cgroup under parent for one test and
// removes it at its end (after the test's processes, whose cleanups run
// first when they are started later).
func testCgroup(t *testing.T, parent, name string) string {
	t.Helper()
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove cgroup: %v", err)
		}
	})
	return dir
}

// startIn runs simwork's script in cgroup dir: a shell moves itself there
// (cgroup.procs) and execs the workload, so the workload's first
// instruction already runs in the cgroup.
func (w *world) startIn(dir, script string) *exec.Cmd {
	w.t.Helper()
	cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$2" "$3"`, "sh", dir, simwork, script)
	cmd.Env = w.environ()
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// runIn runs simwork's script in cgroup dir to its end.
func (w *world) runIn(dir, script string) int {
	w.t.Helper()
	cmd := w.startIn(dir, script)
	waitExit(w.t, cmd, 20*time.Second)
	if !cmd.ProcessState.Success() {
		w.t.Fatalf("workload in %s: %v", dir, cmd.ProcessState)
	}
	return cmd.Process.Pid
}

// --all --cgroup A records A's processes, those of a cgroup made below A
// after the start too, and nothing of cgroup B: B's processes are not
// held at their libcuda mapping, not recorded, and their calls are not
// even seen by the probes (the stop record's count of calls seen is A's
// alone), whether B's process was running before the start or started
// after it, before or after the probes went on the library.
func TestAllScopedToCgroup(t *testing.T) {
	w := newWorld(t)
	mount, err := cgroup.Mount("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	tag := strconv.Itoa(os.Getpid())
	a := testCgroup(t, mount, "forensic-test-a-"+tag)
	b := testCgroup(t, mount, "forensic-test-b-"+tag)

	busy := w.startIn(b, `init; use 0; repeat 1000000 { alloc 1M; free; sleep 5 }`)
	if !waitFor(5*time.Second, func() bool { return mapsFile(busy.Process.Pid, simCUDA) }) {
		t.Fatal("B's busy process did not map the simulated libcuda")
	}
	// A relative path names a cgroup under the cgroup v2 mount.
	rec, db, stderr := w.startRecorder("--all", "--cgroup", filepath.Base(a))
	bBefore := w.runIn(b, `init; use 0; alloc 2M; free`)
	aHeld := w.runIn(a, `init; use 0; alloc 3M; free`)
	below := testCgroup(t, a, "below")
	aBelow := w.runIn(below, `init; use 0; alloc 4M; free`)
	bAfter := w.runIn(b, `init; use 0; alloc 5M; free`)
	time.Sleep(50 * time.Millisecond) // the busy process calls through the attached file meanwhile
	if st := procState(busy.Process.Pid); st != "S" && st != "R" {
		t.Errorf("B's busy process is in state %q, want running or sleeping", st)
	}
	rec.Process.Signal(syscall.SIGINT)
	waitExit(t, rec, 20*time.Second)

	if !strings.Contains(stderr.String(), "--all limited to cgroup "+a) {
		t.Errorf("the recorder did not say it is scoped to %s:\n%s", a, stderr)
	}
	_, evs, stop := stored(t, db)
	if stop == nil {
		t.Fatalf("no stop record; recorder said:\n%s", stderr)
	}
	allocs := map[uint32]uint64{}
	for _, e := range evs {
		if e.Name == "cuMemAlloc_v2" {
			allocs[e.PID] = e.Size
		}
	}
	want := map[uint32]uint64{uint32(aHeld): 3 << 20, uint32(aBelow): 4 << 20}
	for pid, size := range want {
		if allocs[pid] != size {
			t.Errorf("pid %d of A: allocation %d, want %d", pid, allocs[pid], size)
		}
	}
	for pid := range allocs {
		if want[pid] == 0 {
			t.Errorf("pid %d is not A's (B's: busy %d, before %d, after %d) and was recorded", pid, busy.Process.Pid, bBefore, bAfter)
		}
	}
	made := uint64(0)
	w.callLog(func(pid uint32, _ string, n int) {
		if want[pid] != 0 {
			made += uint64(n)
		}
	})
	if stop.Stats.Calls != made || stop.Stats.Events != made {
		t.Errorf("calls seen %d, stored %d; A's processes made %d (B's calls must not reach the ring)",
			stop.Stats.Calls, stop.Stats.Events, made)
	}
	if stop.Hold.Count != 1 {
		t.Errorf("%d holds, want 1 (A's first process; B's are never held)", stop.Hold.Count)
	}
	checkMappedBy(t, db, uint32(aHeld))
	rep, _ := analyzeJSON(t, db)
	for _, p := range rep.Processes {
		if want[p.PID] == 0 {
			t.Errorf("the analysis lists process %d (%s), not one of A's", p.PID, p.Exe)
		}
	}
}

// checkMappedBy asserts that every attached libcuda was attached for pid.
func checkMappedBy(t *testing.T, db string, pid uint32) {
	t.Helper()
	r, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	libs, err := r.Libraries()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) == 0 {
		t.Fatal("no libcuda attached")
	}
	for _, l := range libs {
		if l.MappedBy != pid {
			t.Errorf("%s attached for pid %d, want %d", l.Path, l.MappedBy, pid)
		}
	}
}

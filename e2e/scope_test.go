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
	checkMappedBy(t, db, uint32(aHeld), a)
	rep, _ := analyzeJSON(t, db)
	if len(rep.Run.Scope) != 1 || rep.Run.Scope[0] != a {
		t.Errorf("analyze --json run.scope %q, want [%s]", rep.Run.Scope, a)
	}
	text, err := exec.Command(binPath, "analyze", db).Output()
	if err != nil || !strings.Contains(string(text), "all in "+a) {
		t.Errorf("analyze does not say the run was limited to %s (%v):\n%s", a, err, text)
	}
	for _, p := range rep.Processes {
		if want[p.PID] == 0 {
			t.Errorf("the analysis lists process %d (%s), not one of A's", p.PID, p.Exe)
		}
	}
}

// checkMappedBy asserts that the run record names the scope and every
// attached libcuda was attached for pid.
func checkMappedBy(t *testing.T, db string, pid uint32, scope string) {
	t.Helper()
	r, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if run := r.Run(); run.Mode != "all" || len(run.Scope) != 1 || run.Scope[0] != scope {
		t.Errorf("run record: mode %q scope %q, want all limited to %s", run.Mode, run.Scope, scope)
	}
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

// --all --pod NAMESPACE/NAME finds the pod's cgroup through a running
// process of it (a kubelet's layout: a cgroup named pod<UID> under one
// whose path says kubepods; the name and namespace from the downward
// API's variables) and records that pod's processes only, the one running
// at the start and one started later; a pod with no process on the node
// is a one-line error.
func TestAllScopedToPod(t *testing.T) {
	w := newWorld(t)
	mount, err := cgroup.Mount("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	kubepods := testCgroup(t, mount, "forensic-test-kubepods-"+strconv.Itoa(os.Getpid()))
	pod := testCgroup(t, kubepods, "pod1b4e28ba-2fa1-11d2-883f-0016d3cca427")
	other := testCgroup(t, kubepods, "pod6fa459ea-ee8a-3ca4-894e-db77e160355e")
	w.env = append(w.env, "POD_NAMESPACE=ml", "POD_NAME=trainer-0")
	running := w.startIn(pod, `init; use 0; alloc 1M; wait-signal; alloc 2M; free-all`)
	if !waitFor(5*time.Second, func() bool { return mapsFile(running.Process.Pid, simCUDA) }) {
		t.Fatal("the pod's process did not map the simulated libcuda")
	}
	w.env = append(w.env, "POD_NAME=trainer-1") // the later value wins
	otherBusy := w.startIn(other, `init; use 0; repeat 1000000 { alloc 1M; free; sleep 5 }`)

	missing := w.record([]string{"--all", "--pod", "ml/nosuch", "--duration", "1s"})
	lines := strings.Split(strings.TrimSpace(missing.stderr), "\n")
	if missing.code == 0 || len(lines) != 1 || !strings.Contains(lines[0], "--pod ml/nosuch: no process of that pod") {
		t.Errorf("a pod not on the node: exit %d, stderr %q; want one line and a failure", missing.code, missing.stderr)
	}

	rec, db, stderr := w.startRecorder("--all", "--pod", "ml/trainer-0", "--libcuda", simCUDA)
	w.env = w.env[:len(w.env)-1] // trainer-0 again
	later := w.runIn(pod, `init; use 0; alloc 3M; free`)
	running.Process.Signal(syscall.SIGUSR1)
	waitExit(t, running, 20*time.Second)
	rec.Process.Signal(syscall.SIGINT)
	waitExit(t, rec, 20*time.Second)

	_, evs, stop := stored(t, db)
	if stop == nil {
		t.Fatalf("no stop record; recorder said:\n%s", stderr)
	}
	if !strings.Contains(stderr.String(), "--all limited to cgroup "+pod) {
		t.Errorf("the recorder did not say it is scoped to %s:\n%s", pod, stderr)
	}
	allocs := map[uint32]uint64{}
	for _, e := range evs {
		if e.Name == "cuMemAlloc_v2" {
			allocs[e.PID] += e.Size
		}
	}
	if allocs[uint32(running.Process.Pid)] != 2<<20 || allocs[uint32(later)] != 3<<20 {
		t.Errorf("allocations %v; want 2 MiB by the pod's running process %d (after the start) and 3 MiB by %d",
			allocs, running.Process.Pid, later)
	}
	if n := allocs[uint32(otherBusy.Process.Pid)]; n != 0 || len(allocs) != 2 {
		t.Errorf("allocations %v: the other pod's process %d was recorded", allocs, otherBusy.Process.Pid)
	}
}

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrivium/forensic/report"
)

// Recording every process that loads libcuda (record --all and workers
// started at once without --libcuda): each is attached and held while
// the probes go in, and none is lost.

// --all records unrelated processes: one running before the recorder, one
// started after it through a libcuda file the recorder had not seen (held
// at its mapping until attached), the way a container brings its own
// driver library.
func TestRecordAll(t *testing.T) {
	w := newWorld(t)
	other := filepath.Join(w.dir, "container", "libcuda.so.1")
	os.MkdirAll(filepath.Dir(other), 0o755)
	data, err := os.ReadFile(simCUDA)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(other, data, 0o755)

	a := w.startWorkload(`init; use 0; wait-signal; alloc 5M; free`)
	waitFor(5*time.Second, func() bool { return exists(w.state) })
	time.Sleep(200 * time.Millisecond)
	rec, db, stderr := w.startRecorder("--all")
	bcmd := exec.Command(simwork, `init; use 0; sleep 2500; alloc 7M; free`)
	bcmd.Env = w.environ("SIMWORK_LIBCUDA=" + other)
	if err := bcmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.Process.Signal(syscall.SIGUSR1)
	waitExit(t, a, 20*time.Second)
	waitExit(t, bcmd, 20*time.Second)
	rec.Process.Signal(syscall.SIGINT)
	waitExit(t, rec, 20*time.Second)

	_, evs, stop := stored(t, db)
	if stop == nil {
		t.Fatalf("no stop record; recorder said:\n%s", stderr)
	}
	got := map[uint32]uint64{}
	for _, e := range evs {
		if e.Name == "cuMemAlloc_v2" {
			got[e.PID] = e.Size
		}
	}
	if got[uint32(a.Process.Pid)] != 5<<20 {
		t.Errorf("process started before the recorder: allocation %d, want 5 MiB", got[uint32(a.Process.Pid)])
	}
	if got[uint32(bcmd.Process.Pid)] != 7<<20 {
		t.Errorf("process started after, through another libcuda file: allocation %d, want 7 MiB", got[uint32(bcmd.Process.Pid)])
	}
	rep, _ := analyzeJSON(t, db)
	paths := map[string]bool{}
	for _, l := range rep.Coverage {
		paths[l.Path] = true
	}
	if !paths[other] {
		t.Errorf("coverage lists %v, want the late library %s too", paths, other)
	}
}

// A launcher that starts many workers at once (a shell loop, as torchrun
// or an inference server does), recorded without --libcuda: the first
// worker to map libcuda is held while the probes go in, and so is every
// worker that maps it meanwhile. Every call of every worker is in the
// record, nothing is counted lost, and no worker is said to have started
// before the recording. Ten times, since the window is a race.
func TestWorkersStartedAtOnceAllHeld(t *testing.T) {
	verdictVaries(t, "ten recordings of a race the test hunts; the test checks every call of each in full, and a run that loses the race fails before the later recordings exist")
	w := newWorld(t)
	const workers = 8
	loop := fmt.Sprintf(`for i in $(seq %d); do "$0" "$1" & done; wait`, workers)
	script := `init; use 0; alloc 16M; alloc 16M; alloc-host 1M; free-all`
	for run := 0; run < 10; run++ {
		os.Remove(w.calls)
		os.Remove(w.state)
		res := w.recordAs(foundAtMapping, nil, "sh", "-c", loop, simwork, script)
		if res.code != 0 {
			t.Fatalf("run %d: exit %d: %s", run, res.code, res.stderr)
		}
		made := w.callsByPID()
		if len(made) != workers {
			t.Fatalf("run %d: %d workers logged their calls, want %d", run, len(made), workers)
		}
		_, evs, stop := stored(t, res.db)
		got := map[uint32]int{}
		for _, e := range evs {
			if e.Depth == 0 {
				got[e.PID]++
			}
		}
		for pid, n := range made {
			if got[pid] != n {
				t.Errorf("run %d: pid %d made %d calls, %d recorded", run, pid, n, got[pid])
			}
		}
		w.checkComplete(res.db)
		if stop.Stats.LostHolds != 0 {
			t.Errorf("run %d: %d lost holds", run, stop.Stats.LostHolds)
		}
		rep, _ := analyzeJSON(t, res.db)
		for _, p := range rep.Processes {
			if p.AttachedLate {
				t.Errorf("run %d: pid %d marked attached late; every worker started after the recorder", run, p.PID)
			}
		}
		if rep.Attribution != report.AttrNone {
			t.Errorf("run %d: attribution %s, want none: %s", run, rep.Attribution, rep.Verdict)
		}
		if t.Failed() {
			t.Fatalf("run %d: recorder said:\n%s", run, res.stderr)
		}
		t.Logf("run %d: %d holds, max %v", run, stop.Hold.Count, time.Duration(stop.Hold.Max))
	}
}

// --all started while a process that holds GPU memory sits idle (it makes
// no call while recording): it has a process record, marked as running
// before the recording, its end is followed, and the failure of another
// process that ran out of room names it.
func TestAllRecordsIdleHolder(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=4G")
	idle := w.startWorkload(`init; use 0; alloc 3G; wait-signal; sleep 100000`)
	if !waitFor(5*time.Second, func() bool { return mapsFile(idle.Process.Pid, simCUDA) }) {
		t.Fatal("the idle process did not map the simulated libcuda")
	}
	time.Sleep(300 * time.Millisecond) // let it allocate
	rec, db, stderr := w.startRecorder("--all")
	res := w.startWorkload(`init; use 0; alloc 2G; exit 1`)
	waitExit(t, res, 20*time.Second)
	idle.Process.Signal(syscall.SIGTERM)
	waitExit(t, idle, 20*time.Second)
	time.Sleep(300 * time.Millisecond) // let the recorder read the exit
	rec.Process.Signal(syscall.SIGINT)
	waitExit(t, rec, 20*time.Second)

	rep, _ := analyzeJSON(t, db)
	var found *report.ProcessInfo
	for i := range rep.Processes {
		if rep.Processes[i].PID == uint32(idle.Process.Pid) {
			found = &rep.Processes[i]
		}
	}
	if found == nil {
		t.Fatalf("no process record for the idle holder %d; recorder said:\n%s", idle.Process.Pid, stderr)
	}
	if !found.AttachedLate || found.Calls != 0 || !strings.HasSuffix(found.Exe, "simwork") {
		t.Errorf("idle holder: %+v; want attached late, no call, its program named", *found)
	}
	if found.Exit == nil || found.Exit.Signal == nil || *found.Exit.Signal != int(syscall.SIGTERM) {
		t.Errorf("idle holder's end %+v, want killed by SIGTERM", found.Exit)
	}
	if deref(rep.Capacity) != string(report.CapFBExhausted) {
		t.Errorf("capacity %s, want framebuffer-exhausted: %s", deref(rep.Capacity), rep.Verdict)
	}
}

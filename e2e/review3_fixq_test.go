package e2e

import (
	"database/sql"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrivium/forensic/report"
)

// callsByPID reads the workloads' own count of hooked calls, per process.
func (w *world) callsByPID() map[uint32]int {
	made := map[uint32]int{}
	w.callLog(func(pid uint32, _ string, n int) { made[pid] += n })
	return made
}

// A launcher that starts many workers at once (a shell loop, as torchrun
// or an inference server does), recorded without --libcuda: the first
// worker to map libcuda is held while the probes go in, and so is every
// worker that maps it meanwhile. Every call of every worker is in the
// record, nothing is counted lost, and no worker is said to have started
// before the recording. Ten times, since the window is a race.
func TestReview3WorkersStartedAtOnce(t *testing.T) {
	w := newWorld(t)
	const workers = 8
	loop := fmt.Sprintf(`for i in $(seq %d); do "$0" "$1" & done; wait`, workers)
	script := `init; use 0; alloc 16M; alloc 16M; alloc-host 1M; free-all`
	for run := 0; run < 10; run++ {
		os.Remove(w.calls)
		os.Remove(w.state)
		res := w.recordFound(nil, "sh", "-c", loop, simwork, script)
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
func TestReview3AllRecordsIdleHolder(t *testing.T) {
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

// checkGPUUUIDJoin: every call and failure that names a GPU names its UUID
// (never empty), the UUID the samples carry, so a fleet query joins them.
func checkGPUUUIDJoin(t *testing.T, db *sql.DB, out string) {
	t.Helper()
	src := func(table string) string {
		return fmt.Sprintf("read_parquet('%s/%s/*/*/*.parquet', hive_partitioning=true)", out, table)
	}
	for _, table := range []string{"calls", "failures"} {
		var withGPU, noUUID, joined int64
		q := fmt.Sprintf(`SELECT count(*), count(*) FILTER (WHERE gpu_uuid IS NULL OR gpu_uuid = ''),
			count(*) FILTER (WHERE EXISTS (SELECT 1 FROM %s s WHERE s.host = c.host AND s.run = c.run
				AND s.gpu = c.gpu AND s.gpu_uuid = c.gpu_uuid))
			FROM %s c WHERE gpu IS NOT NULL`, src("samples"), src(table))
		if err := db.QueryRow(q).Scan(&withGPU, &noUUID, &joined); err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		if withGPU == 0 || noUUID != 0 || joined != withGPU {
			t.Errorf("%s: %d rows name a GPU, %d of them without its UUID, %d join the samples on gpu_uuid",
				table, withGPU, noUUID, joined)
		}
	}
}

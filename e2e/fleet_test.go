package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/duckdb/duckdb-go/v2" // the database/sql driver "duckdb"
	"golang.org/x/sys/unix"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/fleet"
	"github.com/retrivium/forensic/parquetexport"
	"github.com/retrivium/forensic/store"
)

// recordOn runs `forensic record -o db` in a UTS namespace of its own whose
// host name is host (a real namespace: the recorder and the workload see
// that name, as on another node), with extra environment for both.
func (w *world) recordOn(host, db string, env []string, script string) {
	w.t.Helper()
	args := []string{"--uts", "sh", "-c", `hostname "$0" && exec "$@"`, host, binPath, "record", "-o", db,
		"--libcuda", simCUDA, "--libnvidia-ml", simNVML, "--", simwork, script}
	cmd := exec.Command("unshare", args...)
	cmd.Env = w.environ(env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			w.t.Fatalf("forensic record on %s: %v", host, err)
		}
	}
	if _, err := os.Stat(db); err != nil {
		w.t.Fatalf("forensic record on %s wrote no run.db: %s", host, out.String())
	}
}

func readRun(t *testing.T, db string) (store.RunInfo, *store.StopInfo) {
	t.Helper()
	r, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stop, err := r.Stop()
	if err != nil || stop == nil {
		t.Fatalf("%s: stop record %v, %v", db, stop, err)
	}
	return r.Run(), stop
}

// A spawned workload's run says where it ran, which rank it was, and how
// its clock was paired: the machine's own files and clocks agree.
func TestRecordIdentity(t *testing.T) {
	w := newWorld(t, "RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1", "TORCHELASTIC_RUN_ID=e2e")
	before := readClocks()
	res := w.record(nil, simwork, "init; use 0; alloc 1M; free")
	after := readClocks()
	if res.code != 0 {
		t.Fatalf("record exited %d: %s", res.code, res.stderr)
	}
	run, stop := readRun(t, res.db)
	machine, _ := os.ReadFile("/etc/machine-id")
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	host, _ := os.Hostname()
	want := &store.Job{Source: "spawn", Env: map[string]string{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "e2e"},
		Rank: ptr(3), RankFrom: "RANK", WorldSize: ptr(4), WorldSizeFrom: "WORLD_SIZE", LocalRank: ptr(1), JobID: "e2e"}
	for _, id := range []*store.Identity{run.Identity, stop.Identity} {
		if id == nil || id.Clock == nil {
			t.Fatalf("no identity: run %+v stop %+v", run.Identity, stop.Identity)
		}
		if id.MachineID != strings.TrimSpace(string(machine)) || id.BootID != strings.TrimSpace(string(boot)) || id.Hostname != host {
			t.Errorf("identity %+v, want this machine (%s, %s, %s)", id, bytes.TrimSpace(machine), bytes.TrimSpace(boot), host)
		}
		if !reflect.DeepEqual(id.Job, want) {
			t.Errorf("job %+v, want %+v", id.Job, want)
		}
		checkPairing(t, id.Clock, before, after)
	}
	if run.Env["RANK"] != "3" || run.Env["TORCHELASTIC_RUN_ID"] != "e2e" {
		t.Errorf("run env %v: the rank variables are allowlisted", run.Env)
	}
	checkClockBound(t, run.Identity.Clock, stop.Identity.Clock)
}

// clocks is a reading of both clocks by the test itself.
type clocks struct{ mono, real int64 }

func readClocks() clocks {
	var m, r unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &m)
	unix.ClockGettime(unix.CLOCK_REALTIME, &r)
	return clocks{m.Nano(), r.Nano()}
}

// checkPairing: the recorder's pair lies between the test's readings, and
// realtime - monotonic agrees with the test's own within a millisecond.
func checkPairing(t *testing.T, c *store.ClockReading, before, after clocks) {
	t.Helper()
	if c.MonotonicNS < before.mono || c.MonotonicNS > after.mono || c.RealtimeNS < before.real || c.RealtimeNS > after.real {
		t.Errorf("pair (%d, %d) outside the test's readings [%v, %v]", c.MonotonicNS, c.RealtimeNS, before, after)
	}
	if d := (c.RealtimeNS - c.MonotonicNS) - (before.real - before.mono); d > 1e6 || d < -1e6 {
		t.Errorf("realtime - monotonic differs from the test's by %d ns", d)
	}
	if c.Reads != 16 || c.PairUncertaintyNS <= 0 || c.PairUncertaintyNS > 1e6 {
		t.Errorf("pairing: %d reads, uncertainty %d ns", c.Reads, c.PairUncertaintyNS)
	}
}

// checkClockBound compares the bound with what the kernel says now: null
// when it marks the clock unsynchronized, maxerror-derived otherwise.
func checkClockBound(t *testing.T, start, stop *store.ClockReading) {
	t.Helper()
	var tx unix.Timex
	state, err := unix.Adjtimex(&tx)
	if err != nil || start.Adjtimex == nil {
		t.Fatalf("adjtimex: %v; recorded %+v", err, start)
	}
	unsync := tx.Status&unix.STA_UNSYNC != 0 || state == unix.TIME_ERROR
	if start.Adjtimex.Unsync != (tx.Status&unix.STA_UNSYNC != 0) {
		t.Errorf("recorded unsync %v, the kernel says status %#x", start.Adjtimex.Unsync, tx.Status)
	}
	if unsync {
		if stop.ErrorNS != nil || !strings.Contains(stop.ErrorWhy, "unsynchronized") {
			t.Errorf("unsynchronized clock: bound %v (%q), want null with the reason", stop.ErrorNS, stop.ErrorWhy)
		}
		return
	}
	if stop.ErrorNS == nil || *stop.ErrorNS < stop.Adjtimex.MaxErrorNS {
		t.Errorf("synchronized clock: bound %v, want at least maxerror %d", stop.ErrorNS, stop.Adjtimex.MaxErrorNS)
	}
}

// --pid reads the job from the target's /proc/PID/environ, not from the
// recorder's environment.
func TestRecordIdentityPID(t *testing.T) {
	w := newWorld(t)
	target := exec.Command(simwork, "init; use 0; wait-signal; alloc 1M; free")
	target.Env = w.environ("RANK=5", "WORLD_SIZE=8", "SLURM_JOB_ID=4242")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { target.Process.Kill(); target.Wait() })
	rec, db, stderr := w.startRecorder("--libcuda", simCUDA, "--pid", strconv.Itoa(target.Process.Pid))
	target.Process.Signal(syscall.SIGUSR1)
	waitExit(t, target, 20*time.Second)
	waitExit(t, rec, 20*time.Second)
	run, stop := readRun(t, db)
	want := &store.Job{Source: "pid", Env: map[string]string{"RANK": "5", "WORLD_SIZE": "8", "SLURM_JOB_ID": "4242"},
		Rank: ptr(5), RankFrom: "RANK", WorldSize: ptr(8), WorldSizeFrom: "WORLD_SIZE", JobID: "4242"}
	if run.Identity == nil || !reflect.DeepEqual(run.Identity.Job, want) {
		t.Fatalf("start job %+v, want %+v; recorder said:\n%s", run.Identity, want, stderr)
	}
	// The target has exited by the stop: its job is kept from the start.
	if stop.Identity == nil || !reflect.DeepEqual(stop.Identity.Job, want) {
		t.Errorf("stop job %+v, want the start's", stop.Identity.Job)
	}
}

func ptr(v int) *int { return &v }

// --all: each process keeps its own rank, and the stop record lists the
// ranks the node's processes had.
func TestRecordIdentityAll(t *testing.T) {
	w := newWorld(t)
	rec, db, stderr := w.startRecorder("--all", "--libcuda", simCUDA)
	var ws []*exec.Cmd
	for _, rank := range []string{"6", "7"} {
		// The recorder reads a process's environment when it sees its
		// first call; a process gone by then keeps no rank (sleep: stay).
		c := exec.Command(simwork, "init; use 0; alloc 1M; free; sleep 500")
		c.Env = w.environ("RANK="+rank, "WORLD_SIZE=8", "LOCAL_RANK="+rank)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		ws = append(ws, c)
	}
	for _, c := range ws {
		waitExit(t, c, 20*time.Second)
	}
	rec.Process.Signal(syscall.SIGINT)
	waitExit(t, rec, 20*time.Second)
	run, stop := readRun(t, db)
	if run.Identity == nil || run.Identity.Job != nil {
		t.Errorf("--all start job %+v: nothing to read before processes are seen", run.Identity)
	}
	j := stop.Identity.Job
	if j == nil || j.Source != "processes" || !reflect.DeepEqual(j.Ranks, []int{6, 7}) || j.Rank != nil || j.WorldSize == nil || *j.WorldSize != 8 {
		t.Fatalf("--all stop job %+v, want ranks [6 7] of 8; recorder said:\n%s", j, stderr)
	}
}

// fleetRun is one recording of TestParquetFleet.
type fleetRun struct {
	host, db string
	rank     int
	fails    bool
}

// Several runs on two host names (real UTS namespaces), some failing, are
// exported to one directory; DuckDB reads it through hive partitioning and
// its counts equal what the run.db files hold.
func TestParquetFleet(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=4G")
	runs := []fleetRun{{"node-a", "", 0, false}, {"node-a", "", 1, true}, {"node-b", "", 2, false}, {"node-b", "", 3, true}}
	var dbs []string
	for i := range runs {
		r := &runs[i]
		r.db = filepath.Join(w.dir, fmt.Sprintf("rank%d.db", r.rank))
		script := "init; use 0; alloc 256M; alloc-host 1M; free-all"
		if r.fails {
			script = "init; use 0; alloc 256M; alloc 64G; alloc 32G; free-all"
		}
		w.recordOn(r.host, r.db, []string{"RANK=" + strconv.Itoa(r.rank), "WORLD_SIZE=5"}, script)
		dbs = append(dbs, r.db)
	}
	out := filepath.Join(w.dir, "parquet")
	if err := parquetexport.Write(context.Background(), out, dbs, parquetexport.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := parquetexport.Write(context.Background(), out, dbs[:1], parquetexport.Options{}); !errors.Is(err, parquetexport.ErrExported) {
		t.Errorf("second export of a run: %v, want ErrExported", err)
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	want := expectFromRuns(t, runs)
	if len(want["calls"]) != len(runs) || len(want["failures"]) != 2 {
		t.Fatalf("the runs hold calls %v and failures %v: want calls in every run, failures in two", want["calls"], want["failures"])
	}
	got := queryFleet(t, db, out)
	for _, k := range []string{"calls", "failures", "samples", "processes", "runs"} {
		if !reflect.DeepEqual(got[k], want[k]) {
			t.Errorf("%s: DuckDB %v\n  run.db %v", k, got[k], want[k])
		}
	}
	checkWallTimes(t, db, out, runs)
	checkGPUUUIDJoin(t, db, out)
	checkFleetOrder(t, runs)
}

// expectFromRuns counts what the run.db files hold, read with store.Open:
// calls per run, failures per run and result, samples per run and view,
// processes per run, and each run's rank.
func expectFromRuns(t *testing.T, runs []fleetRun) map[string]map[string]int64 {
	t.Helper()
	want := map[string]map[string]int64{"calls": {}, "failures": {}, "samples": {}, "processes": {}, "runs": {}}
	for _, fr := range runs {
		r, err := store.Open(fr.db)
		if err != nil {
			t.Fatal(err)
		}
		run := r.Run()
		key := fr.host + "/" + run.ID
		r.Events(func(e *store.Event) error {
			want["calls"][key]++
			if e.Result != 0 {
				want["failures"][key+"/"+cuda.LookupResult(e.Result).Name]++
			}
			return nil
		})
		r.Samples(func(s *store.Sample) error {
			view := "framebuffer"
			if s.Kind == store.KindBAR1 {
				view = "bar1"
			}
			want["samples"][key+"/"+view]++
			return nil
		})
		procs, _ := r.Processes()
		want["processes"][key] = int64(len(procs))
		want["runs"][key+"/rank"] = int64(fr.rank)
		r.Close()
	}
	return want
}

func queryFleet(t *testing.T, db *sql.DB, out string) map[string]map[string]int64 {
	t.Helper()
	src := func(table string) string {
		return fmt.Sprintf("read_parquet('%s/%s/*/*/*.parquet', hive_partitioning=true)", out, table)
	}
	queries := map[string]string{
		"calls":     "SELECT host || '/' || run, count(*) FROM " + src("calls") + " GROUP BY ALL",
		"failures":  "SELECT host || '/' || run || '/' || result_name, count(*) FROM " + src("failures") + " GROUP BY ALL",
		"samples":   "SELECT host || '/' || run || '/' || view, count(DISTINCT seq) FROM " + src("samples") + " GROUP BY ALL",
		"processes": "SELECT host || '/' || run, count(*) FROM " + src("processes") + " GROUP BY ALL",
		"runs":      "SELECT host || '/' || run || '/rank', rank FROM " + src("runs"),
	}
	got := map[string]map[string]int64{}
	for k, q := range queries {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		got[k] = map[string]int64{}
		for rows.Next() {
			var key string
			var n int64
			if err := rows.Scan(&key, &n); err != nil {
				t.Fatal(err)
			}
			got[k][key] = n
		}
		rows.Close()
	}
	return got
}

// checkWallTimes: every call's Unix time lies between the run's wall start
// and its stop's wall time, each read by the recorder on its own.
func checkWallTimes(t *testing.T, db *sql.DB, out string, runs []fleetRun) {
	t.Helper()
	for _, fr := range runs {
		run, stop := readRun(t, fr.db)
		var lo, hi int64
		q := fmt.Sprintf("SELECT min(start_ns), max(end_ns) FROM read_parquet('%s/calls/*/*/*.parquet', hive_partitioning=true) WHERE run = '%s'", out, run.ID)
		if err := db.QueryRow(q).Scan(&lo, &hi); err != nil {
			t.Fatal(err)
		}
		if lo < run.WallStart.UnixNano()-1e6 || hi > stop.Wall.UnixNano()+1e6 {
			t.Errorf("%s: calls span [%d, %d], outside the run's wall time [%d, %d]", fr.db, lo, hi, run.WallStart.UnixNano(), stop.Wall.UnixNano())
		}
	}
}

// checkFleetOrder: the runs share one boot, so their failures order
// exactly; the first is the rank recorded first, and rank 4 of WORLD_SIZE=5
// has no run.
func checkFleetOrder(t *testing.T, runs []fleetRun) {
	t.Helper()
	var in []fleet.Run
	for _, fr := range runs {
		run, stop := readRun(t, fr.db)
		c := stop.Identity.Clock
		f := fleet.Run{Path: fr.db, ID: run.ID, Host: stop.Identity.Hostname, BootID: stop.Identity.BootID,
			Rank: stop.Identity.Job.Rank, WorldSize: stop.Identity.Job.WorldSize,
			Clock: &fleet.Clock{MonotonicNS: run.Identity.Clock.MonotonicNS, RealtimeNS: run.Identity.Clock.RealtimeNS, ErrorNS: c.ErrorNS}}
		r, _ := store.Open(fr.db)
		r.Failures(func(e *store.Event) error {
			if f.Failure == nil {
				f.Failure = &fleet.Failure{TimeNS: e.End, Symbol: e.Name, ResultName: cuda.LookupResult(e.Result).Name, PID: e.PID}
			}
			return nil
		})
		r.Close()
		if f.Host != fr.host {
			t.Errorf("%s: host %q, want %q (its UTS namespace)", fr.db, f.Host, fr.host)
		}
		in = append(in, f)
	}
	res := fleet.Order(in)
	if res.Order != fleet.OrderCertain || res.FirstFailure == nil || res.FirstFailure.RunPath != runs[1].db {
		t.Fatalf("order %s, first %+v; want certain, %s", res.Order, res.FirstFailure, runs[1].db)
	}
	if len(res.Consequences) != 1 || !res.Consequences[0].Exact || res.Consequences[0].DelayMinNS <= 0 {
		t.Errorf("consequences %+v, want rank 3's failure, exactly later", res.Consequences)
	}
	if !reflect.DeepEqual(res.MissingRanks, []int{4}) {
		t.Errorf("missing ranks %v, want [4]", res.MissingRanks)
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

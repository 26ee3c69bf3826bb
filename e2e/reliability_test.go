package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
	"golang.org/x/sys/unix"
)

func monotonic() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// bpfIDs lists the BPF program and link ids a live process holds open
// (from /proc/PID/fdinfo).
func bpfIDs(t *testing.T, pid int) (progs, links []uint32) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 {
				continue
			}
			n, err := strconv.ParseUint(f[1], 10, 32)
			if err != nil {
				continue
			}
			switch f[0] {
			case "prog_id:":
				progs = append(progs, uint32(n))
			case "link_id:":
				links = append(links, uint32(n))
			}
		}
	}
	return progs, links
}

// checkDetached asserts that none of the programs and links remain in the
// kernel (uprobes go away with their links).
func checkDetached(t *testing.T, progs, links []uint32) {
	t.Helper()
	ok := waitFor(5*time.Second, func() bool {
		for _, id := range progs {
			if p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id)); err == nil {
				p.Close()
				return false
			}
		}
		for _, id := range links {
			if l, err := link.NewFromID(link.ID(id)); err == nil {
				l.Close()
				return false
			}
		}
		return true
	})
	if !ok {
		t.Errorf("probes of the stopped recorder remain: programs %v, links %v", progs, links)
	}
}

// Committed data survives kill -9 of the recorder at any moment; the run
// is reported as ended abruptly with what it has; no probe remains.
func TestKillNineKeepsCommitted(t *testing.T) {
	for _, after := range []time.Duration{150 * time.Millisecond, 700 * time.Millisecond, 1300 * time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) {
			w := newWorld(t)
			db := filepath.Join(w.dir, "run.db")
			cmd := binCommand(bin{w: w}, "record", "-o", db, "--libcuda", simCUDA, "--libnvidia-ml", simNVML, "--",
				simwork, "init; use 0; repeat 400 { alloc 1M; sleep 5 }")
			var errb bytes.Buffer
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if !waitFor(10*time.Second, func() bool { return strings.Contains(errb.String(), "recording") }) {
				t.Fatalf("recorder not ready: %s", errb.String())
			}
			progs, links := bpfIDs(t, cmd.Process.Pid)
			if len(progs) == 0 || len(links) == 0 {
				t.Fatalf("recorder holds no BPF programs (%v) or links (%v)", progs, links)
			}
			time.Sleep(after)
			killed := monotonic()
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			checkDetached(t, progs, links)

			r, err := store.Open(db)
			if err != nil {
				t.Fatalf("run.db after kill -9: %v", err)
			}
			var newest int64
			n := 0
			r.Events(func(e *store.Event) error {
				n++
				newest = max(newest, e.End)
				return nil
			})
			stop, _ := r.Stop()
			drops, _ := r.Drops()
			r.Close()
			if stop != nil {
				t.Error("a stop record after kill -9")
			}
			// Loss counters are read about once a second, so a run killed
			// later than that still has a reading.
			if after > 1200*time.Millisecond && (len(drops) == 0 || drops[len(drops)-1].Stats.Events == 0) {
				t.Errorf("no loss-counter reading with events after %v: %+v", after, drops)
			}
			// The workload calls every ~5 ms; everything older than the
			// flush bound (250 ms) must have been committed.
			if n == 0 || killed-newest > int64(250*time.Millisecond) {
				t.Errorf("%d events, newest %v before the kill: more than the 250 ms bound was lost", n, time.Duration(killed-newest))
			}
			rep, _ := analyzeJSON(t, db)
			if rep.Run.Ended != "abrupt" {
				t.Errorf("run ended %q, want abrupt", rep.Run.Ended)
			}
			found := false
			for _, m := range rep.Missing {
				found = found || strings.Contains(m.What, "did not stop cleanly")
			}
			if !found {
				t.Errorf("abrupt end not listed as missing evidence: %+v", rep.Missing)
			}
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		})
	}
}

// A workload that crashes (SIGSEGV) is recorded with its signal, and the
// recording of the other processes continues.
func TestWorkloadCrashRecorded(t *testing.T) {
	w := newWorld(t)
	res := w.record(nil, simwork, `init; use 0; alloc 1M;
		fork { init; use 0; alloc 2M; crash segv };
		fork { init; use 0; sleep 300; alloc 3M; free };
		wait; free-all`)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	w.checkComplete(res.db)
	rep, _ := analyzeJSON(t, res.db)
	var crashed, later *report.ProcessInfo
	for i, p := range rep.Processes {
		if p.Exit != nil && p.Exit.Signal != nil {
			crashed = &rep.Processes[i]
		} else if !p.Root {
			later = &rep.Processes[i]
		}
	}
	if crashed == nil || *crashed.Exit.Signal != int(syscall.SIGSEGV) || crashed.Exit.Name != "SIGSEGV" {
		t.Fatalf("no process recorded as killed by SIGSEGV: %+v", rep.Processes)
	}
	if later == nil || later.Calls < 4 || crashed.Exit.TimeNS == 0 {
		t.Fatalf("the other child was not recorded after the crash: %+v", later)
	}
	// A process died with no failed call: the first failure cannot be
	// established from the record.
	if rep.Attribution != report.AttrMissingEvidence {
		t.Errorf("attribution %s, want missing-evidence", rep.Attribution)
	}
}

// Abort after a CUDA error: the failure and the signal are both recorded.
func TestAbortAfterError(t *testing.T) {
	w := newWorld(t, "SIMGPU_FAIL=cuMemAlloc_v2:2:2")
	res := w.record(nil, simwork, `init; use 0; alloc 1M; alloc 1M; crash abort`)
	if res.code != 128+int(syscall.SIGABRT) {
		t.Fatalf("exit %d, want 134 (SIGABRT passed on): %s", res.code, res.stderr)
	}
	rep, _ := analyzeJSON(t, res.db)
	if rep.FirstFailure == nil || rep.FirstFailure.ResultName != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Fatalf("first failure %+v", rep.FirstFailure)
	}
	if rep.Run.WorkloadExit == nil || rep.Run.WorkloadExit.Signal == nil || *rep.Run.WorkloadExit.Signal != int(syscall.SIGABRT) {
		t.Errorf("workload exit %+v, want SIGABRT", rep.Run.WorkloadExit)
	}
	if rep.Attribution != report.AttrAllocation {
		t.Errorf("attribution %s: the failure was recorded before the abort", rep.Attribution)
	}
}

// A call storm faster than the ring drains: drops are counted exactly
// (stored + lost = calls made), and a failure after the drops is shown but
// cannot be called the first. The recorder is stopped (SIGSTOP) during the
// storm, which is what a recorder that falls behind looks like.
func TestStormAccounting(t *testing.T) {
	// The failure comes after the storm (call 120001), once the recorder
	// runs again.
	w := newWorld(t, "SIMGPU_FAIL=cuMemAlloc_v2:120001:2")
	gate, gate2 := filepath.Join(w.dir, "storm"), filepath.Join(w.dir, "after")
	started := filepath.Join(w.dir, "started")
	db := filepath.Join(w.dir, "run.db")
	cmd := binCommand(bin{w: w}, "record", "-o", db, "--ring-size", "1MiB", "--libcuda", simCUDA, "--libnvidia-ml", simNVML, "--",
		simwork, "init; use 0; touch "+started+"; wait-file "+gate+"; threads 2 { use 0; stress 40000 }; stress 40000; touch "+gate2+".storm; wait-file "+gate2+"; alloc 1M; free-all")
	logf, _ := os.Create(filepath.Join(w.dir, "recorder.log"))
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The recorder announces itself before it spawns the workload; stopping
	// it in between would stop the workload from ever starting.
	if !waitFor(10*time.Second, func() bool { return exists(started) }) {
		b, _ := os.ReadFile(logf.Name())
		t.Fatalf("workload not started:\n%s", b)
	}
	cmd.Process.Signal(syscall.SIGSTOP)
	os.WriteFile(gate, nil, 0o600)
	if !waitFor(120*time.Second, func() bool { return exists(gate2 + ".storm") }) {
		t.Fatal("storm did not finish")
	}
	cmd.Process.Signal(syscall.SIGCONT)
	time.Sleep(300 * time.Millisecond)
	os.WriteFile(gate2, nil, 0o600)
	if err := cmd.Wait(); err != nil {
		b, _ := os.ReadFile(logf.Name())
		t.Fatalf("record: %v\n%s", err, b)
	}
	made := 0
	for _, n := range w.callsMade() {
		made += n
	}
	got, _, stop := stored(t, db)
	storedN := 0
	for _, n := range got {
		storedN += n
	}
	st := stop.Stats
	if st.LostCalls == 0 {
		t.Fatalf("no calls lost with a 1 MiB ring and the reader stopped through a %d-call storm", made)
	}
	if uint64(storedN)+st.LostCalls != uint64(made) || st.Calls != uint64(made) {
		t.Fatalf("stored %d + lost %d != made %d (probes saw %d)", storedN, st.LostCalls, made, st.Calls)
	}
	rep, _ := analyzeJSON(t, db)
	if !rep.Loss.BeforeFailure || rep.Loss.LostCalls != st.LostCalls {
		t.Errorf("loss %+v", rep.Loss)
	}
	if rep.FirstFailure == nil {
		t.Fatal("the recorded failure is not shown")
	}
	if rep.Attribution != report.AttrMissingEvidence {
		t.Errorf("attribution %s, want missing-evidence (calls were lost before the failure)", rep.Attribution)
	}
}

// A full disk: the recorder stops writing with one line, keeps what it
// committed, keeps the file valid, and leaves the workload alone.
func TestFullDisk(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reserve string
		want    string
	}{
		{"reserve", "8MiB", "disk-full"}, // stops while there is room for the stop record
		{"enospc", "0", ""},              // no reserve: the write itself fails
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			mnt := filepath.Join(w.dir, "small")
			os.MkdirAll(mnt, 0o755)
			if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=12m"); err != nil {
				t.Fatalf("mount tmpfs: %v", err)
			}
			defer syscall.Unmount(mnt, syscall.MNT_DETACH)
			db := filepath.Join(mnt, "run.db")
			marker := filepath.Join(w.dir, "workload-done")
			cmd := binCommand(bin{w: w}, "record", "-o", db, "--disk-reserve", tc.reserve, "--libcuda", simCUDA,
				"--libnvidia-ml", simNVML, "--", simwork, "init; use 0; mix 150000; touch "+marker)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatal(err)
			}
			if code := cmd.ProcessState.ExitCode(); code != 0 {
				t.Errorf("exit %d: the workload's status must pass through: %s", code, out)
			}
			if !exists(marker) {
				t.Fatal("the workload did not finish")
			}
			lines := 0
			for _, l := range strings.Split(string(out), "\n") {
				if strings.Contains(l, "disk full") || strings.Contains(l, "no space") {
					lines++
				}
			}
			if lines != 1 {
				t.Errorf("want one line about the full disk, got %d:\n%s", lines, out)
			}
			r, err := store.Open(db)
			if err != nil {
				t.Fatalf("run.db on a full disk is not readable: %v", err)
			}
			n := 0
			r.Events(func(*store.Event) error { n++; return nil })
			stop, _ := r.Stop()
			r.Close()
			if n == 0 {
				t.Error("nothing committed before the disk filled")
			}
			if tc.want != "" && (stop == nil || stop.Reason != tc.want) {
				t.Errorf("stop record %+v, want reason %s", stop, tc.want)
			}
			if _, raw := analyzeJSON(t, db); raw == nil {
				t.Error("analyze failed")
			}
		})
	}
}

// SIGINT stops recording, detaches every probe and writes the summary
// while the workload runs on; a second SIGINT exits at once.
func TestCleanStopOnSignal(t *testing.T) {
	w := newWorld(t)
	db := filepath.Join(w.dir, "run.db")
	cmd := binCommand(bin{w: w}, "record", "-o", db, "--libcuda", simCUDA, "--libnvidia-ml", simNVML, "--",
		simwork, "init; use 0; alloc 1M; sleep 30000")
	// Recorder and workload get their own process group, as a supervised
	// job would: the signal is the recorder's alone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A file, not a pipe: the workload inherits it and outlives the
	// recorder, and a pipe would keep cmd.Wait waiting for it.
	logf, err := os.Create(filepath.Join(w.dir, "recorder.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stderr = logf
	logged := func() string { b, _ := os.ReadFile(logf.Name()); return string(b) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if !waitFor(10*time.Second, func() bool { return strings.Contains(logged(), "recording") }) {
		t.Fatal("recorder not ready")
	}
	progs, links := bpfIDs(t, cmd.Process.Pid)
	time.Sleep(300 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGINT)
	// The stop record is written and the file released while the
	// workload still runs.
	var stop *store.StopInfo
	if !waitFor(10*time.Second, func() bool {
		r, err := store.Open(db)
		if err != nil {
			return false
		}
		defer r.Close()
		stop, _ = r.Stop()
		return stop != nil
	}) {
		t.Fatalf("no stop record after SIGINT: %s", logged())
	}
	if stop.Reason != "signal" || stop.Stats.Events == 0 {
		t.Errorf("stop %+v", stop)
	}
	checkDetached(t, progs, links)
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatal("the recorder exited before its workload without being told twice")
	}
	start := time.Now()
	cmd.Process.Signal(syscall.SIGINT)
	cmd.Wait()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("second SIGINT took %v", d)
	}
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("exit %d after a second SIGINT, want 130", code)
	}
}

// analyze, report and export refuse bad files with one line.
func TestBadInputAllCommands(t *testing.T) {
	w := newWorld(t)
	dir := w.dir
	good := w.record(nil, simwork, "init; use 0; alloc 1M").db
	data, _ := os.ReadFile(good)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o600)
		return p
	}
	random := make([]byte, 128<<10)
	for i := range random {
		random[i] = byte(i*2654435761>>13 + i)
	}
	foreign := filepath.Join(dir, "foreign.db")
	newer := write("newer.db", data)
	for _, args := range [][]string{{foreign}, {"-newer", newer}} {
		cmd := exec.Command("go", append([]string{"run", "./testdata/foreigndb"}, args...)...)
		cmd.Dir = filepath.Join(repo, "e2e")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("foreigndb %v: %v %s", args, err, out)
		}
	}
	cases := map[string]string{
		"truncated": write("trunc.db", data[:len(data)/2]),
		"random":    write("random.db", random),
		"foreign":   foreign,
		"newer":     newer,
	}
	// A file still locked by a live recorder.
	live := binCommand(bin{w: w}, "record", "-o", filepath.Join(dir, "live.db"), "--libcuda", simCUDA,
		"--libnvidia-ml", simNVML, "--", simwork, "init; sleep 20000")
	var errb bytes.Buffer
	live.Stderr = &errb
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { live.Process.Signal(syscall.SIGINT); live.Process.Signal(syscall.SIGINT); live.Wait() }()
	waitFor(10*time.Second, func() bool { return strings.Contains(errb.String(), "recording") })
	cases["locked"] = filepath.Join(dir, "live.db")

	commands := [][]string{{"analyze"}, {"analyze", "--json"}, {"report", "-o", filepath.Join(dir, "r.html")},
		{"export", "--format", "perfetto", "-o", filepath.Join(dir, "t.json")}}
	for name, path := range cases {
		for _, c := range commands {
			t.Run(name+"/"+c[0], func(t *testing.T) {
				out, err := binCommand(bin{}, append(c, path)...).CombinedOutput()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() == 0 {
					t.Fatalf("exit %v, want non-zero: %q", err, out)
				}
				lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
				if len(lines) != 1 || strings.Contains(string(out), "goroutine") {
					t.Fatalf("want one line, got %q", out)
				}
				for want, phrase := range map[string]string{"locked": "locked by a running recorder",
					"newer": "newer forensic", "foreign": "another program"} {
					if name == want && !strings.Contains(string(out), phrase) {
						t.Errorf("%s file: %q does not say %q", name, out, phrase)
					}
				}
			})
		}
	}
}

// Privacy: run.db is 0600 and holds no environment beyond the allowlist.
func TestPrivacy(t *testing.T) {
	w := newWorld(t)
	w.env = append(w.env, "FORENSIC_TEST_SECRET=hunter2-do-not-store", "CUDA_VISIBLE_DEVICES=0")
	res := w.record(nil, simwork, "init; use 0; alloc 1M")
	st, err := os.Stat(res.db)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("run.db mode %v, want 0600", st.Mode().Perm())
	}
	data, _ := os.ReadFile(res.db)
	if bytes.Contains(data, []byte("hunter2-do-not-store")) {
		t.Error("an environment variable outside the allowlist reached run.db")
	}
	rep, _ := analyzeJSON(t, res.db)
	found := false
	for _, p := range rep.Processes {
		found = found || p.Env["CUDA_VISIBLE_DEVICES"] == "0"
	}
	if !found {
		t.Error("CUDA_VISIBLE_DEVICES (allowlisted) was not stored")
	}
}

// record's stop summary and analyze count the same losses, each kind on
// its own and named the same: a lost process record is not a lost call.
func TestRecordAndAnalyzeCountLossesAlike(t *testing.T) {
	w := newWorld(t)
	res := w.record([]string{"--ring-size", "4096"}, simwork, "init; use 0; stress 100000")
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	_, _, stop := stored(t, res.db)
	if stop == nil || stop.Stats.LostCalls == 0 {
		t.Fatalf("no call was lost (stop %+v): the test needs losses", stop)
	}
	m := regexp.MustCompile(`(?m) forensic: recorded (\d+) calls`).FindStringSubmatch(res.stderr)
	if m == nil || m[1] != strconv.FormatUint(stop.Stats.Events, 10) {
		t.Errorf("record says %q; the run stored %d call events", m, stop.Stats.Events)
	}
	_, said, ok := strings.Cut(res.stderr, "forensic: not in the record: ")
	if !ok {
		t.Fatalf("record does not say what was lost:\n%s", res.stderr)
	}
	said, _, _ = strings.Cut(said, "\n")
	out, err := binCommand(bin{}, "analyze", "--no-color", res.db).Output()
	if err != nil {
		t.Fatalf("analyze: %v", err)
	}
	text := strings.Join(strings.Fields(string(out)), " ")
	for _, kind := range strings.Split(said, ", ") {
		if !strings.Contains(text, kind) {
			t.Errorf("record says %q; analyze does not:\n%s", kind, out)
		}
	}
	if want := fmt.Sprintf("%d calls lost (ring buffer full)", stop.Stats.LostCalls); !strings.Contains(said, want) {
		t.Errorf("record says %q, want %q", said, want)
	}
}

// Package e2e holds the end-to-end tests: real eBPF programs loaded into
// this kernel, real uprobes on the simulated libcuda (and on NVIDIA's real
// one), the real go-nvml path into the simulated libnvidia-ml, a real
// run.db, and the forensic binary as users run it.
//
// They need root, `make` (bin/forensic and build/simgpu) and `make
// nvidia-libs`. Without them they skip, except under `make test` and CI
// (FORENSIC_REQUIRE_E2E=1), where a missing prerequisite fails.
//
// Golden files make any drift in a verdict show. The scenario tables keep
// each scenario's whole analyze --json, normalised, in testdata/golden
// (golden_test.go). Every other recording the harness makes (w.record,
// w.recordAs) keeps its verdict in testdata/verdicts/<Test>[/<subtest>]-<n>.json,
// n counting the test's recordings from 1: the attribution, the capacity,
// the first failure's symbol, result, size and class, near_miss, and the
// first unrecovered failure and the jobs' attributions when there are
// some (verdictgolden_test.go). A test whose verdict may differ from run
// to run (a race it allows, an outcome that depends on the machine's
// load) says so, with the reason, by calling verdictVaries before it
// records. -update rewrites both kinds of golden from the run; read the
// diff before committing it.
package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/internal/e2eenv"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// repo is the repository root (tests run in e2e/).
var repo = func() string {
	wd, _ := os.Getwd()
	return filepath.Dir(wd)
}()

var (
	binPath   = forensicBinary()
	simDir    = filepath.Join(repo, "build", "simgpu")
	simCUDA   = filepath.Join(simDir, "libcuda.so.1")
	simNVML   = filepath.Join(simDir, "libnvidia-ml.so.1")
	simwork   = filepath.Join(simDir, "scenarios", "simwork")
	nvidiaDir = filepath.Join(repo, "build", "nvidia")
)

// TestMain runs the tests without sudo's variables: under `sudo make
// test` forensic would run every workload as the user who ran sudo, in
// directories only root may use. A test of that behaviour sets them itself.
func TestMain(m *testing.M) {
	for _, v := range []string{"SUDO_UID", "SUDO_GID", "SUDO_USER", "SUDO_COMMAND"} {
		os.Unsetenv(v)
	}
	os.Exit(m.Run())
}

// forensicBinary is the binary under test: FORENSIC_BIN (relative to the
// repository root, or absolute; make test-race sets it to the -race build),
// else bin/forensic.
func forensicBinary() string {
	p := os.Getenv("FORENSIC_BIN")
	if p == "" {
		return filepath.Join(repo, "bin", "forensic")
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(repo, p)
	}
	return p
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// world is one test's simulated machine: its own device state file and
// call log, so tests never see each other's GPUs.
type world struct {
	t     *testing.T
	dir   string
	state string
	calls string
	env   []string // extra environment for recorder and workload
	hog   int      // pid of a memory-holding process a scenario started
}

// newWorld prepares a simulated GPU world, with SIMGPU_* settings in env
// ("SIMGPU_DEVICES=2", ...).
func newWorld(t *testing.T, env ...string) *world {
	t.Helper()
	e2eenv.NeedRoot(t)
	e2eenv.Need(t, exists(binPath), "bin/forensic is not built (run make)")
	e2eenv.Need(t, exists(simCUDA) && exists(simNVML) && exists(simwork), "the simulated GPU is not built (run make)")
	dir := t.TempDir()
	w := &world{t: t, dir: dir, state: filepath.Join(dir, "simgpu.state"), calls: filepath.Join(dir, "calls.txt")}
	w.env = append([]string{"SIMGPU_STATE=" + w.state, "SIMWORK_CALLS=" + w.calls, "SIMWORK_LIBCUDA=" + simCUDA}, env...)
	return w
}

// environ is the process environment plus the world's.
func (w *world) environ(extra ...string) []string {
	return append(append(os.Environ(), w.env...), extra...)
}

// Running the binary under test. Every test runs bin/forensic through
// these, the way a user runs it; binCommand is the one place its command
// is made, so FORENSIC_BIN, the world's environment and a user's
// credentials apply the same way everywhere:
//
//	runBin(t, bin{...}, args...)     run it to the end: exit status, stdout, stderr
//	binCommand(bin{...}, args...)    its *exec.Cmd, for a run in the background
//	                                 or one whose streams the test reads
//	w.record(flags, command...)      record command on the world's simulated GPU
//	w.recordAs(how, flags, cmd...)   record otherwise: libcuda found at mapping,
//	                                 or NVIDIA's real libraries
//	w.startRecorder(flags...)        a recorder in the background, once it records
//	analyzeJSON(t, db)               analyze --json, decoded (analyzeJSONBytes: and as written)
//	textAt80(t, db)                  analyze's text at 80 columns without colour

// bin says how a test runs the binary, beyond its arguments.
type bin struct {
	w    *world              // run in this world's environment (nil: the test's own)
	env  []string            // more environment, after the world's
	cred *syscall.Credential // run as this user, from the root directory
}

// binCommand is the command that runs the binary under test with args.
func binCommand(b bin, args ...string) *exec.Cmd {
	cmd := exec.Command(binPath, args...)
	cmd.Env = append(os.Environ(), b.env...)
	if b.w != nil {
		cmd.Env = append(b.w.environ(), b.env...)
	}
	if b.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: b.cred}
		cmd.Dir = "/"
	}
	return cmd
}

// ran is one finished run of the binary.
type ran struct {
	code           int
	stdout, stderr string
	pid            int // the process's id
}

// outputs is r as three values: stdout, stderr and the exit status.
func (r ran) outputs() (string, string, int) { return r.stdout, r.stderr, r.code }

// runBin runs the binary with args to the end. An exit status is the
// result, not an error; a binary that cannot start fails the test.
func runBin(t *testing.T, b bin, args ...string) ran {
	t.Helper()
	cmd := binCommand(b, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatalf("forensic %v: %v", args, err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("forensic %v: %v", args, err)
	}
	return ran{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String(), pid: cmd.Process.Pid}
}

// result is one finished `forensic record`: its run.db and how it ended
// (pid is the recorder's own).
type result struct {
	db string
	ran
}

// recording says how w.recordAs points the recorder at libcuda and NVML.
type recording int

const (
	// onSim names the simulated libcuda and libnvidia-ml (w.record).
	onSim recording = iota
	// foundAtMapping names the simulated libnvidia-ml only: the recorder
	// must find libcuda where the workload maps it and hold the workload
	// there until its probes are in.
	foundAtMapping
	// onReal adds nothing: the flags name NVIDIA's real libraries.
	onReal
)

// record runs `forensic record` on the simulated GPU with flags, then the
// workload command.
func (w *world) record(flags []string, command ...string) result {
	w.t.Helper()
	return w.recordAs(onSim, flags, command...)
}

// recordAs runs `forensic record -o DIR/run.db --force`, the libraries
// as how says, then flags, then the workload command (after --, when
// there is one).
func (w *world) recordAs(how recording, flags []string, command ...string) result {
	w.t.Helper()
	db := filepath.Join(w.dir, "run.db")
	args := []string{"record", "-o", db, "--force"}
	switch how {
	case onSim:
		args = append(args, "--libcuda", simCUDA, "--libnvidia-ml", simNVML)
	case foundAtMapping:
		args = append(args, "--libnvidia-ml", simNVML)
	}
	args = append(args, flags...)
	if len(command) > 0 {
		args = append(append(args, "--"), command...)
	}
	res := result{db: db, ran: runBin(w.t, bin{w: w}, args...)}
	checkRecordingReads(w.t, db)
	return res
}

// analyzeJSON runs `forensic analyze --json` and decodes the contract both
// as the typed report and as a generic map (for key-level checks).
func analyzeJSON(t *testing.T, db string) (*report.Report, map[string]any) {
	t.Helper()
	rep, raw, _ := analyzeJSONBytes(t, db)
	return rep, raw
}

// analyzeJSONBytes is analyzeJSON that also returns the report as analyze
// wrote it (for golden comparisons).
func analyzeJSONBytes(t *testing.T, db string) (*report.Report, map[string]any, []byte) {
	t.Helper()
	r := runBin(t, bin{}, "analyze", "--json", db)
	if r.code != 0 {
		t.Fatalf("forensic analyze --json %s: exit status %d: %s", db, r.code, r.stderr)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("analyze --json is not a report: %v", err)
	}
	var raw map[string]any
	json.Unmarshal([]byte(r.stdout), &raw)
	return &rep, raw, []byte(r.stdout)
}

// textAt80 runs `forensic analyze` at 80 columns without colour and
// returns what it printed, stdout and stderr together.
func textAt80(t *testing.T, db string) string {
	t.Helper()
	cmd := binCommand(bin{env: []string{"COLUMNS=80"}}, "analyze", "--no-color", db)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("analyze: %v\n%s", err, out)
	}
	return string(out)
}

// callsMade reads the workloads' own count of hooked calls, per symbol.
func (w *world) callsMade() map[string]int {
	made := map[string]int{}
	w.callLog(func(_ uint32, sym string, n int) { made[sym] += n })
	return made
}

// callLog reads the workloads' own log of hooked calls (SIMWORK_CALLS:
// pid tid symbol count device), one line at a time.
func (w *world) callLog(fn func(pid uint32, sym string, n int)) {
	w.t.Helper()
	f, err := os.Open(w.calls)
	if err != nil {
		w.t.Fatalf("workload call log: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 5 {
			continue
		}
		if _, _, hooked := cuda.Lookup(fs[2]); !hooked {
			continue
		}
		pid, _ := strconv.ParseUint(fs[0], 10, 32)
		n, _ := strconv.Atoi(fs[3])
		fn(uint32(pid), fs[2], n)
	}
}

// stored counts the call events in a run.db, per symbol (application
// calls only).
func stored(t *testing.T, db string) (map[string]int, []store.Event, *store.StopInfo) {
	t.Helper()
	r, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := map[string]int{}
	var evs []store.Event
	r.Events(func(e *store.Event) error {
		if e.Depth == 0 {
			got[e.Name]++
		}
		c := *e
		c.Key = append([]byte(nil), e.Key...)
		evs = append(evs, c)
		return nil
	})
	stop, err := r.Stop()
	if err != nil {
		t.Fatal(err)
	}
	return got, evs, stop
}

// checkComplete asserts that every hooked call the workload made is in the
// run, nothing more, and nothing was lost (and that zero loss is recorded
// as zero, not absent).
func (w *world) checkComplete(db string) {
	w.t.Helper()
	made := w.callsMade()
	got, _, stop := stored(w.t, db)
	for sym, n := range made {
		if got[sym] != n {
			w.t.Errorf("%s: %d calls made, %d events stored", sym, n, got[sym])
		}
	}
	for sym, n := range got {
		if made[sym] == 0 {
			w.t.Errorf("%s: %d events stored for calls the workload did not make", sym, n)
		}
	}
	if stop == nil {
		w.t.Fatal("no stop record")
	}
	st := stop.Stats
	if st.LostCalls != 0 || st.LostInflight != 0 || st.TooDeep != 0 {
		w.t.Errorf("losses recorded: %+v", st)
	}
	total := 0
	for _, n := range made {
		total += n
	}
	if st.Calls != uint64(total) || st.Events != uint64(total) {
		w.t.Errorf("stop record counts %d calls seen and %d stored; the workload made %d", st.Calls, st.Events, total)
	}
}

// waitFor polls cond for up to d.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}

// callsByPID reads the workloads' own count of hooked calls, per process.
func (w *world) callsByPID() map[uint32]int {
	made := map[uint32]int{}
	w.callLog(func(pid uint32, _ string, n int) { made[pid] += n })
	return made
}

// processesOf reads the process records of a run.db.
func processesOf(t *testing.T, db string) []store.Process {
	t.Helper()
	r, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ps, err := r.Processes()
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// script writes a bash script into the world's directory.
func (w *world) script(name, body string) string {
	w.t.Helper()
	p := filepath.Join(w.dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/bash\nS="+simwork+"\n"+body), 0o755); err != nil {
		w.t.Fatal(err)
	}
	return p
}

// valText shows an optional value in a message.
func valText(v *uint64) string {
	if v == nil {
		return "none"
	}
	return strconv.FormatUint(*v, 10)
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// startWorkload runs simwork outside the recorder, as an unrelated process.
func (w *world) startWorkload(script string) *exec.Cmd {
	w.t.Helper()
	cmd := exec.Command(simwork, script)
	cmd.Env = w.environ()
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// startRecorder runs `forensic record` in the background and waits until
// it says it is recording.
func (w *world) startRecorder(flags ...string) (*exec.Cmd, string, *strings.Builder) {
	w.t.Helper()
	db := filepath.Join(w.dir, "run.db")
	args := append([]string{"record", "-o", db, "--force", "--libnvidia-ml", simNVML}, flags...)
	cmd := binCommand(bin{w: w}, args...)
	var stderr strings.Builder
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := false
		for sc.Scan() {
			stderr.WriteString(sc.Text() + "\n")
			if !once && strings.Contains(sc.Text(), "recording") {
				once = true
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		w.t.Fatalf("recorder not ready: %s", stderr.String())
	}
	w.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); pw.Close() })
	return cmd, db, &stderr
}

func waitExit(t *testing.T, cmd *exec.Cmd, d time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(d):
		cmd.Process.Kill()
		t.Fatalf("%s did not exit within %v", cmd.Path, d)
	}
}

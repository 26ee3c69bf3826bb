package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/retrivium/forensic/flight"
	"github.com/retrivium/forensic/internal/e2eenv"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// flightRun is a flight recording in progress: its directory, the
// recorder's process and log, and what the poller measured.
type flightRun struct {
	t       *testing.T
	dir     string // the recording
	work    string // the workload's files
	cmd     *exec.Cmd
	log     bytes.Buffer
	metrics string // host:port
	done    chan error
	// diskMax is the most the segments and the index took at any poll;
	// rss the recorder's resident memory, once a second, in KiB.
	diskMax int64
	polls   int
	rss     []int64
}

// freePort returns a local TCP address nothing listens on.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startFlight starts `forensic record --flight` of `sh -c script` with
// flags.
func (w *world) startFlight(script string, flags ...string) *flightRun {
	w.t.Helper()
	fr := &flightRun{t: w.t, dir: filepath.Join(w.dir, "flight"), work: filepath.Join(w.dir, "work"),
		metrics: freePort(w.t), done: make(chan error, 1)}
	os.MkdirAll(fr.work, 0o755)
	args := append([]string{"record", "--flight", "-o", fr.dir, "--libnvidia-ml", simNVML,
		"--metrics-addr", fr.metrics}, flags...)
	args = append(args, "--", "/bin/sh", "-c", script)
	fr.cmd = binCommand(bin{w: w, env: []string{"S=" + simwork}}, args...)
	fr.cmd.Dir = fr.work
	fr.cmd.Stdout, fr.cmd.Stderr = &fr.log, &fr.log
	if err := fr.cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() { fr.done <- fr.cmd.Wait() }()
	w.t.Cleanup(func() {
		// A test that failed part way: the workloads here wait for
		// work/stop, and the recorder's kill would leave them waiting.
		os.WriteFile(filepath.Join(fr.work, "stop"), nil, 0o644)
		fr.cmd.Process.Kill()
	})
	return fr
}

// poll measures the disk the recording takes (every file but the
// snapshots) and, every fourth call, the recorder's memory.
func (fr *flightRun) poll() {
	var n int64
	filepath.WalkDir(fr.dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil // a segment deleted while the walk ran
		}
		if d.IsDir() && d.Name() == flight.SnapshotDir {
			return filepath.SkipDir
		}
		if fi, err := d.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Sys().(*syscall.Stat_t).Blocks * 512
		}
		return nil
	})
	fr.diskMax = max(fr.diskMax, n)
	if fr.polls%4 == 0 {
		if kb := vmRSS(fr.cmd.Process.Pid); kb > 0 {
			fr.rss = append(fr.rss, kb)
		}
	}
	fr.polls++
}

// vmRSS reads a process's resident memory in KiB (0 when gone).
func vmRSS(pid int) int64 {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}

// pollUntil polls every 250 ms until cond holds (or the recorder exits,
// or d passes: fatal).
func (fr *flightRun) pollUntil(d time.Duration, what string, cond func() bool) {
	fr.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		select {
		case err := <-fr.done:
			fr.done <- err
			if cond() {
				return
			}
			fr.t.Fatalf("the recorder exited (%v) before %s:\n%s", err, what, fr.log.String())
		case <-time.After(250 * time.Millisecond):
		}
		fr.poll()
		if time.Now().After(deadline) {
			fr.cmd.Process.Signal(os.Interrupt)
			fr.t.Fatalf("%s did not happen within %v:\n%s", what, d, fr.log.String())
		}
	}
}

// clockLines reads the "clock NS" lines simwork printed into a file: the
// run-clock bracket of the failure between them.
func clockLines(path string) []int64 {
	data, _ := os.ReadFile(path)
	var out []int64
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "clock "); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// analyzeDir runs `forensic analyze --json` on a flight directory and
// returns the report and what it said on stderr.
func analyzeDir(t *testing.T, dir string) (*report.Report, string) {
	t.Helper()
	cmd := binCommand(bin{}, "analyze", "--json", dir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("forensic analyze --json %s: %v: %s", dir, err, errb.String())
	}
	var rep report.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("analyze --json is not a report: %v", err)
	}
	return &rep, errb.String()
}

// firstIn checks that the report's first failure is an out-of-memory
// allocation inside the bracket [from, to].
func firstIn(t *testing.T, what string, rep *report.Report, bracket []int64) {
	t.Helper()
	f := rep.FirstFailure
	if f == nil || len(bracket) != 2 || f.Symbol != "cuMemAlloc_v2" || f.TimeNS < bracket[0] || f.TimeNS > bracket[1] {
		t.Errorf("%s: first failure %+v, want the allocation made in %v", what, f, bracket)
	}
}

// scrape reads the recorder's /metrics into families by name.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	return fams
}

// value returns a metric's value for the labels given (name=value ...).
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.Metric {
		match := true
		for _, l := range labels {
			k, v, _ := strings.Cut(l, "=")
			if !slices.ContainsFunc(m.Label, func(p *dto.LabelPair) bool { return p.GetName() == k && p.GetValue() == v }) {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// container is a private copy of the simulated libcuda seen at a path of
// its own inside a mount namespace (not on the host), in a pod's cgroup.
type container struct {
	lib, mnt, hostname, cgroup string
	podUID                     string
}

// newContainer prepares the container's files and its pod cgroup (removed
// at the end of the test).
func newContainer(t *testing.T, dir string) *container {
	t.Helper()
	c := &container{lib: filepath.Join(dir, "ctr", "lib"), mnt: filepath.Join(dir, "ctr", "mnt"),
		hostname: filepath.Join(dir, "ctr", "hostname"), podUID: "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"}
	os.MkdirAll(c.lib, 0o755)
	os.MkdirAll(c.mnt, 0o755)
	data, err := os.ReadFile(simCUDA)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(c.lib, "libcuda.so.1"), data, 0o755)
	os.WriteFile(c.hostname, []byte("e2e-pod-0\n"), 0o644)
	root := cgroup2Root()
	e2eenv.Need(t, root != "", "a cgroup2 hierarchy (for a pod's cgroup)")
	e2eenv.Need(t, exists("/usr/bin/unshare") || exists("/bin/unshare"), "unshare (util-linux), for a container's namespaces")
	c.cgroup = filepath.Join(root, "forensic-e2e-kubepods", "pod"+c.podUID)
	if err := os.MkdirAll(c.cgroup, 0o755); err != nil {
		t.Fatalf("pod cgroup: %v", err)
	}
	t.Cleanup(func() {
		os.Remove(c.cgroup)
		os.Remove(filepath.Dir(c.cgroup))
	})
	return c
}

// cgroup2Root finds where the cgroup2 hierarchy is mounted.
func cgroup2Root() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if fs := strings.Fields(pre); ok && strings.HasPrefix(post, "cgroup2 ") && len(fs) >= 5 {
			return fs[4]
		}
	}
	return ""
}

// run is the shell line that runs a simwork script in the container: a
// new mount and pid namespace where the private libcuda is at the mount
// point (the host sees an empty directory there) and /etc/hostname names
// the pod, in the pod's cgroup, with the pod's namespace in its
// environment.
func (c *container) run(script string) string {
	inner := fmt.Sprintf(`mount --bind %s %s && mount --bind %s /etc/hostname && echo 0 > %s/cgroup.procs && SIMWORK_LIBCUDA=%s/libcuda.so.1 POD_NAMESPACE=e2e-ns exec "$S" %q`,
		c.lib, c.mnt, c.hostname, c.cgroup, c.mnt, script)
	return fmt.Sprintf("unshare --mount --pid --fork /bin/sh -c '%s'", inner)
}

// Flight mode for a compressed stretch of days: a steady call rate, some
// three thousand short-lived processes, two failures (one in a container
// with a libcuda of its own), a 16 MiB bound that retention must enforce,
// and windows of 3 s around each failure. The disk bound holds at every
// poll, the recorder's memory stays flat, analyze reads the live
// recording (and a copy of it with a snapshot) with the right first
// failure, /metrics tells the state, the container's libcuda is attached
// and detached once nobody maps it, its process names its pod, and at the
// end every failure's window is whole and every event is either read or
// in a deleted stretch.
func TestFlightCompressedDays(t *testing.T) {
	w := newWorld(t)
	ctr := newContainer(t, w.dir)
	const maxSize, keep = 16 << 20, 3 * time.Second
	script := strings.Join([]string{
		`"$S" 'init; use 0; paced 7000 60' > paced.txt &`,
		`(i=0; while [ $i -lt 30 ]; do "$S" 'init; use 0; repeat 100 { fork { init; use 0; repeat 10 { alloc 64K; free } } }; wait' > /dev/null; sleep 1.5; i=$((i+1)); done) &`,
		`sleep 12`,
		`"$S" 'clock; init; use 0; alloc 100G; clock' > f1.txt 2>&1`,
		`sleep 8`,
		ctr.run("clock; init; use 0; repeat 200 { alloc 1M; free }; sleep 3000; alloc 300G; clock") + ` > f2.txt 2>&1`,
		`wait`,
	}, "\n")
	fr := w.startFlight(script, "--max-size", "16MiB", "--keep-before", keep.String(), "--keep-after", keep.String(),
		"--segment-age", "2s")

	// While it records.
	fr.pollUntil(60*time.Second, "the container's failure", func() bool { return len(clockLines(filepath.Join(fr.work, "f2.txt"))) == 2 })
	f1, f2 := clockLines(filepath.Join(fr.work, "f1.txt")), clockLines(filepath.Join(fr.work, "f2.txt"))
	end := time.Now().Add(time.Second) // a commit after it
	fr.pollUntil(10*time.Second, "a second of recording after it", func() bool { return time.Now().After(end) })
	fr.checkLive(f1)
	fr.checkMetrics()
	fr.checkSnapshotCopy(f1)
	fr.pollUntil(90*time.Second, "the end of the workload", func() bool {
		select {
		case err := <-fr.done:
			fr.done <- err
			return true
		default:
			return false
		}
	})
	if err := <-fr.done; err != nil {
		t.Fatalf("record: %v\n%s", err, fr.log.String())
	}

	// After.
	fr.checkEnd(f1, f2, keep)
	fr.checkContainer(ctr)
	fr.checkBounded(maxSize)
}

// checkLive analyzes the recording while it runs: the live segment comes
// from a copy the recorder makes, and the first failure is the first.
func (fr *flightRun) checkLive(f1 []int64) {
	t := fr.t
	rep, said := analyzeDir(t, fr.dir)
	firstIn(t, "live", rep, f1)
	if rep.Run.Ended != "recording" || rep.Run.Flight == nil || rep.Run.Flight.Live != "copy" {
		t.Errorf("live: ended %q, flight %+v; want a recording read with a copy of its live segment", rep.Run.Ended, rep.Run.Flight)
	}
	if !strings.Contains(said, "the live one from a copy its recorder made now") {
		t.Errorf("live: analyze said %q, want how the live segment was read", said)
	}
}

// checkMetrics scrapes a recorder in the middle of a recording.
func (fr *flightRun) checkMetrics() {
	t := fr.t
	fams := scrape(t, fr.metrics)
	failed, _ := value(fams, "forensic_failed_calls_total", "class=allocation", "symbol=cuMemAlloc_v2", "gpu=0")
	oom, _ := value(fams, "forensic_failed_call_results_total", "class=allocation", "result=CUDA_ERROR_OUT_OF_MEMORY")
	maxBytes, _ := value(fams, "forensic_flight_max_bytes")
	used, _ := value(fams, "forensic_flight_segments_bytes")
	dropped, _ := value(fams, "forensic_flight_dropped_segments_total", "reason=retention")
	last, okLast := value(fams, "forensic_last_failure_timestamp_seconds")
	libs, _ := value(fams, "forensic_attached_libraries")
	events, _ := value(fams, "forensic_events_stored_total")
	switch {
	case failed != 2 || oom != 2:
		t.Errorf("metrics: %v allocations failed on GPU 0, %v out of memory, want 2 and 2", failed, oom)
	case maxBytes != 16<<20 || used <= 0 || used > maxBytes:
		t.Errorf("metrics: segments take %v bytes of at most %v", used, maxBytes)
	case dropped < 1:
		t.Errorf("metrics: %v segments dropped by retention, want some by now", dropped)
	case !okLast || time.Since(time.Unix(int64(last), 0)) > time.Minute:
		t.Errorf("metrics: last failure at %v, want within the last minute", last)
	case libs < 1 || events < 10000:
		t.Errorf("metrics: %v libraries attached, %v events stored", libs, events)
	}
	resp, err := http.Get("http://" + fr.metrics + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
		t.Errorf("/healthz: %d %q", resp.StatusCode, body)
	}
}

// checkSnapshotCopy takes a snapshot, copies the recording elsewhere as
// an operator would, without the live segment (a copy taken while it was
// written may catch it torn), and analyzes the copy: its live segment is
// read from the snapshot.
func (fr *flightRun) checkSnapshotCopy(f1 []int64) {
	t := fr.t
	// SIGUSR1 takes one too (systemctl reload).
	fr.cmd.Process.Signal(syscall.SIGUSR1)
	fr.pollUntil(10*time.Second, "the snapshot SIGUSR1 asked for", func() bool {
		snaps, _ := flight.Snapshots(fr.dir)
		return len(snaps) == 1 && strings.Contains(fr.log.String(), "snapshot of the live segment: "+snaps[0].Path)
	})
	// The copy holds the live segment's snapshot only if the segment did
	// not rotate between the snapshot and the copy of the index: an
	// operator who copied across a rotation takes a new snapshot.
	cp := filepath.Join(filepath.Dir(fr.dir), "copy")
	for attempt := 1; ; attempt++ {
		if fr.snapshotAndCopy(cp) || attempt == 3 {
			break
		}
		os.RemoveAll(cp)
	}
	rep, _ := analyzeDir(t, cp)
	firstIn(t, "copy with a snapshot", rep, f1)
	if f := rep.Run.Flight; f == nil || f.Live != "snapshot" {
		t.Errorf("copy: flight %+v, want the live segment read from its snapshot", f)
	}
}

// snapshotAndCopy takes a snapshot with `forensic snapshot` and copies
// the recording to cp without its live segment. It reports whether the
// copied index's live segment is the one the snapshot copies.
func (fr *flightRun) snapshotAndCopy(cp string) bool {
	t := fr.t
	out, err := binCommand(bin{}, "snapshot", fr.dir).CombinedOutput()
	path, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "wrote ")
	if err != nil || !ok || !exists(path) {
		t.Fatalf("forensic snapshot: %v: %s", err, out)
	}
	snap := filepath.Join(flight.SnapshotDir, filepath.Base(path))
	index, err := os.ReadFile(filepath.Join(fr.dir, flight.IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	var x flight.Index
	if err := json.Unmarshal(index, &x); err != nil {
		t.Fatal(err)
	}
	names := []string{flight.IndexFile, snap}
	live := false
	for _, s := range x.Segments {
		if !s.Live {
			names = append(names, s.File)
		} else {
			live = strings.HasPrefix(filepath.Base(path), fmt.Sprintf("%08d-", s.Seq))
		}
	}
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(fr.dir, n))
		if n == flight.IndexFile {
			data, err = index, nil // the index the names came from
		}
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted by retention since the index was read
		}
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Dir(filepath.Join(cp, n)), 0o700)
		if err := os.WriteFile(filepath.Join(cp, n), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return live
}

// checkEnd analyzes the finished recording: the first failure, both
// failures' windows whole, the events read and deleted adding up to the
// recorder's count.
func (fr *flightRun) checkEnd(f1, f2 []int64, keep time.Duration) {
	t := fr.t
	rep, _ := analyzeDir(t, fr.dir)
	firstIn(t, "end", rep, f1)
	times := []int64{}
	if rep.FirstFailure != nil {
		times = append(times, rep.FirstFailure.TimeNS)
	}
	for _, f := range rep.Failures {
		if f.TimeNS >= f2[0] && f.TimeNS <= f2[1] {
			times = append(times, f.TimeNS)
		}
	}
	if len(times) != 2 {
		t.Errorf("end: failures at %v; want the first and the container's (in %v) among %d", times, f2, len(rep.Failures))
	}
	fl := rep.Run.Flight
	if rep.Run.Ended != "clean" || fl == nil || fl.Live != "none" || fl.DroppedRanges == 0 ||
		fl.EventsRecorded != fl.EventsRead+fl.DroppedCalls || len(fl.NotRead) != 0 {
		t.Errorf("end: ended %q, flight %+v: want every event read or in a deleted stretch", rep.Run.Ended, fl)
	}
	x, err := flight.ReadIndex(fr.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range times {
		from, to := f-int64(keep), f+int64(keep)
		for _, d := range x.Dropped {
			if d.From <= to && from <= d.To {
				t.Errorf("the window [%d, %d] of the failure at %d lost %+v", from, to, f, d)
			}
		}
	}
	t.Logf("%d segments on disk, %d dropped ranges, %d events read of %d recorded, %d processes",
		len(x.Segments), len(x.Dropped), fl.EventsRead, fl.EventsRecorded, len(rep.Processes))
	// The other readers take the directory as one recording too.
	for _, args := range [][]string{{"report", fr.dir, "-o", "flight.html"}, {"export", fr.dir, "-o", "flight.pftrace"}} {
		cmd := binCommand(bin{}, args...)
		cmd.Dir = fr.work
		out, err := cmd.CombinedOutput()
		st, serr := os.Stat(filepath.Join(fr.work, args[len(args)-1]))
		if err != nil || serr != nil || st.Size() == 0 {
			t.Errorf("forensic %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
}

// checkContainer: the private libcuda in the container's mount namespace
// was attached through the process's root and detached once its process
// exited; the process names its pod.
func (fr *flightRun) checkContainer(c *container) {
	t := fr.t
	set, err := flight.Open(fr.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	libs, _ := set.Libraries()
	want := filepath.Join(c.mnt, "libcuda.so.1")
	found := false
	for _, l := range libs {
		if l.Path == want {
			found = true
			if l.Error != "" || !strings.HasPrefix(l.HostPath, "/proc/") || len(l.Attached) == 0 {
				t.Errorf("container library %+v: want it attached through /proc/PID/root", l)
			}
		}
	}
	if !found {
		t.Errorf("no library at %s among %d: %s", want, len(libs), fr.log.String())
	}
	if !strings.Contains(fr.log.String(), "detached "+want) {
		t.Errorf("the container's libcuda was not detached after its process exited:\n%s", fr.log.String())
	}
	procs, _ := set.Processes()
	pod := &store.Pod{UID: c.podUID, Namespace: "e2e-ns", Name: "e2e-pod-0"}
	if !slices.ContainsFunc(procs, func(p store.Process) bool {
		return p.Pod != nil && *p.Pod == *pod && strings.Contains(p.Cgroup, "pod"+c.podUID)
	}) {
		t.Errorf("no process names the pod %+v", pod)
	}
}

// checkBounded: the disk bound held at every poll, and the recorder's
// memory did not grow with the processes it saw come and go.
func (fr *flightRun) checkBounded(maxSize int64) {
	t := fr.t
	// The index and its temporary copy are the only files besides the
	// segments: a few KiB.
	if fr.diskMax > maxSize+64<<10 || fr.polls < 100 {
		t.Errorf("the recording took up to %d bytes (%d polls); the bound is %d", fr.diskMax, fr.polls, maxSize)
	}
	n := len(fr.rss)
	if n < 20 {
		t.Fatalf("%d memory readings", n)
	}
	early, late := slices.Max(fr.rss[n/5:n/2]), slices.Max(fr.rss[n*3/4:])
	if late > early+early/4 {
		t.Errorf("the recorder's memory grew from %d KiB to %d KiB (readings %v)", early, late, fr.rss)
	}
	t.Logf("disk at most %d bytes of %d over %d polls; memory %d KiB early, %d KiB late", fr.diskMax, maxSize, fr.polls, early, late)
}

// A restarted recorder refuses a directory that holds a recording, saying
// how to keep it; with --keep-previous the recording found is moved to
// DIR/previous, whole, and a new one starts.
func TestFlightRestart(t *testing.T) {
	w := newWorld(t)
	dir := filepath.Join(w.dir, "flight")
	record := func(flags ...string) (int, string) {
		args := append([]string{"record", "--flight", "-o", dir, "--libcuda", simCUDA, "--libnvidia-ml", simNVML}, flags...)
		cmd := binCommand(bin{w: w}, append(args, "--", simwork, "init; use 0; alloc 1M; free")...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	if code, out := record(); code != 0 {
		t.Fatalf("first recording: exit %d: %s", code, out)
	}
	first, err := flight.ReadIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	if code, out := record(); code != 1 || !strings.Contains(out, "holds a flight recording already") || !strings.Contains(out, "--keep-previous") {
		t.Errorf("second recording without --keep-previous: exit %d: %s", code, out)
	}
	if code, out := record("--keep-previous"); code != 0 {
		t.Fatalf("with --keep-previous: exit %d: %s", code, out)
	}
	prev, err := flight.ReadIndex(filepath.Join(dir, flight.PreviousDir))
	now, err2 := flight.ReadIndex(dir)
	if err != nil || err2 != nil || prev.ID != first.ID || now.ID == first.ID {
		t.Fatalf("previous %v (%v), now %v (%v): want the first recording kept whole and a new one", prev, err, now, err2)
	}
	for _, d := range []string{filepath.Join(dir, flight.PreviousDir), dir} {
		rep, _ := analyzeDir(t, d)
		if rep.Run.Ended != "clean" || rep.Run.Events != 6 {
			t.Errorf("%s: ended %q with %d events, want a clean recording of the six calls (init, use, alloc, free)", d, rep.Run.Ended, rep.Run.Events)
		}
	}
}

// A flight recording in small segments whose
// workload fails twice is copied as an operator would, and a segment is
// removed from the copy. Without its last segment the recording is not
// said to have stopped uncleanly: segment N is missing and its records are
// lost, named once, with advice to restore it, and stderr says so.
// Without the segment of the first failure, the second cannot be
// established as the first. Given with a run.db of another job, the
// flight recording is analyzed apart.
func TestFlightLostSegmentNamed(t *testing.T) {
	w := newWorld(t)
	fr := w.startFlight(`"$S" 'init; use 0; alloc 1G; sleep 1500; alloc 100G; sleep 2500; alloc 200G; sleep 2500'`,
		"--segment-age", "1s", "--libcuda", simCUDA)
	select {
	case err := <-fr.done:
		if err != nil {
			t.Fatalf("record: %v\n%s", err, fr.log.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the flight recording did not end:\n%s", fr.log.String())
	}
	x, err := flight.ReadIndex(fr.dir)
	if err != nil || len(x.Segments) < 4 {
		t.Fatalf("index %+v %v: want several segments", x, err)
	}
	var failed []int
	for i, s := range x.Segments {
		if s.Failures > 0 {
			failed = append(failed, i)
		}
	}
	if len(failed) != 2 || failed[1] == len(x.Segments)-1 {
		t.Fatalf("segments %+v: want the two failures in two segments before the last", x.Segments)
	}
	last := x.Segments[len(x.Segments)-1]
	cp := copyDir(t, fr.dir, filepath.Join(w.dir, "copy-last"), last.File)
	out, stderr, code := runBin(t, bin{}, "analyze", cp).outputs()
	if code != 0 || !strings.Contains(stderr, "segment "+itoa(int(last.Seq))+" is missing") {
		t.Errorf("analyze without the last segment: exit %d, stderr %q", code, stderr)
	}
	// The recorder stopped cleanly: the header says so, whatever the copy
	// lost afterwards.
	if header, _, _ := strings.Cut(out, "\nVERDICT"); !regexp.MustCompile(`, clean, `).MatchString(strings.Join(strings.Fields(header), " ")) {
		t.Errorf("without its last segment the header does not say the recording ended clean:\n%s", header)
	}
	if !strings.Contains(out, "segment "+itoa(int(last.Seq))+" is missing: its records are lost") ||
		strings.Count(out, filepath.Base(last.File)) != 1 {
		t.Errorf("the missing segment is not named once as lost records:\n%s", out)
	}
	js, _, _ := runBin(t, bin{}, "analyze", "--json", cp).outputs()
	rep := decodeReport(t, []byte(js))
	if rep.Run.Ended != "clean" || rep.Run.Flight == nil || !slices.Equal(rep.Run.Flight.SegmentsLost, []uint64{last.Seq}) {
		t.Errorf("ended %q, flight %+v; want clean with segment %d lost", rep.Run.Ended, rep.Run.Flight, last.Seq)
	}

	first := x.Segments[failed[0]]
	cp = copyDir(t, fr.dir, filepath.Join(w.dir, "copy-first"), first.File)
	js, _, _ = runBin(t, bin{}, "analyze", "--json", cp).outputs()
	rep = decodeReport(t, []byte(js))
	if rep.Attribution != report.AttrMissingEvidence || !hasMissing(rep.Missing, "segment "+itoa(int(first.Seq))+" is missing") {
		t.Errorf("without the first failure's segment: attribution %s, missing %+v", rep.Attribution, rep.Missing)
	}

	other := filepath.Join(w.dir, "other.db")
	w.recordJob(w.dir, map[string][]string{"other.db": {"SLURM_JOB_ID=77"}}, map[string]string{"other.db": "init; use 0; alloc 100G"})
	if _, stderr, code := runBin(t, bin{}, "analyze", "--json", fr.dir, other).outputs(); code != 1 || !strings.Contains(stderr, "2 runs are 2 separate jobs") {
		t.Errorf("a flight recording with another job's run.db: exit %d, %q", code, stderr)
	}
}

// copyDir copies a flight recording's directory without one file.
func copyDir(t *testing.T, from, to, without string) string {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o700)
		}
		if rel == without || !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), data, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return to
}

// A flight recording's report says flight mode and how its segments were
// read, not just the mode its command was recorded in.
func TestFlightHeaderSaysHowItWasRead(t *testing.T) {
	w := newWorld(t)
	script := `"$S" 'init; use 0; alloc 1G; sleep 1500; alloc 100G; sleep 1500'`
	fr := w.startFlight(script, "--segment-age", "1s")
	select {
	case err := <-fr.done:
		if err != nil {
			t.Fatalf("record: %v\n%s", err, fr.log.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the flight recording did not end")
	}
	page := filepath.Join(w.dir, "flight.html")
	if r := runBin(t, bin{}, "report", fr.dir, "-o", page); r.code != 0 {
		t.Fatalf("report: %s", r.stderr)
	}
	text := strings.Join(strings.Fields(pageText(string(mustRead(t, page)))), " ")
	for _, want := range []string{"recorded flight mode (spawn)", "segments read", "deleted nothing"} {
		if !strings.Contains(text, want) {
			t.Errorf("the header lacks %q", want)
		}
	}
}

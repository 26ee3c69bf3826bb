// Package benchutil holds what the benchmark programs under bench/ share:
// paths of the built tools, running the simulated workload (simwork)
// alone or under `forensic record`, sampling a process's CPU time and
// memory from /proc, the empty-probe floor, and small statistics and
// markdown helpers.
//
// Everything here uses public tools only: the forensic binary, the
// simulator built by `make`, /proc, and cilium/ebpf.
package benchutil

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/retrivium/forensic/store"
)

// Env locates the built tools. Programs run from the repository root
// (scripts/bench.sh does).
type Env struct {
	Root     string
	Forensic string // bin/forensic, or $BENCH_FORENSIC
	Simwork  string // build/simgpu/scenarios/simwork
	LibCUDA  string // build/bench/lib/libcuda.so.1, a copy of build/simgpu's
	LibNVML  string // build/simgpu/libnvidia-ml.so.1
	Work     string // build/bench
	// Quick shortens every duration (BENCH_QUICK=1), for a smoke run.
	Quick bool
}

// Setup finds the repository root from the working directory and checks
// that `make` has built what the benchmarks run.
func Setup() (*Env, error) {
	dir, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil, errors.New("run from inside the repository (no go.mod found)")
		}
		dir = parent
	}
	forensic := filepath.Join(dir, "bin/forensic")
	if f := os.Getenv("BENCH_FORENSIC"); f != "" {
		// scripts/bench.sh builds its own copy with the harness, so a
		// rebuild of bin/forensic during the run cannot swap the binary
		// under the measurements.
		if forensic, err = filepath.Abs(f); err != nil {
			return nil, err
		}
	}
	e := &Env{Root: dir,
		Forensic: forensic,
		Simwork:  filepath.Join(dir, "build/simgpu/scenarios/simwork"),
		LibCUDA:  filepath.Join(dir, "build/simgpu/libcuda.so.1"),
		LibNVML:  filepath.Join(dir, "build/simgpu/libnvidia-ml.so.1"),
		Work:     filepath.Join(dir, "build/bench"),
		Quick:    os.Getenv("BENCH_QUICK") == "1",
	}
	for _, p := range []string{e.Forensic, e.Simwork, e.LibCUDA, e.LibNVML} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%s missing: run make first", p)
		}
	}
	if err := os.MkdirAll(e.Work, 0o755); err != nil {
		return nil, err
	}
	// A private copy of the simulated libcuda: uprobes belong to a file
	// (inode), so processes of anyone else using build/simgpu on this
	// machine (tests) neither hit the benchmark's probes nor slow down
	// under them.
	data, err := os.ReadFile(e.LibCUDA)
	if err != nil {
		return nil, err
	}
	lib := filepath.Join(e.Work, "lib", "libcuda.so.1")
	if old, err := os.ReadFile(lib); err != nil || !bytes.Equal(old, data) {
		if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
			return nil, err
		}
		tmp := lib + ".tmp"
		if err := os.WriteFile(tmp, data, 0o755); err != nil {
			return nil, err
		}
		if err := os.Rename(tmp, lib); err != nil {
			return nil, err
		}
	}
	e.LibCUDA = lib
	return e, nil
}

// Dur is full, or quick under BENCH_QUICK=1.
func (e *Env) Dur(full, quick time.Duration) time.Duration {
	if e.Quick {
		return quick
	}
	return full
}

// SimEnv is the environment of a simulated workload: the simulator's
// libcuda and a state file of its own (a fresh 16 GiB GPU).
func (e *Env) SimEnv(state string, extra ...string) []string {
	env := os.Environ()
	env = append(env, "SIMWORK_LIBCUDA="+e.LibCUDA, "SIMGPU_STATE="+state)
	return append(env, extra...)
}

// Logf reports progress on stderr (stdout carries the markdown).
func Logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", a...)
}

// RunSimwork runs the workload alone and returns its stdout.
func (e *Env) RunSimwork(state, script string) (string, error) {
	cmd := exec.Command(e.Simwork, script)
	cmd.Env = e.SimEnv(state)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("simwork %q: %v: %s", script, err, errb.String())
	}
	return out.String(), nil
}

// Clocks returns the values of the "clock NS" lines simwork printed.
func Clocks(stdout string) []int64 {
	var out []int64
	for _, l := range strings.Split(stdout, "\n") {
		if v, ok := strings.CutPrefix(l, "clock "); ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// Elapsed is the time between the first two clock lines.
func Elapsed(stdout string) (time.Duration, error) {
	c := Clocks(stdout)
	if len(c) < 2 {
		return 0, fmt.Errorf("workload printed %d clock lines, want 2: %q", len(c), stdout)
	}
	return time.Duration(c[1] - c[0]), nil
}

// Paced sums the summary lines of simwork's paced steps (one per thread):
// "paced CALLS calls FAILED failed NS ns RATE calls/s".
type Paced struct {
	Threads int
	Calls   uint64
	Failed  uint64
	// Rate is the sum of the threads' achieved rates (calls/s).
	Rate float64
	// Longest is the longest thread's duration.
	Longest time.Duration
}

// ParsePaced reads the paced summary lines.
func ParsePaced(stdout string) (Paced, error) {
	var p Paced
	for _, l := range strings.Split(stdout, "\n") {
		f := strings.Fields(l)
		if len(f) != 9 || f[0] != "paced" {
			continue
		}
		calls, err1 := strconv.ParseUint(f[1], 10, 64)
		failed, err2 := strconv.ParseUint(f[3], 10, 64)
		ns, err3 := strconv.ParseInt(f[5], 10, 64)
		rate, err4 := strconv.ParseFloat(f[7], 64)
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return p, fmt.Errorf("paced line %q: %v", l, err)
		}
		p.Threads++
		p.Calls += calls
		p.Failed += failed
		p.Rate += rate
		p.Longest = max(p.Longest, time.Duration(ns))
	}
	if p.Threads == 0 {
		return p, fmt.Errorf("no paced line in %q", stdout)
	}
	return p, nil
}

// RSSPoint is one reading of a process's resident memory.
type RSSPoint struct {
	At  time.Duration // since the process started
	RSS uint64        // VmRSS, bytes
	// The parts of VmRSS: anonymous memory (the Go heap and stacks),
	// file-backed pages (the mmap of run.db, the binary) and shared
	// memory (the BPF ring buffer's mapping).
	Anon, File, Shmem uint64
}

// Usage is what was read about one process from /proc.
type Usage struct {
	// CPU is utime+stime of the process's own threads (not its
	// children), read from /proc/PID/stat after it exited and before it
	// was reaped.
	CPU time.Duration
	// HWM is the largest VmHWM seen (peak resident memory).
	HWM uint64
	// RSS is VmRSS at each sampling tick.
	RSS  []RSSPoint
	Wall time.Duration
}

const clkTck = 100 // sysconf(_SC_CLK_TCK) is 100 on Linux x86-64

// procCPU reads utime+stime of a process (fields 14 and 15 of stat).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may contain spaces: fields start after ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("bad stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, errors.New("short stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration((ut + st) * int64(time.Second) / clkTck), nil
}

// memStatus is a reading of /proc/PID/status (bytes); zero once the
// process has no memory (a zombie).
type memStatus struct {
	rss, hwm, anon, file, shmem uint64
}

func procMem(pid int) memStatus {
	var m memStatus
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		var dst *uint64
		switch {
		case strings.HasPrefix(l, "VmRSS:"):
			dst = &m.rss
		case strings.HasPrefix(l, "VmHWM:"):
			dst = &m.hwm
		case strings.HasPrefix(l, "RssAnon:"):
			dst = &m.anon
		case strings.HasPrefix(l, "RssFile:"):
			dst = &m.file
		case strings.HasPrefix(l, "RssShmem:"):
			dst = &m.shmem
		default:
			continue
		}
		fs := strings.Fields(l)
		if len(fs) >= 2 {
			if v, err := strconv.ParseUint(fs[1], 10, 64); err == nil {
				*dst = v << 10
			}
		}
	}
	return m
}

// Watch starts cmd and samples its /proc entries every period until it
// exits; then reads its final CPU time while it is a zombie, reaps it,
// and returns its wait error.
func Watch(cmd *exec.Cmd, period time.Duration) (Usage, error) {
	var u Usage
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return u, err
	}
	pid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		// Wait for the exit without reaping, so /proc/PID/stat still
		// holds the final times.
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if err != unix.EINTR {
				break
			}
		}
		close(exited)
	}()
	t := time.NewTicker(period)
	defer t.Stop()
	sample := func() {
		m := procMem(pid)
		if m.rss > 0 {
			u.RSS = append(u.RSS, RSSPoint{At: time.Since(start), RSS: m.rss, Anon: m.anon, File: m.file, Shmem: m.shmem})
		}
		u.HWM = max(u.HWM, m.hwm)
	}
	sample()
loop:
	for {
		select {
		case <-t.C:
			sample()
		case <-exited:
			break loop
		}
	}
	u.Wall = time.Since(start)
	if c, err := procCPU(pid); err == nil {
		u.CPU = c
	}
	return u, cmd.Wait()
}

// RecordOpts describe one `forensic record` of a simwork script.
type RecordOpts struct {
	Bin    string   // the forensic binary (default: Env.Forensic)
	DB     string   // run.db to create (replaced)
	Flags  []string // extra record flags, e.g. --ring-size 1MiB
	Script string
	State  string        // SIMGPU_STATE
	Period time.Duration // /proc sampling period (default 200 ms)
}

// RecordResult is how it went.
type RecordResult struct {
	Stdout, Stderr string
	Usage          Usage
	Stop           *store.StopInfo
	Size           int64 // run.db bytes
}

// Record runs `forensic record` on a simwork script with the simulated
// libcuda and NVML, sampling the recorder's own /proc entries.
func (e *Env) Record(o RecordOpts) (*RecordResult, error) {
	if o.Period == 0 {
		o.Period = 200 * time.Millisecond
	}
	args := []string{"record", "-o", o.DB, "--force", "--libcuda", e.LibCUDA, "--libnvidia-ml", e.LibNVML}
	args = append(args, o.Flags...)
	args = append(args, "--", e.Simwork, o.Script)
	bin := e.Forensic
	if o.Bin != "" {
		bin = o.Bin
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = e.SimEnv(o.State)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	u, err := Watch(cmd, o.Period)
	res := &RecordResult{Stdout: out.String(), Stderr: errb.String(), Usage: u}
	if err != nil {
		return res, fmt.Errorf("forensic record %q: %v: %s", o.Script, err, errb.String())
	}
	if res.Stop, err = ReadStop(o.DB); err != nil {
		return res, err
	}
	if st, err := os.Stat(o.DB); err == nil {
		res.Size = st.Size()
	}
	return res, nil
}

// ReadStop reads the stop record of a run.db.
func ReadStop(db string) (*store.StopInfo, error) {
	r, err := store.Open(db)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	s, err := r.Stop()
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, fmt.Errorf("%s has no stop record", db)
	}
	return s, nil
}

// Median of xs (the mean of the middle two for an even count).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Verdict is "met" or "**missed**".
func Verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

// MiB formats bytes as MiB.
func MiB(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// Thousands formats an integer with thin separators (1,234,567).
func Thousands(v uint64) string {
	s := strconv.FormatUint(v, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// GoVersion is the Go toolchain that built the harness (and, through
// make, forensic).
func GoVersion() string { return runtime.Version() }

// Summary appends one row to the targets table scripts/bench.sh puts at
// the top of BENCHMARKS.md ($BENCH_SUMMARY; nothing when unset).
func Summary(section, target, measured string, ok bool) {
	SummaryText(section, target, measured, Verdict(ok))
}

// SummaryText is Summary with a verdict in words.
func SummaryText(section, target, measured, verdict string) {
	path := os.Getenv("BENCH_SUMMARY")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		Logf("summary: %v", err)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "| %s | %s | %s | %s |\n", section, target, measured, verdict)
}

// Command overhead measures what a hooked libcuda call costs the workload
// in four configurations, run interleaved for several rounds:
//
//	(a) no probes
//	(b) the empty-probe floor: an empty uprobe + uretprobe program pair,
//	    attached with uprobe_multi links and cookies on the same symbols
//	    forensic attaches (benchutil.Floor)
//	(c) forensic record
//	(d) the equivalent bpftrace script: a uprobe on each of the six
//	    symbols storing @start[tid] = nsecs, a uretprobe counting
//	    @calls = count() and deleting the entry
//
// The workload is simwork 'init; use 0; clock; mix N; clock' on the
// simulated libcuda: mix makes 6 hooked calls per iteration, and the two
// clock lines time the loop from inside the process, so process start and
// probe attachment are excluded. Per-call time = elapsed / 6N. It prints a
// markdown section on stdout.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/retrivium/forensic/bench/internal/benchutil"
)

var mixSymbols = []string{"cuMemAlloc_v2", "cuMemAllocAsync", "cuMemFreeAsync", "cuMemAllocHost_v2", "cuMemFreeHost", "cuMemFree_v2"}

const callsPerIter = 6

type config struct {
	key, name string
	run       func(n int) (time.Duration, error)
	perCall   []float64 // ns, one per round
}

func main() {
	rounds := flag.Int("rounds", 0, "interleaved rounds (default 7; 3 under BENCH_QUICK=1)")
	target := flag.Duration("target", 0, "how long a run under forensic should last (default 1.5s; 0.3s quick)")
	fixedN := flag.Int("n", 0, "mix iterations (default: calibrated to -target)")
	also := flag.String("also", "", "another forensic binary, measured as configuration (e) in the same rounds (a before/after comparison)")
	flag.Parse()
	if err := run(*rounds, *target, *fixedN, *also); err != nil {
		fmt.Fprintln(os.Stderr, "overhead:", err)
		os.Exit(1)
	}
}

// bench is what the configurations share: the environment, the floor's
// programs, bpftrace and its script, the workload's state and run.db.
type bench struct {
	env                     *benchutil.Env
	floor                   *benchutil.Floor
	bt, btVersion, btScript string
	state, db               string
	lastRecord              *benchutil.RecordResult
	rounds, n               int
	target                  time.Duration
	also                    string // another forensic binary: configuration (e)
}

func run(rounds int, target time.Duration, n int, also string) error {
	b, err := newBench(rounds, target, n)
	if err != nil {
		return err
	}
	b.also = also
	defer b.floor.Close()
	defer os.Remove(b.db)
	configs := b.configs()
	if b.n == 0 {
		if err := b.calibrate(configs[2]); err != nil {
			return err
		}
	}
	for r := 0; r < b.rounds; r++ {
		for _, c := range configs {
			d, err := c.run(b.n)
			if err != nil {
				return fmt.Errorf("(%s) %s: %w", c.key, c.name, err)
			}
			pc := float64(d) / float64(callsPerIter*b.n)
			c.perCall = append(c.perCall, pc)
			benchutil.Logf("overhead: round %d (%s) %-17s %v  %.0f ns/call", r+1, c.key, c.name, d.Round(time.Millisecond), pc)
		}
	}
	diags, err := diagnose(b.env, b.floor, b.bt, b.btScript, b.state, b.db, b.n)
	if err != nil {
		return fmt.Errorf("BPF statistics pass: %w", err)
	}
	med := map[string]float64{}
	for _, c := range configs {
		med[c.key] = benchutil.Median(c.perCall)
	}
	w := os.Stdout
	b.printConfigs(w, configs, med)
	printBreakdown(w, configs, diags)
	printOutside(w, med, diags)
	if b.lastRecord != nil {
		benchutil.Logf("overhead: last forensic run: %d events, recorder CPU %v", b.lastRecord.Stop.Stats.Events, b.lastRecord.Usage.CPU)
	}
	fmt.Fprintln(w)
	return nil
}

// newBench finds the tools, loads the floor and writes the bpftrace script.
func newBench(rounds int, target time.Duration, n int) (*bench, error) {
	env, err := benchutil.Setup()
	if err != nil {
		return nil, err
	}
	b := &bench{env: env, rounds: rounds, target: target, n: n,
		state: filepath.Join(env.Work, "overhead.state"), db: filepath.Join(env.Work, "overhead.db")}
	if b.rounds == 0 {
		b.rounds = 7
		if env.Quick {
			b.rounds = 3
		}
	}
	if b.target == 0 {
		b.target = env.Dur(1500*time.Millisecond, 300*time.Millisecond)
	}
	os.Remove(b.state)
	if b.bt, err = exec.LookPath("bpftrace"); err != nil {
		return nil, fmt.Errorf("bpftrace not found (scripts/bench.sh installs it with apt-get): %w", err)
	}
	b.btVersion = "bpftrace"
	if out, err := exec.Command(b.bt, "--version").Output(); err == nil {
		b.btVersion = strings.TrimSpace(string(out))
	}
	b.btScript = filepath.Join(env.Work, "overhead.bt")
	if err := os.WriteFile(b.btScript, []byte(bpftraceScript(env.LibCUDA)), 0o644); err != nil {
		return nil, err
	}
	if b.floor, err = benchutil.LoadFloor(); err != nil {
		return nil, err
	}
	return b, nil
}

func script(n int) string { return fmt.Sprintf("init; use 0; clock; mix %d; clock", n) }

// configs are the four configurations, in the order each round runs them.
func (b *bench) configs() []*config {
	env := b.env
	cs := []*config{
		{key: "a", name: "no probes", run: func(n int) (time.Duration, error) {
			out, err := env.RunSimwork(b.state, script(n))
			if err != nil {
				return 0, err
			}
			return benchutil.Elapsed(out)
		}},
		{key: "b", name: "empty-probe floor", run: func(n int) (time.Duration, error) {
			if err := b.floor.Attach(env.LibCUDA); err != nil {
				return 0, err
			}
			defer b.floor.Detach()
			out, err := env.RunSimwork(b.state, script(n))
			if err != nil {
				return 0, err
			}
			return benchutil.Elapsed(out)
		}},
		{key: "c", name: "forensic record", run: func(n int) (time.Duration, error) { return b.record("", n) }},
		{key: "d", name: "bpftrace", run: func(n int) (time.Duration, error) {
			return runBpftrace(b.bt, b.btScript, env, b.state, script(n), n, nil)
		}},
	}
	if b.also != "" {
		cs = append(cs, &config{key: "e", name: "forensic record, " + b.also, run: func(n int) (time.Duration, error) {
			return b.record(b.also, n)
		}})
	}
	return cs
}

// record runs the workload under forensic record (bin, or the bench's
// own build) and checks that nothing was lost.
func (b *bench) record(bin string, n int) (time.Duration, error) {
	res, err := b.env.Record(benchutil.RecordOpts{Bin: bin, DB: b.db, Script: script(n), State: b.state})
	if err != nil {
		return 0, err
	}
	st := res.Stop.Stats
	if st.LostCalls != 0 || st.Events != st.Calls || st.Events < uint64(callsPerIter*n) {
		return 0, fmt.Errorf("forensic lost calls: %+v", st)
	}
	if bin == "" {
		b.lastRecord = res
	}
	return benchutil.Elapsed(res.Stdout)
}

// calibrate sets N so that a run under forensic, the configuration the
// target is about, lasts about the target time.
func (b *bench) calibrate(forensic *config) error {
	n0 := 10000
	if b.env.Quick {
		n0 = 2000
	}
	d, err := forensic.run(n0)
	if err != nil {
		return err
	}
	b.n = max(int(math.Round(float64(n0)*float64(b.target)/float64(d))), 1000)
	benchutil.Logf("overhead: calibration: mix %d took %v under forensic; using N = %d", n0, d, b.n)
	return nil
}

// printConfigs prints the method, the per-call table and the targets.
func (b *bench) printConfigs(w *os.File, configs []*config, med map[string]float64) {
	fmt.Fprintf(w, "## 1. Per-call overhead\n\n")
	fmt.Fprintf(w, "Workload: `simwork 'init; use 0; clock; mix %d; clock'` on the simulated libcuda: %s hooked calls "+
		"(`mix` = %s per iteration). The loop is timed inside the process between the two `clock` lines "+
		"(CLOCK_MONOTONIC), so process start and probe attachment are excluded; per-call time = elapsed / 6N. "+
		"N was calibrated so a run under forensic lasts about %v. %d rounds, configurations interleaved "+
		"(a b c d a b c d ...); figures are medians over the rounds.\n\n",
		b.n, benchutil.Thousands(uint64(callsPerIter*b.n)), strings.Join(mixSymbols, ", "), b.target, b.rounds)
	fmt.Fprintf(w, "- (b) floor: two empty BPF programs (`r0 = 0; exit`, built with cilium/ebpf asm, type kprobe, "+
		"attach type trace_uprobe_multi), attached like forensic's: one uretprobe_multi and one uprobe_multi link "+
		"with the symbol ids as cookies, on the same %d symbols forensic attaches in this library.\n", b.floor.Symbols)
	fmt.Fprintf(w, "- (c) `forensic record --libcuda build/bench/lib/libcuda.so.1 --libnvidia-ml build/simgpu/libnvidia-ml.so.1 -- simwork ...` "+
		"(defaults: 16 MiB ring, NVML sampled every 100 ms); every run checked: stored events = calls seen, 0 lost.\n")
	fmt.Fprintf(w, "- (d) %s, script `build/bench/overhead.bt`: a uprobe on each of the 6 mix symbols doing "+
		"`@start[tid] = nsecs`, a uretprobe on each doing `@calls = count(); delete(@start[tid])`; "+
		"every run checked: `@calls` = 6N.\n\n", b.btVersion)
	fmt.Fprintf(w, "| configuration | per-call median | min .. max over rounds | over (a) |\n|---|---:|---:|---:|\n")
	for _, c := range configs {
		lo, hi := minMax(c.perCall)
		delta := "—"
		if c.key != "a" {
			delta = fmt.Sprintf("+%s", ns(med[c.key]-med["a"]))
		}
		fmt.Fprintf(w, "| (%s) %s | %s | %s .. %s | %s |\n", c.key, c.name, ns(med[c.key]), ns(lo), ns(hi), delta)
	}
	if e, ok := med["e"]; ok {
		fmt.Fprintf(w, "\n(e) against (c), same rounds: %.3f per call; (e) over the floor %s, (c) %s.\n",
			e/med["c"], ns(e-med["b"]), ns(med["c"]-med["b"]))
	}
	rf := med["c"] / med["b"]
	rb := med["c"] / med["d"]
	fmt.Fprintf(w, "\n| target | measured | |\n|---|---:|---|\n")
	fmt.Fprintf(w, "| forensic/floor ≤ 1.10 (per-call time) | %.3f | %s |\n", rf, benchutil.Verdict(rf <= 1.10))
	fmt.Fprintf(w, "| forensic/bpftrace < 1.0 (per-call time) | %.3f | %s |\n", rb, benchutil.Verdict(rb < 1.0))
	benchutil.Summary("1", "forensic/floor ≤ 1.10 (per-call time)", fmt.Sprintf("%.3f (%s vs %s)", rf, ns(med["c"]), ns(med["b"])), rf <= 1.10)
	benchutil.Summary("1", "forensic/bpftrace < 1.0 (per-call time)", fmt.Sprintf("%.3f (%s vs %s)", rb, ns(med["c"]), ns(med["d"])), rb < 1.0)
	fmt.Fprintf(w, "\nWork above the trap itself, per call: forensic %s, bpftrace %s (medians of (c) and (d) minus (b)); "+
		"the trap pair costs %s over no probes ((b) minus (a)).\n", ns(med["c"]-med["b"]), ns(med["d"]-med["b"]), ns(med["b"]-med["a"]))
}

// printBreakdown prints the statistics pass: the programs' own run time.
func printBreakdown(w *os.File, configs []*config, diags map[string]diag) {
	fmt.Fprintf(w, "\nWhere the time goes (a separate pass, not part of the figures above: one run each of (b), (c), (d) "+
		"with the kernel's BPF run-time statistics enabled (BPF_ENABLE_STATS), which itself adds two clock reads per "+
		"program run): run time of the probe programs themselves, per hooked call (entry + return program).\n\n")
	fmt.Fprintf(w, "| configuration | programs' run time per call | program runs | per-call time in this run |\n|---|---:|---:|---:|\n")
	for _, k := range []string{"b", "c", "d"} {
		d := diags[k]
		fmt.Fprintf(w, "| (%s) %s | %s | %s | %s |\n", k, configs[map[string]int{"b": 1, "c": 2, "d": 3}[k]].name,
			ns(d.bpfPerCall), benchutil.Thousands(d.runs), ns(d.perCall))
	}
	fmt.Fprintf(w, "\nforensic's programs per run, statistics' own cost included: `call_entry` %s, `call_return` %s "+
		"(the empty programs: %s each).\n", ns(diags["c"].entry), ns(diags["c"].ret), ns(diags["b"].bpfPerCall/2))
}

// printOutside splits forensic's cost over the floor into its programs and
// the rest, and when the target is missed says by how much.
func printOutside(w *os.File, med map[string]float64, diags map[string]diag) {
	progDelta := diags["c"].bpfPerCall - diags["b"].bpfPerCall
	rest := diags["c"].perCall - diags["b"].perCall - progDelta
	fmt.Fprintf(w, "\nforensic's programs run %s longer per call than the empty pair and %s longer than bpftrace's "+
		"(negative: shorter). "+
		"In this pass forensic's per-call time exceeds the floor's by %s, so %s of it is outside the programs",
		ns(progDelta), ns(diags["c"].bpfPerCall-diags["d"].bpfPerCall), ns(diags["c"].perCall-diags["b"].perCall), ns(rest))
	if math.Abs(rest) < 150 {
		fmt.Fprintf(w, ", within a single run's noise: forensic's cost over the floor is its programs.\n")
	} else if rest > 0 {
		fmt.Fprintf(w, " (the reader draining the ring on the other CPU and the cache lines it shares with the probes, "+
			"NVML sampling of the simulated GPU, the recorder's threads taking the workload's CPU).\n")
	} else {
		fmt.Fprintf(w, " (negative: single-run noise).\n")
	}
	rf := med["c"] / med["b"]
	if rf <= 1.10 {
		return
	}
	budget := 0.10 * med["b"]
	fmt.Fprintf(w, "\nforensic/floor misses its target by %.3f (%.1f points): forensic adds %s per call beyond the trap, "+
		"the budget is %s (10%% of the floor's %s). Its programs alone take %s more than the empty pair (%.1f times the "+
		"budget, statistics' cost removed).\n", rf-1.10, (rf-1.10)*100, ns(med["c"]-med["b"]), ns(budget), ns(med["b"]),
		ns(progDelta), progDelta/budget)
	fmt.Fprintf(w, "\nWhy: what one recorded call needs costs more than that budget on this kernel. Each call "+
		"must carry its entry and return times (two bpf_ktime_get_ns), the calling thread's state and its "+
		"calls in progress (one task-local storage lookup per probe), which symbol it is (the attach cookie, "+
		"once), one ring buffer record, and for an allocation the pointer it returns (one bpf_probe_read_user); "+
		"the table below gives each one's cost, and the experiments after it what was tried to make the pair "+
		"cheaper. None of these helpers is inlined by this kernel, and every call and return inside the kernel pays "+
		"for the CPU mitigations listed in the machine table above (a return thunk for SRSO, retpolines for "+
		"indirect calls); bpf_probe_read_user also runs the hardened-usercopy checks. Reaching 1.10 would mean "+
		"recording less (no entry time, no thread state, or no returned pointer, which matches frees to "+
		"allocations), which forensic does not do.\n")
}

func ns(v float64) string {
	if math.Abs(v) >= 1000 {
		return fmt.Sprintf("%.2f µs", v/1000)
	}
	return fmt.Sprintf("%.0f ns", v)
}

func minMax(xs []float64) (float64, float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

func bpftraceScript(lib string) string {
	var entry, ret []string
	for _, s := range mixSymbols {
		entry = append(entry, "uprobe:"+lib+":"+s)
		ret = append(ret, "uretprobe:"+lib+":"+s)
	}
	return "BEGIN { printf(\"ready\\n\"); }\n" +
		strings.Join(entry, ",\n") + "\n{ @start[tid] = nsecs; }\n" +
		strings.Join(ret, ",\n") + "\n{ @calls = count(); delete(@start[tid]); }\n"
}

// runBpftrace starts bpftrace, waits until its BEGIN probe ran (after every
// probe is attached), runs the workload, stops bpftrace with SIGINT and
// checks that it counted every call.
func runBpftrace(bt, script string, env *benchutil.Env, state, work string, n int, beforeStop func(pid int)) (time.Duration, error) {
	cmd := exec.Command(bt, "-B", "line", script)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, out)
	}()
	timeout := time.After(120 * time.Second)
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				cmd.Wait()
				return 0, fmt.Errorf("bpftrace exited before attaching: %s", errb.String())
			}
			if l == "ready" {
				break wait
			}
		case <-timeout:
			return 0, fmt.Errorf("bpftrace did not attach in 120 s: %s", errb.String())
		}
	}
	stdout, werr := env.RunSimwork(state, work)
	if beforeStop != nil {
		beforeStop(cmd.Process.Pid)
	}
	cmd.Process.Signal(syscall.SIGINT)
	var calls int64 = -1
	for l := range lines {
		if v, ok := strings.CutPrefix(l, "@calls: "); ok {
			calls, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	cmd.Wait()
	if werr != nil {
		return 0, werr
	}
	if calls != int64(callsPerIter*n) {
		return 0, fmt.Errorf("bpftrace counted %d calls, want %d", calls, callsPerIter*n)
	}
	return benchutil.Elapsed(stdout)
}

type diag struct {
	// entry and ret: forensic's call_entry and call_return, ns per run.
	entry, ret float64
	bpfPerCall float64 // ns of program run time per hooked call (entry + return)
	runs       uint64  // program runs counted
	perCall    float64 // ns per call measured in that run
}

// diagnose runs (b), (c) and (d) once more with the kernel's BPF run-time
// statistics on, and reads how long the probe programs themselves ran.
func diagnose(env *benchutil.Env, floor *benchutil.Floor, bt, btScript, state, db string, n int) (map[string]diag, error) {
	closer, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("enable BPF statistics: %w", err)
	}
	defer closer.Close()
	out := map[string]diag{}
	work := fmt.Sprintf("init; use 0; clock; mix %d; clock", n)
	perRun := func(s benchutil.ProgStat) float64 { return 2 * float64(s.Runtime) / float64(max(s.Count, 1)) }

	// (b)
	before := floor.Stats()
	if err := floor.Attach(env.LibCUDA); err != nil {
		return nil, err
	}
	stdout, err := env.RunSimwork(state, work)
	floor.Detach()
	if err != nil {
		return nil, err
	}
	after := floor.Stats()
	d, err := benchutil.Elapsed(stdout)
	if err != nil {
		return nil, err
	}
	delta := benchutil.ProgStat{Runtime: after.Runtime - before.Runtime, Count: after.Count - before.Count}
	out["b"] = diag{bpfPerCall: perRun(delta), runs: delta.Count, perCall: float64(d) / float64(callsPerIter*n)}

	// (c): the workload waits after its loop until the statistics of
	// forensic's programs have been read.
	ready, goOn := filepath.Join(env.Work, "overhead.ready"), filepath.Join(env.Work, "overhead.go")
	os.Remove(ready)
	os.Remove(goOn)
	defer os.Remove(ready)
	defer os.Remove(goOn)
	cmd := exec.Command(env.Forensic, "record", "-o", db, "--force", "--libcuda", env.LibCUDA, "--libnvidia-ml", env.LibNVML,
		"--", env.Simwork, work+"; touch "+ready+"; wait-file "+goOn)
	cmd.Env = env.SimEnv(state)
	var so, se strings.Builder
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(120 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, fmt.Errorf("forensic run did not finish its loop: %s", se.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	stats, err := benchutil.ProcProgStats(cmd.Process.Pid)
	os.WriteFile(goOn, nil, 0o644)
	if werr := cmd.Wait(); werr != nil {
		return nil, fmt.Errorf("forensic record: %v: %s", werr, se.String())
	}
	if err != nil {
		return nil, err
	}
	var fs benchutil.ProgStat
	var entry, ret float64
	for _, st := range stats {
		if st.Name == "call_entry" || st.Name == "call_return" {
			fs.Runtime += st.Runtime
			fs.Count += st.Count
			per := float64(st.Runtime) / float64(max(st.Count, 1))
			if st.Name == "call_entry" {
				entry = per
			} else {
				ret = per
			}
			benchutil.Logf("overhead: forensic program %s: %d runs, %.0f ns per run", st.Name, st.Count, per)
		}
	}
	if d, err = benchutil.Elapsed(so.String()); err != nil {
		return nil, err
	}
	out["c"] = diag{entry: entry, ret: ret, bpfPerCall: perRun(fs), runs: fs.Count, perCall: float64(d) / float64(callsPerIter*n)}

	// (d)
	var bs benchutil.ProgStat
	d, err = runBpftrace(bt, btScript, env, state, work, n, func(pid int) {
		stats, err := benchutil.ProcProgStats(pid)
		if err != nil {
			return
		}
		for _, st := range stats {
			benchutil.Logf("overhead: bpftrace program %q: %d runs, %.0f ns per run", st.Name, st.Count, float64(st.Runtime)/float64(max(st.Count, 1)))
			if !strings.Contains(strings.ToLower(st.Name), "begin") {
				bs.Runtime += st.Runtime
				bs.Count += st.Count
			}
		}
	})
	if err != nil {
		return nil, err
	}
	out["d"] = diag{bpfPerCall: perRun(bs), runs: bs.Count, perCall: float64(d) / float64(callsPerIter*n)}
	return out, nil
}

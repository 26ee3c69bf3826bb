// Command storm measures forensic under call storms on the simulated GPU:
//
//   - the highest sustained call rate, with one and with two workload
//     threads, at which nothing is lost for 30 s (default 16 MiB ring), and
//     the knee with a 1 MiB ring, where losses begin and how many; when
//     1 MiB loses nothing, smaller rings (recorder.Run in this process, as
//     --ring-size counts MiB) until one does, and the knee at that size;
//   - the recorder's CPU time (utime+stime of the forensic process itself,
//     from /proc/PID/stat read after it exited, before it was reaped) and
//     peak memory (VmHWM) during a 30 s storm;
//   - the recorder's resident memory (VmRSS) sampled every second through
//     a long storm;
//   - bytes per stored call event in the run.db of a real recording.
//
// The workload is simwork's paced step: cuMemAlloc_v2(4096) + cuMemFree_v2
// pairs at a given rate per thread (0: as fast as it can), for a given
// time. Losses come from the recorder's stop record (Stats: Calls, Events,
// LostCalls). BENCH_QUICK=1 shortens every duration. It prints markdown
// sections on stdout.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/retrivium/forensic/bench/internal/benchutil"
	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/logging"
	"github.com/retrivium/forensic/recorder"
	"github.com/retrivium/forensic/store"
)

type storm struct {
	env   *benchutil.Env
	state string
	db    string
}

// result is one recorded storm.
type result struct {
	threads   int
	ringBytes int
	askedRate float64 // per thread, 0 = unpaced
	dur       time.Duration
	paced     benchutil.Paced
	calls     uint64 // Stats.Calls
	events    uint64
	lost      uint64
	rec       *benchutil.RecordResult
	file      benchutil.FileStats
}

func (r *result) rate() float64 { return r.paced.Rate }

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "storm:", err)
		os.Exit(1)
	}
}

func (s *storm) script(threads int, perThread float64, dur time.Duration) string {
	step := fmt.Sprintf("paced %.0f %d", perThread, int(dur.Seconds()))
	if threads == 1 {
		return "init; use 0; " + step
	}
	return fmt.Sprintf("init; threads %d { use 0; %s }", threads, step)
}

func (s *storm) record(threads, ringMiB int, perThread float64, dur, period time.Duration) (*result, error) {
	res, err := s.env.Record(benchutil.RecordOpts{DB: s.db, State: s.state, Period: period,
		Flags:  []string{"--ring-size", fmt.Sprintf("%dMiB", ringMiB)},
		Script: s.script(threads, perThread, dur)})
	if err != nil {
		return nil, err
	}
	return s.finish(threads, ringMiB<<20, perThread, dur, res.Stdout, res.Stop, res)
}

// recordInProcess records through recorder.Run in this process, for ring
// sizes below the command line's 1 MiB granularity.
func (s *storm) recordInProcess(threads, ringBytes int, perThread float64, dur time.Duration) (*result, error) {
	os.Setenv("SIMWORK_LIBCUDA", s.env.LibCUDA)
	os.Setenv("SIMGPU_STATE", s.state)
	var out bytes.Buffer
	res, err := recorder.Run(context.Background(), recorder.Config{Output: s.db, Force: true,
		Command: []string{s.env.Simwork, s.script(threads, perThread, dur)}, LibCUDA: []string{s.env.LibCUDA},
		NVML: s.env.LibNVML, RingBytes: ringBytes, Stdout: &out, Stderr: io.Discard, Log: logging.Discard()})
	if err != nil {
		return nil, err
	}
	return s.finish(threads, ringBytes, perThread, dur, out.String(), &res.Stop, nil)
}

func (s *storm) finish(threads, ringBytes int, perThread float64, dur time.Duration, stdout string, stop *store.StopInfo,
	rec *benchutil.RecordResult) (*result, error) {
	p, err := benchutil.ParsePaced(stdout)
	if err != nil {
		return nil, err
	}
	st := stop.Stats
	r := &result{threads: threads, ringBytes: ringBytes, askedRate: perThread, dur: dur, paced: p,
		calls: st.Calls, events: st.Events, lost: st.LostCalls, rec: rec}
	if r.file, err = benchutil.ReadFileStats(s.db); err != nil {
		return nil, err
	}
	if r.file.Events != st.Events {
		return nil, fmt.Errorf("run.db holds %d events, the stop record says %d", r.file.Events, st.Events)
	}
	if p.Failed != 0 {
		return nil, fmt.Errorf("%d workload calls failed", p.Failed)
	}
	if st.Events+st.LostCalls != st.Calls {
		return nil, fmt.Errorf("stop record does not add up: %+v", st)
	}
	asked := "unpaced"
	if perThread > 0 {
		asked = fmt.Sprintf("%.0f/s per thread", perThread)
	}
	benchutil.Logf("storm: %d thread(s), %s ring, %s, %v: achieved %.0f calls/s, %d calls, %d lost",
		threads, ringName(ringBytes), asked, dur, p.Rate, st.Calls, st.LostCalls)
	return r, nil
}

func ringName(b int) string {
	if b >= 1<<20 {
		return fmt.Sprintf("%d MiB", b>>20)
	}
	return fmt.Sprintf("%d KiB", b>>10)
}

// floorRate is the rate the workload reaches under the empty probes.
func (s *storm) floorRate(threads int, dur time.Duration, probes bool) (float64, error) {
	if probes {
		f, err := benchutil.LoadFloor()
		if err != nil {
			return 0, err
		}
		defer f.Close()
		if err := f.Attach(s.env.LibCUDA); err != nil {
			return 0, err
		}
	}
	out, err := s.env.RunSimwork(s.state, s.script(threads, 0, dur))
	if err != nil {
		return 0, err
	}
	p, err := benchutil.ParsePaced(out)
	if err != nil {
		return 0, err
	}
	return p.Rate, nil
}

// search finds the highest rate without loss: first as fast as the
// workload can go (asking for the floor's rate), then, if that lost calls,
// bisecting on the asked rate.
type searchResult struct {
	top       *result // the unpaced run
	zeroLoss  *result // highest-rate run without loss (nil if none)
	aboveLoss *result // lowest-rate run with loss (nil if none)
	runs      []*result
}

func (s *storm) search(threads int, floorTotal float64, steps int, rec func(perThread float64) (*result, error)) (*searchResult, error) {
	sr := &searchResult{}
	top, err := rec(floorTotal / float64(threads))
	if err != nil {
		return nil, err
	}
	sr.top = top
	sr.runs = append(sr.runs, top)
	if top.lost == 0 {
		sr.zeroLoss = top
		return sr, nil
	}
	sr.aboveLoss = top
	lo, hi := 0.0, top.rate()
	for i := 0; i < steps; i++ {
		mid := (lo + hi) / 2
		if lo == 0 {
			mid = hi / 2
		}
		r, err := rec(mid / float64(threads))
		if err != nil {
			return nil, err
		}
		sr.runs = append(sr.runs, r)
		if r.lost == 0 {
			lo = mid
			if sr.zeroLoss == nil || r.rate() > sr.zeroLoss.rate() {
				sr.zeroLoss = r
			}
		} else {
			hi = mid
			if r.rate() < sr.aboveLoss.rate() {
				sr.aboveLoss = r
			}
		}
	}
	return sr, nil
}

// durations are how long each kind of run lasts (shorter under
// BENCH_QUICK=1), and steps how many times a search bisects the rate.
type durations struct {
	sustain, knee, floor, long time.Duration
	steps                      int
}

// figures are everything the two sections report.
type figures struct {
	d           durations
	none, floor map[int]float64 // calls/s by threads: no probes, empty-probe floor
	def, knee   map[int]*searchResult
	ladder      []*result     // rings below 1 MiB, one thread, until one loses
	small       *searchResult // the search at the first size of ladder that lost
	long        *result       // memory over a long storm
	mixN        int
	mixFile     benchutil.FileStats
}

func run() error {
	env, err := benchutil.Setup()
	if err != nil {
		return err
	}
	s := &storm{env: env, state: filepath.Join(env.Work, "storm.state"), db: filepath.Join(env.Work, "storm.db")}
	os.Remove(s.state)
	defer os.Remove(s.db)
	f := &figures{d: durations{sustain: env.Dur(30*time.Second, 5*time.Second), knee: env.Dur(10*time.Second, 3*time.Second),
		floor: env.Dur(5*time.Second, 2*time.Second), long: env.Dur(60*time.Second, 12*time.Second), steps: 4}}
	if env.Quick {
		f.d.steps = 2
	}
	for _, step := range []func(*figures) error{s.rates, s.sustained, s.knees, s.smallRings, s.longStorm, s.mixBytes} {
		if err := step(f); err != nil {
			return err
		}
	}
	w := os.Stdout
	printSustained(w, f)
	printKnees(w, f)
	printRecorder(w, f)
	printMemory(w, f)
	return nil
}

// rates measures the rates without forensic: no probes, and the
// empty-probe floor.
func (s *storm) rates(f *figures) error {
	f.none, f.floor = map[int]float64{}, map[int]float64{}
	for _, th := range []int{1, 2} {
		var err error
		if f.none[th], err = s.floorRate(th, f.d.floor, false); err != nil {
			return err
		}
		if f.floor[th], err = s.floorRate(th, f.d.floor, true); err != nil {
			return err
		}
		benchutil.Logf("storm: %d thread(s): %.0f calls/s without probes, %.0f under the empty-probe floor", th, f.none[th], f.floor[th])
	}
	return nil
}

// sustained searches the default ring's loss-free rate over 30 s runs. The
// one-thread run is also the storm whose recorder CPU and memory section 3
// reports.
func (s *storm) sustained(f *figures) error {
	f.def = map[int]*searchResult{}
	for _, th := range []int{1, 2} {
		var err error
		if f.def[th], err = s.search(th, f.floor[th], f.d.steps, func(pt float64) (*result, error) {
			return s.record(th, 16, pt, f.d.sustain, 200*time.Millisecond)
		}); err != nil {
			return err
		}
	}
	return nil
}

// knees searches the knee with a 1 MiB ring.
func (s *storm) knees(f *figures) error {
	f.knee = map[int]*searchResult{}
	for _, th := range []int{1, 2} {
		var err error
		if f.knee[th], err = s.search(th, f.floor[th], f.d.steps, func(pt float64) (*result, error) {
			return s.record(th, 1, pt, f.d.knee, 200*time.Millisecond)
		}); err != nil {
			return err
		}
	}
	return nil
}

// smallRings: when 1 MiB loses nothing for one thread, smaller rings
// (through recorder.Run in this process: the command line counts MiB)
// until one does, then bisect the rate at that size.
func (s *storm) smallRings(f *figures) error {
	if f.knee[1].top.lost != 0 {
		return nil
	}
	for _, rb := range []int{256 << 10, 64 << 10, 16 << 10, 4 << 10} {
		r, err := s.recordInProcess(1, rb, f.floor[1], f.d.knee)
		if err != nil {
			return err
		}
		f.ladder = append(f.ladder, r)
		if r.lost == 0 {
			continue
		}
		first := true
		f.small, err = s.search(1, f.floor[1], f.d.steps, func(pt float64) (*result, error) {
			if first { // the run just made
				first = false
				return r, nil
			}
			return s.recordInProcess(1, rb, pt, f.d.knee)
		})
		return err
	}
	return nil
}

// longStorm records one thread for a minute, the recorder's memory read
// every second.
func (s *storm) longStorm(f *figures) error {
	var err error
	f.long, err = s.record(1, 16, f.floor[1], f.d.long, time.Second)
	return err
}

// mixBytes records the realistic mix for its bytes per event.
func (s *storm) mixBytes(f *figures) error {
	f.mixN = 250000 // 1.5 million events: the file's fixed part is amortized
	if s.env.Quick {
		f.mixN = 50000
	}
	mixDB := filepath.Join(s.env.Work, "storm-mix.db")
	defer os.Remove(mixDB)
	if _, err := s.env.Record(benchutil.RecordOpts{DB: mixDB, State: s.state, Script: fmt.Sprintf("init; use 0; mix %d", f.mixN)}); err != nil {
		return err
	}
	var err error
	f.mixFile, err = benchutil.ReadFileStats(mixDB)
	return err
}

// printSustained prints section 2 up to the knee: the rates and the
// default ring's search.
func printSustained(w *os.File, f *figures) {
	fmt.Fprintf(w, "## 2. Sustained call rate without loss\n\n")
	fmt.Fprintf(w, "Workload: `simwork 'init; use 0; paced RATE SECONDS'` (two threads: `init; threads 2 { use 0; paced RATE SECONDS }`): "+
		"cuMemAlloc_v2(4096) + cuMemFree_v2 pairs issued at RATE calls/s per thread, spin-waiting on clock_gettime "+
		"(sleeping first when more than 200 µs early); a thread that falls behind catches up, so asking for more than it "+
		"can do means as fast as it can. Loss is read from the stop record (`Stats.LostCalls`; `Events + LostCalls = Calls` checked). "+
		"Each run first asks for the rate the empty-probe floor reaches; if that loses calls, the asked rate is bisected (%d steps).\n\n", f.d.steps)
	fmt.Fprintf(w, "| threads | no probes | empty-probe floor |\n|---:|---:|---:|\n")
	for _, th := range []int{1, 2} {
		fmt.Fprintf(w, "| %d | %s calls/s | %s calls/s |\n", th, rate(f.none[th]), rate(f.floor[th]))
	}
	fmt.Fprintf(w, "\n(%v runs each; the floor's rate is the most any recorder could be asked to absorb here.)\n\n", f.d.floor)
	fmt.Fprintf(w, "**Default ring (16 MiB), %v per run:**\n\n", f.d.sustain)
	searchTable(w, f.def)
	for _, th := range []int{1, 2} {
		sr := f.def[th]
		if sr.top.lost == 0 {
			fmt.Fprintf(w, "- %d thread(s): nothing lost at %s calls/s for %v, the most the workload reached under forensic "+
				"(asked for the floor's %s calls/s). No higher rate could be produced on this machine: the workload thread is "+
				"saturated by the calls themselves (simulated call + uprobe trap + forensic's probes), so there is no drop count "+
				"\"just above\" to report at this ring size; see the 1 MiB knee below.\n",
				th, rate(sr.top.rate()), f.d.sustain, rate(f.floor[th]))
		} else {
			fmt.Fprintf(w, "- %d thread(s): highest rate without loss %s; just above it, %s.\n", th, lossless(sr), lossy(sr))
		}
	}
	if f.floor[1] > 0 {
		printSustainedTarget(w, f)
	}
}

// printSustainedTarget prints section 2's target: nothing lost at the
// floor's rate, one thread.
func printSustainedTarget(w *os.File, f *figures) {
	top := f.def[1].top
	ok := top.lost == 0
	fmt.Fprintf(w, "\n| target | measured | |\n|---|---|---|\n")
	fmt.Fprintf(w, "| zero loss at the highest rate the floor allows, one thread (%s calls/s) | asked for it: %s calls/s achieved for %v, %s lost | %s |\n",
		rate(f.floor[1]), rate(top.rate()), f.d.sustain, benchutil.Thousands(top.lost), benchutil.Verdict(ok))
	benchutil.Summary("2", fmt.Sprintf("zero loss at the highest rate the floor allows, one thread (%s calls/s asked)", rate(f.floor[1])),
		fmt.Sprintf("%s lost of %s calls in %v at %s calls/s achieved", benchutil.Thousands(top.lost),
			benchutil.Thousands(top.calls), f.d.sustain, rate(top.rate())), ok)
	if ok && top.rate() < f.floor[1] {
		fmt.Fprintf(w, "\nThe target is met in the sense that nothing is lost when the floor's rate is asked for; the rate itself is "+
			"not reached (%.0f%% of it), because forensic's per-call cost (section 1) slows the calling thread. "+
			"The loss-free rate is bounded by the workload, not by the reader.\n", 100*top.rate()/f.floor[1])
	}
}

// printKnees prints the 1 MiB knee and the smaller rings.
func printKnees(w *os.File, f *figures) {
	fmt.Fprintf(w, "\n**Knee with a 1 MiB ring (`--ring-size 1`), %v per run:**\n\n", f.d.knee)
	searchTable(w, f.knee)
	for _, th := range []int{1, 2} {
		sr := f.knee[th]
		if sr.top.lost == 0 {
			fmt.Fprintf(w, "- %d thread(s): even a 1 MiB ring loses nothing at the highest rate produced (%s calls/s).\n", th, rate(sr.top.rate()))
		} else {
			fmt.Fprintf(w, "- %d thread(s): losses begin between %s and %s.\n", th, lossless(sr), lossy(sr))
		}
	}
	if len(f.ladder) > 0 {
		printLadder(w, f)
	}
	fmt.Fprintln(w)
}

// pairBytes is what one alloc/free pair of the storm takes in the ring.
func pairBytes() int {
	_, a, _ := cuda.Lookup("cuMemAlloc_v2")
	_, fr, _ := cuda.Lookup("cuMemFree_v2")
	return bpf.RingBytes(&cuda.Symbols[a]) + bpf.RingBytes(&cuda.Symbols[fr])
}

// printLadder prints the rings below 1 MiB.
func printLadder(w *os.File, f *figures) {
	fmt.Fprintf(w, "\n**Smaller rings, one thread, %v per run.** `--ring-size` counts MiB, so these runs call "+
		"`recorder.Run` (what `forensic record` runs) in the harness's process with `Config.RingBytes` below 1 MiB; "+
		"everything else is as above. The reader wakes every 25 ms, and when a CPU has submitted an eighth of the "+
		"ring's worth of the largest call records.\n\n", f.d.knee)
	fmt.Fprintf(w, "| ring | asked (per thread) | achieved | calls | stored | lost |\n|---:|---:|---:|---:|---:|---:|\n")
	rows := f.ladder
	if f.small != nil {
		rows = append(append([]*result(nil), f.ladder...), f.small.runs[1:]...)
	}
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s calls/s | %s | %s | %s |\n", ringName(r.ringBytes), rate(r.askedRate), rate(r.rate()),
			benchutil.Thousands(r.calls), benchutil.Thousands(r.events), benchutil.Thousands(r.lost))
	}
	fmt.Fprintln(w)
	if f.small == nil {
		fmt.Fprintf(w, "No ring size down to %s lost a call at the highest rate one thread produces: the reader keeps up "+
			"with the workload whenever it has a CPU.\n", ringName(f.ladder[len(f.ladder)-1].ringBytes))
		return
	}
	last := f.ladder[len(f.ladder)-1]
	calls := 2 * last.ringBytes / pairBytes()
	fmt.Fprintf(w, "The first size that loses calls is %s (%s calls of an alloc/free storm, %d bytes a pair in the ring; "+
		"%.1f ms of calls at %s calls/s); at that size losses begin between %s and %s.\n", ringName(last.ringBytes),
		benchutil.Thousands(uint64(calls)), pairBytes(), 1000*float64(calls)/math.Max(last.rate(), 1),
		rate(last.rate()), lossless(f.small), lossy(f.small))
}

// printRecorder prints section 3's recorder CPU and bytes per event.
func printRecorder(w *os.File, f *figures) {
	fmt.Fprintf(w, "## 3. Store and recorder resources\n\n")
	fmt.Fprintf(w, "### Recorder during a %v storm\n\n", f.d.sustain)
	st := f.def[1].top
	cpu := st.rec.Usage.CPU
	fmt.Fprintf(w, "The one-thread, default-ring run above (`paced` unpaced for %v): %s calls, %s stored, %s lost, %s calls/s.\n\n",
		f.d.sustain, benchutil.Thousands(st.calls), benchutil.Thousands(st.events), benchutil.Thousands(st.lost), rate(st.rate()))
	fmt.Fprintf(w, "| figure | value |\n|---|---:|\n")
	fmt.Fprintf(w, "| recorder CPU, utime+stime of the forensic process (its own threads; /proc/PID/stat after exit, before reaping) | %.2f s |\n", cpu.Seconds())
	fmt.Fprintf(w, "| recorder wall time (start to exit) | %.2f s |\n", st.rec.Usage.Wall.Seconds())
	fmt.Fprintf(w, "| recorder CPU as a share of one CPU | %.0f%% |\n", 100*cpu.Seconds()/st.rec.Usage.Wall.Seconds())
	fmt.Fprintf(w, "| recorder CPU per stored event | %.2f µs |\n", float64(cpu.Microseconds())/float64(max(st.events, 1)))
	fmt.Fprintf(w, "| peak memory (largest VmHWM seen, sampled every 200 ms) | %s |\n", benchutil.MiB(st.rec.Usage.HWM))
	fmt.Fprintf(w, "\n### Bytes per stored call event\n\n")
	fmt.Fprintf(w, "| recording | events | file size / event | in use / event | payload / event | target ≤ 64 B (file size / event) |\n|---|---:|---:|---:|---:|---|\n")
	for _, x := range []struct {
		name string
		fs   benchutil.FileStats
	}{{fmt.Sprintf("%v storm above (alloc/free pairs)", f.d.sustain), st.file}, {fmt.Sprintf("`mix %d` (6 symbols)", f.mixN), f.mixFile}} {
		v := x.fs.PerEvent(x.fs.File)
		benchutil.Summary("3", "≤ 64 bytes per stored call event (file size / events), "+x.name,
			fmt.Sprintf("%.1f B (payload %.1f B)", v, x.fs.PerEvent(x.fs.Payload)), v <= 64)
		fmt.Fprintf(w, "| %s | %s | %.1f B | %.1f B | %.1f B | %s |\n", x.name, benchutil.Thousands(x.fs.Events), v,
			x.fs.PerEvent(x.fs.InUse), x.fs.PerEvent(x.fs.Payload), benchutil.Verdict(v <= 64))
	}
	fmt.Fprintf(w, "\nFile size / event counts everything in run.db (samples, processes, bbolt pages, free pages and the "+
		"file's preallocated tail); in use stops at bbolt's high-water mark; payload is the encoded event chunks alone.\n")
}

// printMemory prints the recorder's memory over the long storm.
func printMemory(w *os.File, f *figures) {
	fmt.Fprintf(w, "\n### Memory under a long storm\n\n")
	long := f.long
	pts := long.rec.Usage.RSS
	early := min(10*time.Second, f.d.long/5)
	var atEarly, atEnd, lo, hi uint64
	for _, p := range pts {
		if atEarly == 0 && p.At >= early {
			atEarly = p.RSS
		}
		if p.At >= early {
			if lo == 0 || p.RSS < lo {
				lo = p.RSS
			}
			hi = max(hi, p.RSS)
		}
		atEnd = p.RSS
	}
	fmt.Fprintf(w, "One thread, unpaced, %v (%s calls at %s calls/s, %s lost); the recorder's VmRSS read every second:\n\n",
		f.d.long, benchutil.Thousands(long.calls), rate(long.rate()), benchutil.Thousands(long.lost))
	fmt.Fprintf(w, "| at %v | at the end | min .. max after %v | peak (VmHWM) |\n|---:|---:|---:|---:|\n", early, early)
	fmt.Fprintf(w, "| %s | %s | %s .. %s | %s |\n\n", benchutil.MiB(atEarly), benchutil.MiB(atEnd), benchutil.MiB(lo), benchutil.MiB(hi),
		benchutil.MiB(long.rec.Usage.HWM))
	printRSSSeries(w, long, early)
	growth := float64(atEnd) - float64(atEarly)
	fmt.Fprintf(w, "Growth from %v to the end: %+.1f MiB (%+.1f%%).\n\n", early, growth/(1<<20), 100*growth/math.Max(float64(atEarly), 1))
}

// printRSSSeries prints the long storm's memory, second by second, and
// what its anonymous and file-backed parts are.
func printRSSSeries(w *os.File, long *result, early time.Duration) {
	var series, anon, file []string
	var anonEarly, anonEnd, fileEarly, fileEnd uint64
	for _, p := range long.rec.Usage.RSS {
		series = append(series, fmt.Sprintf("%.0f", float64(p.RSS)/(1<<20)))
		anon = append(anon, fmt.Sprintf("%.0f", float64(p.Anon)/(1<<20)))
		file = append(file, fmt.Sprintf("%.0f", float64(p.File)/(1<<20)))
		if anonEarly == 0 && p.At >= early {
			anonEarly, fileEarly = p.Anon, p.File
		}
		anonEnd, fileEnd = p.Anon, p.File
	}
	fmt.Fprintf(w, "Each second, in MiB (run.db grew to %s):\n\n```\nVmRSS    %s\nRssAnon  %s\nRssFile  %s\n```\n\n",
		benchutil.MiB(uint64(long.file.File)), strings.Join(series, " "), strings.Join(anon, " "), strings.Join(file, " "))
	fmt.Fprintf(w, "RssAnon is the Go heap and stacks: %s at %v, %s at the end. RssFile is file-backed and kernel-buffer "+
		"pages mapped into the recorder: the binary, the BPF ring buffer (16 MiB, its data pages mapped twice) and the "+
		"pages of run.db that bbolt touched through its mapping: %s at %v, %s at the end.", benchutil.MiB(anonEarly), early,
		benchutil.MiB(anonEnd), benchutil.MiB(fileEarly), early, benchutil.MiB(fileEnd))
	if fileEnd > fileEarly+16<<20 {
		fmt.Fprintf(w, " That part grows with the file (bbolt reads the earlier chunks of the last leaf through the "+
			"mapping each time a commit rewrites it) until bbolt remaps the file (the drops in the series); the pages "+
			"are page cache, reclaimable, but they count in VmRSS.")
	}
	fmt.Fprintf(w, "\n\n")
}

func rate(v float64) string { return benchutil.Thousands(uint64(math.Round(v))) }

func lossless(sr *searchResult) string {
	if sr.zeroLoss == nil {
		return "none found (every rate tried lost calls)"
	}
	return fmt.Sprintf("%s calls/s (0 of %s lost)", rate(sr.zeroLoss.rate()), benchutil.Thousands(sr.zeroLoss.calls))
}

func lossy(sr *searchResult) string {
	r := sr.aboveLoss
	return fmt.Sprintf("%s calls/s (%s of %s lost, %.2f%%)", rate(r.rate()), benchutil.Thousands(r.lost),
		benchutil.Thousands(r.calls), 100*float64(r.lost)/float64(max(r.calls, 1)))
}

func searchTable(w *os.File, m map[int]*searchResult) {
	fmt.Fprintf(w, "| threads | asked (per thread) | achieved (all threads) | calls | stored | lost |\n|---:|---:|---:|---:|---:|---:|\n")
	for _, th := range []int{1, 2} {
		for _, r := range m[th].runs {
			fmt.Fprintf(w, "| %d | %s | %s calls/s | %s | %s | %s |\n", th, rate(r.askedRate), rate(r.rate()),
				benchutil.Thousands(r.calls), benchutil.Thousands(r.events), benchutil.Thousands(r.lost))
		}
	}
	fmt.Fprintln(w)
}

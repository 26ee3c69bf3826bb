// Command flight measures forensic in flight mode (record --flight) on
// the simulated GPU:
//
//   - the recorder's CPU time per second of wall time while nothing calls
//     CUDA (a process with libcuda loaded, asleep): NVML sampling, the
//     writer's flushes, the reader's polls, segment rotation;
//   - the same under steady call rates (simwork's paced step), with the
//     disk the recording takes per hour at that rate (allocated bytes of
//     all segments, those retention deleted included, over the recording's
//     time) and per call event;
//   - the recorder's memory: peak (VmHWM) and resident (VmRSS) at the end;
//   - with what an operator turns on: /metrics served and scraped every
//     second (more often than Prometheus would), and the --events stream
//     written to a file; the last run adds a second process whose
//     allocation fails ten times a second, so that the failure counters,
//     the event lines and the failure-triggered samples are paid for.
//
// Segments are closed at the default age (60 s) and --max-size is the
// default (1 GiB), so nothing is deleted and the bytes are all counted.
// BENCH_QUICK=1 shortens every duration. -observe=false leaves out the
// metrics, their scrapes and the event stream, and -rows picks runs by
// their row number (from 1), to measure what observing costs on its own.
// It prints a markdown section on stdout.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/retrivium/forensic/bench/internal/benchutil"
	"github.com/retrivium/forensic/flight"
)

// idleCPUTarget is the most CPU an idle flight recorder may take: a
// recorder left on every node must cost next to nothing.
const idleCPUTarget = 0.01

// run is one measured flight recording.
type run struct {
	what     string
	rate     int // calls per second asked, 0 for idle
	fails    int // failed allocations a second, in a process of their own
	scrapes  int
	lines    int // event lines written
	paced    benchutil.Paced
	usage    benchutil.Usage
	segments int
	bytes    int64 // all segments, deleted ones included
	events   uint64
	wall     time.Duration // the recording's time on its own clock
	rssEnd   uint64
}

func main() {
	observe := flag.Bool("observe", true, "serve and scrape /metrics and write --events")
	rows := flag.String("rows", "", "the rows to run, by number from 1 (default: all), e.g. 3,4")
	flag.Parse()
	env, err := benchutil.Setup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/flight:", err)
		os.Exit(1)
	}
	d := env.Dur(60*time.Second, 10*time.Second)
	var runs []*run
	for i, r := range []*run{
		{what: "idle: a process with libcuda loaded, asleep", rate: 0},
		{what: "1,000 calls/s", rate: 1000},
		{what: "10,000 calls/s", rate: 10000},
		{what: "10,000 calls/s and 10 failures/s", rate: 10000, fails: 10},
	} {
		if *rows != "" && !slices.Contains(strings.Split(*rows, ","), strconv.Itoa(i+1)) {
			continue
		}
		benchutil.Logf("flight: %s for %v", r.what, d)
		if err := measure(env, r, d, *observe); err != nil {
			fmt.Fprintln(os.Stderr, "bench/flight:", err)
			os.Exit(1)
		}
		runs = append(runs, r)
	}
	if *rows != "" {
		writeTable(runs)
		return
	}
	write(runs, d, *observe)
}

// measure records one workload in flight mode.
func measure(env *benchutil.Env, r *run, d time.Duration, observe bool) error {
	dir := filepath.Join(env.Work, "flight")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	script := fmt.Sprintf("init; use 0; sleep %d", d.Milliseconds())
	if r.rate > 0 {
		script = fmt.Sprintf("init; use 0; paced %d %d", r.rate, int(d.Seconds()))
	}
	if r.fails > 0 {
		n := r.fails * int(d.Seconds())
		script = fmt.Sprintf("fork { init; use 0; repeat %d { alloc 100G; sleep %d } }; %s; wait", n, 1000/r.fails, script)
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	events := filepath.Join(env.Work, "events.jsonl")
	os.Remove(events)
	args := []string{"record", "--flight", "-o", dir, "--libcuda", env.LibCUDA, "--libnvidia-ml", env.LibNVML}
	if observe {
		args = append(args, "--metrics-addr", addr, "--events", events)
	}
	cmd := exec.Command(env.Forensic, append(args, "--", env.Simwork, script)...)
	cmd.Env = env.SimEnv(filepath.Join(env.Work, "flight.state"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	stop := make(chan struct{})
	scraped := make(chan int)
	go func() {
		if !observe {
			<-stop
			scraped <- 0
			return
		}
		scraped <- scrape(addr, stop)
	}()
	u, err := benchutil.Watch(cmd, time.Second)
	close(stop)
	r.scrapes = <-scraped
	if err != nil {
		return fmt.Errorf("forensic record --flight: %v: %s", err, errb.String())
	}
	r.usage = u
	if data, err := os.ReadFile(events); err == nil {
		r.lines = bytes.Count(data, []byte("\n"))
	}
	os.Remove(events)
	if len(u.RSS) > 0 {
		r.rssEnd = u.RSS[len(u.RSS)-1].RSS
	}
	if r.rate > 0 {
		if r.paced, err = benchutil.ParsePaced(out.String()); err != nil {
			return err
		}
	}
	x, err := flight.ReadIndex(dir)
	if err != nil {
		return err
	}
	r.segments = len(x.Segments) + len(x.Dropped)
	first, last := int64(0), int64(0)
	for i, s := range x.Segments {
		r.bytes += s.Bytes
		r.events += s.Calls
		if i == 0 {
			first = s.Start
		}
		last = s.End
	}
	for _, g := range x.Dropped {
		r.bytes += g.Bytes
		r.events += g.Calls
		first = min(first, g.From)
	}
	r.wall = time.Duration(last - first)
	return os.RemoveAll(dir)
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// scrape reads addr's /metrics once a second until stop, and returns how
// many scrapes were answered.
func scrape(addr string, stop <-chan struct{}) int {
	n := 0
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return n
		case <-t.C:
			resp, err := http.Get("http://" + addr + "/metrics")
			if err != nil {
				continue
			}
			if _, err := io.Copy(io.Discard, resp.Body); err == nil && resp.StatusCode == http.StatusOK {
				n++
			}
			resp.Body.Close()
		}
	}
}

// cpuShare is the recorder's CPU time per second of its wall time.
func (r *run) cpuShare() float64 { return r.usage.CPU.Seconds() / r.usage.Wall.Seconds() }

// perHour is the disk an hour at this rate takes.
func (r *run) perHour() float64 { return float64(r.bytes) / r.wall.Hours() }

func write(runs []*run, d time.Duration, observe bool) {
	fmt.Printf("## 6. Flight mode\n\n")
	fmt.Printf("`bench/flight`: `forensic record --flight -o DIR --libcuda ... --libnvidia-ml ... -- simwork SCRIPT`, default\n")
	fmt.Printf("retention (`--max-size 1GiB`, segments closed every 60 s or at 128 MiB, nothing deleted in a run this short),\n")
	fmt.Printf("NVML sampled every 100 ms. Each run lasts %v. Idle is `simwork 'init; use 0; sleep %d'`: libcuda loaded,\n", d, d.Milliseconds())
	fmt.Printf("nothing called. The others are `paced RATE %d` (cuMemAlloc_v2 + cuMemFree_v2 at RATE calls/s). CPU is the\n", int(d.Seconds()))
	fmt.Printf("recorder's utime+stime over its wall time (%% of one CPU). Disk is the allocated bytes of every segment of the\n")
	fmt.Printf("recording (from its index) over the recording's time, scaled to an hour; per event, over the call events stored.\n")
	if observe {
		fmt.Printf("Every run serves `--metrics-addr` (scraped once a second here) and writes `--events FILE`.\n")
	}
	fmt.Printf("The last adds a process whose `alloc 100G` fails 10 times a second\n")
	fmt.Printf("(`fork { init; use 0; repeat N { alloc 100G; sleep 100 } }`).\n\n")
	writeTable(runs)
	fmt.Println()
	idle := runs[0]
	fmt.Printf("Idle, the recorder takes %.2f%% of a CPU (its start-up included): NVML's 10 sample rounds a second, a\n", 100*idle.cpuShare())
	fmt.Printf("commit of them once a second (while no call is queued), the reader's poll every 250 ms. Idle disk is those\n")
	fmt.Printf("samples; thinning halves their rate after each %s rounds kept (an hour at 100 ms), so it falls over days.\n", benchutil.Thousands(36000))
	fmt.Printf("Under load the cost is the reader's decoding and the writer's commits, per call. `--max-size` bounds the\n")
	fmt.Printf("disk whatever the rate: at the highest rate here an hour is %s, so the default 1 GiB keeps about %.0f\n",
		benchutil.MiB(uint64(runs[2].perHour())), 60*float64(1<<30)/runs[2].perHour())
	fmt.Printf("minutes of routine history (less the windows kept around failures).\n\n")
	benchutil.Summary("6", fmt.Sprintf("idle flight recorder ≤ %.0f%% of a CPU", 100*idleCPUTarget),
		fmt.Sprintf("%.2f%% over %v", 100*idle.cpuShare(), idle.usage.Wall.Round(time.Second)), idle.cpuShare() <= idleCPUTarget)
}

// writeTable prints the table of runs.
func writeTable(runs []*run) {
	fmt.Printf("| workload | calls/s achieved | recorder CPU | disk per hour | bytes per event | segments | peak memory (VmHWM) | resident at the end | scrapes | event lines |\n")
	fmt.Printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range runs {
		perEvent := "-"
		if r.rate > 0 && r.events > 0 {
			perEvent = fmt.Sprintf("%.1f B", float64(r.bytes)/float64(r.events))
		}
		achieved := "0"
		if r.rate > 0 {
			achieved = benchutil.Thousands(uint64(r.paced.Rate))
		}
		fmt.Printf("| %s | %s | %.2f%% | %s | %s | %d | %s | %s | %d | %s |\n", r.what, achieved, 100*r.cpuShare(),
			benchutil.MiB(uint64(r.perHour())), perEvent, r.segments, benchutil.MiB(r.usage.HWM), benchutil.MiB(r.rssEnd),
			r.scrapes, benchutil.Thousands(uint64(r.lines)))
	}
}

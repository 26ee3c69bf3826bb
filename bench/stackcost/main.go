// Command stackcost measures what naming stacks in the recorder costs: the
// recorder's own CPU time per failed call at failure storms (one call
// site, and a new call site every failure), with two forensic builds
// (before and after stacks were named by the recorder), and the run.db
// bytes each keeps per captured call site; then the time the namer takes
// per capture, measured in-process on the captures of a --keep-stack-bytes
// recording (the first capture of a recording, which opens the files,
// apart). It prints a markdown section on stdout.
//
//	go run ./bench/stackcost -bins OLD,NEW [-rounds 5]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/retrivium/forensic/bench/internal/benchutil"
	"github.com/retrivium/forensic/stackname"
	"github.com/retrivium/forensic/store"
	"github.com/retrivium/forensic/unwind"
)

// userHZ is the unit of /proc/PID/stat's times on Linux.
const userHZ = 100

type scenario struct {
	name string
	cmd  func(e *benchutil.Env) []string
}

func scenarios(e *benchutil.Env) []scenario {
	chain := filepath.Join(e.Root, "build/simgpu/scenarios/callchain_o2")
	script := filepath.Join(e.Root, "testdata/stacks/ctypes_oom.py")
	return []scenario{
		{"C -O2, 2000 failures at one call site", func(e *benchutil.Env) []string {
			return []string{chain, e.LibCUDA, "0x10000000000", "2000", "same"}
		}},
		{"C -O2, 200 failures, a new call site each", func(e *benchutil.Env) []string {
			return []string{chain, e.LibCUDA, "0x10000000000", "200", "deeper"}
		}},
		{"Python 3.11 ctypes, 2000 failures at two call sites", func(e *benchutil.Env) []string {
			return []string{"/usr/bin/python3", script, e.LibCUDA, "1099511627776", "2000"}
		}},
		{"Python 3.11 ctypes, 200 failures, a new call site each", func(e *benchutil.Env) []string {
			return []string{"/usr/bin/python3", script, e.LibCUDA, "1099511627776", "200", "new"}
		}},
	}
}

// result is one recording.
type result struct {
	cpu                  time.Duration // the recorder's own user + system time
	failures             int
	named, raw           int // records
	namedBytes, rawBytes int // bytes of their values
}

func main() {
	bins := flag.String("bins", "", "OLD,NEW forensic binaries")
	rounds := flag.Int("rounds", 5, "recordings per binary and scenario")
	flag.Parse()
	e, err := benchutil.Setup()
	if err != nil {
		fail(err)
	}
	b := strings.Split(*bins, ",")
	if len(b) != 2 {
		fail(fmt.Errorf("-bins OLD,NEW"))
	}
	work, err := os.MkdirTemp(e.Work, "stackcost")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(work)
	fmt.Println("| storm | failures | recorder CPU old | new | per failure old | new | stack bytes per captured site old | new |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, sc := range scenarios(e) {
		var res [2][]result
		for r := 0; r < *rounds; r++ {
			for i := range b { // interleaved, old then new
				out, err := record(e, b[i], work, sc.cmd(e), nil)
				if err != nil {
					fail(fmt.Errorf("%s: %w", sc.name, err))
				}
				res[i] = append(res[i], out)
			}
		}
		row(sc.name, res)
	}
	fmt.Println()
	nameCost(e, b[1], work)
}

func row(name string, res [2][]result) {
	cpu := func(rs []result) time.Duration {
		var ds []time.Duration
		for _, r := range rs {
			ds = append(ds, r.cpu)
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}
	perSite := func(r result) string {
		n, bytes := r.raw, r.rawBytes
		if r.named > 0 {
			n, bytes = r.named, r.namedBytes
		}
		if n == 0 {
			return "—"
		}
		return fmt.Sprintf("%d B (%d sites)", bytes/n, n)
	}
	o, n := res[0][0], res[1][0]
	co, cn := cpu(res[0]), cpu(res[1])
	fmt.Printf("| %s | %d | %.0f ms | %.0f ms | %.1f µs | %.1f µs | %s | %s |\n", name, n.failures,
		ms(co), ms(cn), us(co)/float64(max(o.failures, 1)), us(cn)/float64(max(n.failures, 1)), perSite(o), perSite(n))
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
func us(d time.Duration) float64 { return float64(d) / 1e3 }

// record runs one recording and reads the recorder's CPU time from its
// /proc/PID/stat once it has exited (a zombie until reaped).
func record(e *benchutil.Env, bin, work string, command, flags []string) (result, error) {
	db := filepath.Join(work, "run.db")
	os.Remove(db)
	args := append([]string{"record", "-o", db, "--libcuda", e.LibCUDA, "--libnvidia-ml", e.LibNVML}, flags...)
	cmd := exec.Command(bin, append(append(args, "--"), command...)...)
	cmd.Env = e.SimEnv(filepath.Join(work, "state"))
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	var cpu time.Duration
	stat := filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "stat")
	for {
		b, err := os.ReadFile(stat)
		if err != nil {
			return result{}, err
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		cpu = time.Duration(ut+st) * time.Second / userHZ
		if f[0] == "Z" {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Wait()
	r, err := store.Open(db)
	if err != nil {
		return result{}, fmt.Errorf("%w: %s", err, errb.String())
	}
	defer r.Close()
	out := result{cpu: cpu}
	r.Failures(func(*store.Event) error { out.failures++; return nil })
	err = r.Each(func(v store.Value) error {
		switch v.Bucket {
		case "named":
			out.named++
			out.namedBytes += len(v.Val)
		case "captures":
			out.raw++
			out.rawBytes += len(v.Val)
		case "pystacks", "pycode":
			out.rawBytes += len(v.Val)
		}
		return nil
	})
	return out, err
}

// nameCost times stackname.Name on the raw captures of --keep-stack-bytes
// recordings of the new-call-site storms.
func nameCost(e *benchutil.Env, bin, work string) {
	fmt.Println("| captures of | captures | first (opens the files) | each after, median | max |")
	fmt.Println("|---|---:|---:|---:|---:|")
	for _, sc := range scenarios(e) {
		if !strings.Contains(sc.name, "new call site") {
			continue
		}
		if _, err := record(e, bin, work, sc.cmd(e), []string{"--keep-stack-bytes"}); err != nil {
			fail(err)
		}
		first, rest := timeNaming(filepath.Join(work, "run.db"))
		sort.Slice(rest, func(i, j int) bool { return rest[i] < rest[j] })
		fmt.Printf("| %s | %d | %.2f ms | %.0f µs | %.0f µs |\n", sc.name, len(rest)+1, ms(first), us(rest[len(rest)/2]),
			us(rest[len(rest)-1]))
	}
}

// timeNaming names every capture of a run.db as the recorder does and
// returns the time of the first and of each other.
func timeNaming(db string) (time.Duration, []time.Duration) {
	r, err := store.Open(db)
	if err != nil {
		fail(err)
	}
	defer r.Close()
	procs, _ := r.Processes()
	u := unwind.New(unwind.LocalFiles{}, 0)
	var times []time.Duration
	err = r.Failures(func(ev *store.Event) error {
		c, err := r.Capture(ev.PID, ev.TID, ev.End)
		if c == nil || err != nil {
			return err
		}
		py := stackname.Python{}
		for i := range procs {
			if procs[i].PID == c.PID && procs[i].Python != nil {
				py.Interp = procs[i].Python
			}
		}
		if py.Interp != nil {
			py.Stack, _ = r.PyStack(c.PID, c.TID, c.Time)
			py.Codes, _ = r.PyCodes(c.PID)
		}
		t0 := time.Now()
		stackname.Name(u, c, py)
		times = append(times, time.Since(t0))
		return nil
	})
	if err != nil || len(times) == 0 {
		fail(fmt.Errorf("%s: %d captures: %v", db, len(times), err))
	}
	return times[0], times[1:]
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "stackcost:", err)
	os.Exit(1)
}

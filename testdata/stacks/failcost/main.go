// Command failcost measures what forensic's return probe costs per failed
// call with the stack capture, against a build without it: forensic
// binaries (OLD,NEW[,MORE...]) record the same failure storms on the
// simulated GPU, interleaved round by round (OLD NEW OLD NEW ...), with the
// kernel's BPF run-time statistics on. It prints call_return's run time per
// run (medians over the rounds, the statistics' own cost included) of each
// binary and its difference from OLD's, and, from the last binary's
// run.db, how the failures were captured: their own capture, a reference
// to their call site's, or skipped by the rate limit.
//
//	make && flock /tmp/forensic-e2e.lock go run ./testdata/stacks/failcost -bins OLD,bin/forensic
//
// Run it as root, under the e2e lock: it loads BPF programs. The
// workloads are callchain_o2 (built by make) and ctypes_oom.py under
// Debian's python3.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/retrivium/forensic/store"
)

// workload is one storm: a command run under `forensic record`.
type workload struct {
	name string
	argv []string
}

// result is one recording's cost and, for NEW, its captures.
type result struct {
	perRun                  float64 // call_return, ns per run
	runs                    uint64
	fails, caps, refs, skip int
}

func main() {
	bins := flag.String("bins", "", "OLD,NEW[,MORE...]: forensic binaries")
	rounds := flag.Int("rounds", 5, "rounds, each recording every workload with both binaries")
	n := flag.Int("n", 2000, "failures of the one- and two-site storms")
	sites := flag.Int("sites", 200, "failures (each at a new call site) of the new-site storms")
	flag.Parse()
	list := strings.Split(*bins, ",")
	if len(list) < 2 || *rounds < 1 {
		fmt.Fprintln(os.Stderr, "failcost: -bins OLD,NEW is required, -rounds at least 1")
		os.Exit(2)
	}
	if err := run(list, *rounds, *n, *sites); err != nil {
		fmt.Fprintln(os.Stderr, "failcost:", err)
		os.Exit(1)
	}
}

func workloads(repo string, n, sites int) []workload {
	lib := filepath.Join(repo, "build", "simgpu", "libcuda.so.1")
	chain := filepath.Join(repo, "build", "simgpu", "scenarios", "callchain_o2")
	py := filepath.Join(repo, "testdata", "stacks", "ctypes_oom.py")
	tb := strconv.FormatUint(1<<40, 10)
	return []workload{
		{"C -O2, one call site", []string{chain, lib, tb, strconv.Itoa(n), "same"}},
		{"C -O2, a new call site each", []string{chain, lib, tb, strconv.Itoa(sites), "deeper"}},
		{"Python 3.11, two call sites", []string{"/usr/bin/python3", py, lib, tb, strconv.Itoa(n)}},
		{"Python 3.11, a new call site each", []string{"/usr/bin/python3", py, lib, tb, strconv.Itoa(sites), "new"}},
	}
}

func run(bins []string, rounds, n, sites int) error {
	_, self, _, _ := runtime.Caller(0)
	repo := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(self))))
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return fmt.Errorf("enable BPF statistics: %w", err)
	}
	defer stats.Close()
	work, err := os.MkdirTemp("", "failcost")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	loads := workloads(repo, n, sites)
	res := make([][][]result, len(loads)) // workload, binary, round
	for w := range loads {
		res[w] = make([][]result, len(bins))
	}
	for r := 0; r < rounds; r++ {
		for w, wl := range loads {
			for b, bin := range bins {
				got, err := record(repo, work, bin, wl, b == len(bins)-1)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", bin, wl.name, err)
				}
				fmt.Fprintf(os.Stderr, "failcost: round %d %s %s: %.0f ns per run (%d runs)\n", r+1, wl.name, bin, got.perRun, got.runs)
				res[w][b] = append(res[w][b], got)
			}
		}
	}
	table(bins, rounds, loads, res)
	return nil
}

// table writes the markdown table.
func table(bins []string, rounds int, loads []workload, res [][][]result) {
	fmt.Printf("call_return run time per run, %d rounds interleaved, medians; old is %s:\n\n", rounds, bins[0])
	head, line := "| storm | failures | old |", "|---|---:|---:|"
	for _, b := range bins[1:] {
		head += fmt.Sprintf(" %s | - old |", filepath.Base(b))
		line += "---:|---:|"
	}
	fmt.Println(head + " captured | referred | skipped |")
	fmt.Println(line + "---:|---:|---:|")
	for w, wl := range loads {
		med := func(b int) float64 {
			var xs []float64
			for _, r := range res[w][b] {
				xs = append(xs, r.perRun)
			}
			sort.Float64s(xs)
			return xs[len(xs)/2]
		}
		last := res[w][len(bins)-1][rounds-1]
		row := fmt.Sprintf("| %s | %d | %.0f ns |", wl.name, last.fails, med(0))
		for b := 1; b < len(bins); b++ {
			row += fmt.Sprintf(" %.0f ns | %+.0f ns |", med(b), med(b)-med(0))
		}
		fmt.Printf("%s %d | %d | %d |\n", row, last.caps, last.refs, last.skip)
	}
}

// record runs one storm under `bin record` and reads call_return's
// statistics while the programs are loaded: the storm's shell waits for a
// file after the workload exits.
func record(repo, work, bin string, wl workload, count bool) (result, error) {
	ready, goOn := filepath.Join(work, "ready"), filepath.Join(work, "continue")
	db, state := filepath.Join(work, "run.db"), filepath.Join(work, "state")
	for _, p := range []string{ready, goOn, state, db} {
		os.Remove(p)
	}
	script := fmt.Sprintf(`"$@" 2>/dev/null; touch %s; while [ ! -e %s ]; do sleep 0.01; done`, ready, goOn)
	args := append([]string{"record", "-o", db, "--force", "--libcuda", filepath.Join(repo, "build", "simgpu", "libcuda.so.1"),
		"--libnvidia-ml", filepath.Join(repo, "build", "simgpu", "libnvidia-ml.so.1"), "--", "/bin/sh", "-c", script, "sh"}, wl.argv...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "SIMGPU_STATE="+state)
	var se strings.Builder
	cmd.Stderr = &se
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	deadline := time.Now().Add(120 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			return result{}, fmt.Errorf("the storm did not end: %s", se.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	rt, runs, err := returnStats(cmd.Process.Pid)
	os.WriteFile(goOn, nil, 0o644)
	if werr := cmd.Wait(); werr != nil {
		return result{}, fmt.Errorf("forensic record: %v: %s", werr, se.String())
	}
	if err != nil {
		return result{}, err
	}
	r := result{perRun: float64(rt) / float64(max(runs, 1)), runs: runs}
	if count {
		err = captures(db, &r)
	}
	return r, err
}

// returnStats reads call_return's run time and count from the file
// descriptors the recorder holds.
func returnStats(pid int) (time.Duration, uint64, error) {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, err
	}
	for _, ent := range ents {
		kv := fdinfo(filepath.Join(dir, ent.Name()))
		id, ok := kv["prog_id"]
		if !ok || kv["run_cnt"] == "" {
			continue
		}
		n, _ := strconv.ParseUint(id, 10, 32)
		p, err := ebpf.NewProgramFromID(ebpf.ProgramID(n))
		if err != nil {
			continue
		}
		info, err := p.Info()
		p.Close()
		if err != nil || info.Name != "call_return" {
			continue
		}
		ns, _ := strconv.ParseInt(kv["run_time_ns"], 10, 64)
		runs, _ := strconv.ParseUint(kv["run_cnt"], 10, 64)
		return time.Duration(ns), runs, nil
	}
	return 0, 0, errors.New("the recorder holds no call_return program")
}

// fdinfo reads one /proc/PID/fdinfo file's "key: value" lines.
func fdinfo(path string) map[string]string {
	out := map[string]string{}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// captures counts how a run's failures were captured.
func captures(db string, r *result) error {
	rd, err := store.Open(db)
	if err != nil {
		return err
	}
	defer rd.Close()
	err = rd.Failures(func(e *store.Event) error {
		r.fails++
		c, err := rd.Capture(e.PID, e.TID, e.End)
		if c != nil {
			r.caps++
		}
		return err
	})
	if err == nil {
		err = rd.StackRefs(func(*store.StackRef) error { r.refs++; return nil })
	}
	if stop, serr := rd.Stop(); serr == nil && stop != nil {
		r.skip = int(stop.Stats.StackSkipped)
	}
	return err
}

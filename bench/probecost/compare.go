package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/retrivium/forensic/bench/internal/benchutil"
)

// A comparison (-compare OLD,NEW) runs forensic's own probe programs, as
// each of two forensic binaries loads them, over the same workloads, the
// binaries interleaved round by round in ABBA order (OLD NEW, NEW OLD, ...:
// what runs first in a round has no advantage over the whole), with the
// kernel's run-time statistics on. It reports the call programs' run time
// per hooked call (medians over the rounds) and NEW/OLD as the median of
// the rounds' own ratios: the cost of a change to the programs, measured
// in one run so that both sides share the machine's load.

// workload is one simwork script of a comparison.
type workload struct {
	name, script, what string
	env                []string
}

// progCost is what forensic's call programs cost in one recording.
type progCost struct {
	perCall float64            // ns of run time per hooked call, all call programs
	perRun  map[string]float64 // ns per run, by program name
}

// callPrograms are the programs that run at a hooked call's entry and
// return: the entry/return pair, or the session program run at both ends.
var callPrograms = map[string]bool{"call_entry": true, "call_return": true, "call_session": true}

func compareWorkloads(n int) []workload {
	vmm := max(n/10, 200)
	return []workload{
		{"mix", fmt.Sprintf("init; use 0; mix %d", n),
			fmt.Sprintf("`mix %d`: cuMemAlloc_v2, cuMemAllocAsync, cuMemFreeAsync, cuMemAllocHost_v2, cuMemFreeHost, cuMemFree_v2 (no array argument: the common record)", n), nil},
		{"vmm", fmt.Sprintf("init; use 0; repeat %d { vmm 2M 0 1; free }", vmm),
			fmt.Sprintf("`repeat %d { vmm 2M 0 1; free }` on 2 GPUs: 7 calls per iteration, one of them cuMemSetAccess with 2 descriptors (the array record)", vmm),
			[]string{"SIMGPU_DEVICES=2"}},
	}
}

// compare runs the comparison and prints its markdown table.
func compare(env *benchutil.Env, bins []string, rounds, n int) error {
	loads := compareWorkloads(n)
	costs := make([][][]progCost, len(loads)) // workload, binary, round
	for w := range loads {
		costs[w] = make([][]progCost, len(bins))
	}
	for r := 0; r < rounds; r++ {
		for w, wl := range loads {
			for k := range bins {
				b := k
				if r%2 == 1 {
					b = len(bins) - 1 - k
				}
				c, err := recordCost(env, bins[b], wl, fmt.Sprintf("cmp-%d", b))
				if err != nil {
					return fmt.Errorf("%s, %s: %w", bins[b], wl.name, err)
				}
				benchutil.Logf("probecost: round %d %s %s: %.0f ns per call %v", r+1, wl.name, bins[b], c.perCall, c.perRun)
				costs[w][b] = append(costs[w][b], c)
			}
		}
	}
	printCompare(bins, rounds, loads, costs)
	return nil
}

// printCompare prints a comparison's table: per workload, the call
// programs' run time per call of each binary and their ratio.
func printCompare(bins []string, rounds int, loads []workload, costs [][][]progCost) {
	w := os.Stdout
	fmt.Fprintf(w, "forensic's call programs, %s (old) against %s (new), %d rounds interleaved (ABBA); run time of "+
		"the programs per hooked call (statistics' own cost included), medians over the rounds; new/old is the "+
		"median of the rounds' own ratios:\n\n", bins[0], bins[1], rounds)
	fmt.Fprintf(w, "| workload | old per call | new per call | new/old | old per program run | new per program run |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---|---|\n")
	for i, wl := range loads {
		old, cur := costs[i][0], costs[i][1]
		var ratios, o, c []float64
		for r := range old {
			ratios = append(ratios, cur[r].perCall/old[r].perCall)
			o = append(o, old[r].perCall)
			c = append(c, cur[r].perCall)
		}
		fmt.Fprintf(w, "| %s | %.0f ns | %.0f ns | %.3f | %s | %s |\n", wl.name, benchutil.Median(o), benchutil.Median(c),
			benchutil.Median(ratios), perRun(old), perRun(cur))
	}
	fmt.Fprintln(w)
	for _, wl := range loads {
		fmt.Fprintf(w, "- %s: %s\n", wl.name, wl.what)
	}
	fmt.Fprintln(w)
}

// perRun is each call program's median run time over the rounds.
func perRun(rounds []progCost) string {
	by := map[string][]float64{}
	for _, c := range rounds {
		for name, v := range c.perRun {
			by[name] = append(by[name], v)
		}
	}
	var names []string
	for name := range by {
		names = append(names, name)
	}
	sort.Strings(names)
	var parts []string
	for _, name := range names {
		parts = append(parts, fmt.Sprintf("`%s` %.0f ns", name, benchutil.Median(by[name])))
	}
	return strings.Join(parts, ", ")
}

// recordCost records one workload with one forensic binary and reads its
// programs' statistics while they are still loaded: the workload waits
// after its loop until they have been read.
func recordCost(env *benchutil.Env, bin string, wl workload, tag string) (progCost, error) {
	ready := filepath.Join(env.Work, "probecost."+tag+".ready")
	goOn := filepath.Join(env.Work, "probecost."+tag+".continue")
	db := filepath.Join(env.Work, "probecost."+tag+".db")
	state := filepath.Join(env.Work, "probecost."+tag+".state")
	for _, p := range []string{ready, goOn, state} {
		os.Remove(p)
	}
	defer func() {
		for _, p := range []string{ready, goOn, state, db} {
			os.Remove(p)
		}
	}()
	cmd := exec.Command(bin, "record", "-o", db, "--force", "--libcuda", env.LibCUDA, "--libnvidia-ml", env.LibNVML,
		"--", env.Simwork, wl.script+"; touch "+ready+"; wait-file "+goOn)
	cmd.Env = env.SimEnv(state, wl.env...)
	var se strings.Builder
	cmd.Stderr = &se
	if err := cmd.Start(); err != nil {
		return progCost{}, err
	}
	if err := waitFile(ready, 120*time.Second); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return progCost{}, fmt.Errorf("the workload did not finish its loop: %s", se.String())
	}
	stats, err := benchutil.ProcProgStats(cmd.Process.Pid)
	os.WriteFile(goOn, nil, 0o644)
	if werr := cmd.Wait(); werr != nil {
		return progCost{}, fmt.Errorf("forensic record: %v: %s", werr, se.String())
	}
	if err != nil {
		return progCost{}, err
	}
	return callCost(stats)
}

// callCost sums the call programs' statistics: every hooked call runs
// two of them (entry and return, or the session program twice).
func callCost(stats map[uint32]benchutil.ProgStat) (progCost, error) {
	c := progCost{perRun: map[string]float64{}}
	var rt time.Duration
	var runs uint64
	for _, st := range stats {
		if !callPrograms[st.Name] {
			continue
		}
		rt += st.Runtime
		runs += st.Count
		c.perRun[st.Name] = float64(st.Runtime) / float64(max(st.Count, 1))
	}
	if runs < 2 {
		return c, fmt.Errorf("no statistics for the call programs (%d programs)", len(stats))
	}
	c.perCall = float64(rt) / float64(runs/2)
	return c, nil
}

// waitFile waits for a file to exist.
func waitFile(path string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %v", path, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

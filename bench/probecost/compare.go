package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/retrivium/forensic/bench/internal/benchutil"
)

// A comparison (-compare OLD,NEW) runs forensic's own probe programs, as
// each of two forensic binaries loads them, over the same workloads, the
// binaries interleaved round by round (OLD NEW OLD NEW ...), with the
// kernel's run-time statistics on. It reports each program's run time per
// run (medians over the rounds) and NEW/OLD as ratios: the cost of a
// change to the programs, measured in one run so that both sides share
// the machine's load.

// workload is one simwork script of a comparison.
type workload struct {
	name, script, what string
	env                []string
}

// progCost is forensic's two programs' run time per run, one recording.
type progCost struct{ entry, ret float64 }

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
			for b, bin := range bins {
				c, err := recordCost(env, bin, wl, fmt.Sprintf("cmp-%d", b))
				if err != nil {
					return fmt.Errorf("%s, %s: %w", bin, wl.name, err)
				}
				benchutil.Logf("probecost: round %d %s %s: call_entry %.0f ns, call_return %.0f ns", r+1, wl.name, filepath.Base(filepath.Dir(bin)), c.entry, c.ret)
				costs[w][b] = append(costs[w][b], c)
			}
		}
	}
	w := os.Stdout
	fmt.Fprintf(w, "forensic's own programs, %s (old) against %s (new), %d rounds interleaved; run time per program run "+
		"(statistics' own cost included), medians over the rounds:\n\n", bins[0], bins[1], rounds)
	fmt.Fprintf(w, "| workload | call_entry old | new | new/old | call_return old | new | new/old | entry + return new/old |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, wl := range loads {
		med := func(b int, f func(progCost) float64) float64 {
			var xs []float64
			for _, c := range costs[i][b] {
				xs = append(xs, f(c))
			}
			return benchutil.Median(xs)
		}
		entry := func(c progCost) float64 { return c.entry }
		ret := func(c progCost) float64 { return c.ret }
		both := func(c progCost) float64 { return c.entry + c.ret }
		fmt.Fprintf(w, "| %s | %.0f ns | %.0f ns | %.3f | %.0f ns | %.0f ns | %.3f | %.3f |\n", wl.name,
			med(0, entry), med(1, entry), med(1, entry)/med(0, entry),
			med(0, ret), med(1, ret), med(1, ret)/med(0, ret), med(1, both)/med(0, both))
	}
	fmt.Fprintln(w)
	for _, wl := range loads {
		fmt.Fprintf(w, "- %s: %s\n", wl.name, wl.what)
	}
	fmt.Fprintln(w)
	return nil
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
	deadline := time.Now().Add(120 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			return progCost{}, fmt.Errorf("the workload did not finish its loop: %s", se.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	stats, err := benchutil.ProcProgStats(cmd.Process.Pid)
	os.WriteFile(goOn, nil, 0o644)
	if werr := cmd.Wait(); werr != nil {
		return progCost{}, fmt.Errorf("forensic record: %v: %s", werr, se.String())
	}
	if err != nil {
		return progCost{}, err
	}
	var c progCost
	for _, st := range stats {
		per := float64(st.Runtime) / float64(max(st.Count, 1))
		switch st.Name {
		case "call_entry":
			c.entry = per
		case "call_return":
			c.ret = per
		}
	}
	if c.entry == 0 || c.ret == 0 {
		return c, fmt.Errorf("no statistics for call_entry/call_return (%d programs)", len(stats))
	}
	return c, nil
}

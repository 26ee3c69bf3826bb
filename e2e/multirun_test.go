package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/retrivium/forensic/report"
)

// A job of four ranks, each recorded by its own `forensic record` with its
// own RANK and WORLD_SIZE: rank 1 runs out of memory first, ranks 0 and 2
// fail after it, and rank 3's run.db is not gathered. Analyzing the
// directory names rank 1's run as the first failure, ranks 0 and 2 as
// failures after it that only the job ties to it (other GPUs, no cause of
// their own), and rank 3 as missing, which leaves the job's first failure
// unestablished.
func TestMultiRunJob(t *testing.T) {
	w := newWorld(t, "SIMGPU_DEVICES=4", "SIMGPU_FB_TOTAL=16G")
	gathered := filepath.Join(w.dir, "gathered")
	os.MkdirAll(gathered, 0o755)
	// The others wait for rank 1's failure (a file it makes after it),
	// not for a time: four recorders starting at once on a busy machine
	// start their workloads hundreds of milliseconds apart.
	died := filepath.Join(w.dir, "rank1-failed")
	scripts := []string{
		"init; use 0; alloc 2G; wait-file " + died + "; sleep 100; alloc 1G; exit 1",
		"init; use 1; alloc 14G; sleep 100; alloc 4G; touch " + died + "; exit 1",
		"init; use 2; alloc 2G; wait-file " + died + "; sleep 200; alloc 1G; exit 1",
		"init; use 3; alloc 2G; wait-file " + died + "; sleep 300; free-all",
	}
	var wg sync.WaitGroup
	for rank, script := range scripts {
		db := filepath.Join(gathered, rankDB(rank))
		if rank == 3 {
			db = filepath.Join(w.dir, rankDB(rank)) // never gathered
		}
		env := []string{"RANK=" + itoa(rank), "WORLD_SIZE=4", "LOCAL_RANK=" + itoa(rank)}
		if rank != 1 {
			// The other ranks' next allocation fails in the collective
			// that rank 1's death broke (injected: the simulator's driver
			// does not know NCCL).
			env = append(env, "SIMGPU_FAIL=cuMemAlloc_v2:2:999")
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := binCommand(bin{}, "record", "-o", db, "--libcuda", simCUDA, "--libnvidia-ml", simNVML, "--", simwork, script)
			cmd.Env = w.environ(env...)
			if out, err := cmd.CombinedOutput(); err != nil && cmd.ProcessState == nil {
				t.Errorf("rank %d: %v %s", rank, err, out)
			}
		}()
	}
	wg.Wait()

	out, err := binCommand(bin{}, "analyze", "--json", gathered).Output()
	if err != nil {
		t.Fatalf("analyze %s: %v", gathered, err)
	}
	if err := report.ValidateReportJSON(out); err != nil {
		t.Errorf("the multi-run report does not match the schema: %v", err)
	}
	rep := decodeReport(t, out)
	ff := rep.FirstFailure
	if ff == nil || filepath.Base(ff.RunPath) != rankDB(1) || ff.Rank == nil || *ff.Rank != 1 {
		t.Fatalf("first failure %+v, want rank 1's", ff)
	}
	if rep.MultiRun == nil || rep.Order != "certain" || len(rep.Runs) != 3 {
		t.Fatalf("multi-run %+v, want 3 runs in a certain order", rep.MultiRun)
	}
	var after []int
	for _, c := range rep.Consequences {
		if c.Rank != nil && c.DelayMinNS > 0 && c.Exact && c.Relation == report.RelationSameJob {
			after = append(after, *c.Rank)
		}
	}
	slices.Sort(after)
	if !slices.Equal(after, []int{0, 2}) {
		t.Errorf("consequences %+v, want ranks 0 and 2, exactly later", rep.Consequences)
	}
	if !slices.Equal(rep.MissingRanks, []int{3}) {
		t.Errorf("missing ranks %v, want [3]", rep.MissingRanks)
	}
	if rep.Attribution != report.AttrMissingEvidence || !hasMissing(rep.Missing, "rank 3", "file is missing") {
		t.Errorf("a missing rank does not leave the first failure unestablished: %s %+v", rep.Attribution, rep.Missing)
	}
	if !strings.Contains(rep.Verdict, "rank 1") || !strings.Contains(rep.Verdict, "cuMemAlloc_v2 of 4.00 GiB") {
		t.Errorf("the verdict does not name rank 1's failure: %s", rep.Verdict)
	}
	text, _ := binCommand(bin{}, "analyze", filepath.Join(gathered, "rank*.db")).Output()
	if !strings.Contains(string(text), "RUNS (3 runs") || !strings.Contains(string(text), "rank 3 of the job's 4 has no run") {
		t.Errorf("the text report lacks the runs:\n%s", text)
	}
}

func rankDB(rank int) string { return "rank" + itoa(rank) + ".db" }

func itoa(i int) string { return strconv.Itoa(i) }

func decodeReport(t *testing.T, data []byte) *report.Report {
	t.Helper()
	var rep report.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("not a report: %v", err)
	}
	return &rep
}

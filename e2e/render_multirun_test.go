package e2e

import (
	"fmt"
	"html"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/retrivium/forensic/internal/e2eenv"
	"github.com/retrivium/forensic/report"
)

// Three ranks of a job of four, each recorded by its own `forensic
// record` with its own RANK and WORLD_SIZE: rank 1 runs out of memory,
// rank 0 fails after it, rank 2 ends cleanly and rank 3 was not recorded.
// `forensic report DIR` writes one page whose Runs section, after the
// verdict, draws the three runs and the missing rank on one wall-clock
// axis and lists the runs and the consequence with the delays the
// analysis measured; headless Chromium renders it without a script error.
func TestRenderMultiRun(t *testing.T) {
	chrome := chromiumPath()
	e2eenv.Need(t, chrome != "", "headless Chromium is not installed (apt-get install chromium)")
	w := newWorld(t, "SIMGPU_DEVICES=3", "SIMGPU_FB_TOTAL=16G")
	dir := filepath.Join(w.dir, "job")
	os.MkdirAll(dir, 0o755)
	scripts := []string{
		"init; use 0; alloc 2G; sleep 300; alloc 1G; exit 1",
		"init; use 1; alloc 14G; sleep 100; alloc 4G; exit 1",
		"init; use 2; alloc 2G; sleep 200; free-all",
	}
	var wg sync.WaitGroup
	for rank, script := range scripts {
		env := []string{"RANK=" + itoa(rank), "WORLD_SIZE=4", "LOCAL_RANK=" + itoa(rank)}
		if rank == 0 {
			// Its next allocation fails in the collective rank 1's death
			// broke (injected: the simulator does not know NCCL).
			env = append(env, "SIMGPU_FAIL=cuMemAlloc_v2:2:999")
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := binCommand(bin{}, "record", "-o", filepath.Join(dir, rankDB(rank)), "--libcuda", simCUDA,
				"--libnvidia-ml", simNVML, "--", simwork, script)
			cmd.Env = w.environ(env...)
			if out, err := cmd.CombinedOutput(); err != nil && cmd.ProcessState == nil {
				t.Errorf("rank %d: %v %s", rank, err, out)
			}
		}()
	}
	wg.Wait()

	out, err := binCommand(bin{}, "analyze", "--json", dir).Output()
	if err != nil {
		t.Fatalf("analyze %s: %v", dir, err)
	}
	rep := decodeReport(t, out)
	if rep.MultiRun == nil || len(rep.Runs) != 3 || rep.FirstFailure == nil || filepath.Base(rep.FirstFailure.RunPath) != rankDB(1) {
		t.Fatalf("want rank 1's failure first of 3 runs; got %+v", rep.MultiRun)
	}
	page := filepath.Join(w.dir, "report.html")
	if out, err := binCommand(bin{}, "report", dir, "-o", page).CombinedOutput(); err != nil {
		t.Fatalf("forensic report %s: %v\n%s", dir, err, out)
	}
	checkMultiRunPage(t, page, rep)
	checkRunsSection(t, string(mustRead(t, page)), rep)
	checkRendered(t, chrome, w.dir, page)
	shotRuns(t, chrome, w.dir, page)
}

// checkMultiRunPage holds what every page holds: self-contained, the
// verdict, no total GPU memory.
func checkMultiRunPage(t *testing.T, path string, rep *report.Report) {
	t.Helper()
	s := string(mustRead(t, path))
	if m := remoteRef.FindAllString(s, -1); len(m) > 0 {
		t.Errorf("report.html loads external resources: %q", m)
	}
	if !strings.Contains(html.UnescapeString(s), rep.Verdict) {
		t.Error("report.html lacks the verdict")
	}
	if strings.Contains(strings.ToLower(s), "total gpu memory") {
		t.Error("report.html shows a total GPU memory")
	}
}

// checkRunsSection holds what the Runs section shows of the analysis.
func checkRunsSection(t *testing.T, page string, rep *report.Report) {
	t.Helper()
	v, r, e := strings.Index(page, `id="verdict"`), strings.Index(page, `id="runs"`), strings.Index(page, `id="evidence"`)
	if !(v >= 0 && v < r && r < e) {
		t.Fatalf("verdict at %d, runs at %d, evidence at %d: no Runs section after the verdict", v, r, e)
	}
	s := html.UnescapeString(page[r:e])
	want := []string{"order of their first failures: " + rep.Order, `class="norun">no run<`,
		"rank 3 of the job's 4 has no run", "this page", "no failed call", "first: cuMemAlloc_v2 OUT_OF_MEMORY"}
	for _, run := range rep.Runs {
		want = append(want, fmt.Sprintf("rank %d · %s", *run.Rank, run.Host), run.Path)
		if run.ClockErrorNS == nil {
			want = append(want, "no bound")
		} else {
			want = append(want, "±"+report.Duration(*run.ClockErrorNS))
		}
	}
	if len(rep.Consequences) != 1 {
		t.Fatalf("consequences %+v, want rank 0's", rep.Consequences)
	}
	c := rep.Consequences[0]
	want = append(want, report.Duration(c.DelayMinNS)+" later", "cuMemAlloc_v2 → "+c.ResultName)
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("the Runs section lacks %q", w)
		}
	}
	// One row per run and one for the missing rank in each panel, the
	// first failure and the consequence marked in each.
	panels := strings.Count(s, `<g class="runs-panel">`)
	if panels < 1 {
		t.Fatal("no runs picture")
	}
	for class, n := range map[string]int{`class="span"`: 3, `class="pname"`: 4, `class="row`: 4, `class="rfail first"`: 1, `class="rfail consequence"`: 1} {
		if got := strings.Count(s, class); got != n*panels {
			t.Errorf("%d × %s in %d panels, want %d", got, class, panels, n*panels)
		}
	}
}

// shotRuns renders the page at 800 px wide, and keeps both screenshots
// where FORENSIC_SCREENSHOT_DIR says, to be looked at.
func shotRuns(t *testing.T, chrome, dir, page string) {
	t.Helper()
	shot := filepath.Join(dir, "runs-800.png")
	_, log := chromium(t, chrome, dir, "--screenshot="+shot, "--window-size=800,2600", "--hide-scrollbars", "file://"+page)
	if m := pageErrors.FindAllString(log, -1); len(m) > 0 {
		t.Errorf("JavaScript errors while rendering report.html at 800 px:\n%s", strings.Join(m, "\n"))
	}
	if d := os.Getenv("FORENSIC_SCREENSHOT_DIR"); d != "" {
		os.WriteFile(filepath.Join(d, "runs-800.png"), mustRead(t, shot), 0o644)
		os.WriteFile(filepath.Join(d, "runs-1280.png"), mustRead(t, filepath.Join(dir, "report.png")), 0o644)
		os.WriteFile(filepath.Join(d, "runs.html"), mustRead(t, page), 0o644)
	}
}

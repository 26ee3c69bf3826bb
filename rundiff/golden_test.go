package rundiff

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/retrivium/forensic/report"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// goldenRuns are three good runs and a failing one of a serving job: the
// failing run has a neighbour NVML listed, an extra 2 GiB allocation in
// its serving phase, less framebuffer free at the least (a bound, where
// the good runs' headroom is exact), and another driver.
func goldenRuns() []*Run {
	mk := func(path string, failed bool, sizes []int64, neighbour uint64, leastFree uint64, driver string) *Run {
		r := run(path, failed, sizes, neighbour)
		r.Report.Headroom = []report.Headroom{{GPU: 0, View: "framebuffer", LeastFree: leastFree, Total: 81559 << 20,
			Exact: !failed, Source: "sample and traced calls"}}
		r.Report.Phases = []report.Phase{{Label: "before serving", StartNS: 0, EndNS: 2}, {Label: "serving", StartNS: 2, EndNS: 100}}
		r.Report.PhasesFrom = "markers"
		r.Platform = Platform{Driver: driver, GPUs: []GPUPlatform{{Index: 0, Name: "NVIDIA H100 80GB HBM3", FBTotal: u64(81559 << 20), BAR1: u64(128 << 30), MIG: "disabled"}}}
		return r
	}
	return []*Run{
		mk("good1.db", false, []int64{6144, 512, 512}, 0, 9<<30, "535.161.08"),
		mk("good2.db", false, []int64{6144, 512, 512}, 0, 8<<30, "535.161.08"),
		mk("good3.db", false, []int64{6144, 512, 512}, 0, 9<<30, "550.54.15"),
		mk("bad.db", true, []int64{6144, 512, 2048, -512}, 6<<30, 1<<30, "550.54.15"),
	}
}

// The diff of a fixed set of runs, as --json writes it: a change in any
// difference, its rank or its wording shows here.
func TestDiffJSONGolden(t *testing.T) {
	d, err := Diff(goldenRuns())
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := report.WriteDiffJSON(&buf, d); err != nil {
		t.Fatal(err)
	}
	if err := report.ValidateDiffJSON(buf.Bytes()); err != nil {
		t.Errorf("the diff does not follow its schema: %v", err)
	}
	golden := filepath.Join("testdata", "serving.diff.json")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test ./rundiff -update writes it)", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("diff --json differs from %s (go test ./rundiff -update rewrites it; read the diff before committing it):\n%s", golden, buf.String())
	}
}

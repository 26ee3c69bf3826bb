// Package largerun times forensic's analysis and diff on large synthetic
// runs (bench/internal/runsynth): `analyze` of a 10,000,000-call run and
// `diff` of two of them, each in a process of its own so that its peak
// memory is its own (not the generator's, nor the other benchmark's).
//
//	go test -run '^$' -bench LargeRun -benchtime 1x ./bench/largerun
//
// LARGERUN_CALLS sets the calls per run (default 10,000,000; the NVML
// samples are one per 100 calls). The run.db files are written into the
// benchmark's temporary directory and removed after it.
package largerun

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrivium/forensic/analyze"
	"github.com/retrivium/forensic/bench/internal/runsynth"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/rundiff"
	"github.com/retrivium/forensic/store"
)

// childEnv names the operation a child process runs, childArgs its run.db
// files (separated by newlines).
const (
	childEnv  = "LARGERUN_CHILD"
	childArgs = "LARGERUN_ARGS"
)

// figures is what a child reports of itself on its standard output.
type figures struct {
	HeapSys    uint64 `json:"heap_sys"`
	TotalAlloc uint64 `json:"total_alloc"`
	NumGC      uint32 `json:"num_gc"`
	Calls      uint64 `json:"calls"`
	Headline   string `json:"headline"`
}

// BenchmarkLargeRun writes a failing run and a good run of the same job
// (the same seed: they make the same calls until the first failure, 90%
// of the way in), then times `analyze --json` of the failing run and
// `diff --json` of the two, each in a child process. Besides ns/op it
// reports the child's CPU time, peak RSS (getrusage's maxrss: heap,
// stacks and the mapped pages of run.db bbolt reads) and the Go heap it
// held at its end (runtime.MemStats.HeapSys, which does not shrink).
func BenchmarkLargeRun(b *testing.B) {
	calls := 10_000_000
	if v := os.Getenv("LARGERUN_CALLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 100_000 {
			b.Fatalf("LARGERUN_CALLS=%q: want a number of calls of at least 100000", v)
		}
		calls = n
	}
	dir := b.TempDir()
	good, bad := filepath.Join(dir, "good.db"), filepath.Join(dir, "bad.db")
	for _, r := range []struct {
		path string
		good bool
	}{{good, true}, {bad, false}} {
		start := time.Now()
		o := runsynth.Options{Calls: calls, Samples: calls / 100, Seed: 1, NoFailures: r.good}
		if err := runsynth.Write(r.path, o); err != nil {
			b.Fatal(err)
		}
		b.Logf("%s: %d calls written in %v", filepath.Base(r.path), calls, time.Since(start).Round(time.Millisecond))
	}
	label := fmt.Sprintf("%dM", calls/1_000_000)
	if calls < 1_000_000 {
		label = fmt.Sprintf("%dk", calls/1000)
	}
	b.Run("analyze-"+label, func(b *testing.B) { timeChild(b, "analyze", bad) })
	b.Run("diff-"+label, func(b *testing.B) { timeChild(b, "diff", good, bad) })
}

// timeChild runs op in a child process b.N times and reports its figures
// (the last run's memory, the mean CPU time).
func timeChild(b *testing.B, op string, paths ...string) {
	var cpu time.Duration
	var rss int64
	var fig figures
	for i := 0; i < b.N; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"="+op, childArgs+"="+strings.Join(paths, "\n"))
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			b.Fatalf("%s: %v\n%s", op, err, out.String())
		}
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		cpu += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		rss = max(rss, ru.Maxrss) // KiB
		line := out.String()
		if j := strings.Index(line, "{"); j >= 0 {
			line = line[j:]
		}
		if err := json.NewDecoder(strings.NewReader(line)).Decode(&fig); err != nil {
			b.Fatalf("%s: its figures: %v\n%s", op, err, out.String())
		}
	}
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
	b.ReportMetric(float64(rss)/1024, "maxrss-MiB")
	b.ReportMetric(float64(fig.HeapSys)/(1<<20), "heapsys-MiB")
	b.ReportMetric(float64(fig.TotalAlloc)/(1<<20), "alloc-MiB/op")
	if fig.Headline != "" {
		b.Logf("%s: %s", op, fig.Headline)
	}
}

// TestChild is the child process's work: run one operation as the
// command would (with its --json output discarded) and print its
// figures. Run on its own (no LARGERUN_CHILD), it has nothing to do.
func TestChild(t *testing.T) {
	op := os.Getenv(childEnv)
	if op == "" {
		t.Skip("run by BenchmarkLargeRun in a child process")
	}
	paths := strings.Split(os.Getenv(childArgs), "\n")
	var fig figures
	var err error
	switch op {
	case "analyze":
		err = analyzeRun(paths[0], &fig)
	case "diff":
		err = diffRuns(paths, &fig)
	default:
		err = fmt.Errorf("unknown operation %q", op)
	}
	if err != nil {
		t.Fatal(err)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fig.HeapSys, fig.TotalAlloc, fig.NumGC = ms.HeapSys, ms.TotalAlloc, ms.NumGC
	if err := json.NewEncoder(os.Stdout).Encode(&fig); err != nil {
		t.Fatal(err)
	}
}

// analyzeRun is `forensic analyze --json` of one run: the whole analysis
// (headroom and budget included: every analysis computes them).
func analyzeRun(path string, fig *figures) error {
	r, err := store.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	rep, err := analyze.Analyze(r, analyze.Options{})
	if err != nil {
		return err
	}
	if len(rep.Headroom) == 0 {
		return fmt.Errorf("%s: the analysis gave no headroom", path)
	}
	for _, c := range rep.Calls {
		fig.Calls += c.Calls
	}
	return report.WriteJSON(io.Discard, rep)
}

// diffRuns is `forensic diff --json` of runs, the failing one last.
func diffRuns(paths []string, fig *figures) error {
	var srcs []analyze.Source
	for _, p := range paths {
		r, err := store.Open(p)
		if err != nil {
			return err
		}
		defer r.Close()
		srcs = append(srcs, r)
	}
	runs, err := rundiff.ReadAll(srcs, rundiff.Options{})
	if err != nil {
		return err
	}
	d, err := rundiff.Diff(runs)
	if err != nil {
		return err
	}
	fig.Headline = d.Headline
	return report.WriteDiffJSON(io.Discard, d)
}

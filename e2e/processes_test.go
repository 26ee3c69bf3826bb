package e2e

import (
	"bufio"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// A workload that forks two children which allocate and fail: all three
// processes are recorded with their exit status.
func TestForkedChildrenRecorded(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=4G", "SIMGPU_FB_RESERVED=0")
	res := w.record(nil, simwork, `init; use 0; alloc 1G;
		fork { init; use 0; until-fail { alloc 512M }; exit 3 };
		fork { init; use 0; until-fail { alloc 512M }; exit 4 };
		wait; free-all`)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	w.checkComplete(res.db)
	rep, _ := analyzeJSON(t, res.db)
	if len(rep.Processes) != 3 {
		t.Fatalf("%d processes recorded, want 3: %+v", len(rep.Processes), rep.Processes)
	}
	codes := map[int]bool{}
	var root uint32
	for _, p := range rep.Processes {
		if p.Exit == nil || p.Exit.Code == nil {
			t.Errorf("pid %d: no exit status recorded", p.PID)
			continue
		}
		codes[*p.Exit.Code] = true
		if p.Root {
			root = p.PID
		}
	}
	if !codes[0] || !codes[3] || !codes[4] {
		t.Errorf("exit codes %v, want 0 (parent), 3 and 4 (children)", codes)
	}
	for _, p := range rep.Processes {
		if !p.Root && p.PPID != root {
			t.Errorf("child %d has parent %d, want %d", p.PID, p.PPID, root)
		}
		if !p.Root && p.Failed == 0 {
			t.Errorf("child %d: no failed call recorded", p.PID)
		}
	}
	if rep.Attribution != report.AttrAllocation {
		t.Errorf("attribution %s, want allocation", rep.Attribution)
	}
}

// Four threads allocating at once on two simulated GPUs: every event has
// its thread and its GPU.
func TestThreadsOnTwoGPUs(t *testing.T) {
	w := newWorld(t, "SIMGPU_DEVICES=2")
	res := w.record(nil, simwork, `init; threads 4 { use %d; repeat 25 { alloc 1M } }`)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	w.checkComplete(res.db)
	// The workload logged, per thread, the device each call ran on.
	want := map[uint32]int32{}
	f, _ := os.Open(w.calls)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 5 && fs[2] == "cuMemAlloc_v2" {
			tid, _ := strconv.Atoi(fs[1])
			dev, _ := strconv.Atoi(fs[4])
			want[uint32(tid)] = int32(dev)
		}
	}
	f.Close()
	if len(want) != 4 {
		t.Fatalf("%d threads in the call log, want 4", len(want))
	}
	_, evs, _ := stored(t, res.db)
	perGPU := map[int32]int{}
	for _, e := range evs {
		if e.Name != "cuMemAlloc_v2" {
			continue
		}
		d, ok := want[e.TID]
		if !ok {
			t.Fatalf("event from unknown thread %d", e.TID)
		}
		if e.Dev != d {
			t.Errorf("thread %d: event on CUDA device %d, the thread used %d", e.TID, e.Dev, d)
		}
		perGPU[e.Dev]++
	}
	if perGPU[0] != 50 || perGPU[1] != 50 {
		t.Errorf("allocations per device %v, want 50 and 50", perGPU)
	}
	// Both simulated GPUs are the same model, so CUDA order is NVML order.
	rep, _ := analyzeJSON(t, res.db)
	for _, p := range rep.Processes {
		for _, d := range p.Devices {
			if d.GPU == nil || int32(*d.GPU) != d.Ordinal || d.Method == "unknown" {
				t.Errorf("device map %+v", d)
			}
		}
	}
	// The process exits without freeing: the peak is 50 MiB per GPU, and
	// its exit returns it all (the driver frees a dead process's memory).
	views := map[int]bool{}
	for _, v := range rep.MemoryViews {
		if v.Field == "traced device allocations" && v.Peak != nil && *v.Peak == 50<<20 && v.End != nil && *v.End == 0 {
			views[v.GPU] = true
		}
	}
	if !views[0] || !views[1] {
		t.Errorf("traced live bytes per GPU do not peak at 50 MiB and end at 0: %+v", views)
	}
}

// The spawned workload's parent is the recorder, whether its libcuda was
// given up front (nothing holds the workload when it maps it, so it may
// be gone before its exec record is read) or found at mapping.
func TestSpawnedWorkloadParentIsRecorder(t *testing.T) {
	w := newWorld(t)
	for i, flags := range [][]string{
		{"--libcuda", simCUDA}, {"--libcuda", simCUDA}, {"--libcuda", simCUDA}, {"--libcuda", simCUDA}, nil,
	} {
		res := w.recordAs(foundAtMapping, flags, simwork, "init; use 0; alloc 1M")
		recorder := res.pid
		if res.code != 0 {
			t.Fatalf("run %d: exit %d: %s", i, res.code, res.stderr)
		}
		rep, _ := analyzeJSON(t, res.db)
		roots := 0
		for _, p := range rep.Processes {
			if !p.Root {
				continue
			}
			roots++
			if p.PPID != uint32(recorder) {
				t.Errorf("run %d (%q): the workload's parent is recorded as %d, want the recorder, %d", i, flags, p.PPID, recorder)
			}
		}
		if roots != 1 {
			t.Errorf("run %d: %d root processes, want 1", i, roots)
		}
	}
}

// Process records come from ring buffer memory that earlier records used:
// after tens of thousands of calls have gone through a small ring, a
// process's arguments are still exactly its argv (nothing of the calls
// before them), empty arguments stay, and a list longer than the probe
// copies is either read whole from /proc or kept cut and marked so.
func TestArgsExactAfterBusyRing(t *testing.T) {
	verdictVaries(t, "the busy workload fills a small ring on purpose: whether calls are lost, and so whether the verdict is none or missing-evidence, depends on the machine's load")
	w := newWorld(t)
	long := "# " + strings.Repeat("x", 1500)
	sh := w.script("dirty.sh", `$S 'init; use 0; paced 20000 1 65536' >/dev/null
$S 'init' '' 'exit 0'
$S 'init' "`+long+`"
`)
	res := w.record([]string{"--ring-size", "64KiB"}, sh)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	short := []string{simwork, "init", "", "exit 0"}
	var sawShort, sawLong bool
	for _, p := range processesOf(t, res.db) {
		if len(p.Args) == 0 || p.Args[0] != simwork {
			continue
		}
		if p.Exe != simwork || p.Comm != "simwork" {
			t.Errorf("pid %d: exe %q, comm %q; want %s, simwork", p.PID, p.Exe, p.Comm, simwork)
		}
		switch {
		case len(p.Args) > 1 && p.Args[1] == "init; use 0; paced 20000 1 65536":
			if len(p.Args) != 2 || p.ArgsCut {
				t.Errorf("pid %d: args %q (cut %v), want the 2 it was given", p.PID, p.Args, p.ArgsCut)
			}
		case reflect.DeepEqual(p.Args, short):
			sawShort = !p.ArgsCut
		case len(p.Args) == 3 && p.Args[1] == "init" && strings.HasPrefix(long, p.Args[2]):
			whole := p.Args[2] == long
			// Cut, the probe copied exactly 1 KiB: the arguments and their NULs.
			if whole == p.ArgsCut || !whole && len(strings.Join(p.Args, "\x00")) != 1024 {
				t.Errorf("pid %d: %d bytes of the long argument, cut %v", p.PID, len(p.Args[2]), p.ArgsCut)
			}
			sawLong = true
		default:
			t.Errorf("pid %d: args %q are not the argv of any process the script ran", p.PID, p.Args)
		}
	}
	if !sawShort || !sawLong {
		t.Errorf("recorded the empty-argument process: %v, the long-argument one: %v", sawShort, sawLong)
	}
}

// A process that a shell execs (or forks and execs) and that exits at once
// is named after the program it ran, not the shell, even when it is gone
// before the recorder reads its exec; the shells keep their own name, and
// the analysis names the program that failed.
func TestShortLivedExecNamedAfterProgram(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=16G")
	shell, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	sh := w.script("short.sh", `for i in $(seq 1 15); do
  bash -c "exec $S 'init; use 0; alloc 1G'"
  sh -c "$S 'init; use 0; alloc 1G'; true"
done
bash -c "exec $S 'init; use 0; alloc 40G'" 2>/dev/null
true
`)
	res := w.record(nil, sh)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	programs, shells := 0, 0
	for _, p := range processesOf(t, res.db) {
		switch {
		case len(p.Args) > 0 && p.Args[0] == simwork:
			programs++
			if p.Exe != simwork || p.Comm != "simwork" {
				t.Errorf("pid %d runs simwork (args %q) but is recorded as exe %q, comm %q", p.PID, p.Args, p.Exe, p.Comm)
			}
		case len(p.Args) > 0 && p.Args[0] == "sh":
			shells++
			if p.Exe != shell {
				t.Errorf("pid %d: the sh -c process is recorded as exe %q, want %s", p.PID, p.Exe, shell)
			}
		}
	}
	if programs != 31 || shells != 15 {
		t.Errorf("%d simwork and %d sh processes recorded, want 31 and 15", programs, shells)
	}
	out, err := binCommand(bin{}, "analyze", "--no-color", res.db).Output()
	if err != nil {
		t.Fatalf("analyze: %v", err)
	}
	if !strings.Contains(string(out), "(simwork)") || strings.Contains(string(out), "(bash)") {
		t.Errorf("the analysis does not name simwork as the failing program:\n%s", out)
	}
}

// A program deeper than the probe's path walk reaches is named by the last
// components of its path (or, while /proc still shows it, the whole path),
// never by the shell that ran it.
func TestDeepExecutablePathNamed(t *testing.T) {
	w := newWorld(t)
	dir := filepath.Join(w.dir, strings.Repeat("deep/", 60))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "simwork")
	b, err := os.ReadFile(simwork)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, b, 0o755); err != nil {
		t.Fatal(err)
	}
	sh := w.script("deep.sh", "for i in 1 2 3; do "+prog+" 'init; exit 0'; done\n")
	res := w.record(nil, sh)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	n := 0
	for _, p := range processesOf(t, res.db) {
		if len(p.Args) == 0 || p.Args[0] != prog {
			continue
		}
		n++
		cut, isCut := strings.CutPrefix(p.Exe, "...")
		if p.Exe != prog && !(isCut && strings.HasSuffix(prog, cut) && strings.HasSuffix(cut, "/deep/simwork")) {
			t.Errorf("pid %d: exe %q, want %s or its last components after ...", p.PID, p.Exe, prog)
		}
	}
	if n != 3 {
		t.Errorf("%d processes ran the deep simwork, want 3", n)
	}
}

// A child forked after cuInit calls cuDeviceGet and cuMemAlloc_v2 without
// initializing: both fail. The first failure is the allocation everywhere
// (JSON, the FAILURES table's FIRST, the verdict), the verdict does not call
// it the first failed operation, and the earlier query it names as the
// cause is marked so in the table.
func TestForkAfterInitHasOneFirstFailure(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=8G")
	res := w.record(nil, simwork, "init; use 0; alloc 1G; fork { use 0; alloc 1G; exit 0 }; "+
		"fork { init; use 0; alloc 3G; sleep 100 }; fork { init; use 0; alloc 3G; sleep 100 }; wait; exit 1")
	rep, _ := analyzeJSON(t, res.db)
	ff := rep.FirstFailure
	if ff == nil || ff.Symbol != "cuMemAlloc_v2" || rep.Attribution != report.AttrNotMemory {
		t.Fatalf("first %+v, attribution %s: %s", ff, rep.Attribution, rep.Verdict)
	}
	if !strings.HasPrefix(rep.Verdict, "The first failed allocation is cuMemAlloc_v2") {
		t.Errorf("verdict %q", rep.Verdict)
	}
	if rep.Cause == nil || rep.Cause.Symbol != "cuDeviceGet" || rep.Cause.PID != ff.PID {
		t.Fatalf("cause %+v", rep.Cause)
	}
	text := textAt80(t, res.db)
	var firstRow, causeRow int
	for i, l := range strings.Split(text[strings.Index(text, "\nFAILURES"):], "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) > 3 && f[3] == "cuMemAlloc_v2" && strings.HasSuffix(l, "FIRST"):
			firstRow = i
		case len(f) > 3 && f[3] == "cuDeviceGet" && strings.HasSuffix(l, "cause"):
			causeRow = i
		}
	}
	if firstRow == 0 || causeRow == 0 || causeRow > firstRow {
		t.Errorf("FAILURES: FIRST on row %d, cause on row %d:\n%s", firstRow, causeRow, text)
	}
}

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retrivium/forensic/report"
)

// meminfoFree reads the simulated GPU's own free framebuffer from a
// workload's "meminfo DEV FREE TOTAL" line (cuMemGetInfo_v2, which the
// recorder does not trace).
func meminfoFree(t *testing.T, out string) (free, total uint64) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^meminfo \d+ (\d+) (\d+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no meminfo line in the workload's output:\n%s", out)
	}
	free, _ = strconv.ParseUint(m[1], 10, 64)
	total, _ = strconv.ParseUint(m[2], 10, 64)
	return free, total
}

// framebufferHeadroom is GPU 0's framebuffer entry of the headroom.
func framebufferHeadroom(t *testing.T, rep *report.Report) report.Headroom {
	t.Helper()
	for _, h := range rep.Headroom {
		if h.GPU == 0 && h.View == "framebuffer" {
			return h
		}
	}
	t.Fatalf("no framebuffer headroom for GPU 0: %+v", rep.Headroom)
	return report.Headroom{}
}

// TestHeadroomNearMissMatchesTheGPUsOwnAccounting: a job takes the
// framebuffer to within 512 MiB of full for a moment no sample catches,
// beside a neighbour the recording does not follow and with contexts
// that hold memory no call sizes. Nothing fails; the report says it was a
// near miss, and its least free is the simulated GPU's own free at that
// moment, to the byte.
func TestHeadroomNearMissMatchesTheGPUsOwnAccounting(t *testing.T) {
	w := newWorld(t, "SIMGPU_CTX_MEM=256M")
	ready := filepath.Join(w.dir, "neighbour-ready")
	w.startWorkload("init; use 0; alloc 2G; touch " + ready + "; wait-signal; free-all")
	if !waitFor(20e9, func() bool { return exists(ready) }) {
		t.Fatal("the neighbour did not allocate")
	}
	// 16 GiB - 512 MiB reserved - 2 GiB and 256 MiB (the neighbour and its
	// context) - 256 MiB (this job's context) - 12.5 GiB = 512 MiB.
	res := w.record([]string{"--interval", "100ms"}, simwork,
		"init; use 0; sleep 400; alloc 12G; alloc 512M; meminfo; free; free; sleep 400")
	if res.code != 0 {
		t.Fatalf("record exited %d: %s", res.code, res.stderr)
	}
	simFree, simTotal := meminfoFree(t, res.stdout)
	rep, raw := analyzeJSON(t, res.db)
	if _, ok := raw["headroom"].([]any); !ok {
		t.Fatalf("--json has no headroom array: %v", raw["headroom"])
	}
	if rep.FirstFailure != nil || !rep.NearMiss {
		t.Fatalf("near_miss %v (first failure %v), want a near miss of a run with no failure", rep.NearMiss, rep.FirstFailure)
	}
	h := framebufferHeadroom(t, rep)
	if h.LeastFree != simFree || h.Total != simTotal || !h.Exact {
		t.Errorf("least free %d of %d (exact %v, %s), want the simulated GPU's own %d of %d, exact",
			h.LeastFree, h.Total, h.Exact, h.Note, simFree, simTotal)
	}
	if c := h.Call; c == nil || c.Symbol != "cuMemAlloc_v2" || c.Size == nil || *c.Size != 512<<20 || c.TimeNS != h.AtNS {
		t.Errorf("the call that brought it there: %+v, want the 512 MiB cuMemAlloc_v2 returning at %d", c, h.AtNS)
	}
	if !strings.Contains(rep.Verdict, "Near miss") || !strings.Contains(rep.Verdict, "512.0 MiB") {
		t.Errorf("verdict %q does not give the near miss's numbers", rep.Verdict)
	}
	text := binCommand(bin{}, "analyze", "--no-color", res.db)
	text.Env = append(w.environ(), "COLUMNS=80")
	out, err := text.Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(string(out), "\n", 26)[:25]
	for _, l := range lines {
		if len([]rune(l)) > 80 {
			t.Errorf("line wider than 80 columns: %q", l)
		}
	}
	if first := strings.Join(strings.Fields(strings.Join(lines, " ")), " "); !strings.Contains(first, "Near miss: GPU 0 had 512.0 MiB") {
		t.Errorf("the first 25 lines of the text report do not show the near miss:\n%s", strings.Join(lines, "\n"))
	}
}

// TestHeadroomSampleStraddlingAnAllocation: on a busy host an NVML query
// takes long enough that a large allocation lands inside it, and the
// reading includes it. The least free is still the GPU's own, exact, not
// a bound that counts the allocation twice.
func TestHeadroomSampleStraddlingAnAllocation(t *testing.T) {
	w := newWorld(t, "SIMGPU_NVML_DELAY_MS=300")
	// Queries of 300 ms, 10 ms apart: the allocation almost surely lands
	// in one.
	res := w.record([]string{"--interval", "10ms"}, simwork,
		"init; use 0; sleep 500; alloc 14G; meminfo; sleep 700; free; sleep 700")
	if res.code != 0 {
		t.Fatalf("record exited %d: %s", res.code, res.stderr)
	}
	simFree, _ := meminfoFree(t, res.stdout)
	rep, _ := analyzeJSON(t, res.db)
	if h := framebufferHeadroom(t, rep); h.LeastFree != simFree || !h.Exact {
		t.Errorf("least free %d (exact %v, %s), want the simulated GPU's own %d, exact", h.LeastFree, h.Exact, h.Note, simFree)
	}
}

// TestHeadroomNearMissThreshold: --near-miss sets the threshold; a run
// above it is no near miss, and a threshold outside (0, 100) is refused
// with one line.
func TestHeadroomNearMissThreshold(t *testing.T) {
	w := newWorld(t)
	// 16 GiB - 512 MiB reserved - 14 GiB: 1.5 GiB free, 9.4% of the total.
	res := w.record(nil, simwork, "init; use 0; sleep 300; alloc 14G; meminfo; free; sleep 300")
	if res.code != 0 {
		t.Fatalf("record exited %d: %s", res.code, res.stderr)
	}
	simFree, _ := meminfoFree(t, res.stdout)
	for _, tc := range []struct {
		flag string
		want bool
	}{{"5", false}, {"10", true}} {
		out, err := binCommand(bin{}, "analyze", "--json", "--near-miss", tc.flag, res.db).Output()
		if err != nil {
			t.Fatal(err)
		}
		var rep report.Report
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatal(err)
		}
		if err := report.ValidateReportJSON(out); err != nil {
			t.Errorf("--json does not follow the schema: %v", err)
		}
		if rep.NearMiss != tc.want || framebufferHeadroom(t, &rep).LeastFree != simFree {
			t.Errorf("--near-miss %s: near_miss %v least free %d, want %v and %d", tc.flag, rep.NearMiss,
				framebufferHeadroom(t, &rep).LeastFree, tc.want, simFree)
		}
	}
	for _, bad := range []string{"0", "100", "-3", "x"} {
		cmd := binCommand(bin{}, "analyze", "--near-miss", bad, res.db)
		out, err := cmd.CombinedOutput()
		if err == nil || strings.Count(strings.TrimSpace(string(out)), "\n") > 0 && !strings.Contains(string(out), "near-miss") {
			t.Errorf("--near-miss %s: %v, %q: want a refusal naming the flag", bad, err, out)
		}
	}
}

// TestPoolAtItsLimitJudgedAgainstThePool: a stream-ordered pool created
// with a 1 GiB maxSize refuses a 512 MiB allocation while 768 MiB of it is
// in use, with gigabytes of framebuffer free. The verdict is the pool's,
// naming the pool the recorder saw created, not the framebuffer's.
func TestPoolAtItsLimitJudgedAgainstThePool(t *testing.T) {
	w := newWorld(t)
	res := w.record(nil, simwork, "init; use 0; pool-create 1G; alloc-pool 768M; sleep 200; alloc-pool 512M; sleep 200")
	if !strings.Contains(res.stderr, "cuMemAllocFromPoolAsync -> 2") {
		t.Fatalf("the pool did not refuse the allocation: %s", res.stderr)
	}
	_, events, _ := stored(t, res.db)
	var handle uint64
	for _, e := range events {
		if e.Name == "cuMemPoolCreate" && e.Result == 0 {
			handle = e.Ptr
		}
	}
	if handle == 0 {
		t.Fatal("no cuMemPoolCreate recorded")
	}
	rep, _ := analyzeJSON(t, res.db)
	if f := rep.FirstFailure; f == nil || f.Symbol != "cuMemAllocFromPoolAsync" || f.ResultName != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Fatalf("first failure %+v, want the pool allocation's out-of-memory", rep.FirstFailure)
	}
	if rep.Capacity == nil || *rep.Capacity != report.CapPoolExhausted || rep.Attribution != report.AttrAllocation {
		t.Fatalf("attribution %s capacity %v, want allocation, pool-exhausted (verdict %q)", rep.Attribution, rep.Capacity, rep.Verdict)
	}
	name := "memory pool " + "0x" + strconv.FormatUint(handle, 16)
	if !strings.Contains(rep.Verdict, name) || !strings.Contains(rep.Verdict, "maxSize 1.00 GiB, 768.0 MiB in use") {
		t.Errorf("verdict %q does not name %s with its limit and use", rep.Verdict, name)
	}
	for _, ev := range rep.Evidence {
		if ev.Decisive && ev.Field != "memory pool room at the failure" {
			t.Errorf("decisive evidence %q: the pool's room decides, not %s", ev.Field, ev.Source)
		}
		if ev.Field == "memory pool room at the failure" && (ev.Value == nil || *ev.Value != 256<<20 || !ev.Decisive) {
			t.Errorf("pool room %+v, want 256 MiB, decisive", ev)
		}
	}
}

// TestFlightLeastFreeGauge: a flight recorder exports the least free
// framebuffer NVML read as forensic_least_free_bytes, scraped over HTTP as
// Prometheus does; it keeps the least after the memory is freed again.
func TestFlightLeastFreeGauge(t *testing.T) {
	w := newWorld(t)
	fr := w.startFlight(`"$S" 'init; use 0; alloc 14G; meminfo; sleep 500; touch held; free; touch freed; sleep 3000' > out`)
	held, freed := filepath.Join(fr.work, "held"), filepath.Join(fr.work, "freed")
	least := func() (float64, bool) {
		return value(scrape(t, fr.metrics), "forensic_least_free_bytes", "gpu=0", "view=framebuffer")
	}
	fr.pollUntil(20*time.Second, "the workload held its memory", func() bool { return exists(held) })
	out, _ := os.ReadFile(filepath.Join(fr.work, "out"))
	simFree, _ := meminfoFree(t, string(out))
	if v, ok := least(); !ok || v != float64(simFree) {
		t.Fatalf("forensic_least_free_bytes %v (present %v) while 14 GiB was held, want the GPU's own free %d", v, ok, simFree)
	}
	fr.pollUntil(20*time.Second, "the workload freed its memory", func() bool { return exists(freed) })
	time.Sleep(300 * time.Millisecond) // a sample or two of the freed state
	if v, ok := least(); !ok || v != float64(simFree) {
		t.Errorf("forensic_least_free_bytes %v after the free, want the least, %d, kept", v, simFree)
	}
	if _, ok := value(scrape(t, fr.metrics), "forensic_least_free_bytes", "gpu=0", "view=bar1"); !ok {
		t.Error("no BAR1 series: each view has its own")
	}
	// The flight recording, analyzed once its workload ended, has the same
	// least free in its headroom.
	if err := <-fr.done; err != nil {
		t.Fatalf("the flight recorder: %v\n%s", err, fr.log.String())
	}
	rep, _ := analyzeJSON(t, fr.dir)
	if h := framebufferHeadroom(t, rep); h.LeastFree != simFree || !h.Exact {
		t.Errorf("the flight recording's headroom %d (exact %v, %s), want %d, exact", h.LeastFree, h.Exact, h.Note, simFree)
	}
}

// TestBudgetAtTheFailureAddsUpToTheGPU: a job out of memory beside a
// neighbour the recording does not follow, with contexts that hold memory
// no call sizes. The budget at the failure adds up to the framebuffer
// total, and each part is what the simulated GPU holds: the driver's
// reserved share, the job's traced allocation and its context, the
// neighbour (by pid), and the GPU's own free.
func TestBudgetAtTheFailureAddsUpToTheGPU(t *testing.T) {
	w := newWorld(t, "SIMGPU_CTX_MEM=256M")
	ready := filepath.Join(w.dir, "neighbour-ready")
	neighbour := w.startWorkload("init; use 0; alloc 2G; touch " + ready + "; wait-signal; free-all")
	if !waitFor(20e9, func() bool { return exists(ready) }) {
		t.Fatal("the neighbour did not allocate")
	}
	res := w.record(nil, simwork, "init; use 0; sleep 200; alloc 12G; alloc 4G; meminfo; sleep 300")
	simFree, simTotal := meminfoFree(t, res.stdout)
	rep, raw := analyzeJSON(t, res.db)
	if _, ok := raw["budget"].([]any); !ok {
		t.Fatalf("--json has no budget array: %v", raw["budget"])
	}
	if rep.Capacity == nil || *rep.Capacity != report.CapFBExhausted || len(failureBudgets(rep)) != 1 {
		t.Fatalf("capacity %v, budgets %d: want an exhausted framebuffer and its budget", rep.Capacity, len(failureBudgets(rep)))
	}
	b := failureBudgets(rep)[0]
	job := rep.FirstFailure.PID
	want := map[string]uint64{
		"reserved":                           512 << 20,
		"traced " + strconv.Itoa(int(job)):   12 << 30,
		"untraced " + strconv.Itoa(int(job)): 256 << 20,
		"process-not-recorded " + strconv.Itoa(neighbour.Process.Pid): 2<<30 + 256<<20,
		"unattributed": 0,
		"free":         simFree,
	}
	got := map[string]uint64{}
	var sum uint64
	for _, p := range b.Parts {
		k := p.Kind
		if p.PID != nil {
			k += " " + strconv.Itoa(int(*p.PID))
		}
		got[k] = p.Bytes
		sum += p.Bytes
		if p.Bound != "exact" || p.Source == "" {
			t.Errorf("part %+v: want exact, with its source", p)
		}
	}
	if sum != b.Total || b.Total != simTotal {
		t.Errorf("parts add up to %d, total %d, want the GPU's %d", sum, b.Total, simTotal)
	}
	if len(got) != len(want) {
		t.Errorf("parts %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d, want %d", k, got[k], v)
		}
	}
}

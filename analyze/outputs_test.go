package analyze

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

// testWorld describes the run that buildRun writes: two processes on two
// GPUs, one failed allocation, samples of both views on both GPUs, a
// kernel log line with an Xid and a marker.
const (
	tClock   = int64(5_000_000_000) // run clock at the start
	tFail    = tClock + 1_200_000_000
	pidTrain = 4242
	pidServe = 4300
	gib      = uint64(1) << 30
	mibB     = uint64(1) << 20
)

var testSymbols = []string{"cuInit", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuMemAlloc_v2", "cuMemFree_v2"}

const (
	symInit = iota
	symRetain
	symSetCurrent
	symAlloc
	symFree
)

func u64(v uint64) *uint64 { return &v }
func intp(v int) *int      { return &v }

func gpuUUID(i int) string { return fmt.Sprintf("GPU-0000000%d-aaaa-bbbb-cccc-dddddddddddd", i) }

// buildRun writes a small but realistic run.db and returns its path.
// extraCalls adds that many successful 4 KiB alloc/free pairs to the
// serving process (to exercise binning and streaming).
func buildRun(t testing.TB, extraCalls int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run.db")
	wall := time.Date(2026, 3, 14, 9, 26, 53, 589793000, time.UTC)
	run := store.RunInfo{ID: "test-run-1", Version: "test", Clock: store.ClockName, ClockStart: tClock, WallStart: wall,
		Hostname: "gpu-node-7", Kernel: "6.8.0", Mode: "spawn", Command: []string{"python3", "train.py", "--batch", "64"},
		Interval: 100 * time.Millisecond, FlushInterval: 100 * time.Millisecond, RingBytes: 16 << 20, NVMLLibrary: "libnvidia-ml.so.1"}
	w, err := store.Create(path, store.CreateOptions{}, run, testSymbols)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Reserve = 0

	fbTotal, fbReserved, barTotal := 80*gib, 512*mibB, 256*mibB
	var inv store.Inventory
	inv.Time = tClock
	inv.Library = "libnvidia-ml.so.1"
	inv.Init = store.Status{Code: 0, Name: "NVML_SUCCESS"}
	inv.InitAPI = "nvmlInit_v2"
	for i := 0; i < 2; i++ {
		u, name, bus := gpuUUID(i), "NVIDIA H100 80GB HBM3", fmt.Sprintf("00000000:%02X:00.0", 0x41+2*i)
		ok := store.Status{Name: "NVML_SUCCESS"}
		inv.GPUs = append(inv.GPUs, store.GPUInventory{Index: i,
			UUID:       store.Obs[string]{Value: &u, API: "nvmlDeviceGetUUID", Status: ok},
			Name:       store.Obs[string]{Value: &name, API: "nvmlDeviceGetName", Status: ok},
			PCIBusID:   store.Obs[string]{Value: &bus, API: "nvmlDeviceGetPciInfo_v3", Status: ok},
			FBTotal:    store.Obs[uint64]{Value: u64(fbTotal), API: "nvmlDeviceGetMemoryInfo_v2", Status: ok},
			FBReserved: store.Obs[uint64]{Value: u64(fbReserved), API: "nvmlDeviceGetMemoryInfo_v2", Status: ok},
			BAR1Total:  store.Obs[uint64]{Value: u64(barTotal), API: "nvmlDeviceGetBAR1MemoryInfo", Status: ok},
		})
	}
	procs := []store.Process{
		{PID: pidTrain, PPID: 1, Start: tClock + 1_000_000, Comm: "python3", Exe: "/usr/bin/python3.11", Args: []string{"python3", "train.py", "--batch", "64"},
			Root: true, Exit: &store.Exit{Time: tFail + 300_000_000, Code: intp(1)},
			Devices: []store.DeviceMap{{Ordinal: 0, UUID: gpuUUID(0), GPU: 0, Method: "uuid"}}},
		{PID: pidServe, PPID: pidTrain, Start: tClock + 2_000_000, Comm: "serve", Exe: "/opt/bin/serve",
			Args:    []string{"serve", "--port", "8000"},
			Devices: []store.DeviceMap{{Ordinal: 1, UUID: gpuUUID(1), GPU: 1, Method: "uuid"}}},
	}
	lib := store.Library{Path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1", HostPath: "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
		BuildID: "abc123", Attached: testSymbols, Time: tClock}

	ev := func(sym int, pid, tid uint32, start, end int64, res int32, dev int32, f cuda.Fields) store.Event {
		return store.Event{Symbol: uint16(sym), PID: pid, TID: tid, Start: start, End: end, Result: res, Fields: f, Dev: dev, Ctx: 1, Stack: -1}
	}
	var events []store.Event
	for _, p := range []struct {
		pid uint32
		dev int32
		at  int64
	}{{pidTrain, 0, tClock + 10_000_000}, {pidServe, 1, tClock + 20_000_000}} {
		events = append(events,
			ev(symInit, p.pid, p.pid, p.at, p.at+2000, 0, -1, cuda.Fields{Has: cuda.FieldFlags}),
			ev(symRetain, p.pid, p.pid, p.at+5000, p.at+9000, 0, -1, cuda.Fields{Has: cuda.FieldPtr | cuda.FieldDevice, Ptr: 0xc0, Device: p.dev}),
			ev(symSetCurrent, p.pid, p.pid, p.at+10000, p.at+12000, 0, -1, cuda.Fields{Has: cuda.FieldTarget, Target: 0xc0}))
	}
	// The training process loads 60 GiB of weights (6 x 10 GiB), on two
	// threads, then asks for 24 GiB more and fails.
	for i := 0; i < 6; i++ {
		at := tClock + 100_000_000 + int64(i)*100_000_000
		tid := uint32(pidTrain + i%2)
		events = append(events, ev(symAlloc, pidTrain, tid, at, at+40_000, 0, 0,
			cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: 10 * gib, Ptr: 0x7f0000000000 + uint64(i)<<36}))
	}
	events = append(events, ev(symAlloc, pidTrain, pidTrain, tFail-30_000, tFail, 2, 0, cuda.Fields{Has: cuda.FieldSize, Size: 24 * gib}))
	// The serving process holds 2 GiB on GPU 1, and frees it at the end.
	events = append(events, ev(symAlloc, pidServe, pidServe, tClock+150_000_000, tClock+150_020_000, 0, 1,
		cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: 2 * gib, Ptr: 0x7e0000000000}))
	events = append(events, ev(symFree, pidServe, pidServe+1, tClock+1_450_000_000, tClock+1_450_010_000, 0, 1,
		cuda.Fields{Has: cuda.FieldTarget, Target: 0x7e0000000000}))
	if err := w.Commit(&store.Batch{Events: events, Processes: procs, Inventory: &inv, Libraries: []store.Library{lib}}); err != nil {
		t.Fatal(err)
	}
	// Extra calls, in chunks, spread over the run.
	var chunk []store.Event
	for i := 0; i < extraCalls; i += 2 {
		at := tClock + 200_000_000 + int64(i)*(1_000_000_000/int64(max(extraCalls, 1)))
		p := uint64(0x7d0000000000 + i*4096)
		chunk = append(chunk,
			ev(symAlloc, pidServe, pidServe+1, at, at+3000, 0, 1, cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: 4096, Ptr: p}),
			ev(symFree, pidServe, pidServe+1, at+4000, at+5000, 0, 1, cuda.Fields{Has: cuda.FieldTarget, Target: p}))
		if len(chunk) >= 10000 {
			if err := w.Commit(&store.Batch{Events: chunk}); err != nil {
				t.Fatal(err)
			}
			chunk = chunk[:0]
		}
	}
	if len(chunk) > 0 {
		if err := w.Commit(&store.Batch{Events: chunk}); err != nil {
			t.Fatal(err)
		}
	}

	// Samples every 100 ms on both GPUs: framebuffer and BAR1, and one
	// round the failure triggered.
	var samples []store.Sample
	round := uint64(0)
	fbUsed := func(gpu int, t int64) uint64 {
		if gpu == 1 {
			if t >= tClock+150_020_000 && t < tClock+1_450_010_000 {
				return 2 * gib
			}
			return 0
		}
		n := uint64(0)
		for i := 0; i < 6; i++ {
			if t >= tClock+100_040_000+int64(i)*100_000_000 {
				n++
			}
		}
		if t > tFail+250_000_000 {
			return 0 // the process exited
		}
		return n * 10 * gib
	}
	add := func(t int64, trig []store.Trigger) {
		round++
		for g := 0; g < 2; g++ {
			ref := store.GPURef{Index: g, UUID: gpuUUID(g), PCIBusID: fmt.Sprintf("00000000:%02X:00.0", 0x41+2*g)}
			used := fbUsed(g, t)
			free := fbTotal - fbReserved - used
			samples = append(samples,
				store.Sample{Round: round, GPU: ref, Kind: store.KindFramebuffer, Scope: store.ScopeDevice,
					API: "nvmlDeviceGetMemoryInfo_v2", Struct: "nvmlMemory_v2_t", Status: store.Status{Name: "NVML_SUCCESS"},
					Start: t, End: t + 40_000, Total: u64(fbTotal), Reserved: u64(fbReserved), Used: u64(used), Free: u64(free), Triggers: trig},
				store.Sample{Round: round, GPU: ref, Kind: store.KindBAR1, Scope: store.ScopeAperture,
					API: "nvmlDeviceGetBAR1MemoryInfo", Struct: "nvmlBAR1Memory_t", Status: store.Status{Name: "NVML_SUCCESS"},
					Start: t + 40_000, End: t + 60_000, Total: u64(barTotal), Used: u64(6 * mibB), Free: u64(barTotal - 6*mibB), Triggers: trig})
		}
	}
	for at := tClock + 50_000_000; at <= tClock+1_550_000_000; at += 100_000_000 {
		add(at, nil)
		if at < tFail && at+100_000_000 > tFail {
			add(tFail+700_000, []store.Trigger{{PID: pidTrain, TID: pidTrain, Symbol: "cuMemAlloc_v2", End: tFail}})
		}
	}
	xid := 31
	kmsg := []store.KernelLog{{Time: tFail + 100_000_000, Seq: 77, Priority: 4, Xid: &xid,
		Text: "NVRM: Xid (PCI:0000:41:00): 31, pid=4242, name=python3, Ch 00000010, MMU Fault: ENGINE GRAPHICS faulted @ 0x7f12_34560000"}}
	markers := []store.Marker{{Time: tClock + 700_000_000, Label: "weights loaded"}}
	if err := w.Commit(&store.Batch{Samples: samples, Kmsg: kmsg, Markers: markers}); err != nil {
		t.Fatal(err)
	}
	nEvents := uint64(len(events) + extraCalls)
	stats := store.Stats{Calls: nEvents, Events: nEvents, Samples: uint64(len(samples)), KernelLines: 1}
	if err := w.Stop(store.StopInfo{Time: tClock + 1_600_000_000, Wall: wall.Add(1600 * time.Millisecond), Reason: "workload-exited",
		Workload: &store.Exit{Time: tFail + 300_000_000, Code: intp(1)}, Stats: stats,
		TriggerDelay: store.DelayStats{Count: 1, Median: 700_000, Max: 700_000}}); err != nil {
		t.Fatal(err)
	}
	return path
}

func openAnalyzed(t testing.TB, path string) (*store.Reader, *Report) {
	t.Helper()
	r, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	rep, err := Analyze(r, Options{Symbolizer: NewELFSymbolizer()})
	if err != nil {
		t.Fatal(err)
	}
	return r, rep
}

func TestOutputJSONMatchesSchema(t *testing.T) {
	_, rep := openAnalyzed(t, buildRun(t, 0))
	if rep.FirstFailure == nil || rep.FirstFailure.ResultName != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Fatalf("the test run should fail with OOM, got %+v", rep.FirstFailure)
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, rep); err != nil {
		t.Fatal(err)
	}
	if err := ValidateReportJSON(buf.Bytes()); err != nil {
		t.Fatalf("analyze --json does not match docs/analyze.schema.json:\n%v", err)
	}
	// And a run in which nothing failed.
	_, ok := openAnalyzed(t, buildRunNoFailure(t))
	buf.Reset()
	if err := WriteJSON(&buf, ok); err != nil {
		t.Fatal(err)
	}
	if err := ValidateReportJSON(buf.Bytes()); err != nil {
		t.Fatalf("a run without failures does not match the schema:\n%v", err)
	}
}

// buildRunNoFailure is a run with one successful allocation and no
// samples at all (NVML did not initialize).
func buildRunNoFailure(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ok.db")
	run := store.RunInfo{ID: "ok", Version: "test", Clock: store.ClockName, ClockStart: tClock, WallStart: time.Unix(1700000000, 0),
		Mode: "pid", TargetPID: 77, Interval: 100 * time.Millisecond}
	w, err := store.Create(path, store.CreateOptions{}, run, testSymbols)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Reserve = 0
	inv := store.Inventory{Time: tClock, Library: "libnvidia-ml.so.1", InitAPI: "nvmlInit_v2",
		Init: store.Status{Code: 9, Name: "NVML_ERROR_DRIVER_NOT_LOADED"}}
	b := store.Batch{Inventory: &inv, Processes: []store.Process{{PID: 77, Start: tClock, Exe: "/bin/app", Root: true}},
		Events: []store.Event{{Symbol: symAlloc, PID: 77, TID: 77, Start: tClock + 10, End: tClock + 20, Dev: -1, Stack: -1,
			Fields: cuda.Fields{Has: cuda.FieldSize | cuda.FieldPtr, Size: 4096, Ptr: 0x1000}}}}
	if err := w.Commit(&b); err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(store.StopInfo{Time: tClock + 1000, Reason: "target-exited", Stats: store.Stats{Calls: 1, Events: 1}}); err != nil {
		t.Fatal(err)
	}
	return path
}

// The schema must catch drift: a renamed key, a value outside an enum, a
// size that is not an integer, an inconsistent capacity.
func TestSchemaRejectsDrift(t *testing.T) {
	_, rep := openAnalyzed(t, buildRun(t, 0))
	var buf bytes.Buffer
	if err := WriteJSON(&buf, rep); err != nil {
		t.Fatal(err)
	}
	mutate := func(name string, f func(m map[string]any)) {
		var m map[string]any
		if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		data, _ := json.Marshal(m)
		if err := ValidateReportJSON(data); err == nil {
			t.Errorf("%s: the schema accepted it", name)
		}
	}
	mutate("attribution renamed", func(m map[string]any) { m["attribution_kind"] = m["attribution"]; delete(m, "attribution") })
	mutate("unknown attribution", func(m map[string]any) { m["attribution"] = "memory" })
	mutate("unknown capacity", func(m map[string]any) { m["capacity"] = "gpu-memory-exhausted" })
	mutate("size as a string", func(m map[string]any) { m["first_failure"].(map[string]any)["size"] = "1 GiB" })
	mutate("operation outside the enum", func(m map[string]any) { m["first_failure"].(map[string]any)["operation"] = "alloc" })
	mutate("gpu as a number", func(m map[string]any) { m["first_failure"].(map[string]any)["gpu"] = 0 })
	mutate("missing without decisive", func(m map[string]any) { m["missing"] = []any{map[string]any{"what": "x", "fix": "y"}} })
	mutate("capacity with no failure", func(m map[string]any) { m["first_failure"] = nil })
	mutate("memory_views null", func(m map[string]any) { m["memory_views"] = nil })
	mutate("failures missing", func(m map[string]any) { delete(m, "failures") })
	// Added fields are fine.
	var m map[string]any
	json.Unmarshal(buf.Bytes(), &m)
	m["some_future_field"] = map[string]any{"x": 1}
	data, _ := json.Marshal(m)
	if err := ValidateReportJSON(data); err != nil {
		t.Errorf("an added top-level field was rejected: %v", err)
	}
}

// docs/analyze.schema.json is the published schema; the package embeds a
// copy (go:embed cannot reach ../docs). They must be byte-identical.
func TestSchemaCopyIdentical(t *testing.T) {
	docs, err := os.ReadFile(filepath.Join("..", "docs", "analyze.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(docs, ReportJSONSchema()) {
		t.Fatal("analyze/analyze.schema.json differs from docs/analyze.schema.json: run go generate ./analyze")
	}
	var v any
	if err := json.Unmarshal(docs, &v); err != nil {
		t.Fatalf("the schema is not JSON: %v", err)
	}
}

type traceEvent struct {
	Ph   string          `json:"ph"`
	Name string          `json:"name"`
	Cat  string          `json:"cat"`
	PID  int64           `json:"pid"`
	TID  int64           `json:"tid"`
	TS   *float64        `json:"ts"`
	Dur  *float64        `json:"dur"`
	S    string          `json:"s"`
	Args json.RawMessage `json:"args"`
}

type trace struct {
	TraceEvents     []traceEvent `json:"traceEvents"`
	DisplayTimeUnit string       `json:"displayTimeUnit"`
}

// ParsePerfetto is shared with TestOutputPerfettoScale.
func parsePerfetto(t testing.TB, data []byte) *trace {
	t.Helper()
	var tr trace
	if err := json.Unmarshal(data, &tr); err != nil {
		t.Fatalf("perfetto export is not JSON: %v", err)
	}
	return &tr
}

func TestOutputPerfetto(t *testing.T) {
	r, _ := openAnalyzed(t, buildRun(t, 0))
	var buf bytes.Buffer
	if err := WritePerfetto(&buf, r); err != nil {
		t.Fatal(err)
	}
	tr := parsePerfetto(t, buf.Bytes())
	if tr.DisplayTimeUnit != "ns" {
		t.Errorf("displayTimeUnit = %q", tr.DisplayTimeUnit)
	}
	threads := map[[2]int64]string{}
	procNames := map[int64]string{}
	slices := 0
	counters := map[string]int{}
	var failInstant, xidInstant, markInstant bool
	var allocTS []float64
	for _, e := range tr.TraceEvents {
		switch e.Ph {
		case "M":
			var a struct{ Name string }
			json.Unmarshal(e.Args, &a)
			switch e.Name {
			case "thread_name":
				threads[[2]int64{e.PID, e.TID}] = a.Name
			case "process_name":
				procNames[e.PID] = a.Name
			}
		case "X":
			slices++
			if e.TS == nil || e.Dur == nil || *e.Dur < 0 {
				t.Errorf("slice without ts/dur: %+v", e)
			}
			if e.Name == "cuMemAlloc_v2" {
				allocTS = append(allocTS, *e.TS)
			}
		case "C":
			counters[e.Name]++
			var a map[string]float64
			if err := json.Unmarshal(e.Args, &a); err != nil || len(a) != 1 {
				t.Errorf("counter %q args %s: want exactly one value", e.Name, e.Args)
			}
		case "i":
			if e.S != "g" && e.S != "p" && e.S != "t" {
				t.Errorf("instant %q scope %q", e.Name, e.S)
			}
			switch e.Cat {
			case "failure":
				failInstant = failInstant || strings.Contains(e.Name, "CUDA_ERROR_OUT_OF_MEMORY") && e.PID == pidTrain
			case "kernel":
				xidInstant = xidInstant || strings.Contains(e.Name, "Xid 31")
			case "marker":
				markInstant = markInstant || strings.Contains(e.Name, "weights loaded")
			}
		}
	}
	// One slice per call, a thread name per thread.
	r2, _ := openAnalyzed(t, r.Path())
	nEvents := 0
	seen := map[[2]int64]bool{}
	r2.Events(func(e *store.Event) error {
		nEvents++
		seen[[2]int64{int64(e.PID), int64(e.TID)}] = true
		return nil
	})
	if slices != nEvents {
		t.Errorf("%d X slices for %d calls", slices, nEvents)
	}
	for k := range seen {
		if threads[k] == "" {
			t.Errorf("no thread_name for pid %d tid %d", k[0], k[1])
		}
	}
	if procNames[pidTrain] != "python3.11" || procNames[pidServe] != "serve" {
		t.Errorf("process names = %v", procNames)
	}
	// The first allocation's ts is (start - clock start) in microseconds.
	if len(allocTS) == 0 || allocTS[0] != 100_000.0 {
		t.Errorf("first cuMemAlloc_v2 ts = %v, want 100000 (µs after the run's clock start)", allocTS)
	}
	for _, want := range []string{"GPU 0 framebuffer used", "GPU 0 framebuffer free", "GPU 0 BAR1 used", "GPU 0 BAR1 free",
		"GPU 1 framebuffer used", "GPU 1 BAR1 free"} {
		if counters[want] == 0 {
			t.Errorf("no counter %q (have %v)", want, counters)
		}
	}
	for name := range counters {
		lower := strings.ToLower(name)
		if strings.Contains(lower, "framebuffer") && strings.Contains(lower, "bar1") || strings.Contains(lower, "total gpu") {
			t.Errorf("counter %q mixes framebuffer and BAR1", name)
		}
	}
	if !failInstant {
		t.Error("no instant event for the failed cuMemAlloc_v2")
	}
	if !xidInstant || !markInstant {
		t.Errorf("kernel log instant %v, marker instant %v", xidInstant, markInstant)
	}
}

// External resource loads: src=, href=, xlink:href=, url(...), @import
// naming a network URL (or a protocol-relative one).
var remoteRef = regexp.MustCompile(`(?i)((?:src|href|action|poster|data)\s*=\s*["']?\s*(?:https?:)?//)|url\(\s*["']?\s*(?:https?:)?//|@import`)

func TestOutputHTML(t *testing.T) {
	r, rep := openAnalyzed(t, buildRun(t, 0))
	var buf bytes.Buffer
	if err := WriteHTML(&buf, r, rep); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	checkHTML(t, page, rep)
	for _, want := range []string{"GPU 0", "GPU 1", "weights loaded", "Xid 31", "python3.11", "serve",
		"framebuffer-exhausted", "attribution: allocation"} {
		if !strings.Contains(page, want) {
			t.Errorf("the HTML report lacks %q", want)
		}
	}
	// Each GPU gets a framebuffer panel and a separate BAR1 panel.
	if n := strings.Count(page, `class="ptitle">Framebuffer<`); n != 2 {
		t.Errorf("%d framebuffer panels, want 2", n)
	}
	if n := strings.Count(page, `class="ptitle">BAR1 aperture<`); n != 2 {
		t.Errorf("%d BAR1 panels, want 2", n)
	}
	// Every failure is drawn on its own.
	if n := strings.Count(page, `<g class="fail">`); n != len(rep.Failures) {
		t.Errorf("%d failure marks for %d failures", n, len(rep.Failures))
	}
	// The traced line agrees with the memory-view table.
	d, err := collectHTML(r, rep)
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, v := range rep.MemoryViews {
		if v.Field != "traced device allocations" || v.Peak == nil {
			continue
		}
		rows++
		g := d.gpus[v.GPU]
		if g == nil || g.traced == nil || g.traced.peak != *v.Peak {
			t.Errorf("GPU %d: traced line peak differs from the table's %d", v.GPU, *v.Peak)
		}
	}
	if rows != 2 {
		t.Errorf("%d traced rows, want one per GPU", rows)
	}
	if lead := d.lead; len(lead) != 10 {
		t.Errorf("%d calls leading up to the failure, want its 10 calls (3 setup, 6 allocations, the failure)", len(lead))
	}
}

// checkHTML holds the checks every HTML report passes.
func checkHTML(t *testing.T, page string, rep *Report) {
	t.Helper()
	if !strings.HasPrefix(page, "<!DOCTYPE html>") || !strings.HasSuffix(strings.TrimSpace(page), "</html>") {
		t.Error("not a complete HTML document")
	}
	if m := remoteRef.FindAllString(page, -1); len(m) > 0 {
		t.Errorf("the report loads external resources: %q", m)
	}
	if strings.Contains(page, "<link") || strings.Contains(page, "<script src") || strings.Contains(page, "<img") {
		t.Error("the report links an external file")
	}
	if !strings.Contains(page, htmlEsc(rep.Verdict)) {
		t.Error("the report lacks the verdict text")
	}
	if n := strings.Count(page, "MiB = 2^20 bytes"); n != 1 {
		t.Errorf("the MiB conversion is declared %d times, want once", n)
	}
	if strings.Contains(strings.ToLower(page), "total gpu memory") {
		t.Error("the report shows a total GPU memory")
	}
	for _, bad := range []string{"NaN", "+Inf", "-Inf", "%!"} {
		if strings.Contains(page, bad) {
			t.Errorf("the report contains %q", bad)
		}
	}
	// The verdict comes before everything else.
	v, e, tl, mv := strings.Index(page, `id="verdict"`), strings.Index(page, `id="evidence"`), strings.Index(page, `id="timeline"`), strings.Index(page, `id="memory-views"`)
	if !(v >= 0 && v < e && e < tl && tl < mv) {
		t.Errorf("section order verdict %d, evidence %d, timeline %d, memory views %d", v, e, tl, mv)
	}
}

func htmlEsc(s string) string { return esc(s) }

// A process with many calls is drawn as bins; the output stays small,
// failures stay individual, and the exports stream.
func TestOutputScale(t *testing.T) {
	const extra = 200_000
	path := buildRun(t, extra)
	r, rep := openAnalyzed(t, path)
	var buf bytes.Buffer
	if err := WriteHTML(&buf, r, rep); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	checkHTML(t, page, rep)
	if buf.Len() > 1<<20 {
		t.Errorf("HTML of a %d-call run is %d bytes; calls should be binned", extra, buf.Len())
	}
	if !strings.Contains(page, "(binned)") {
		t.Error("the busy process is not drawn as bins")
	}
	if n := strings.Count(page, `<g class="fail">`); n != 1 {
		t.Errorf("%d failure marks, want 1", n)
	}

	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	cw := &countWriter{}
	start := time.Now()
	if err := WritePerfetto(cw, r); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	runtime.ReadMemStats(&ms1)
	t.Logf("perfetto: %d calls, %d bytes in %v, %d bytes allocated", extra, cw.n, took, ms1.TotalAlloc-ms0.TotalAlloc)
	if per := float64(ms1.TotalAlloc-ms0.TotalAlloc) / extra; per > 256 {
		t.Errorf("perfetto export allocates %.0f bytes per call; it should stream", per)
	}
	if ms1.HeapInuse > ms0.HeapInuse+64<<20 {
		t.Errorf("heap grew by %d bytes during the export", ms1.HeapInuse-ms0.HeapInuse)
	}
}

type countWriter struct{ n int }

func (c *countWriter) Write(p []byte) (int, error) { c.n += len(p); return len(p), nil }

func TestOutputPerfettoJSONStrings(t *testing.T) {
	for _, s := range []string{"plain", `q"uote\`, "nl\nctl\x01", "bad\xffutf8", "ünïcode ✓", "\u2028"} {
		b := appendJSONString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Errorf("%q -> %s: %v", s, b, err)
			continue
		}
		if want := strings.ToValidUTF8(s, "\ufffd"); got != want {
			t.Errorf("%q round-trips to %q", s, got)
		}
	}
	for ns, want := range map[int64]string{0: "0.000", 1: "0.001", 1500: "1.500", 123456789: "123456.789", -2500: "-2.500"} {
		if got := string(appendMicros(nil, ns)); got != want {
			t.Errorf("appendMicros(%d) = %s, want %s", ns, got, want)
		}
	}
}

// A run without failures and without any sample (NVML did not start) still
// renders, says so, and never draws a missing value as zero.
func TestOutputHTMLWithoutSamples(t *testing.T) {
	r, rep := openAnalyzed(t, buildRunNoFailure(t))
	var buf bytes.Buffer
	if err := WriteHTML(&buf, r, rep); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	checkHTML(t, page, rep)
	if !strings.Contains(page, "No recorded call failed") {
		t.Error("the report does not say that no call failed")
	}
	if strings.Contains(page, `class="ptitle">Framebuffer<`) {
		t.Error("a framebuffer panel is drawn without any GPU")
	}
	var pf bytes.Buffer
	if err := WritePerfetto(&pf, r); err != nil {
		t.Fatal(err)
	}
	parsePerfetto(t, pf.Bytes())
}

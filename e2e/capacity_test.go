package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// Capacity verdicts on real recordings of the simulated GPU: which view
// and which GPU's sample a failed request is judged on (framebuffer,
// BAR1 of the GPU whose memory is mapped, a MIG instance), releases the
// record cannot size, and requests that had room.

// --pid on a process that holds 2 GiB from before recording, asks for 2
// GiB more of a 4 GiB GPU and exits at once: the sample the failure
// triggered comes after its exit freed the untraced 2 GiB, and must not
// make the exhausted framebuffer look as if it had room.
func TestReleaseAfterFailureLeavesFramebufferFull(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=4G")
	target := w.startWorkload("init; use 0; alloc 2G; wait-signal; alloc 2G; exit 1")
	if !waitFor(5*time.Second, func() bool { return mapsFile(target.Process.Pid, simCUDA) }) {
		t.Fatal("the target did not map the simulated libcuda")
	}
	rec, db, stderr := w.startRecorder("--pid", strconv.Itoa(target.Process.Pid))
	time.Sleep(400 * time.Millisecond) // samples before the failure
	target.Process.Signal(syscall.SIGUSR1)
	waitExit(t, target, 20*time.Second)
	waitExit(t, rec, 20*time.Second)
	rep, _ := analyzeJSON(t, db)
	if rep.FirstFailure == nil || rep.Capacity == nil {
		t.Fatalf("no failure judged; recorder said:\n%s", stderr)
	}
	if c := *rep.Capacity; c != report.CapFBExhausted && c != report.CapUnknown {
		t.Errorf("capacity %s, want framebuffer-exhausted or unknown: %s", c, rep.Verdict)
	}
	// The text gives the JSON's verdict, judged as above, not one from the
	// sample after the exit.
	text := textAt80(t, db)
	if flat := strings.Join(strings.Fields(text), " "); !strings.Contains(flat, strings.Join(strings.Fields(rep.Verdict), " ")) {
		t.Errorf("the text does not give the verdict %q:\n%s", rep.Verdict, text)
	}
}

// A sticky code (CUDA_ERROR_ILLEGAL_ADDRESS) on an allocation gets no
// capacity verdict; a call with no current context is on no GPU.
func TestStickyErrorAndNoContextGetNoCapacity(t *testing.T) {
	w := newWorld(t, "SIMGPU_FAIL=cuMemAlloc_v2:2:700")
	res := w.record(nil, simwork, "init; use 0; alloc 1G; alloc 1G; alloc 1G; exit 1")
	rep, _ := analyzeJSON(t, res.db)
	if rep.Capacity == nil || *rep.Capacity != report.CapNotApplicable || rep.Attribution != report.AttrMissingEvidence {
		t.Errorf("sticky: attribution %s, capacity %v: %s", rep.Attribution, rep.Capacity, rep.Verdict)
	}
	w = newWorld(t)
	res = w.record(nil, simwork, "init; alloc 1G; exit 1")
	rep, _ = analyzeJSON(t, res.db)
	if rep.FirstFailure == nil || rep.FirstFailure.GPUIndex != nil || strings.Contains(rep.Verdict, "GPU 0") {
		t.Errorf("no context: the call is put on a GPU: %s", rep.Verdict)
	}
	if text := textAt80(t, filepath.Clean(res.db)); !strings.Contains(text, "no current context") {
		t.Errorf("the text does not say the thread had no context:\n%s", text)
	}
}

// A mapping through another GPU's aperture is judged on that GPU's BAR1,
// from that GPU's sample, recorded on two simulated GPUs: an IPC open by a
// process on GPU 0 of memory exported on GPU 1, whose BAR1 a VMM grant
// nearly filled (52 MiB free, 64 MiB needed; GPU 0 had 252 MiB), and peer
// access from GPU 0 to a context on GPU 1, whose BAR1 had 24 MiB left
// (GPU 0 had 124 MiB).
func TestApertureJudgedOnItsOwnGPU(t *testing.T) {
	t.Run("IPC open of another GPU's memory", func(t *testing.T) {
		w := newWorld(t, "SIMGPU_DEVICES=2", "SIMGPU_BAR1_TOTAL=256M")
		h := filepath.Join(w.dir, "handle")
		script := fmt.Sprintf("%[1]s 'init; use 1; vmm 200M 1 0; alloc 64M; ipc-export %[2]s; sleep 1000' & sleep 0.3; "+
			"%[1]s 'init; use 0; ipc-open %[2]s; sleep 300; exit 1'; wait", simwork, h)
		res := w.record(nil, "/bin/sh", "-c", script)
		rep, _ := analyzeJSON(t, res.db)
		ff := rep.FirstFailure
		if ff == nil || !strings.HasPrefix(ff.Symbol, "cuIpcOpenMemHandle") {
			t.Fatalf("first failure %+v, want the IPC open: %s", ff, res.stderr)
		}
		if got := deref(rep.Capacity); got != string(report.CapBAR1Exhausted) {
			t.Fatalf("capacity %s, want bar1-exhausted: %s", got, rep.Verdict)
		}
		checkFreeRow(t, rep, 1, 52, true)
		if ff.ApertureGPU == nil || *ff.ApertureGPU != 1 || ff.ApertureOf != "exporter" {
			t.Errorf("aperture GPU %v of %q, want GPU 1 of the exporter", ff.ApertureGPU, ff.ApertureOf)
		}
		if rep.NearestSamples == nil || rep.NearestSamples.GPU != 1 {
			t.Errorf("samples around the failure %+v, want GPU 1's", rep.NearestSamples)
		}
		if !strings.Contains(rep.Verdict, "52.0 MiB free") || strings.Contains(rep.Verdict, "252.0 MiB") {
			t.Errorf("verdict does not judge GPU 1's 52 MiB: %s", rep.Verdict)
		}
	})
	t.Run("peer access to another GPU's context", func(t *testing.T) {
		w := newWorld(t, "SIMGPU_DEVICES=2", "SIMGPU_BAR1_TOTAL=128M", "SIMGPU_PEER_BAR1=32M")
		res := w.record(nil, simwork, "init; use 1; vmm 100M 1 0; use 0; peer 1; sleep 200; exit 1")
		rep, raw := analyzeJSON(t, res.db)
		ff := rep.FirstFailure
		if ff == nil || ff.Symbol != "cuCtxEnablePeerAccess" {
			t.Fatalf("first failure %+v, want cuCtxEnablePeerAccess: %s", ff, res.stderr)
		}
		if got := deref(rep.Capacity); got != string(report.CapUnknown) {
			t.Fatalf("capacity %s, want unknown (peer access names no size): %s", got, rep.Verdict)
		}
		checkFreeRow(t, rep, 1, 24, false)
		for _, e := range rep.Evidence {
			if e.Decisive {
				t.Errorf("%q marked decisive although capacity is unknown", e.Field)
			}
		}
		if ff.ApertureGPU == nil || *ff.ApertureGPU != 1 || ff.ApertureOf != "peer" {
			t.Errorf("aperture GPU %v of %q, want GPU 1 of the peer", ff.ApertureGPU, ff.ApertureOf)
		}
		if ff.GPUIndex == nil || *ff.GPUIndex != 0 || !strings.Contains(rep.Verdict, "on GPU 0") {
			t.Errorf("the call ran on GPU 0 (its context's): gpu %v, %s", ff.GPUIndex, rep.Verdict)
		}
		steps := strings.Join(rep.NextSteps, " | ")
		if strings.Contains(steps, "exporting process") || !strings.Contains(steps, "enabling peer access") {
			t.Errorf("next steps are not peer access's: %s", steps)
		}
		ffRaw, _ := raw["first_failure"].(map[string]any)
		if ffRaw["aperture_of"] != "peer" {
			t.Errorf("JSON first_failure.aperture_of %v, want peer", ffRaw["aperture_of"])
		}
		// The HTML's lead table: the process mapped on GPU 1 and failed on
		// GPU 0, so its live column cannot be headed "GPU 0".
		html := filepath.Join(w.dir, "r.html")
		if out, err := binCommand(bin{}, "report", res.db, "-o", html).CombinedOutput(); err != nil {
			t.Fatalf("forensic report: %v: %s", err, out)
		}
		b, err := os.ReadFile(html)
		if err != nil {
			t.Fatal(err)
		}
		page := string(b)
		if strings.Contains(page, "traced live on GPU 0 after it") || !strings.Contains(page, "traced live on the call&#39;s GPU after it") {
			t.Errorf("the lead table's live column is headed with one GPU though its calls ran on two")
		}
	})
}

// checkFreeRow checks the "BAR1 free at the failure" evidence row: its GPU,
// value in MiB, and whether it is marked decisive.
func checkFreeRow(t *testing.T, rep *report.Report, gpu int, mib uint64, decisive bool) {
	t.Helper()
	for _, e := range rep.Evidence {
		if e.Field != "BAR1 free at the failure" {
			continue
		}
		if e.GPU == nil || *e.GPU != gpu || e.Value == nil || *e.Value != mib<<20 || e.Decisive != decisive {
			t.Errorf("BAR1 free row: GPU %v, %v bytes, decisive %v; want GPU %d, %d MiB, decisive %v",
				e.GPU, e.Value, e.Decisive, gpu, mib, decisive)
		}
		return
	}
	t.Errorf("no BAR1 free row in the evidence: %+v", rep.Evidence)
}

// migUUID asks `forensic inventory` for a MIG instance's UUID in w.
func migUUID(t *testing.T, w *world, index int) string {
	t.Helper()
	cmd := binCommand(bin{w: w}, "inventory", "--json", "--libnvidia-ml", simNVML)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("inventory: %v", err)
	}
	var inv store.Inventory
	if err := json.Unmarshal(out, &inv); err != nil {
		t.Fatal(err)
	}
	if len(inv.GPUs) != 1 || len(inv.GPUs[0].MIG) <= index || inv.GPUs[0].MIG[index].UUID.Value == nil {
		t.Fatalf("inventory lists no MIG instance %d: %s", index, out)
	}
	return *inv.GPUs[0].MIG[index].UUID.Value
}

func TestMIGInstanceJudgedOnItsOwnMemory(t *testing.T) {
	tests := []struct {
		name     string
		script   string
		visible  int // index of the MIG instance CUDA_VISIBLE_DEVICES names, -1 none
		capacity report.Capacity
		mig      int // the failure's MIG index, -1 unknown
	}{
		// 7 GiB fill most of instance 0 (8 GiB); the whole GPU still shows
		// 8.5 GiB free.
		{"nothing names the instance", "init; use 0; alloc 7G; alloc 1G; exit 1", -1, report.CapUnknown, -1},
		{"the second instance, unnamed", "init; use 1; alloc 7G; alloc 1G; exit 1", -1, report.CapUnknown, -1},
		{"cuDeviceGetUuid_v2 names it", "init; use 0; uuid 0; alloc 7G; alloc 1G; exit 1", -1, report.CapFBExhausted, 0},
		{"named by v2, then v1 names the GPU", "init; use 1; uuid 1; uuid-v1 1; alloc 7G; alloc 1G; exit 1", -1, report.CapFBExhausted, 1},
		{"cuDeviceGetUuid names only the GPU", "init; use 0; uuid-v1 0; alloc 7G; alloc 1G; exit 1", -1, report.CapUnknown, -1},
		{"CUDA_VISIBLE_DEVICES=MIG-<uuid>", "init; use 0; alloc 7G; alloc 1G; exit 1", 0, report.CapFBExhausted, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A 200 MiB aperture: with 256 MiB, 768 MiB free would be the
			// reserved 512 MiB plus BAR1's total to the check of outputs.
			w := newWorld(t, "SIMGPU_MIG=2", "SIMGPU_FB_TOTAL=16G", "SIMGPU_BAR1_TOTAL=200M")
			if tt.visible >= 0 {
				w.env = append(w.env, "CUDA_VISIBLE_DEVICES="+migUUID(t, w, tt.visible))
			}
			res := w.record(nil, simwork, tt.script)
			rep, _ := analyzeJSON(t, res.db)
			ff := rep.FirstFailure
			if ff == nil || ff.Symbol != "cuMemAlloc_v2" {
				t.Fatalf("first failure %+v, want the 1 GiB allocation", ff)
			}
			if got := deref(rep.Capacity); got != string(tt.capacity) {
				t.Fatalf("capacity %s, want %s: %s", got, tt.capacity, rep.Verdict)
			}
			gotMIG := -1
			if ff.MIGIndex != nil {
				gotMIG = *ff.MIGIndex
			}
			if gotMIG != tt.mig || ff.GPUIndex == nil || *ff.GPUIndex != 0 {
				t.Errorf("failure on GPU %v MIG %d, want GPU 0 MIG %d", ff.GPUIndex, gotMIG, tt.mig)
			}
			if tt.capacity == report.CapFBExhausted && !strings.Contains(rep.Verdict, "768.0 MiB free") {
				t.Errorf("not judged on the instance's own memory: %s", rep.Verdict)
			}
			if tt.capacity == report.CapUnknown {
				if !hasMissing(rep.Missing, "MIG enabled", "does not say which") {
					t.Errorf("the unknown instance is not the missing evidence: %+v", rep.Missing)
				}
				if !anyContains(rep.NextSteps, "CUDA_VISIBLE_DEVICES=MIG-") || anyContains(rep.NextSteps, "CUDA_DEVICE_ORDER") {
					t.Errorf("next steps %q, want the MIG advice", rep.NextSteps)
				}
			}
			checkOutputs(t, w, res.db)
		})
	}
}

func TestPeerGrantsJudgedApart(t *testing.T) {
	// When the failure's sample is taken before the process exits it reads
	// the 24 MiB free exactly; after the exit, which also frees the
	// context's own memory (some of it mapped through BAR1), free at the
	// failure is at most the sample's less the grants it released (88 MiB
	// when they cost one mapping each). Either is honest; "had room" never
	// is. The grants to three peers are held stopped at the failure, so
	// that the per-peer cost is the only doubt.
	exhausted24 := map[report.Capacity][]string{report.CapBAR1Exhausted: {"24.0 MiB free"}}
	tests := []struct {
		name   string
		script string
		flags  []string
		want   map[report.Capacity][]string // each acceptable capacity, with what the verdict or the missing evidence says
	}{
		// The simulated driver charges each peer: 300 MiB needed, 188 free.
		{"a grant to three peers", "init; use 0; vmm 64M 0 1; vmm 100M 0 1 2 3; exit 1", []string{"--freeze-on-failure"},
			map[report.Capacity][]string{report.CapUnknown: {"100.0 MiB", "300.0 MiB", "188.0 MiB"}}},
		{"a grant to three peers, owner not granted", "init; use 0; vmm 64M 0 1; vmm 100M 2 3 1; exit 1", []string{"--freeze-on-failure"},
			map[report.Capacity][]string{report.CapUnknown: {"300.0 MiB"}}},
		// An earlier grant to two peers: 24 MiB free (per peer) or 88.
		{"an earlier grant to two peers", "init; use 0; vmm 64M 0 1 2; vmm 100M 0 1; vmm 30M 0 1; exit 1", nil,
			map[report.Capacity][]string{report.CapUnknown: {"88.0 MiB"}, report.CapBAR1Exhausted: exhausted24[report.CapBAR1Exhausted]}},
		{"an earlier grant to two peers, frozen at the failure", "init; use 0; vmm 64M 0 1 2; vmm 100M 0 1; vmm 30M 0 1; exit 1",
			[]string{"--freeze-on-failure"}, exhausted24},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if len(tt.want) > 1 {
				verdictVaries(t, "either capacity is honest: the failure's sample is read before or after the process exits, as the machine's load has it")
			}
			w := newWorld(t, "SIMGPU_DEVICES=4")
			res := w.record(tt.flags, simwork, tt.script)
			rep, _ := analyzeJSON(t, res.db)
			if ff := rep.FirstFailure; ff == nil || ff.Symbol != "cuMemSetAccess" || ff.ResultName != "CUDA_ERROR_MAP_FAILED" {
				t.Fatalf("first failure %+v, want cuMemSetAccess MAP_FAILED", ff)
			}
			words, ok := tt.want[report.Capacity(deref(rep.Capacity))]
			if !ok {
				t.Fatalf("capacity %s, want one of %v: %s", deref(rep.Capacity), tt.want, rep.Verdict)
			}
			said := rep.Verdict
			for _, m := range rep.Missing {
				if m.Decisive {
					said += " " + m.What
				}
			}
			for _, word := range words {
				if !strings.Contains(said, word) {
					t.Errorf("%q not said: %s", word, said)
				}
			}
			if anyContains(rep.NextSteps, "had room") {
				t.Errorf("next steps say the aperture had room: %q", rep.NextSteps)
			}
			checkOutputs(t, w, res.db)
		})
	}
}

func TestAllocationWithRoomNotBlamedOnReserved(t *testing.T) {
	w := newWorld(t, "SIMGPU_FAIL=cuMemAlloc_v2:3:2")
	// Held stopped until its sample is read: a sample read after the exit
	// cannot say "had room", since the exit also freed the context's own
	// memory, of a size no traced call gives.
	res := w.record([]string{"--freeze-on-failure"}, simwork, "init; use 0; alloc 1G; alloc 1G; alloc 1G; exit 1")
	rep, _ := analyzeJSON(t, res.db)
	if got := deref(rep.Capacity); got != string(report.CapFBHadRoom) {
		t.Fatalf("capacity %s, want framebuffer-had-room: %s", got, rep.Verdict)
	}
	if strings.Contains(rep.Verdict, "reserved by the driver") || anyContains(rep.NextSteps, "reserved memory") {
		t.Errorf("reserved memory blamed for a request that had room: %s / %q", rep.Verdict, rep.NextSteps)
	}
	for _, want := range []string{"fragmentation", "per-process limit", "injected fault"} {
		if !strings.Contains(rep.Verdict, want) {
			t.Errorf("the verdict does not name %s: %s", want, rep.Verdict)
		}
	}
}

// An IPC open names no size: the mapped size comes from the exporter's
// allocation, and its evidence carries that allocation's time, never a
// time before the run ("at -8627.330 s").
func TestIPCOpenSizedByExporterAllocation(t *testing.T) {
	w := newWorld(t)
	res := w.record(nil, filepath.Join(simDir, "scenarios", "ipc_map"))
	rep, _ := analyzeJSON(t, res.db)
	var ev *report.Evidence
	for i := range rep.Evidence {
		if rep.Evidence[i].Field == "mapped size" {
			ev = &rep.Evidence[i]
		}
	}
	if ev == nil || rep.FirstFailure == nil {
		t.Fatalf("no mapped-size evidence: %+v", rep.Evidence)
	}
	if ev.TimeNS < rep.Run.StartNS || ev.TimeNS > rep.FirstFailure.TimeNS {
		t.Errorf("mapped size at %d ns, want the exporter's allocation, between the run's start (%d) and the failure (%d)",
			ev.TimeNS, rep.Run.StartNS, rep.FirstFailure.TimeNS)
	}
	for _, e := range chromeEvents(t, res.db) {
		if e.Ph == "X" && e.Name == "cuMemAlloc_v2" {
			end := rep.Run.StartNS + int64(e.TS*1000) // ts is µs from the start
			if d := ev.TimeNS - end; d < 0 || d > 100_000 {
				t.Errorf("mapped size at %d ns, the exporter's allocation started at %d", ev.TimeNS, end)
			}
		}
	}
	// The text gives the mapped size the time of the exporter's allocation,
	// after the run's start.
	out := textAt80(t, res.db)
	at := fmt.Sprintf("at +%.3f s", float64(ev.TimeNS-rep.Run.StartNS)/1e9)
	if !regexp.MustCompile(`mapped size: 512\.0 MiB from the exporter's allocation \(pid \d+, traced\), recorded, ` +
		regexp.QuoteMeta(at)).MatchString(strings.Join(strings.Fields(out), " ")) {
		t.Errorf("the mapped size is not given the exporter's allocation's time (%s):\n%s", at, out)
	}
}

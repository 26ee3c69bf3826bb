package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/retrivium/forensic/internal/e2eenv"
	"github.com/retrivium/forensic/report"
)

// The review's findings on report correctness and wording, on real
// recordings of the simulated GPU.

// textAt80 runs `forensic analyze` at 80 columns without colour.
func textAt80(t *testing.T, db string) string {
	t.Helper()
	cmd := exec.Command(binPath, "analyze", "--no-color", db)
	cmd.Env = append(os.Environ(), "COLUMNS=80")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("analyze: %v\n%s", err, out)
	}
	return string(out)
}

// chromeEvents exports a run as trace-event JSON.
func chromeEvents(t *testing.T, db string) []chromeEvent {
	t.Helper()
	out := filepath.Join(t.TempDir(), "trace.json")
	if b, err := exec.Command(binPath, "export", "--format", "chrome-json", "-o", out, db).CombinedOutput(); err != nil {
		t.Fatalf("export: %v\n%s", err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []chromeEvent `json:"traceEvents"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("export is not JSON: %v", err)
	}
	return doc.TraceEvents
}

type chromeEvent struct {
	Ph   string         `json:"ph"`
	Name string         `json:"name"`
	TS   float64        `json:"ts"`
	Args map[string]any `json:"args"`
}

// An IPC open names no size: the mapped size comes from the exporter's
// allocation, and its evidence carries that allocation's time, never a
// time before the run ("at -8627.330 s").
func TestReviewExporterSizedEvidenceTime(t *testing.T) {
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
	if out := textAt80(t, res.db); regexp.MustCompile(`at -\d`).MatchString(out) {
		t.Errorf("a time before the run is printed:\n%s", out)
	}
}

// A process that exited holds nothing: its "process used" row ends at 0,
// and its exported counter drops to 0, while the process still running
// keeps its value.
func TestReviewProcessUsedAfterExit(t *testing.T) {
	w := newWorld(t)
	res := w.record(nil, script("init; fork { init; use 0; alloc 1G; sleep 400 }; use 0; alloc 2G; sleep 900; wait")...)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	rep, _ := analyzeJSON(t, res.db)
	var child, parent *report.ViewRow
	for i := range rep.MemoryViews {
		v := &rep.MemoryViews[i]
		if v.Field != "process used" || v.Peak == nil {
			continue
		}
		switch *v.Peak {
		case 1 << 30:
			child = v
		case 2 << 30:
			parent = v
		}
	}
	if child == nil || parent == nil {
		t.Fatalf("no process used rows for the child (1 GiB) and the parent (2 GiB): %+v", rep.MemoryViews)
	}
	if child.End == nil || *child.End != 0 {
		t.Errorf("the exited child ends at %s, want 0", valText(child.End))
	}
	// In the export, the child's counter drops to 0 while the parent's
	// still reads 2 GiB.
	childName := "GPU 0 framebuffer used by pid " + strconv.FormatUint(uint64(child.PID), 10)
	parentName := "GPU 0 framebuffer used by pid " + strconv.FormatUint(uint64(parent.PID), 10)
	cur := map[string]float64{}
	dropped := false
	for _, e := range chromeEvents(t, res.db) {
		if e.Ph != "C" || (e.Name != childName && e.Name != parentName) {
			continue
		}
		cur[e.Name], _ = e.Args["bytes"].(float64)
		if v, ok := cur[childName]; ok && v == 0 && cur[parentName] == 2<<30 {
			dropped = true
		}
	}
	if !dropped {
		t.Errorf("the exited child's counter never dropped to 0 while the parent held 2 GiB: last values %v", cur)
	}
}

// The first allocation starts "up to first failure": "before first
// allocation" holds no allocation.
func TestReviewFirstAllocationPhase(t *testing.T) {
	w := newWorld(t)
	res := w.record(nil, script("init; use 0; sleep 150; alloc 2G; alloc 1G; alloc 40G; exit 1")...)
	rep, _ := analyzeJSON(t, res.db)
	if rep.FirstFailure == nil || rep.FirstFailure.Phase != "up to first failure" {
		t.Fatalf("first failure %+v, want it in \"up to first failure\"", rep.FirstFailure)
	}
	var traced *report.ViewRow
	for i := range rep.MemoryViews {
		if rep.MemoryViews[i].Field == "traced device allocations" {
			traced = &rep.MemoryViews[i]
		}
	}
	if traced == nil || len(traced.Phases) != 3 {
		t.Fatalf("traced row %+v, want three phases", traced)
	}
	for i, want := range []uint64{0, 3 << 30} {
		p := traced.Phases[i]
		if p.Peak == nil || *p.Peak != want {
			t.Errorf("phase %q peaks at %s, want %d", p.Phase, valText(p.Peak), want)
		}
	}
}

// A workload that never loaded libcuda (recorded without --libcuda) gets
// no framework-pool advice and no "record again without --libcuda": it is
// told it never loaded libcuda.
func TestReviewWorkloadWithoutLibcuda(t *testing.T) {
	w := newWorld(t)
	db := filepath.Join(w.dir, "run.db")
	cmd := exec.Command(binPath, "record", "-o", db, "--libnvidia-ml", simNVML, "--", simwork, "print hello; exit 1")
	cmd.Env = w.environ()
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("the workload exits 1, forensic record exited 0:\n%s", out)
	}
	out := textAt80(t, db)
	flat := strings.Join(strings.Fields(out), " ")
	if !strings.Contains(flat, "never loaded libcuda") || !strings.Contains(flat, "exited with status 1") {
		t.Errorf("not told the workload never loaded libcuda:\n%s", out)
	}
	for _, bad := range []string{"memory pool", "preallocation", "--libcuda"} {
		if strings.Contains(flat, bad) {
			t.Errorf("says %q:\n%s", bad, out)
		}
	}
}

// The demo's output at 80 columns: every line fits; an instant is said
// once; no nested parentheses, no "NVML NVML_SUCCESS", no zero loss
// counts; the memory views explain why "framebuffer used" never shows the
// memory the verdict says ran out. The export gives cuInit no CUDA device
// and cuDeviceGet no pointer.
func TestReviewDemoWording(t *testing.T) {
	w := newWorld(t)
	res := w.record(nil, filepath.Join(simDir, "scenarios", "weights_oom"))
	out := textAt80(t, res.db)
	for i, line := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(line); n > 80 {
			t.Errorf("line %d has %d columns: %q", i+1, n, line)
		}
	}
	if m := regexp.MustCompile(`(\+\d+\.\d+ s) to (\+\d+\.\d+ s)`).FindAllStringSubmatch(out, -1); m != nil {
		for _, x := range m {
			if x[1] == x[2] {
				t.Errorf("an instant said twice: %q", x[0])
			}
		}
	}
	flat := strings.Join(strings.Fields(out), " ")
	for _, bad := range []string{"((", "))", "NVML NVML_SUCCESS", " 0 nested", " 0 lost", " 0 not followed", " 0 thinned"} {
		if strings.Contains(flat, bad) {
			t.Errorf("says %q:\n%s", bad, out)
		}
	}
	for _, want := range []string{"framebuffer-exhausted", "no sample was taken while the traced processes' device memory was at its peak"} {
		if !strings.Contains(flat, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	seen := map[string]bool{}
	for _, e := range chromeEvents(t, res.db) {
		if e.Ph != "X" || seen[e.Name] {
			continue
		}
		seen[e.Name] = true
		_, dev := e.Args["cuda_device"]
		_, ptr := e.Args["ptr"]
		switch e.Name {
		case "cuInit":
			if dev {
				t.Errorf("cuInit, before any context, has a CUDA device: %v", e.Args)
			}
		case "cuDeviceGet":
			if ptr || e.Args["device_handle"] == nil {
				t.Errorf("cuDeviceGet returns a device handle, not a pointer: %v", e.Args)
			}
		case "cuMemAlloc_v2":
			if !dev || !ptr {
				t.Errorf("an allocation in a context lacks its device or pointer: %v", e.Args)
			}
		}
	}
}

// Sizes from 1 TiB are written in TiB.
func TestReviewTiBSizes(t *testing.T) {
	w := newWorld(t)
	res := w.record(nil, script("init; use 0; alloc 100T; exit 1")...)
	rep, _ := analyzeJSON(t, res.db)
	if rep.FirstFailure == nil || rep.FirstFailure.Size == nil || *rep.FirstFailure.Size != 100<<40 {
		t.Fatalf("first failure %+v, want an allocation of 100 TiB", rep.FirstFailure)
	}
	out := textAt80(t, res.db)
	if !strings.Contains(out, "100.00 TiB") || strings.Contains(out, "102400.00 GiB") {
		t.Errorf("100 TiB not written in TiB:\n%s", out)
	}
}

// The VERDICT heading is coloured by its attribution as the HTML report
// is: red for an allocation problem, green when nothing failed.
func TestReviewVerdictColour(t *testing.T) {
	_, err := exec.LookPath("script")
	e2eenv.Need(t, err == nil, "util-linux script (a terminal for the colour) is not installed")
	tests := []struct {
		name, steps, want string
	}{
		{"allocation", "init; use 0; alloc 40G; exit 1", "\x1b[1;31mVERDICT"},
		{"none", "init; use 0; alloc 1G; free-all", "\x1b[1;32mVERDICT"},
	}
	for _, tt := range tests {
		w := newWorld(t)
		res := w.record(nil, script(tt.steps)...)
		cmd := exec.Command("script", "-qec", binPath+" analyze "+res.db, "/dev/null")
		cmd.Env = append(os.Environ(), "COLUMNS=80", "NO_COLOR=")
		var out bytes.Buffer
		cmd.Stdout = &out
		cmd.Run() // a verdict is not an error; the text is what is checked
		if !strings.Contains(out.String(), tt.want) {
			t.Errorf("%s: heading %q not found:\n%q", tt.name, tt.want, firstLines(out.String(), 8))
		}
	}
}

// valText shows an optional value in a message.
func valText(v *uint64) string {
	if v == nil {
		return "none"
	}
	return strconv.FormatUint(*v, 10)
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

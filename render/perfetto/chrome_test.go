package perfetto

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/retrivium/forensic/analyze"
	"github.com/retrivium/forensic/internal/runfixture"
	"github.com/retrivium/forensic/store"
)

// export analyzes the run at path with a ChromeJSON observer.
func export(t testing.TB, path string, w *bytes.Buffer) {
	t.Helper()
	if err := exportTo(path, w); err != nil {
		t.Fatal(err)
	}
}

func exportTo(path string, w interface{ Write([]byte) (int, error) }) error {
	r, err := store.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	tr := NewChromeJSON(w)
	rep, err := analyze.Analyze(r, analyze.Options{Observer: tr, NoTimeline: true})
	if err != nil {
		return err
	}
	return tr.Finish(rep)
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
	path := runfixture.BuildRun(t, 0)
	var buf bytes.Buffer
	export(t, path, &buf)
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
				failInstant = failInstant || strings.Contains(e.Name, "CUDA_ERROR_OUT_OF_MEMORY") && e.PID == runfixture.PIDTrain
			case "kernel":
				xidInstant = xidInstant || strings.Contains(e.Name, "Xid 31")
			case "marker":
				markInstant = markInstant || strings.Contains(e.Name, "weights loaded")
			}
		}
	}
	// One slice per call, a thread name per thread.
	r2, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
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
	if procNames[runfixture.PIDTrain] != "python3 train.py --batch 64" || procNames[runfixture.PIDServe] != "serve --port 8000" {
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

// The export streams: memory does not grow with the number of calls.
func TestOutputPerfettoScale(t *testing.T) {
	const extra = 200_000
	path := runfixture.BuildRun(t, extra)
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	cw := &countWriter{}
	start := time.Now()
	if err := exportTo(path, cw); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	runtime.ReadMemStats(&ms1)
	t.Logf("perfetto: %d calls, %d bytes in %v, %d bytes allocated", extra, cw.n, took, ms1.TotalAlloc-ms0.TotalAlloc)
	if per := float64(ms1.TotalAlloc-ms0.TotalAlloc) / extra; per > 512 {
		t.Errorf("perfetto export allocates %.0f bytes per call; it should stream", per)
	}
	if ms1.HeapInuse > ms0.HeapInuse+64<<20 {
		t.Errorf("heap grew by %d bytes during the export", ms1.HeapInuse-ms0.HeapInuse)
	}
}

// A run without samples still exports valid JSON.
func TestOutputPerfettoWithoutSamples(t *testing.T) {
	var pf bytes.Buffer
	export(t, runfixture.BuildRunNoFailure(t), &pf)
	parsePerfetto(t, pf.Bytes())
}

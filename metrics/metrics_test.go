package metrics

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/retrivium/forensic/flight"
	"github.com/retrivium/forensic/internal/e2eenv"
	"github.com/retrivium/forensic/store"
)

// serve starts m on a free local port and returns its base URL; the
// server stops when the test ends, and Serve must then return nil.
func serve(t *testing.T, m *Metrics, opts ServeOptions) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, ln, opts) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve returned %v after its context ended", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after its context ended")
		}
	})
	return "http://" + ln.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// scrape reads /metrics and parses the text exposition.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return fams
}

// value returns the value of the series of a family with these labels
// ("name=value" pairs), and whether it exists.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		var have []string
		for _, l := range m.GetLabel() {
			have = append(have, l.GetName()+"="+l.GetValue())
		}
		if strings.Join(have, ",") != strings.Join(labels, ",") {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		}
	}
	return 0, false
}

func flightIndex() *flight.Index {
	x := flight.NewIndex("rec", flight.Policy{MaxBytes: 1 << 30, SegmentBytes: 128 << 20})
	x.Segments = []flight.Segment{{Seq: 4, Bytes: 100 << 20}, {Seq: 5, Bytes: 30 << 20, Live: true}}
	x.Dropped = []flight.Dropped{
		{Gap: store.Gap{Calls: 1000, Bytes: 256 << 20, Reason: store.GapRetention}, FirstSeq: 1, LastSeq: 2},
		{Gap: store.Gap{Calls: 50, Failures: 3, Bytes: 128 << 20, Reason: store.GapWindowCut}, FirstSeq: 3, LastSeq: 3},
	}
	return x
}

// testOptions are two symbols on two GPUs.
func testOptions() Options {
	return Options{Version: "v-test", Revision: "abc123", Modified: true,
		Symbols: []Symbol{{"allocation", "cuMemAlloc_v2"}, {"mapping", "cuMemMap"}},
		GPUs:    []GPU{{Index: 0, UUID: "GPU-0", Model: "Sim A100"}, {Index: 1, UUID: "GPU-1", Model: "Sim A100"}}}
}

func TestScrape(t *testing.T) {
	m := New(testOptions())
	base := serve(t, m, ServeOptions{})
	t1, t2 := time.Unix(1700000000, 0), time.Unix(1700000100, 500e6)
	oom := Failure{Class: "allocation", Symbol: "cuMemAlloc_v2", Result: "CUDA_ERROR_OUT_OF_MEMORY", GPU: 0,
		Namespace: "ml", Pod: "train-0"}
	oom.At = t2
	m.CallFailed(oom)
	oom.At = t1
	m.CallFailed(oom)
	m.CallFailed(Failure{Class: "mapping", Symbol: "cuMemMap", Result: "CUDA_ERROR_INVALID_VALUE", GPU: -1, At: t1})
	m.SetStats(store.Stats{Calls: 100, Events: 90, LostCalls: 7, LostInflight: 2, TooDeep: 1, LostProc: 4, Samples: 12})
	m.SetWatching(2, 5)
	m.SetFlight(flightIndex())
	m.SetMemory(1, Framebuffer, 30<<30, 10<<30)
	m.SetMemory(1, BAR1, 200<<20, 56<<20)
	m.Xid(31)
	m.Held(HoldFirstMapping, true)
	m.Held(HoldFailure, false)

	fams := scrape(t, base)
	gpu1 := []string{"gpu=1", "model=Sim A100", "uuid=GPU-1"}
	want := []struct {
		name   string
		labels []string
		v      float64
	}{
		{"forensic_failed_calls_total", []string{"class=allocation", "gpu=0", "symbol=cuMemAlloc_v2"}, 2},
		{"forensic_failed_calls_total", []string{"class=mapping", "gpu=unknown", "symbol=cuMemMap"}, 1},
		{"forensic_failed_calls_total", []string{"class=mapping", "gpu=1", "symbol=cuMemMap"}, 0},
		{"forensic_failed_call_results_total", []string{"class=allocation", "result=CUDA_ERROR_OUT_OF_MEMORY"}, 2},
		{"forensic_failed_call_results_total", []string{"class=mapping", "result=CUDA_ERROR_INVALID_VALUE"}, 1},
		{"forensic_pod_failed_calls_total", []string{"class=allocation", "namespace=ml", "pod=train-0"}, 2},
		{"forensic_last_failure_timestamp_seconds", nil, 1700000100.5},
		{"forensic_gpu_framebuffer_used_bytes", gpu1, 30 << 30},
		{"forensic_gpu_framebuffer_free_bytes", gpu1, 10 << 30},
		{"forensic_gpu_bar1_used_bytes", gpu1, 200 << 20},
		{"forensic_gpu_bar1_free_bytes", gpu1, 56 << 20},
		{"forensic_xid_events_total", []string{"xid=31"}, 1},
		{"forensic_holds_total", []string{"kind=first-mapping", "outcome=released"}, 1},
		{"forensic_holds_total", []string{"kind=failure", "outcome=failed"}, 1},
		{"forensic_holds_total", []string{"kind=first-mapping", "outcome=failed"}, 0},
		{"forensic_recording", nil, 1},
		{"forensic_calls_total", nil, 100},
		{"forensic_events_stored_total", nil, 90},
		{"forensic_calls_lost_total", []string{"reason=ring_buffer_full"}, 7},
		{"forensic_calls_lost_total", []string{"reason=in_flight_table_full"}, 2},
		{"forensic_calls_lost_total", []string{"reason=too_deep"}, 1},
		{"forensic_process_events_lost_total", nil, 4},
		{"forensic_samples_total", nil, 12},
		{"forensic_attached_libraries", nil, 2},
		{"forensic_processes_tracked", nil, 5},
		{"forensic_flight_segments_bytes", nil, 130 << 20},
		{"forensic_flight_max_bytes", nil, 1 << 30},
		{"forensic_flight_segments", nil, 2},
		{"forensic_flight_dropped_segments_total", []string{"reason=retention"}, 2},
		{"forensic_flight_dropped_segments_total", []string{"reason=window-cut"}, 1},
		{"forensic_flight_dropped_calls_total", []string{"reason=retention"}, 1000},
		{"forensic_flight_dropped_failures_total", []string{"reason=window-cut"}, 3},
		{"forensic_flight_dropped_bytes_total", []string{"reason=retention"}, 256 << 20},
		{"forensic_flight_dropped_ranges", []string{"reason=window-cut"}, 1},
		{"forensic_build_info", []string{"modified=true", "revision=abc123", "version=v-test"}, 1},
	}
	for _, w := range want {
		if v, ok := value(fams, w.name, w.labels...); !ok || v != w.v {
			t.Errorf("%s%v = %v (present %v), want %v", w.name, w.labels, v, ok, w.v)
		}
	}
	if _, ok := value(fams, "go_goroutines"); !ok {
		t.Error("the Go runtime's metrics are missing")
	}
	if _, ok := value(fams, "forensic_recording_stopped_info", "reason="); ok || fams["forensic_recording_stopped_info"] != nil {
		t.Error("a stop reason while recording")
	}
}

// Before any failure, every symbol's failure counter is there at 0 on
// every GPU and on an unknown one, and the holds' counters too: an alert
// on their increase sees the first failure.
func TestFailureCountersExistFromTheStart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   Options
		series int
	}{
		{"two symbols, two GPUs", testOptions(), 2 * 3},
		{"no GPU known", Options{Symbols: testOptions().Symbols}, 2},
		{"nothing to trace", Options{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fams := scrape(t, serve(t, New(tc.opts), ServeOptions{}))
			f := fams["forensic_failed_calls_total"]
			if got := len(f.GetMetric()); got != tc.series {
				t.Fatalf("%d series, want %d", got, tc.series)
			}
			for _, m := range f.GetMetric() {
				if m.GetCounter().GetValue() != 0 {
					t.Errorf("%v = %v before any failure", m.GetLabel(), m.GetCounter().GetValue())
				}
			}
			if n := len(fams["forensic_holds_total"].GetMetric()); n != 4 {
				t.Errorf("%d holds series, want 4 (2 kinds x 2 outcomes)", n)
			}
		})
	}
}

// Pods beyond MaxPods are counted together as OtherPod: the series stay
// bounded however many pods come and go.
func TestPodSeriesAreBounded(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pods      int
		wantPods  int
		wantOther float64
	}{
		{"below the bound", 3, 3, 0},
		{"at the bound", MaxPods, MaxPods, 0},
		{"beyond it", MaxPods + 10, MaxPods + 1, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New(testOptions())
			for i := range tc.pods {
				m.CallFailed(Failure{Class: "allocation", Symbol: "cuMemAlloc_v2", Result: "CUDA_ERROR_OUT_OF_MEMORY",
					Namespace: "ns", Pod: fmt.Sprintf("p%d", i)})
			}
			fams := scrape(t, serve(t, m, ServeOptions{}))
			if n := len(fams["forensic_pod_failed_calls_total"].GetMetric()); n != tc.wantPods {
				t.Errorf("%d pod series, want %d", n, tc.wantPods)
			}
			other, _ := value(fams, "forensic_pod_failed_calls_total", "class=allocation", "namespace=", "pod="+OtherPod)
			if other != tc.wantOther {
				t.Errorf("%s = %v, want %v", OtherPod, other, tc.wantOther)
			}
			if len(m.counters) > MaxPods+1 {
				t.Errorf("%d cached label sets: the cache grows with the pods", len(m.counters))
			}
		})
	}
}

// Once recording stopped, the metrics say so and why.
func TestRecordingState(t *testing.T) {
	for _, tc := range []struct {
		name   string
		on     bool
		reason string
		want   float64
	}{
		{"recording", true, "", 1},
		{"disk full", false, "disk-full", 0},
		{"stopped by a signal", false, "signal", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New(testOptions())
			m.SetRecording(tc.on, tc.reason)
			fams := scrape(t, serve(t, m, ServeOptions{}))
			if v, _ := value(fams, "forensic_recording"); v != tc.want {
				t.Errorf("forensic_recording = %v, want %v", v, tc.want)
			}
			_, stopped := value(fams, "forensic_recording_stopped_info", "reason="+tc.reason)
			if stopped == tc.on {
				t.Errorf("forensic_recording_stopped_info{reason=%q} present: %v", tc.reason, stopped)
			}
		})
	}
}

// /metrics answers in OpenMetrics when the scraper asks for it, as
// Prometheus does.
func TestOpenMetrics(t *testing.T) {
	base := serve(t, New(testOptions()), ServeOptions{})
	req, err := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Errorf("Content-Type %q, want OpenMetrics", ct)
	}
	if !strings.HasSuffix(string(body), "# EOF\n") {
		t.Errorf("no OpenMetrics # EOF at the end")
	}
}

// promtool (Debian's prometheus package) finds nothing to say about the
// exposition: names, units, help.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool := requireTool(t, "promtool")
	m := New(testOptions())
	m.CallFailed(Failure{Class: "allocation", Symbol: "cuMemAlloc_v2", Result: "CUDA_ERROR_OUT_OF_MEMORY", Pod: "p", Namespace: "n"})
	m.SetStats(store.Stats{})
	m.SetFlight(flightIndex())
	m.SetMemory(0, Framebuffer, 1, 2)
	m.SetMemory(0, BAR1, 1, 2)
	m.Xid(79)
	m.SetRecording(false, "disk-full")
	_, body := get(t, serve(t, m, ServeOptions{})+"/metrics")
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// requireTool returns a command's path; without it the test is skipped,
// or fails where end-to-end tests are required (make test).
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	e2eenv.Need(t, err == nil, name+" not found (scripts/deps.sh test installs it)")
	return p
}

// Every metric of the recorder is named forensic_*, has help text, and
// follows Prometheus's naming: counters end in _total, and units are in
// the name.
func TestNaming(t *testing.T) {
	m := New(testOptions())
	m.CallFailed(Failure{Class: "other", Symbol: "cuInit", Result: "CUDA_ERROR_NO_DEVICE", GPU: -1, Pod: "p", At: time.Now()})
	m.SetMemory(0, Framebuffer, 1, 2)
	m.Xid(31)
	m.SetRecording(false, "signal")
	m.SetStats(store.Stats{})
	m.SetFlight(flightIndex())
	fams := scrape(t, serve(t, m, ServeOptions{}))
	n := 0
	for name, f := range fams {
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") || strings.HasPrefix(name, "promhttp_") {
			continue
		}
		n++
		switch {
		case !strings.HasPrefix(name, "forensic_"):
			t.Errorf("%s: not forensic_*", name)
		case f.GetHelp() == "":
			t.Errorf("%s: no help", name)
		case (f.GetType() == dto.MetricType_COUNTER) != strings.HasSuffix(name, "_total"):
			t.Errorf("%s: a %s; only counters end in _total", name, f.GetType())
		case strings.Contains(name, "bytes") && !strings.HasSuffix(strings.TrimSuffix(name, "_total"), "_bytes"):
			t.Errorf("%s: the unit is not the name's end", name)
		}
	}
	if n < 20 {
		t.Errorf("%d forensic metrics, want every one of the list", n)
	}
}

// The flight metrics appear only for a flight recording.
func TestNoFlightMetricsWithoutFlight(t *testing.T) {
	fams := scrape(t, serve(t, New(testOptions()), ServeOptions{}))
	for name := range fams {
		if strings.HasPrefix(name, "forensic_flight_") {
			t.Errorf("%s shown for a recording that is not in flight mode", name)
		}
	}
	if _, ok := value(fams, "forensic_last_failure_timestamp_seconds"); ok {
		t.Error("a last failure time before any failure")
	}
}

func TestHealthz(t *testing.T) {
	m := New(testOptions())
	base := serve(t, m, ServeOptions{Stale: 50 * time.Millisecond})
	for _, step := range []struct {
		before func()
		want   int
	}{
		{func() {}, http.StatusOK}, // no report yet: starting
		{func() { m.SetStats(store.Stats{}) }, http.StatusOK},
		{func() { time.Sleep(100 * time.Millisecond) }, http.StatusServiceUnavailable},
		{func() { m.SetStats(store.Stats{Calls: 1}) }, http.StatusOK},
	} {
		step.before()
		if code, body := get(t, base+"/healthz"); code != step.want {
			t.Errorf("/healthz = %d %q, want %d", code, body, step.want)
		}
	}
}

// Counting a failed call allocates nothing once its labels were seen,
// and nor does reporting the counters.
func TestUpdatesDoNotAllocate(t *testing.T) {
	m := New(testOptions())
	f := Failure{Class: "allocation", Symbol: "cuMemAlloc_v2", Result: "CUDA_ERROR_OUT_OF_MEMORY", GPU: 3,
		Namespace: "ml", Pod: "train-0", At: time.Now()}
	m.CallFailed(f)
	st := store.Stats{Calls: 5}
	for name, fn := range map[string]func(){
		"CallFailed": func() { m.CallFailed(f) },
		"SetMemory":  func() { m.SetMemory(0, Framebuffer, 1, 2) },
		"SetStats":   func() { m.SetStats(st) },
		"SetWatching": func() {
			m.SetWatching(1, 2)
		},
	} {
		if n := testing.AllocsPerRun(1000, fn); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, n)
		}
	}
}

func TestListenAndServeBadAddress(t *testing.T) {
	err := New(testOptions()).ListenAndServe(context.Background(), "127.0.0.1:-1", ServeOptions{})
	if err == nil || !strings.HasPrefix(err.Error(), "metrics: ") {
		t.Errorf("err = %v, want a metrics: listen error", err)
	}
}

// BenchmarkCallFailed measures counting a failed call of a label set seen
// before, from several goroutines at once.
func BenchmarkCallFailed(b *testing.B) {
	m := New(testOptions())
	f := Failure{Class: "allocation", Symbol: "cuMemAlloc_v2", Result: "CUDA_ERROR_OUT_OF_MEMORY", At: time.Now()}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.CallFailed(f)
		}
	})
}

// BenchmarkGather measures one scrape's work (gathering the registry and
// writing the text exposition) for a recorder of 8 GPUs, every failure
// series present.
func BenchmarkGather(b *testing.B) {
	o := testOptions()
	o.Symbols = nil
	for i := range 76 {
		o.Symbols = append(o.Symbols, Symbol{"allocation", fmt.Sprintf("cuSym%d", i)})
	}
	o.GPUs = nil
	for i := range 8 {
		o.GPUs = append(o.GPUs, GPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Model: "H200"})
	}
	m := New(o)
	for i := range 8 {
		m.SetMemory(i, Framebuffer, 1, 2)
		m.SetMemory(i, BAR1, 1, 2)
	}
	m.SetStats(store.Stats{})
	m.SetFlight(flightIndex())
	b.ReportAllocs()
	for b.Loop() {
		fams, err := m.Registry().Gather()
		if err != nil {
			b.Fatal(err)
		}
		enc := expfmt.NewEncoder(io.Discard, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, f := range fams {
			if err := enc.Encode(f); err != nil {
				b.Fatal(err)
			}
		}
	}
}

package metrics

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/retrivium/forensic/flight"
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

func TestScrape(t *testing.T) {
	m := New("v-test")
	base := serve(t, m, ServeOptions{})
	t1, t2 := time.Unix(1700000000, 0), time.Unix(1700000100, 500e6)
	m.CallFailed("cuMemAlloc_v2", "CUDA_ERROR_OUT_OF_MEMORY", 0, t2)
	m.CallFailed("cuMemAlloc_v2", "CUDA_ERROR_OUT_OF_MEMORY", 0, t1)
	m.CallFailed("cuMemMap", "CUDA_ERROR_INVALID_VALUE", -1, t1)
	m.SetStats(store.Stats{Calls: 100, Events: 90, LostCalls: 7, LostInflight: 2, TooDeep: 1, LostProc: 4, Samples: 12})
	m.SetWatching(2, 5)
	m.SetFlight(flightIndex())

	fams := scrape(t, base)
	want := []struct {
		name   string
		labels []string
		v      float64
	}{
		{"forensic_failed_calls_total", []string{"gpu=0", "result=CUDA_ERROR_OUT_OF_MEMORY", "symbol=cuMemAlloc_v2"}, 2},
		{"forensic_failed_calls_total", []string{"gpu=unknown", "result=CUDA_ERROR_INVALID_VALUE", "symbol=cuMemMap"}, 1},
		{"forensic_last_failure_timestamp_seconds", nil, 1700000100.5},
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
		{"forensic_build_info", []string{"version=v-test"}, 1},
	}
	for _, w := range want {
		if v, ok := value(fams, w.name, w.labels...); !ok || v != w.v {
			t.Errorf("%s%v = %v (present %v), want %v", w.name, w.labels, v, ok, w.v)
		}
	}
	if _, ok := value(fams, "go_goroutines"); !ok {
		t.Error("the Go runtime's metrics are missing")
	}
}

// Every metric of the recorder is named forensic_*, has help text, and
// follows Prometheus's naming: counters end in _total, and units are in
// the name.
func TestNaming(t *testing.T) {
	m := New("v")
	m.CallFailed("cuInit", "CUDA_ERROR_NO_DEVICE", -1, time.Now())
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
	fams := scrape(t, serve(t, New("v"), ServeOptions{}))
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
	m := New("v")
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
	m := New("v")
	at := time.Now()
	m.CallFailed("cuMemAlloc_v2", "CUDA_ERROR_OUT_OF_MEMORY", 3, at)
	st := store.Stats{Calls: 5}
	for name, fn := range map[string]func(){
		"CallFailed": func() { m.CallFailed("cuMemAlloc_v2", "CUDA_ERROR_OUT_OF_MEMORY", 3, at) },
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
	err := New("v").ListenAndServe(context.Background(), "127.0.0.1:-1", ServeOptions{})
	if err == nil || !strings.HasPrefix(err.Error(), "metrics: ") {
		t.Errorf("err = %v, want a metrics: listen error", err)
	}
}

// BenchmarkCallFailed measures counting a failed call of a label set seen
// before, from several goroutines at once.
func BenchmarkCallFailed(b *testing.B) {
	m := New("v")
	at := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.CallFailed("cuMemAlloc_v2", "CUDA_ERROR_OUT_OF_MEMORY", 0, at)
		}
	})
}

// Package metrics exposes a recorder's state as Prometheus metrics: failed
// calls by symbol, result and GPU, what was recorded and lost, the flight
// recording's disk use and what retention dropped, and what is being
// watched. It keeps its own registry (never the global default one), and
// the recorder updates it through small methods: CallFailed on each failed
// call (no allocation once a symbol, result and GPU was seen) and the
// Set... methods with values the recorder already keeps, read only when
// /metrics is scraped. Serve answers /metrics and /healthz until its
// context ends. Every metric is listed in docs/flight.md.
package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/retrivium/forensic/flight"
	"github.com/retrivium/forensic/store"
)

// Metrics is one recorder's metrics. Its methods are safe for concurrent
// use.
type Metrics struct {
	reg    *prometheus.Registry
	failed *prometheus.CounterVec
	// counters caches the failed-call counter of each label set, so that
	// CallFailed allocates only the first time it sees one.
	mu       sync.Mutex
	counters map[failKey]prometheus.Counter
	state    *stateCollector
	least    *leastFree // headroom.go
}

// failKey is one label set of forensic_failed_calls_total.
type failKey struct {
	symbol, result string
	gpu            int
}

// New returns the metrics of a recorder of this forensic version, in a
// registry of their own that also holds the Go runtime's and the
// process's collectors.
func New(version string) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forensic_failed_calls_total",
			Help: "Failed CUDA driver calls recorded, by symbol, result (CUresult name) and GPU (NVML index, \"unknown\" when the call's device is not known).",
		}, []string{"symbol", "result", "gpu"}),
		counters: map[failKey]prometheus.Counter{},
		state:    newStateCollector(version),
	}
	m.least = newLeastFree(m.reg)
	m.reg.MustRegister(m.failed, m.state,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the registry, for serving or gathering.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// CallFailed counts one failed call of symbol that returned result on a
// GPU (its NVML index; negative when unknown), at wall time at.
func (m *Metrics) CallFailed(symbol, result string, gpu int, at time.Time) {
	if gpu < 0 {
		gpu = -1
	}
	k := failKey{symbol, result, gpu}
	m.mu.Lock()
	c := m.counters[k]
	if c == nil {
		g := "unknown"
		if gpu >= 0 {
			g = strconv.Itoa(gpu)
		}
		c = m.failed.WithLabelValues(symbol, result, g)
		m.counters[k] = c
	}
	m.mu.Unlock()
	c.Inc()
	m.state.failedAt(at)
}

// SetStats records the recorder's counters (cumulative since the start).
func (m *Metrics) SetStats(st store.Stats) {
	m.state.mu.Lock()
	m.state.stats = st
	m.state.updated = time.Now()
	m.state.mu.Unlock()
}

// SetWatching records what the recorder watches: libcuda files attached
// and processes tracked.
func (m *Metrics) SetWatching(libraries, processes int) {
	m.state.mu.Lock()
	m.state.libraries, m.state.processes = libraries, processes
	m.state.mu.Unlock()
}

// SetFlight records a flight recording's index: the segments' disk use,
// the bound, and what retention dropped.
func (m *Metrics) SetFlight(x *flight.Index) {
	f := flightState{set: true, maxBytes: x.MaxBytes, bytes: x.Bytes(), segments: len(x.Segments),
		dropped: map[string]*droppedSum{}}
	for _, d := range x.Dropped {
		s := f.dropped[d.Reason]
		if s == nil {
			s = &droppedSum{}
			f.dropped[d.Reason] = s
		}
		s.ranges++
		s.segments += d.LastSeq - d.FirstSeq + 1
		s.calls += d.Calls
		s.failures += d.Failures
		s.bytes += d.Bytes
	}
	m.state.mu.Lock()
	m.state.flight = f
	m.state.mu.Unlock()
}

// Updated returns when SetStats was last called (zero before).
func (m *Metrics) Updated() time.Time {
	m.state.mu.Lock()
	defer m.state.mu.Unlock()
	return m.state.updated
}

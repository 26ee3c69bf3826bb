// Package metrics exposes a recorder's state as Prometheus metrics: failed
// calls by class, symbol and GPU (every series there from the start, at 0,
// so that an alert sees the first failure), by result and by pod; GPU
// framebuffer and BAR1 use; Xid events; held processes; whether it is
// recording; what was recorded and lost, the flight recording's disk use
// and what retention dropped. It keeps its own registry (never the global
// default one), and the recorder updates it through small methods:
// CallFailed on each failed call (no allocation once a label set was seen)
// and the Set... methods with values the recorder already keeps, read only
// when /metrics is scraped. Serve answers /metrics (Prometheus text or
// OpenMetrics) and /healthz until its context ends. Every metric is listed
// in docs/flight.md.
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

// MaxPods bounds the pods forensic_pod_failed_calls_total names: the
// failures of pods beyond the first MaxPods are counted under pod
// OtherPod, so that a cluster's churn of pods cannot grow the series
// without bound.
const MaxPods = 64

// OtherPod is the pod label of failures of pods beyond MaxPods.
const OtherPod = "_other"

// UnknownGPU is the gpu label of a call whose device is not known.
const UnknownGPU = "unknown"

// Symbol is one traced function, as the failure counters name it: its
// class (allocation, host-allocation, mapping, context, free, other) and
// its exported name.
type Symbol struct {
	Class, Name string
}

// GPU is one GPU of the inventory: its NVML index, UUID and model name.
type GPU struct {
	Index       int
	UUID, Model string
}

// Options say what a recorder's metrics name.
type Options struct {
	// Version is forensic's version (forensic_build_info).
	Version string
	// Revision and Modified are the build's VCS stamp, when it has one.
	Revision string
	Modified bool
	// Symbols are the functions traced: each one's failure counter exists
	// at 0 from the start, for every GPU and for an unknown one.
	Symbols []Symbol
	// GPUs are the GPUs of the inventory.
	GPUs []GPU
}

// Failure is one failed call as the metrics count it.
type Failure struct {
	Class, Symbol, Result string
	// GPU is the NVML index of the call's device; negative when unknown.
	GPU int
	// Namespace and Pod name the Kubernetes pod of the process, when
	// known.
	Namespace, Pod string
	// At is the call's wall-clock time.
	At time.Time
}

// Metrics is one recorder's metrics. Its methods are safe for concurrent
// use.
type Metrics struct {
	reg     *prometheus.Registry
	failed  *prometheus.CounterVec
	results *prometheus.CounterVec
	pods    *prometheus.CounterVec
	xid     *prometheus.CounterVec
	holds   *prometheus.CounterVec
	// counters caches the counters of each failure's label sets, so that
	// CallFailed allocates only the first time it sees one.
	mu       sync.Mutex
	counters map[Failure]failCounters
	podSeen  map[podKey]bool
	state    *stateCollector
	least    *leastFree // headroom.go
}

// failCounters are the counters one failure adds to.
type failCounters struct {
	failed, result, pod prometheus.Counter
}

type podKey struct{ namespace, pod string }

// New returns the metrics of a recorder, in a registry of their own that
// also holds the Go runtime's and the process's collectors.
func New(o Options) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forensic_failed_calls_total",
			Help: "Failed CUDA driver calls recorded, by class (allocation, host-allocation, mapping, context, free, other), symbol, and GPU (NVML index, \"unknown\" when the call's device is not known). Every series exists at 0 from the start.",
		}, []string{"class", "symbol", "gpu"}),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forensic_failed_call_results_total",
			Help: "Failed CUDA driver calls recorded, by class and result (the CUresult name).",
		}, []string{"class", "result"}),
		pods: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forensic_pod_failed_calls_total",
			Help: "Failed CUDA driver calls of processes in a Kubernetes pod, by namespace, pod and class; pods beyond the first " + strconv.Itoa(MaxPods) + " are counted as pod \"" + OtherPod + "\".",
		}, []string{"namespace", "pod", "class"}),
		xid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forensic_xid_events_total",
			Help: "Xid events in the kernel log since the recorder started, by Xid code.",
		}, []string{"xid"}),
		holds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "forensic_holds_total",
			Help: "Processes held by the recorder, by kind (first-mapping: at its first mapping of a libcuda not yet attached; failure: at a failed call, --freeze-on-failure) and outcome (released, or failed: the process could not be continued).",
		}, []string{"kind", "outcome"}),
		counters: map[Failure]failCounters{},
		podSeen:  map[podKey]bool{},
		state:    newStateCollector(o),
	}
	m.least = newLeastFree(m.reg)
	m.zero(o)
	m.reg.MustRegister(m.failed, m.results, m.pods, m.xid, m.holds, m.state,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// zero creates the series that exist from the start: a failure counter
// for every symbol on every GPU (and an unknown one), and the holds'
// counters, so that the first increase is seen as one.
func (m *Metrics) zero(o Options) {
	gpus := []string{UnknownGPU}
	for _, g := range o.GPUs {
		gpus = append(gpus, strconv.Itoa(g.Index))
	}
	for _, s := range o.Symbols {
		for _, g := range gpus {
			m.failed.WithLabelValues(s.Class, s.Name, g)
		}
	}
	for _, kind := range []string{HoldFirstMapping, HoldFailure} {
		for _, outcome := range []string{"released", "failed"} {
			m.holds.WithLabelValues(kind, outcome)
		}
	}
}

// Registry returns the registry, for serving or gathering.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// CallFailed counts one failed call.
func (m *Metrics) CallFailed(f Failure) {
	if f.GPU < 0 {
		f.GPU = -1
	}
	at := f.At
	f.At = time.Time{}
	m.mu.Lock()
	if k := (podKey{f.Namespace, f.Pod}); f.Pod != "" && !m.podSeen[k] {
		if len(m.podSeen) >= MaxPods {
			f.Namespace, f.Pod = "", OtherPod
		} else {
			m.podSeen[k] = true
		}
	}
	c, ok := m.counters[f]
	if !ok {
		c = m.newCounters(f)
		m.counters[f] = c
	}
	m.mu.Unlock()
	c.failed.Inc()
	c.result.Inc()
	if c.pod != nil {
		c.pod.Inc()
	}
	m.state.failedAt(at)
}

// newCounters finds the counters of a failure's label sets (under mu; a
// pod beyond MaxPods is already OtherPod, so the cache stays bounded too).
func (m *Metrics) newCounters(f Failure) failCounters {
	g := UnknownGPU
	if f.GPU >= 0 {
		g = strconv.Itoa(f.GPU)
	}
	c := failCounters{
		failed: m.failed.WithLabelValues(f.Class, f.Symbol, g),
		result: m.results.WithLabelValues(f.Class, f.Result),
	}
	if f.Pod != "" {
		c.pod = m.pods.WithLabelValues(f.Namespace, f.Pod, f.Class)
	}
	return c
}

// Kinds of holds (forensic_holds_total's kind label).
const (
	HoldFirstMapping = "first-mapping"
	HoldFailure      = "failure"
)

// Held counts a process held by the recorder, of a kind (HoldFirstMapping,
// HoldFailure), and whether it was continued.
func (m *Metrics) Held(kind string, released bool) {
	outcome := "released"
	if !released {
		outcome = "failed"
	}
	m.holds.WithLabelValues(kind, outcome).Inc()
}

// Xid counts one Xid event of the kernel log.
func (m *Metrics) Xid(code int) {
	m.xid.WithLabelValues(strconv.Itoa(code)).Inc()
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

// Memory kinds of SetMemory.
const (
	Framebuffer = "framebuffer"
	BAR1        = "bar1"
)

// SetMemory records a GPU's latest reading of one kind of memory
// (Framebuffer, BAR1): bytes used and free.
func (m *Metrics) SetMemory(gpu int, kind string, used, free uint64) {
	m.state.mu.Lock()
	m.state.memory[memKey{gpu, kind}] = memReading{used, free}
	m.state.mu.Unlock()
}

// SetRecording records whether the recorder is recording, and when it is
// not, the reason it stopped (the stop record's: disk-full, write-error,
// signal, ...).
func (m *Metrics) SetRecording(on bool, reason string) {
	m.state.mu.Lock()
	m.state.recording, m.state.stopReason = on, reason
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

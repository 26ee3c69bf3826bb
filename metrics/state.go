package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retrivium/forensic/store"
)

// stateCollector turns what the recorder last reported into metrics when
// /metrics is scraped: updating it is a copy under a lock.
type stateCollector struct {
	mu          sync.Mutex
	stats       store.Stats
	updated     time.Time
	lastFailure int64 // Unix nanoseconds; 0 before the first
	libraries   int
	processes   int
	flight      flightState
	memory      map[memKey]memReading
	gpus        map[int]GPU
	recording   bool
	stopReason  string

	scalars []scalar
	lost    *prometheus.Desc
	lastFail,
	lastUpdate,
	build *prometheus.Desc
	memDescs   [4]*prometheus.Desc // used, free of framebuffer; used, free of BAR1
	recordingD *prometheus.Desc
	stoppedD   *prometheus.Desc
	dropped    []droppedMetric
	ranges     *prometheus.Desc
}

// memKey is one GPU's kind of memory.
type memKey struct {
	gpu  int
	kind string
}

// memReading is the latest reading of one memory.
type memReading struct{ used, free uint64 }

// flightState is the flight index as the metrics show it.
type flightState struct {
	set             bool
	maxBytes, bytes int64
	segments        int
	dropped         map[string]*droppedSum // by reason
}

// droppedSum adds up the dropped ranges of one reason.
type droppedSum struct {
	ranges                    int
	segments, calls, failures uint64
	bytes                     int64
}

// scalar is one metric with one value read from the state.
type scalar struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(*stateCollector) float64
	// flight: only shown for a flight recording.
	flight bool
}

// droppedMetric is one of the dropped_*_total counters, by reason.
type droppedMetric struct {
	desc  *prometheus.Desc
	value func(*droppedSum) float64
}

// lostReasons are the values of forensic_calls_lost_total's reason label,
// with the counter each reads.
var lostReasons = []struct {
	reason string
	value  func(*store.Stats) uint64
}{
	{"ring_buffer_full", func(s *store.Stats) uint64 { return s.LostCalls }},
	{"in_flight_table_full", func(s *store.Stats) uint64 { return s.LostInflight }},
	{"too_deep", func(s *store.Stats) uint64 { return s.TooDeep }},
}

func counter(name, help string, v func(*store.Stats) uint64) scalar {
	return scalar{desc: prometheus.NewDesc(name, help, nil, nil), kind: prometheus.CounterValue,
		value: func(c *stateCollector) float64 { return float64(v(&c.stats)) }}
}

func gauge(name, help string, flight bool, v func(*stateCollector) float64) scalar {
	return scalar{desc: prometheus.NewDesc(name, help, nil, nil), kind: prometheus.GaugeValue, value: v, flight: flight}
}

func newStateCollector(o Options) *stateCollector {
	gpu := []string{"gpu", "uuid", "model"}
	mem := func(name, what string) *prometheus.Desc {
		return prometheus.NewDesc(name, what+" at the latest NVML sample (bytes; the whole GPU, MIG instances not apart), by GPU (NVML index), UUID and model.", gpu, nil)
	}
	gpus := map[int]GPU{}
	for _, g := range o.GPUs {
		gpus[g.Index] = g
	}
	modified := "false"
	if o.Modified {
		modified = "true"
	}
	c := &stateCollector{
		memory:    map[memKey]memReading{},
		gpus:      gpus,
		recording: true,
		memDescs: [4]*prometheus.Desc{
			mem("forensic_gpu_framebuffer_used_bytes", "Framebuffer (device memory) used"),
			mem("forensic_gpu_framebuffer_free_bytes", "Framebuffer (device memory) free"),
			mem("forensic_gpu_bar1_used_bytes", "BAR1 aperture used"),
			mem("forensic_gpu_bar1_free_bytes", "BAR1 aperture free"),
		},
		recordingD: prometheus.NewDesc("forensic_recording",
			"1 while the recorder records; 0 once it stopped (forensic_recording_stopped_info says why).", nil, nil),
		stoppedD: prometheus.NewDesc("forensic_recording_stopped_info",
			"Why recording stopped (the stop record's reason: disk-full, write-error, signal, stopped, error, ...); always 1, absent while recording.",
			[]string{"reason"}, nil),
		lost: prometheus.NewDesc("forensic_calls_lost_total",
			"Tracked calls the recorder could not record, by reason: ring_buffer_full (the ring buffer had no room), in_flight_table_full (no room to hold the call's arguments until it returned), too_deep (nested deeper than the probes follow).",
			[]string{"reason"}, nil),
		lastFail: prometheus.NewDesc("forensic_last_failure_timestamp_seconds",
			"Wall-clock time of the latest failed call recorded (Unix seconds); absent before the first.", nil, nil),
		lastUpdate: prometheus.NewDesc("forensic_last_update_timestamp_seconds",
			"When the recorder last reported its counters (Unix seconds); absent before the first report.", nil, nil),
		build: prometheus.NewDesc("forensic_build_info",
			"The recorder's build: version (the module's, from the build's VCS stamp), revision (the commit) and modified (built from a tree with changes); always 1.", nil,
			prometheus.Labels{"version": o.Version, "revision": o.Revision, "modified": modified}),
		ranges: prometheus.NewDesc("forensic_flight_dropped_ranges",
			"Stretches of the flight recording deleted, as the index lists them now, by reason (retention: routine history; window-cut: part of a failure window, the size bound won). Adjacent stretches merge, so this can fall.",
			[]string{"reason"}, nil),
	}
	c.scalars = stateScalars()
	c.dropped = droppedMetrics()
	return c
}

// stateScalars are the metrics with one value each.
func stateScalars() []scalar {
	return []scalar{
		counter("forensic_calls_total", "Completed tracked CUDA driver calls the probes saw (recorded or lost).",
			func(s *store.Stats) uint64 { return s.Calls }),
		counter("forensic_events_stored_total", "Call events written to the recording.",
			func(s *store.Stats) uint64 { return s.Events }),
		counter("forensic_process_events_lost_total", "Process events (fork, exec, exit) the recorder could not record.",
			func(s *store.Stats) uint64 { return s.LostProc }),
		counter("forensic_untracked_processes_total", "Processes the probes' table of tracked processes had no room for.",
			func(s *store.Stats) uint64 { return s.Untracked }),
		counter("forensic_unmatched_returns_total", "Returns of tracked calls whose entry was not seen.",
			func(s *store.Stats) uint64 { return s.Unmatched }),
		counter("forensic_stack_errors_total", "Stacks of failed calls that could not be captured.",
			func(s *store.Stats) uint64 { return s.StackErrors }),
		counter("forensic_decode_errors_total", "Ring-buffer records the recorder could not decode.",
			func(s *store.Stats) uint64 { return s.DecodeErrors }),
		counter("forensic_frozen_calls_total", "Failed calls at which the process was held until its GPUs were sampled.",
			func(s *store.Stats) uint64 { return s.Frozen }),
		counter("forensic_samples_total", "NVML samples written to the recording.",
			func(s *store.Stats) uint64 { return s.Samples }),
		counter("forensic_samples_thinned_total", "Periodic NVML samples left out by thinning.",
			func(s *store.Stats) uint64 { return s.SamplesThinned }),
		counter("forensic_kernel_log_lines_total", "NVRM and Xid kernel log lines recorded.",
			func(s *store.Stats) uint64 { return s.KernelLines }),
		gauge("forensic_attached_libraries", "libcuda files the probes are attached to.", false,
			func(c *stateCollector) float64 { return float64(c.libraries) }),
		gauge("forensic_processes_tracked", "Processes the recorder is tracking.", false,
			func(c *stateCollector) float64 { return float64(c.processes) }),
		gauge("forensic_flight_segments_bytes", "Disk used by the flight recording's segments, the live one included (allocated bytes).", true,
			func(c *stateCollector) float64 { return float64(c.flight.bytes) }),
		gauge("forensic_flight_max_bytes", "The bound on the segments' disk use (--max-size).", true,
			func(c *stateCollector) float64 { return float64(c.flight.maxBytes) }),
		gauge("forensic_flight_segments", "Segments on disk, the live one included.", true,
			func(c *stateCollector) float64 { return float64(c.flight.segments) }),
	}
}

// droppedMetrics are the counters of what retention deleted, by reason.
func droppedMetrics() []droppedMetric {
	d := func(name, help string, v func(*droppedSum) float64) droppedMetric {
		return droppedMetric{prometheus.NewDesc(name, help+" By reason: retention (routine history) or window-cut (part of a failure window; the size bound won).",
			[]string{"reason"}, nil), v}
	}
	return []droppedMetric{
		d("forensic_flight_dropped_segments_total", "Segments of the flight recording deleted.",
			func(s *droppedSum) float64 { return float64(s.segments) }),
		d("forensic_flight_dropped_calls_total", "Call events in the deleted segments.",
			func(s *droppedSum) float64 { return float64(s.calls) }),
		d("forensic_flight_dropped_failures_total", "Failed calls in the deleted segments.",
			func(s *droppedSum) float64 { return float64(s.failures) }),
		d("forensic_flight_dropped_bytes_total", "Bytes of the deleted segments.",
			func(s *droppedSum) float64 { return float64(s.bytes) }),
	}
}

// dropReasons are the reasons retention deletes for, each always shown.
var dropReasons = []string{store.GapRetention, store.GapWindowCut}

// Describe sends every descriptor.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, s := range c.scalars {
		ch <- s.desc
	}
	for _, d := range c.dropped {
		ch <- d.desc
	}
	ch <- c.lost
	ch <- c.lastFail
	ch <- c.lastUpdate
	ch <- c.build
	ch <- c.ranges
	for _, d := range c.memDescs {
		ch <- d
	}
	ch <- c.recordingD
	ch <- c.stoppedD
}

// Collect sends the metrics of the state last reported.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.scalars {
		if !s.flight || c.flight.set {
			ch <- prometheus.MustNewConstMetric(s.desc, s.kind, s.value(c))
		}
	}
	for _, l := range lostReasons {
		ch <- prometheus.MustNewConstMetric(c.lost, prometheus.CounterValue, float64(l.value(&c.stats)), l.reason)
	}
	if c.lastFailure != 0 {
		ch <- prometheus.MustNewConstMetric(c.lastFail, prometheus.GaugeValue, float64(c.lastFailure)/1e9)
	}
	if !c.updated.IsZero() {
		ch <- prometheus.MustNewConstMetric(c.lastUpdate, prometheus.GaugeValue, float64(c.updated.UnixNano())/1e9)
	}
	ch <- prometheus.MustNewConstMetric(c.build, prometheus.GaugeValue, 1)
	c.collectMemory(ch)
	on := 0.0
	if c.recording {
		on = 1
	} else {
		ch <- prometheus.MustNewConstMetric(c.stoppedD, prometheus.GaugeValue, 1, c.stopReason)
	}
	ch <- prometheus.MustNewConstMetric(c.recordingD, prometheus.GaugeValue, on)
	if c.flight.set {
		for _, reason := range dropReasons {
			sum := c.flight.dropped[reason]
			if sum == nil {
				sum = &droppedSum{}
			}
			for _, d := range c.dropped {
				ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, d.value(sum), reason)
			}
			ch <- prometheus.MustNewConstMetric(c.ranges, prometheus.GaugeValue, float64(sum.ranges), reason)
		}
	}
}

// failedAt notes a failed call at wall time at, keeping the latest.
func (c *stateCollector) failedAt(at time.Time) {
	ns := at.UnixNano()
	c.mu.Lock()
	c.lastFailure = max(c.lastFailure, ns)
	c.mu.Unlock()
}

// collectMemory sends the GPUs' memory gauges (under mu).
func (c *stateCollector) collectMemory(ch chan<- prometheus.Metric) {
	for k, r := range c.memory {
		g := c.gpus[k.gpu]
		i := 0
		if k.kind == BAR1 {
			i = 2
		}
		labels := []string{strconv.Itoa(k.gpu), g.UUID, g.Model}
		ch <- prometheus.MustNewConstMetric(c.memDescs[i], prometheus.GaugeValue, float64(r.used), labels...)
		ch <- prometheus.MustNewConstMetric(c.memDescs[i+1], prometheus.GaugeValue, float64(r.free), labels...)
	}
}

package recorder

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/eventlog"
	"github.com/retrivium/forensic/internal/buildinfo"
	"github.com/retrivium/forensic/metrics"
	"github.com/retrivium/forensic/store"
)

// metricsStale is how long /healthz waits for a counter reading (about
// one a second) before it reports the recorder stuck.
const metricsStale = time.Minute

// listenMetrics opens the metrics address (a port in use fails the
// recording at once) and connects the metrics to what updates them: the
// event reader at each failed call, the sampler at each round, the kernel
// log at each Xid, the holder and the freezer at each hold, the writer at
// each counter reading and when it stops, and the flight recording at
// each change of its index.
func (s *Session) listenMetrics() error {
	if s.cfg.MetricsAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", s.cfg.MetricsAddr)
	if err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	m := metrics.New(metricsOptions(s.h.gpus, s.cfg.Build))
	s.metrics, s.metricsLn = m, ln
	s.onRelease(func() { ln.Close() })
	s.wr.stats = func(st store.Stats) {
		m.SetStats(st)
		m.SetWatching(s.att.attachedCount(), int(s.h.tracked.Load()))
	}
	s.wr.stopped = func(err error) { m.SetRecording(false, writeErrorReason(err)) }
	s.smp.onRound = func(round []store.Sample) {
		sampleMetricsTo(m.SetMemory, round)
		m.SawSamples(round)
	}
	s.xid = m.Xid
	s.hl.onCont = func(released bool) { m.Held(metrics.HoldFirstMapping, released) }
	s.fz.onCont = func(released bool) { m.Held(metrics.HoldFailure, released) }
	if g := s.wr.seg; g != nil {
		g.index = m.SetFlight
		g.told()
	}
	return nil
}

// metricsOptions names what the metrics count from the start: every
// symbol of the table by class, on every GPU of the inventory.
func metricsOptions(gpus []gpuID, b buildinfo.Info) metrics.Options {
	o := metrics.Options{Version: b.Version, Revision: b.Revision, Modified: b.Modified}
	for _, sym := range cuda.Symbols {
		o.Symbols = append(o.Symbols, metrics.Symbol{Class: sym.Op.String(), Name: sym.Name})
	}
	for _, g := range gpus {
		o.GPUs = append(o.GPUs, metrics.GPU{Index: g.Index, UUID: g.UUID, Model: g.Name})
	}
	return o
}

// metricsFailure is a failed call as the metrics count it.
func metricsFailure(f *eventlog.Failure) metrics.Failure {
	return metrics.Failure{Class: f.Class, Symbol: f.Symbol, Result: f.Result, GPU: f.GPU,
		Namespace: f.Namespace, Pod: f.Pod, At: f.Time}
}

// sampleMetricsTo sets the GPUs' memory gauges (metrics.SetMemory) from
// a round's device-wide framebuffer and BAR1 readings.
func sampleMetricsTo(set func(gpu int, kind string, used, free uint64), round []store.Sample) {
	for i := range round {
		smp := &round[i]
		if smp.Used == nil || smp.Free == nil {
			continue
		}
		switch {
		case smp.Kind == store.KindFramebuffer && smp.Scope == store.ScopeDevice:
			set(smp.GPU.Index, metrics.Framebuffer, *smp.Used, *smp.Free)
		case smp.Kind == store.KindBAR1:
			set(smp.GPU.Index, metrics.BAR1, *smp.Used, *smp.Free)
		}
	}
}

// writeErrorReason is the stop reason of a write error, as the stop
// record says it.
func writeErrorReason(err error) string {
	if errors.Is(err, store.ErrDiskFull) {
		return "disk-full"
	}
	return "write-error"
}

// serveMetrics serves the metrics until the recording stops.
func (s *Session) serveMetrics() {
	if s.metrics == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.metrics.Serve(ctx, s.metricsLn, metrics.ServeOptions{Stale: metricsStale}); err != nil {
			s.cfg.Log.Error(err.Error())
		}
	}()
	s.onRelease(func() { cancel(); <-done })
}

// kmsgLine queues a kernel log line, counting an Xid in the metrics.
func (s *Session) kmsgLine(l store.KernelLog) {
	if l.Xid != nil && s.xid != nil {
		s.xid(*l.Xid)
	}
	s.q.addKmsg(l)
}

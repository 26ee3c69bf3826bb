package recorder

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/metrics"
	"github.com/retrivium/forensic/store"
)

// metricsStale is how long /healthz waits for a counter reading (about
// one a second) before it reports the recorder stuck.
const metricsStale = time.Minute

// listenMetrics opens the metrics address (a port in use fails the
// recording at once) and connects the metrics to what updates them: the
// event reader at each failed call, the writer at each counter reading,
// and the flight recording at each change of its index.
func (s *Session) listenMetrics() error {
	if s.cfg.MetricsAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", s.cfg.MetricsAddr)
	if err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	m := metrics.New(Version)
	s.metrics, s.metricsLn = m, ln
	s.onRelease(func() { ln.Close() })
	start, wall := s.run.ClockStart, s.run.WallStart
	s.h.failedCall = func(e *store.Event, sym *cuda.Symbol, gpu int) {
		m.CallFailed(sym.Name, cuda.LookupResult(e.Result).Name, gpu, wall.Add(time.Duration(e.End-start)))
	}
	s.wr.stats = func(st store.Stats) {
		m.SetStats(st)
		m.SetWatching(s.att.attachedCount(), int(s.h.tracked.Load()))
	}
	s.smp.saw = m.SawSamples
	if g := s.wr.seg; g != nil {
		g.index = m.SetFlight
		g.told()
	}
	return nil
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
			fmt.Fprintf(s.cfg.Log, "forensic: %v\n", err)
		}
	}()
	s.onRelease(func() { cancel(); <-done })
}

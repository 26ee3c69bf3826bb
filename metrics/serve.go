package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ServeOptions adjust Serve.
type ServeOptions struct {
	// Stale, when set, makes /healthz answer 503 once the recorder has not
	// reported its counters (SetStats) for this long: a recorder whose loop
	// is stuck is restarted by its supervisor. Zero: /healthz answers 200
	// while the server runs.
	Stale time.Duration
}

// shutdownWait bounds how long Serve waits for scrapes in progress when
// its context ends.
const shutdownWait = 2 * time.Second

// ListenAndServe listens on addr (--metrics-addr, e.g. ":9401") and serves
// until ctx ends (see Serve).
func (m *Metrics) ListenAndServe(ctx context.Context, addr string, opts ServeOptions) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return m.Serve(ctx, ln, opts)
}

// Serve answers /metrics (the Prometheus text or OpenMetrics exposition of
// the registry) and /healthz on ln until ctx ends, then shuts the server
// down and returns nil; it closes ln.
func (m *Metrics) Serve(ctx context.Context, ln net.Listener, opts ServeOptions) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, EnableOpenMetrics: true}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if last := m.Updated(); opts.Stale > 0 && !last.IsZero() && time.Since(last) > opts.Stale {
			http.Error(w, fmt.Sprintf("stale: no report from the recorder for %s", time.Since(last).Round(time.Second)),
				http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("metrics: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownWait)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

package metrics

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retrivium/forensic/store"
)

// leastFree is forensic_least_free_bytes: the least free memory any NVML
// reading of the recording saw, per GPU and view (as read; forensic
// analyze corrects it by the traced calls between readings).
type leastFree struct {
	mu    sync.Mutex
	gauge *prometheus.GaugeVec
	least map[leastKey]uint64
}

type leastKey struct {
	gpu  int
	view string
}

func newLeastFree(reg *prometheus.Registry) *leastFree {
	l := &leastFree{least: map[leastKey]uint64{}, gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "forensic_least_free_bytes",
		Help: "Least free memory any NVML sample of this recording read, by GPU (NVML index) and view (framebuffer or bar1, never added), as read.",
	}, []string{"gpu", "view"})}
	reg.MustRegister(l.gauge)
	return l
}

// SawSamples lowers forensic_least_free_bytes to each usable whole-GPU
// framebuffer or BAR1 reading of a round that read less free.
func (m *Metrics) SawSamples(round []store.Sample) {
	l := m.least
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range round {
		smp := &round[i]
		view := map[string]string{store.KindFramebuffer: "framebuffer", store.KindBAR1: "bar1"}[smp.Kind]
		if view == "" || !smp.Usable() || smp.Free == nil || smp.Scope == store.ScopeMIG {
			continue
		}
		k := leastKey{smp.GPU.Index, view}
		if v, ok := l.least[k]; !ok || *smp.Free < v {
			l.least[k] = *smp.Free
			l.gauge.WithLabelValues(strconv.Itoa(k.gpu), view).Set(float64(*smp.Free))
		}
	}
}

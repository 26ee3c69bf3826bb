package metrics

import (
	"testing"

	"github.com/retrivium/forensic/store"
)

// reading is a usable sample of a GPU view reading free bytes.
func reading(gpu int, kind, scope string, free uint64) store.Sample {
	f := free
	return store.Sample{GPU: store.GPURef{Index: gpu}, Kind: kind, Scope: scope, Status: store.Status{Name: "NVML_SUCCESS"}, Free: &f}
}

func TestLeastFreeGaugeKeepsTheLeastReadingPerGPUAndView(t *testing.T) {
	m := New(Options{Version: "test"})
	m.SawSamples([]store.Sample{reading(0, store.KindFramebuffer, store.ScopeDevice, 900), reading(0, store.KindBAR1, store.ScopeAperture, 50)})
	m.SawSamples([]store.Sample{reading(0, store.KindFramebuffer, store.ScopeDevice, 300), reading(0, store.KindBAR1, store.ScopeAperture, 70),
		reading(1, store.KindFramebuffer, store.ScopeDevice, 700)})
	m.SawSamples([]store.Sample{reading(0, store.KindFramebuffer, store.ScopeDevice, 800),
		reading(0, store.KindFramebuffer, store.ScopeMIG, 10), // an instance's framebuffer is not the GPU's
		{GPU: store.GPURef{Index: 1}, Kind: store.KindFramebuffer, Scope: store.ScopeDevice, Status: store.Status{Code: 999, Name: "NVML_ERROR_UNKNOWN"}}})
	fams := scrape(t, serve(t, m, ServeOptions{}))
	fam := fams["forensic_least_free_bytes"]
	if fam == nil {
		t.Fatal("no forensic_least_free_bytes")
	}
	want := map[[2]string]float64{{"0", "framebuffer"}: 300, {"0", "bar1"}: 50, {"1", "framebuffer"}: 700}
	got := map[[2]string]float64{}
	for _, mt := range fam.Metric {
		var k [2]string
		for _, l := range mt.Label {
			switch l.GetName() {
			case "gpu":
				k[0] = l.GetValue()
			case "view":
				k[1] = l.GetValue()
			}
		}
		got[k] = mt.GetGauge().GetValue()
	}
	if len(got) != len(want) {
		t.Fatalf("series %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%v: %v, want %v", k, got[k], v)
		}
	}
}

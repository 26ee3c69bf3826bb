package analyze

import (
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

// Each sampled field's row names its view from the field's table row,
// and a field without values says why: a struct without the field is
// "not supported" with its reason, an NVML status is reported as
// returned, never a zero.
func TestViewRowsSupportAndView(t *testing.T) {
	v1 := memSample(store.KindFramebuffer, -1, tClock+200*msNS, 16*gib, 0, 8*gib)
	v1.API, v1.Struct = "nvmlDeviceGetMemoryInfo", "nvmlMemory_t"
	refused := store.Sample{GPU: store.GPURef{Index: 0}, Kind: store.KindBAR1, Scope: store.ScopeAperture,
		API: "nvmlDeviceGetBAR1MemoryInfo", Status: store.Status{Code: 3, Name: "NVML_ERROR_NOT_SUPPORTED"},
		Start: tClock + 400*msNS, End: tClock + 420*msNS}
	events := []store.Event{callAt(0, tClock+300*msNS, 2, cuda.Fields{Has: cuda.FieldSize, Size: gib})}
	rep := capRun{inv: gpuInventory(1, 0), devices: []store.DeviceMap{{GPU: 0, Method: "single-gpu"}},
		syms: []string{"cuMemAlloc_v2"}, events: events, samples: []store.Sample{v1, refused}}.analyze(t)
	tests := []struct {
		field, view, support string
	}{
		{"framebuffer free", "framebuffer", "supported"},
		{"framebuffer reserved", "framebuffer", "not supported: not reported by nvmlMemory_t (v1 has no reserved field)"},
		{"BAR1 free", "bar1", "not supported: nvmlDeviceGetBAR1MemoryInfo returned NVML_ERROR_NOT_SUPPORTED"},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			for _, r := range rep.MemoryViews {
				if r.Field == tt.field && r.PID == 0 {
					if r.View != tt.view || r.Support != tt.support {
						t.Errorf("view %q support %q, want %q %q", r.View, r.Support, tt.view, tt.support)
					}
					return
				}
			}
			t.Errorf("no row for %s", tt.field)
		})
	}
}

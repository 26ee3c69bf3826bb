package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/store"
)

// The inventory names NVML's modes instead of printing their numbers.
func TestInventoryNames(t *testing.T) {
	num := func(v int, api string) store.Obs[int] {
		return store.Obs[int]{Value: &v, API: api, Status: store.Status{Name: "NVML_SUCCESS"}}
	}
	missing := store.Obs[int]{API: "nvmlDeviceGetMigMode", Status: store.Status{Code: 3, Name: "NVML_ERROR_NOT_SUPPORTED"}}
	tests := []struct {
		name        string
		mig, pers   store.Obs[int]
		compute     store.Obs[int]
		cuda        store.Obs[int]
		want, want2 string
	}{
		{"usual", num(0, "mig"), num(1, "p"), num(0, "c"), num(12020, "cu"),
			"MIG mode disabled, persistence mode enabled, compute mode default", "CUDA driver API 12.2 (12020)"},
		{"exclusive", num(1, "mig"), num(0, "p"), num(3, "c"), num(11080, "cu"),
			"MIG mode enabled, persistence mode disabled, compute mode exclusive process", "CUDA driver API 11.8 (11080)"},
		{"prohibited", num(0, "mig"), num(0, "p"), num(2, "c"), num(12040, "cu"),
			"compute mode prohibited", "12.4"},
		{"unknown values", num(7, "mig"), num(1, "p"), num(9, "c"), num(0, "cu"),
			"MIG mode unknown value 7, persistence mode enabled, compute mode unknown value 9", "CUDA driver API 0"},
		{"not supported", missing, num(1, "p"), num(1, "c"), num(12020, "cu"),
			"MIG mode unknown (NVML_ERROR_NOT_SUPPORTED from nvmlDeviceGetMigMode), persistence mode enabled, compute mode exclusive thread", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := store.Inventory{Library: "libnvidia-ml.so.1", Init: store.Status{Name: "NVML_SUCCESS"}, CUDADriver: tt.cuda,
				GPUs: []store.GPUInventory{{MIGMode: tt.mig, Persistence: tt.pers, ComputeMode: tt.compute}}}
			var b strings.Builder
			if err := WriteInventoryText(&b, inv); err != nil {
				t.Fatal(err)
			}
			for _, w := range []string{tt.want, tt.want2} {
				if !strings.Contains(b.String(), w) {
					t.Errorf("no %q in\n%s", w, b.String())
				}
			}
		})
	}
}

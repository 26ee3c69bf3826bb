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
			words := strings.Join(strings.Fields(b.String()), " ") // lines may wrap
			for _, w := range []string{tt.want, tt.want2} {
				if !strings.Contains(words, w) {
					t.Errorf("no %q in\n%s", w, b.String())
				}
			}
		})
	}
}

// Every line of the inventory fits 80 columns, the long values of a real
// machine included; only a word longer than a line (a path) overhangs.
func TestInventoryWidth(t *testing.T) {
	str := func(v, api string) store.Obs[string] {
		return store.Obs[string]{Value: &v, API: api, Status: store.Status{Name: "NVML_SUCCESS"}}
	}
	size := func(v uint64, api string) store.Obs[uint64] {
		return store.Obs[uint64]{Value: &v, API: api, Status: store.Status{Name: "NVML_SUCCESS"}}
	}
	unsupported := store.Obs[int]{API: "nvmlDeviceGetComputeMode", Status: store.Status{Code: 3, Name: "NVML_ERROR_NOT_SUPPORTED"}}
	path := "/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.535.183.01.a.path.longer.than.a.line"
	inv := store.Inventory{Library: path, Init: store.Status{Name: "NVML_SUCCESS"},
		GPUs: []store.GPUInventory{{Name: str("NVIDIA H100 80GB HBM3", "n"), UUID: str("GPU-b0ae225f-1d3a-d2cc-f557-bca7789e4f53", "u"),
			PCIBusID: str("00000000:41:00.0", "p"), FBTotal: size(80<<30, "nvmlDeviceGetMemoryInfo_v2"),
			FBReserved: size(512<<20, "nvmlDeviceGetMemoryInfo_v2"), BAR1Total: size(128<<30, "nvmlDeviceGetBAR1MemoryInfo"),
			MIGMode: unsupported, Persistence: unsupported, ComputeMode: unsupported,
			BARsSource: "sysfs: open /sys/bus/pci/devices/0000:41:00.0/resource: no such file or directory",
			MIG:        []store.MIGInventory{{Index: 3, UUID: str("MIG-062e3900-6098-0dd5-12c3-0af4aa2ba27d", "m"), FBTotal: size(10<<30, "nvmlDeviceGetMemoryInfo")}}}}}
	var b strings.Builder
	if err := WriteInventoryText(&b, inv); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		if n := len([]rune(l)); n > 80 && !strings.Contains(l, path) {
			t.Errorf("%d columns: %q", n, l)
		}
	}
	for _, want := range []string{"BAR1 aperture 128.00 GiB", "not capacity", "MIG 3 MIG-062e3900", "framebuffer 10.00 GiB"} {
		if !strings.Contains(strings.Join(strings.Fields(b.String()), " "), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
}

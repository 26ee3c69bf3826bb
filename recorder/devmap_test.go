package recorder

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/store"
)

func TestResolveDevice(t *testing.T) {
	same := []gpuID{
		{Index: 0, UUID: "GPU-aaaaaaaa-0000-0000-0000-000000000000", BusID: "00000000:41:00.0", Name: "H100"},
		{Index: 1, UUID: "GPU-bbbbbbbb-0000-0000-0000-000000000000", BusID: "00000000:43:00.0", Name: "H100"},
	}
	mixed := []gpuID{
		{Index: 0, UUID: "GPU-aaaaaaaa-0000-0000-0000-000000000000", BusID: "00000000:41:00.0", Name: "A100"},
		{Index: 1, UUID: "GPU-bbbbbbbb-0000-0000-0000-000000000000", BusID: "00000000:43:00.0", Name: "H100",
			MIG: []string{"MIG-cccccccc-0000-0000-0000-000000000000"}},
	}
	one := same[:1]
	// One GPU split into two MIG instances, and a second, whole GPU.
	migOne := []gpuID{{Index: 0, UUID: "GPU-aaaaaaaa-0000-0000-0000-000000000000", BusID: "00000000:41:00.0", Name: "H100",
		MIGOn: true, MIG: []string{"MIG-11111111-0000-0000-0000-000000000000", "MIG-22222222-0000-0000-0000-000000000000"}}}
	migTwo := append(append([]gpuID(nil), migOne...), same[1])
	// MIG enabled, but its instances could not be listed.
	migUnlisted := []gpuID{{Index: 0, UUID: "GPU-aaaaaaaa-0000-0000-0000-000000000000", Name: "H100", MIGOn: true}}
	tests := []struct {
		name     string
		ord      int32
		uuid     string
		bus      string
		vis      visibility
		gpus     []gpuID
		gpu      int
		method   string
		migIndex int // -1: none
	}{
		{"uuid revealed", 0, "bbbbbbbb-0000-0000-0000-000000000000", "", visibility{}, mixed, 1, "uuid", -1},
		{"mig uuid revealed", 0, "cccccccc-0000-0000-0000-000000000000", "", visibility{}, mixed, 1, "uuid", 0},
		{"pci bus id, 4-digit domain, upper case", 1, "", "0000:43:00.0", visibility{}, mixed, 1, "pci-bus-id", -1},
		{"single gpu", 0, "", "", visibility{}, one, 0, "single-gpu", -1},
		{"same model in order", 1, "", "", visibility{}, same, 1, "order-same-model", -1},
		{"unlike gpus, default order: unknown", 1, "", "", visibility{}, mixed, -1, "unknown", -1},
		{"unlike gpus, PCI order", 1, "", "", visibility{CUDAOrder: "PCI_BUS_ID"}, mixed, 1, "order-pci-bus-id", -1},
		{"visible devices by uuid prefix", 0, "", "", visibility{CUDAVisible: "GPU-bbbb"}, mixed, 1, "visible-devices-uuid", -1},
		{"visible devices by index, same model", 0, "", "", visibility{CUDAVisible: "1"}, same, 1, "visible-devices-index+order-same-model", -1},
		{"visible devices by index, unlike", 0, "", "", visibility{CUDAVisible: "1"}, mixed, -1, "unknown", -1},
		{"ordinal beyond visible devices", 1, "", "", visibility{CUDAVisible: "0"}, same, -1, "unknown", -1},
		{"container sees one gpu", 0, "", "", visibility{NvidiaVisible: "1"}, same, 1, "single-gpu", -1},
		{"container hides all", 0, "", "", visibility{NvidiaVisible: "none"}, same, -1, "unknown", -1},
		{"no gpus", 0, "", "", visibility{}, nil, -1, "unknown", -1},
		// MIG: CUDA's devices are instances; only evidence names one.
		{"mig, one gpu, no evidence: the gpu, not an instance", 0, "", "", visibility{}, migOne, 0, "single-gpu", -1},
		{"mig, one gpu, second instance's ordinal", 1, "", "", visibility{}, migOne, 0, "single-gpu", -1},
		{"mig, ordinal beyond the instances", 2, "", "", visibility{}, migOne, -1, "unknown", -1},
		{"mig, instances not listed", 3, "", "", visibility{}, migUnlisted, 0, "single-gpu", -1},
		{"mig uuid revealed", 1, "22222222-0000-0000-0000-000000000000", "", visibility{}, migOne, 0, "uuid", 1},
		{"mig gpu uuid revealed: not the instance", 0, "aaaaaaaa-0000-0000-0000-000000000000", "", visibility{}, migOne, 0, "uuid", -1},
		{"mig gpu uuid revealed, instance from the environment", 0, "aaaaaaaa-0000-0000-0000-000000000000", "",
			visibility{CUDAVisible: "MIG-2222"}, migOne, 0, "visible-devices-uuid", 1},
		{"mig bus id revealed: not the instance", 0, "", "0000:41:00.0", visibility{}, migOne, 0, "pci-bus-id", -1},
		{"mig, visible devices by MIG uuid", 0, "", "", visibility{CUDAVisible: "MIG-22222222-0000-0000-0000-000000000000"}, migOne, 0, "visible-devices-uuid", 1},
		{"mig, second visible MIG uuid", 1, "", "", visibility{CUDAVisible: "MIG-1111,MIG-2222"}, migOne, 0, "visible-devices-uuid", 1},
		{"mig, old MIG-GPU form: the gpu only", 0, "", "", visibility{CUDAVisible: "MIG-GPU-aaaaaaaa-0000-0000-0000-000000000000/1/0"}, migOne, 0, "visible-devices-uuid", -1},
		{"mig, visible devices by gpu uuid: not the instance", 0, "", "", visibility{CUDAVisible: "GPU-aaaa"}, migOne, 0, "visible-devices-uuid", -1},
		{"mig, visible devices by index, one gpu", 0, "", "", visibility{CUDAVisible: "0"}, migOne, 0, "single-gpu", -1},
		{"mig and a whole gpu, no evidence: unknown", 0, "", "", visibility{}, migTwo, -1, "unknown", -1},
		{"mig and a whole gpu, in PCI order: still unknown", 1, "", "", visibility{CUDAOrder: "PCI_BUS_ID"}, migTwo, -1, "unknown", -1},
		{"mig and a whole gpu, visible by index: unknown", 0, "", "", visibility{CUDAVisible: "1"}, migTwo, -1, "unknown", -1},
		{"mig and a whole gpu, after a whole mig gpu entry: unknown", 1, "", "", visibility{CUDAVisible: "GPU-aaaa,GPU-bbbb"}, migTwo, -1, "unknown", -1},
		{"mig and a whole gpu, the whole one by uuid", 0, "", "", visibility{CUDAVisible: "GPU-bbbb"}, migTwo, 1, "visible-devices-uuid", -1},
		{"mig and a whole gpu, the whole one by bus id", 0, "", "00000000:43:00.0", visibility{}, migTwo, 1, "pci-bus-id", -1},
		{"container sees a mig instance", 0, "", "", visibility{NvidiaVisible: "MIG-2222"}, migTwo, 0, "single-gpu", -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := resolveDevice(tt.ord, tt.uuid, tt.bus, tt.vis, tt.gpus)
			if m.GPU != tt.gpu || m.Method != tt.method {
				t.Fatalf("resolveDevice = GPU %d by %q (%s), want GPU %d by %q", m.GPU, m.Method, m.Why, tt.gpu, tt.method)
			}
			if m.Method == "unknown" && m.Why == "" {
				t.Fatal("unknown without a reason")
			}
			if (m.Why == "") != (m.WhyKind == "") {
				t.Fatalf("reason %q of kind %q: each needs the other", m.Why, m.WhyKind)
			}
			// A device on a GPU with MIG enabled and no instance says why.
			onMIG := false
			for _, g := range tt.gpus {
				onMIG = onMIG || (g.Index == m.GPU && g.MIGOn)
			}
			if onMIG && m.MIG == nil && !strings.Contains(m.Why, "MIG enabled") {
				t.Fatalf("GPU %d has MIG enabled, no instance, and the reason is %q", m.GPU, m.Why)
			}
			if m.MIG != nil && m.Why != "" {
				t.Fatalf("instance %d matched, yet a reason: %q", *m.MIG, m.Why)
			}
			gotMIG := -1
			if m.MIG != nil {
				gotMIG = *m.MIG
			}
			if gotMIG != tt.migIndex {
				t.Fatalf("MIG index %d, want %d", gotMIG, tt.migIndex)
			}
		})
	}
}

func TestUUIDString(t *testing.T) {
	b := []byte{0xb0, 0xae, 0x22, 0x5f, 0x1d, 0x3a, 0xd2, 0xcc, 0xf5, 0x57, 0xbc, 0xa7, 0x78, 0x9e, 0x4f, 0x53}
	if got := uuidString(b); got != "b0ae225f-1d3a-d2cc-f557-bca7789e4f53" {
		t.Fatalf("uuidString = %s", got)
	}
	if uuidString(b[:3]) != "" {
		t.Fatal("short uuid accepted")
	}
}

func TestMoreSpecificUUID(t *testing.T) {
	gpus := []gpuID{{Index: 0, UUID: "GPU-aaaaaaaa-0000-0000-0000-000000000000", MIGOn: true,
		MIG: []string{"MIG-11111111-0000-0000-0000-000000000000"}}}
	tests := []struct{ old, now, want string }{
		{"", "aaaaaaaa-0000-0000-0000-000000000000", "aaaaaaaa-0000-0000-0000-000000000000"},
		// cuDeviceGetUuid_v2, then cuDeviceGetUuid: the instance stays.
		{"11111111-0000-0000-0000-000000000000", "aaaaaaaa-0000-0000-0000-000000000000", "11111111-0000-0000-0000-000000000000"},
		// The other order: the instance replaces the GPU.
		{"aaaaaaaa-0000-0000-0000-000000000000", "11111111-0000-0000-0000-000000000000", "11111111-0000-0000-0000-000000000000"},
		{"bbbbbbbb-0000-0000-0000-000000000000", "aaaaaaaa-0000-0000-0000-000000000000", "aaaaaaaa-0000-0000-0000-000000000000"},
	}
	for _, tt := range tests {
		if got := moreSpecificUUID(tt.old, tt.now, gpus); got != tt.want {
			t.Errorf("moreSpecificUUID(%s, %s) = %s, want %s", tt.old, tt.now, got, tt.want)
		}
	}
}

// Each reason a device's GPU or instance is unknown comes with its kind,
// the value analyze decides from.
func TestResolveDeviceReasonKinds(t *testing.T) {
	same := []gpuID{
		{Index: 0, UUID: "GPU-aaaaaaaa-0000-0000-0000-000000000000", BusID: "00000000:41:00.0", Name: "H100"},
		{Index: 1, UUID: "GPU-bbbbbbbb-0000-0000-0000-000000000000", BusID: "00000000:43:00.0", Name: "H100"},
	}
	mixed := []gpuID{same[0], {Index: 1, UUID: same[1].UUID, BusID: same[1].BusID, Name: "A100"}}
	migOne := []gpuID{{Index: 0, UUID: same[0].UUID, BusID: same[0].BusID, Name: "H100", MIGOn: true,
		MIG: []string{"MIG-11111111-0000-0000-0000-000000000000", "MIG-22222222-0000-0000-0000-000000000000"}}}
	tests := []struct {
		name string
		ord  int32
		vis  visibility
		gpus []gpuID
		want store.DeviceWhy
	}{
		{"no gpus", 0, visibility{}, nil, store.WhyNoGPUs},
		{"container hides all", 0, visibility{NvidiaVisible: "void"}, same, store.WhyContainerVisible},
		{"container names a gpu the host lacks", 0, visibility{NvidiaVisible: "7"}, same, store.WhyContainerVisible},
		{"CUDA_VISIBLE_DEVICES names no gpu", 0, visibility{CUDAVisible: "7"}, same, store.WhyCUDAVisible},
		{"ordinal beyond CUDA_VISIBLE_DEVICES", 1, visibility{CUDAVisible: "0"}, same, store.WhyCUDAVisible},
		{"unlike gpus in CUDA's order", 1, visibility{}, mixed, store.WhyOrder},
		{"ordinal beyond the gpus", 2, visibility{}, same, store.WhyOrder},
		{"mig instance not named", 0, visibility{}, migOne, store.WhyMIGInstance},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := resolveDevice(tt.ord, "", "", tt.vis, tt.gpus)
			if m.WhyKind != tt.want || m.Why == "" {
				t.Errorf("reason %q of kind %q, want kind %q", m.Why, m.WhyKind, tt.want)
			}
		})
	}
}

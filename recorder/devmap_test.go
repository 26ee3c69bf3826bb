package recorder

import "testing"

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

package recorder

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/retrivium/forensic/recorder/sampler"
	"github.com/retrivium/forensic/store"
)

// gpuID is what NVML says about one GPU, for matching CUDA devices to it.
type gpuID struct {
	Index int
	UUID  string // GPU-...
	BusID string // normalized, 00000000:41:00.0
	Name  string
	MIG   []string // MIG instance UUIDs, by MIG index
}

// visibility is the environment that decides which GPUs a process's CUDA
// ordinals name.
type visibility struct {
	CUDAVisible   string // CUDA_VISIBLE_DEVICES
	CUDAOrder     string // CUDA_DEVICE_ORDER
	NvidiaVisible string // NVIDIA_VISIBLE_DEVICES (container runtimes)
}

func visibilityOf(env map[string]string) visibility {
	return visibility{env["CUDA_VISIBLE_DEVICES"], env["CUDA_DEVICE_ORDER"], env["NVIDIA_VISIBLE_DEVICES"]}
}

// uuidString formats cuDeviceGetUuid's 16 bytes as NVML writes UUIDs,
// without the GPU-/MIG- prefix.
func uuidString(b []byte) string {
	if len(b) < 16 {
		return ""
	}
	h := hex.EncodeToString(b[:16])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func stripUUIDPrefix(u string) string {
	u = strings.ToLower(strings.TrimSpace(u))
	for _, p := range []string{"gpu-", "mig-"} {
		u = strings.TrimPrefix(u, p)
	}
	return u
}

// resolveDevice matches a process's CUDA device ordinal to an NVML GPU. It
// prefers identity the process itself revealed (UUID, PCI bus id), then the
// environment, then device order where order is unambiguous, and otherwise
// says unknown and why. It never guesses silently: the method is recorded.
func resolveDevice(ordinal int32, uuid, busID string, vis visibility, gpus []gpuID) store.DeviceMap {
	m := store.DeviceMap{Ordinal: ordinal, UUID: uuid, PCIBusID: busID, GPU: -1}
	if uuid != "" {
		want := stripUUIDPrefix(uuid)
		for _, g := range gpus {
			if stripUUIDPrefix(g.UUID) == want {
				m.GPU, m.Method = g.Index, "uuid"
				return m
			}
			for i, mu := range g.MIG {
				if stripUUIDPrefix(mu) == want {
					idx := i
					m.GPU, m.MIG, m.Method = g.Index, &idx, "uuid"
					return m
				}
			}
		}
	}
	if busID != "" {
		want := sampler.NormalizeBusID(busID)
		for _, g := range gpus {
			if g.BusID == want {
				m.GPU, m.Method = g.Index, "pci-bus-id"
				return m
			}
		}
	}
	// The host GPUs this process can see, in the order CUDA numbers them
	// when ordered by PCI bus (container runtimes restrict the set).
	host, why := visibleHost(vis.NvidiaVisible, gpus)
	if host == nil {
		m.Method, m.Why = "unknown", why
		return m
	}
	if vis.CUDAVisible != "" {
		entries := splitList(vis.CUDAVisible)
		if int(ordinal) >= len(entries) || ordinal < 0 {
			m.Method, m.Why = "unknown", fmt.Sprintf("ordinal %d beyond CUDA_VISIBLE_DEVICES=%q", ordinal, vis.CUDAVisible)
			return m
		}
		e := entries[ordinal]
		if g, ok := matchUUIDPrefix(e, host); ok {
			m.GPU, m.Method = g.Index, "visible-devices-uuid"
			return m
		}
		n, err := strconv.Atoi(e)
		if err != nil || n < 0 || n >= len(host) {
			m.Method, m.Why = "unknown", fmt.Sprintf("CUDA_VISIBLE_DEVICES entry %q matches no GPU", e)
			return m
		}
		if g, method, ok := byOrder(n, vis.CUDAOrder, host); ok {
			m.GPU, m.Method = g.Index, "visible-devices-index+"+method
			return m
		}
		m.Method, m.Why = "unknown", "CUDA_VISIBLE_DEVICES uses indices and CUDA's default order (fastest first) differs from NVML's for unlike GPUs"
		return m
	}
	if ordinal < 0 || int(ordinal) >= len(host) {
		m.Method, m.Why = "unknown", fmt.Sprintf("ordinal %d but %d GPUs visible", ordinal, len(host))
		return m
	}
	if len(host) == 1 {
		m.GPU, m.Method = host[0].Index, "single-gpu"
		return m
	}
	if g, method, ok := byOrder(int(ordinal), vis.CUDAOrder, host); ok {
		m.GPU, m.Method = g.Index, method
		return m
	}
	m.Method, m.Why = "unknown", "several unlike GPUs and CUDA's default order (fastest first) is not NVML's; the process revealed no UUID or PCI bus id"
	return m
}

// byOrder maps position n in CUDA's enumeration to a GPU: exact under
// CUDA_DEVICE_ORDER=PCI_BUS_ID (NVML enumerates by PCI bus too); under the
// default fastest-first order only when all GPUs are the same model, where
// CUDA breaks the tie by PCI bus id.
func byOrder(n int, order string, host []gpuID) (gpuID, string, bool) {
	if strings.EqualFold(order, "PCI_BUS_ID") {
		return host[n], "order-pci-bus-id", true
	}
	for _, g := range host[1:] {
		if g.Name != host[0].Name || g.Name == "" {
			return gpuID{}, "", false
		}
	}
	return host[n], "order-same-model", true
}

func splitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// matchUUIDPrefix matches a GPU-... entry, which CUDA accepts abbreviated
// to any unique prefix.
func matchUUIDPrefix(e string, gpus []gpuID) (gpuID, bool) {
	l := strings.ToLower(e)
	if !strings.HasPrefix(l, "gpu-") && !strings.HasPrefix(l, "mig-") {
		return gpuID{}, false
	}
	var found []gpuID
	for _, g := range gpus {
		if strings.HasPrefix(strings.ToLower(g.UUID), l) {
			found = append(found, g)
		}
	}
	if len(found) == 1 {
		return found[0], true
	}
	return gpuID{}, false
}

// visibleHost applies NVIDIA_VISIBLE_DEVICES (host indices or UUIDs) to the
// NVML GPUs, which NVML lists in PCI bus order.
func visibleHost(nv string, gpus []gpuID) ([]gpuID, string) {
	if len(gpus) == 0 {
		return nil, "NVML listed no GPUs"
	}
	switch strings.ToLower(strings.TrimSpace(nv)) {
	case "", "all":
		return gpus, ""
	case "none", "void":
		return nil, "NVIDIA_VISIBLE_DEVICES=" + nv + " hides every GPU"
	}
	var out []gpuID
	for _, e := range splitList(nv) {
		if g, ok := matchUUIDPrefix(e, gpus); ok {
			out = append(out, g)
			continue
		}
		n, err := strconv.Atoi(e)
		if err != nil || n < 0 || n >= len(gpus) {
			return nil, fmt.Sprintf("NVIDIA_VISIBLE_DEVICES entry %q matches no GPU", e)
		}
		out = append(out, gpus[n])
	}
	// CUDA inside the container enumerates what it sees; keep bus order.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].BusID < out[j-1].BusID; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out, ""
}

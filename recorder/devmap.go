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
	MIGOn bool     // MIG mode enabled: CUDA's devices are its instances
	MIG   []string // MIG instance UUIDs, by MIG index
}

// migEnabled is NVML_DEVICE_MIG_ENABLE, the MIG mode of a GPU whose CUDA
// devices are its MIG instances.
const migEnabled = 1

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

// moreSpecificUUID is the UUID to keep for a CUDA device that revealed
// old, then now: a MIG instance's UUID (cuDeviceGetUuid_v2) is not
// replaced by its GPU's (cuDeviceGetUuid), which names no instance.
func moreSpecificUUID(old, now string, gpus []gpuID) string {
	if old == "" {
		return now
	}
	o, n := stripUUIDPrefix(old), stripUUIDPrefix(now)
	for _, g := range gpus {
		if stripUUIDPrefix(g.UUID) != n {
			continue
		}
		for _, mu := range g.MIG {
			if mu != "" && stripUUIDPrefix(mu) == o {
				return old
			}
		}
	}
	return now
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
//
// Under MIG, CUDA's devices are MIG instances, not GPUs: a device on a GPU
// with MIG enabled is matched to an instance only on evidence that names
// the instance (a MIG UUID from cuDeviceGetUuid_v2, or a MIG-<uuid> entry
// of CUDA_VISIBLE_DEVICES); otherwise the instance stays unknown (MIG nil,
// Why says so), and neither order nor "the only GPU" picks one.
func resolveDevice(ordinal int32, uuid, busID string, vis visibility, gpus []gpuID) store.DeviceMap {
	m := store.DeviceMap{Ordinal: ordinal, UUID: uuid, PCIBusID: busID, GPU: -1}
	id, ok := byIdentity(m, uuid, busID, gpus)
	if ok && (id.MIG != nil || id.Why == "") {
		return id
	}
	// The host GPUs this process can see, in the order CUDA numbers them
	// when ordered by PCI bus (container runtimes restrict the set).
	host, why, kind := visibleHost(vis.NvidiaVisible, gpus)
	env := m
	switch {
	case host == nil:
		env.Method, env.Why, env.WhyKind = "unknown", why, kind
	case vis.CUDAVisible != "":
		env = byVisible(m, vis, host)
	default:
		env = byOrdinal(m, vis.CUDAOrder, host)
	}
	if !ok {
		return env
	}
	// The process named its GPU but not the instance: the environment may.
	if env.MIG != nil && env.GPU == id.GPU {
		return env
	}
	return id
}

// byIdentity matches the UUID or PCI bus id the process revealed. A GPU
// UUID or bus id of a GPU with MIG enabled names the GPU, not the instance.
func byIdentity(m store.DeviceMap, uuid, busID string, gpus []gpuID) (store.DeviceMap, bool) {
	if uuid != "" {
		want := stripUUIDPrefix(uuid)
		for _, g := range gpus {
			if stripUUIDPrefix(g.UUID) == want {
				m.GPU, m.Method = g.Index, "uuid"
				m.Why, m.WhyKind = instanceUnknown(g, m.Ordinal, "its UUID names the GPU, not the instance (cuDeviceGetUuid_v2 names the instance)")
				return m, true
			}
			for i, mu := range g.MIG {
				if mu != "" && stripUUIDPrefix(mu) == want {
					idx := i
					m.GPU, m.MIG, m.Method = g.Index, &idx, "uuid"
					return m, true
				}
			}
		}
	}
	if busID != "" {
		want := sampler.NormalizeBusID(busID)
		for _, g := range gpus {
			if g.BusID == want {
				m.GPU, m.Method = g.Index, "pci-bus-id"
				m.Why, m.WhyKind = instanceUnknown(g, m.Ordinal, "its instances share the GPU's PCI bus id")
				return m, true
			}
		}
	}
	return m, false
}

// instanceUnknown says why a device on g has no MIG instance, or "" when
// g does not have MIG enabled (the device is the whole GPU).
func instanceUnknown(g gpuID, ordinal int32, why string) (string, store.DeviceWhy) {
	if !g.MIGOn {
		return "", ""
	}
	return fmt.Sprintf("GPU %d has MIG enabled. CUDA device %d is one of its MIG instances, and which one is not recorded: %s",
		g.Index, ordinal, why), store.WhyMIGInstance
}

// byVisible matches an ordinal through CUDA_VISIBLE_DEVICES, which lists
// the devices CUDA numbers, in order: GPU or MIG UUIDs (any unique
// prefix) or indices.
func byVisible(m store.DeviceMap, vis visibility, host []gpuID) store.DeviceMap {
	entries := splitList(vis.CUDAVisible)
	if int(m.Ordinal) >= len(entries) || m.Ordinal < 0 {
		m.Method, m.Why, m.WhyKind = "unknown", fmt.Sprintf("ordinal %d beyond CUDA_VISIBLE_DEVICES=%q", m.Ordinal, vis.CUDAVisible), store.WhyCUDAVisible
		return m
	}
	// An entry naming a whole GPU that has MIG enabled stands for its
	// instances, however many: the ordinals after it cannot be counted.
	for _, e := range entries[:m.Ordinal] {
		if g, ok := wholeGPUEntry(e, host); ok && g.MIGOn {
			if len(host) == 1 {
				return onlyGPU(m, host[0], fmt.Sprintf("CUDA_VISIBLE_DEVICES entry %q stands for all its instances", e))
			}
			m.Method, m.Why, m.WhyKind = "unknown", fmt.Sprintf("CUDA_VISIBLE_DEVICES entry %q is GPU %d, which has MIG enabled: it stands for its MIG instances, so the devices after it cannot be counted", e, g.Index), store.WhyCUDAVisible
			return m
		}
	}
	e := entries[m.Ordinal]
	if g, idx, ok := matchMIGUUID(e, host); ok {
		m.GPU, m.Method = g.Index, "visible-devices-uuid"
		if idx < 0 {
			m.Why, m.WhyKind = instanceUnknown(g, m.Ordinal, fmt.Sprintf("CUDA_VISIBLE_DEVICES names it by GPU and compute instance ids (%s), which the recorder does not match to NVML's MIG devices; MIG-<uuid> names it", e))
			return m
		}
		m.MIG = &idx
		return m
	}
	if g, ok := matchUUIDPrefix(e, host); ok {
		m.GPU, m.Method = g.Index, "visible-devices-uuid"
		m.Why, m.WhyKind = instanceUnknown(g, m.Ordinal, fmt.Sprintf("CUDA_VISIBLE_DEVICES names the GPU (%s), not a MIG-<uuid> instance", e))
		return m
	}
	n, err := strconv.Atoi(e)
	if err == nil && n >= 0 && len(host) == 1 && host[0].MIGOn {
		return onlyGPU(m, host[0], fmt.Sprintf("CUDA_VISIBLE_DEVICES=%s uses indices, not MIG-<uuid>", vis.CUDAVisible))
	}
	if err != nil || n < 0 || n >= len(host) {
		m.Method, m.Why, m.WhyKind = "unknown", fmt.Sprintf("CUDA_VISIBLE_DEVICES entry %q matches no GPU", e), store.WhyCUDAVisible
		return m
	}
	if mig := migGPUs(host); len(mig) > 0 {
		m.Method, m.Why, m.WhyKind = "unknown", fmt.Sprintf("CUDA_VISIBLE_DEVICES uses indices while MIG is enabled on GPU %s: CUDA's indices then count MIG instances", mig), store.WhyCUDAVisible
		return m
	}
	if g, method, ok := byOrder(n, vis.CUDAOrder, host); ok {
		m.GPU, m.Method = g.Index, "visible-devices-index+"+method
		return m
	}
	m.Method, m.Why, m.WhyKind = "unknown", "CUDA_VISIBLE_DEVICES uses indices and CUDA's default order (fastest first) differs from NVML's for unlike GPUs", store.WhyCUDAVisible
	return m
}

// byOrdinal matches an ordinal by CUDA's enumeration order when nothing
// restricts it.
func byOrdinal(m store.DeviceMap, order string, host []gpuID) store.DeviceMap {
	ordinal := int(m.Ordinal)
	if len(host) == 1 && host[0].MIGOn {
		// Every CUDA device is one of this GPU's instances.
		g := host[0]
		if ordinal < 0 || (len(g.MIG) > 0 && ordinal >= len(g.MIG)) {
			m.Method, m.Why, m.WhyKind = "unknown", fmt.Sprintf("ordinal %d but GPU %d has %d MIG instances", ordinal, g.Index, len(g.MIG)), store.WhyOrder
			return m
		}
		return onlyGPU(m, g, "the process revealed no MIG UUID and CUDA_VISIBLE_DEVICES names no MIG-<uuid>")
	}
	if mig := migGPUs(host); len(mig) > 0 {
		m.Method, m.Why, m.WhyKind = "unknown", fmt.Sprintf("MIG is enabled on GPU %s: CUDA's ordinals count MIG instances, so ordinal %d cannot be matched by order", mig, ordinal), store.WhyOrder
		return m
	}
	if ordinal < 0 || ordinal >= len(host) {
		m.Method, m.Why, m.WhyKind = "unknown", fmt.Sprintf("ordinal %d but %d GPUs visible", ordinal, len(host)), store.WhyOrder
		return m
	}
	if len(host) == 1 {
		m.GPU, m.Method = host[0].Index, "single-gpu"
		return m
	}
	if g, method, ok := byOrder(ordinal, order, host); ok {
		m.GPU, m.Method = g.Index, method
		return m
	}
	m.Method, m.Why, m.WhyKind = "unknown", "several unlike GPUs and CUDA's default order (fastest first) is not NVML's; the process revealed no UUID or PCI bus id", store.WhyOrder
	return m
}

// onlyGPU matches a device to the one GPU the process can see, whose MIG
// instance, when it has MIG enabled, stays unknown for the reason why.
func onlyGPU(m store.DeviceMap, g gpuID, why string) store.DeviceMap {
	m.GPU, m.Method = g.Index, "single-gpu"
	m.Why, m.WhyKind = instanceUnknown(g, m.Ordinal, why)
	return m
}

// migGPUs lists the GPUs with MIG enabled ("0, 2"), "" when none.
func migGPUs(gpus []gpuID) string {
	var out []string
	for _, g := range gpus {
		if g.MIGOn {
			out = append(out, strconv.Itoa(g.Index))
		}
	}
	return strings.Join(out, ", ")
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
	if !strings.HasPrefix(l, "gpu-") {
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

// matchMIGUUID matches a MIG entry of CUDA_VISIBLE_DEVICES: MIG-<uuid>
// (any unique prefix) names one instance, idx its MIG index; the older
// MIG-GPU-<uuid>/<GPU instance>/<compute instance> names the GPU and
// instance ids that NVML's MIG index does not show: idx is -1.
func matchMIGUUID(e string, gpus []gpuID) (g gpuID, idx int, ok bool) {
	l := strings.ToLower(e)
	if rest, old := strings.CutPrefix(l, "mig-gpu-"); old {
		uuid, _, _ := strings.Cut(rest, "/")
		g, ok := matchUUIDPrefix("gpu-"+uuid, gpus)
		return g, -1, ok
	}
	if !strings.HasPrefix(l, "mig-") {
		return gpuID{}, -1, false
	}
	n := 0
	for _, h := range gpus {
		for i, mu := range h.MIG {
			if mu != "" && strings.HasPrefix(strings.ToLower(mu), l) {
				g, idx, n = h, i, n+1
			}
		}
	}
	if n == 1 {
		return g, idx, true
	}
	return gpuID{}, -1, false
}

// wholeGPUEntry resolves an entry of CUDA_VISIBLE_DEVICES that names a
// whole GPU: by GPU UUID, or by index in bus order.
func wholeGPUEntry(e string, host []gpuID) (gpuID, bool) {
	if g, ok := matchUUIDPrefix(e, host); ok {
		return g, true
	}
	if n, err := strconv.Atoi(e); err == nil && n >= 0 && n < len(host) {
		return host[n], true
	}
	return gpuID{}, false
}

// visibleHost applies NVIDIA_VISIBLE_DEVICES (host indices, GPU or MIG
// UUIDs) to the NVML GPUs, which NVML lists in PCI bus order. A MIG entry
// makes its GPU visible; which of its instances a CUDA device is stays for
// the caller to establish.
func visibleHost(nv string, gpus []gpuID) ([]gpuID, string, store.DeviceWhy) {
	if len(gpus) == 0 {
		return nil, "NVML listed no GPUs", store.WhyNoGPUs
	}
	switch strings.ToLower(strings.TrimSpace(nv)) {
	case "", "all":
		return gpus, "", ""
	case "none", "void":
		return nil, "NVIDIA_VISIBLE_DEVICES=" + nv + " hides every GPU", store.WhyContainerVisible
	}
	var out []gpuID
	seen := map[int]bool{}
	for _, e := range splitList(nv) {
		g, ok := matchUUIDPrefix(e, gpus)
		if !ok {
			g, _, ok = matchMIGUUID(e, gpus)
		}
		if ok {
			if !seen[g.Index] {
				out = append(out, g)
			}
			seen[g.Index] = true
			continue
		}
		n, err := strconv.Atoi(e)
		if err != nil || n < 0 || n >= len(gpus) {
			return nil, fmt.Sprintf("NVIDIA_VISIBLE_DEVICES entry %q matches no GPU", e), store.WhyContainerVisible
		}
		if !seen[gpus[n].Index] {
			out = append(out, gpus[n])
		}
		seen[gpus[n].Index] = true
	}
	// CUDA inside the container enumerates what it sees; keep bus order.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].BusID < out[j-1].BusID; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out, "", ""
}

// Package sampler reads GPU memory evidence through NVML (go-nvml):
// framebuffer, BAR1 and per-process usage samples, and the platform
// inventory.
//
// Every value keeps its source: the NVML function and struct version, the
// return status, the GPU identity, the scope and the time window of the
// query. A failed or unsupported query is stored with its NVML return code
// and no value, never as zero. An NVML that cannot start is evidence too:
// Open always succeeds and records why initialization failed.
package sampler

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/retrivium/forensic/store"
)

// NVML return codes this package names (nvml.h).
var returnNames = map[nvml.Return]string{
	0: "NVML_SUCCESS", 1: "NVML_ERROR_UNINITIALIZED", 2: "NVML_ERROR_INVALID_ARGUMENT",
	3: "NVML_ERROR_NOT_SUPPORTED", 4: "NVML_ERROR_NO_PERMISSION", 5: "NVML_ERROR_ALREADY_INITIALIZED",
	6: "NVML_ERROR_NOT_FOUND", 7: "NVML_ERROR_INSUFFICIENT_SIZE", 8: "NVML_ERROR_INSUFFICIENT_POWER",
	9: "NVML_ERROR_DRIVER_NOT_LOADED", 10: "NVML_ERROR_TIMEOUT", 11: "NVML_ERROR_IRQ_ISSUE",
	12: "NVML_ERROR_LIBRARY_NOT_FOUND", 13: "NVML_ERROR_FUNCTION_NOT_FOUND", 14: "NVML_ERROR_CORRUPTED_INFOROM",
	15: "NVML_ERROR_GPU_IS_LOST", 16: "NVML_ERROR_RESET_REQUIRED", 17: "NVML_ERROR_OPERATING_SYSTEM",
	18: "NVML_ERROR_LIB_RM_VERSION_MISMATCH", 19: "NVML_ERROR_IN_USE", 20: "NVML_ERROR_MEMORY",
	21: "NVML_ERROR_NO_DATA", 22: "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED", 23: "NVML_ERROR_INSUFFICIENT_RESOURCES",
	24: "NVML_ERROR_FREQ_NOT_SUPPORTED", 25: "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 26: "NVML_ERROR_DEPRECATED",
	27: "NVML_ERROR_NOT_READY", 28: "NVML_ERROR_GPU_NOT_FOUND", 29: "NVML_ERROR_INVALID_STATE",
	999: "NVML_ERROR_UNKNOWN",
}

// StatusOf converts an NVML return code.
func StatusOf(r nvml.Return) store.Status {
	name, ok := returnNames[r]
	if !ok {
		name = fmt.Sprintf("NVML_ERROR_%d", int(r))
	}
	return store.Status{Code: int(r), Name: name}
}

var statusFunctionNotFound = StatusOf(nvml.ERROR_FUNCTION_NOT_FOUND)

// valueNotAvailable is NVML_VALUE_NOT_AVAILABLE for 64-bit fields.
const valueNotAvailable = ^uint64(0)

// Clock returns the run clock in nanoseconds.
type Clock func() int64

type migDev struct {
	ref store.GPURef
	h   nvml.Device
}

type gpu struct {
	ref store.GPURef
	h   nvml.Device
	// memWhy, once set, says why the v2 query proved unusable; the
	// sampler then uses v1.
	memWhy string
	mig    []migDev
}

// Sampler queries NVML. It is used from one goroutine.
type Sampler struct {
	lib   nvml.Interface
	clock Clock
	ok    bool
	gpus  []*gpu
	inv   store.Inventory
	has   map[string]bool
	// procAPI and procStruct name the per-process query go-nvml binds.
	procAPI, procStruct string
}

// Open loads NVML from path ("" = libnvidia-ml.so.1 through the loader),
// initializes it and takes the inventory. It never fails: an NVML that does
// not start is recorded in the inventory and the sampler takes no samples.
func Open(path string, clock Clock) *Sampler {
	s := &Sampler{clock: clock, has: map[string]bool{}}
	var opts []nvml.LibraryOption
	if path != "" {
		opts = append(opts, nvml.WithLibraryPath(path))
	}
	s.lib = nvml.New(opts...)
	s.inv = store.Inventory{Time: clock(), Library: path, InitAPI: "nvmlInit_v2"}
	if s.inv.Library == "" {
		s.inv.Library = "libnvidia-ml.so.1"
	}
	ret := s.lib.Init()
	s.inv.Init = StatusOf(ret)
	if ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			s.inv.InitError = fmt.Sprintf("could not load %s", s.inv.Library)
		}
		return s
	}
	s.ok = true
	s.pickProcAPI()
	s.takeInventory()
	return s
}

// OK reports whether NVML initialized.
func (s *Sampler) OK() bool { return s.ok }

// Inventory returns the inventory taken by Open.
func (s *Sampler) Inventory() store.Inventory { return s.inv }

// Close shuts NVML down.
func (s *Sampler) Close() {
	if s.ok {
		s.lib.Shutdown()
		s.ok = false
	}
}

// exported reports whether the loaded library exports name. go-nvml calls
// C functions directly: calling one the library lacks would kill the
// process, so every optional call is checked first.
func (s *Sampler) exported(name string) bool {
	v, ok := s.has[name]
	if !ok {
		v = s.lib.Extensions().LookupSymbol(name) == nil
		s.has[name] = v
	}
	return v
}

func (s *Sampler) pickProcAPI() {
	// go-nvml binds the newest of these the library exports; name the same.
	switch {
	case s.exported("nvmlDeviceGetComputeRunningProcesses_v3"):
		s.procAPI, s.procStruct = "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlProcessInfo_v2_t"
	case s.exported("nvmlDeviceGetComputeRunningProcesses_v2"):
		s.procAPI, s.procStruct = "nvmlDeviceGetComputeRunningProcesses_v2", "nvmlProcessInfo_v2_t"
	case s.exported("nvmlDeviceGetComputeRunningProcesses"):
		s.procAPI, s.procStruct = "nvmlDeviceGetComputeRunningProcesses", "nvmlProcessInfo_v1_t"
	}
}

func obs[T any](api string, v T, r nvml.Return) store.Obs[T] {
	o := store.Obs[T]{API: api, Status: StatusOf(r)}
	if r == nvml.SUCCESS {
		o.Value = &v
	}
	return o
}

func missing[T any](api string) store.Obs[T] {
	return store.Obs[T]{API: api, Status: statusFunctionNotFound}
}

// query calls f when the library exports api, else records its absence.
func query[T any](s *Sampler, api string, f func() (T, nvml.Return)) store.Obs[T] {
	if !s.exported(api) {
		return missing[T](api)
	}
	v, r := f()
	return obs(api, v, r)
}

func (s *Sampler) takeInventory() {
	inv := &s.inv
	inv.Driver = query(s, "nvmlSystemGetDriverVersion", s.lib.SystemGetDriverVersion)
	inv.NVMLVersion = query(s, "nvmlSystemGetNVMLVersion", s.lib.SystemGetNVMLVersion)
	inv.CUDADriver = query(s, "nvmlSystemGetCudaDriverVersion", s.lib.SystemGetCudaDriverVersion)
	inv.DeviceCount = query(s, "nvmlDeviceGetCount_v2", s.lib.DeviceGetCount)
	inv.IOMMU, inv.IOMMUSource = iommuActive()
	if inv.DeviceCount.Value == nil {
		return
	}
	for i := 0; i < *inv.DeviceCount.Value; i++ {
		h, r := s.lib.DeviceGetHandleByIndex(i)
		gi := store.GPUInventory{Index: i}
		if r != nvml.SUCCESS {
			gi.UUID = obs("nvmlDeviceGetHandleByIndex_v2", "", r)
			inv.GPUs = append(inv.GPUs, gi)
			continue
		}
		g := &gpu{h: h, ref: store.GPURef{Index: i}}
		gi.UUID = query(s, "nvmlDeviceGetUUID", h.GetUUID)
		gi.Name = query(s, "nvmlDeviceGetName", h.GetName)
		gi.PCIBusID = query(s, "nvmlDeviceGetPciInfo_v3", func() (string, nvml.Return) {
			p, r := h.GetPciInfo()
			return NormalizeBusID(cString(p.BusId[:])), r
		})
		if gi.UUID.Value != nil {
			g.ref.UUID = *gi.UUID.Value
		}
		if gi.PCIBusID.Value != nil {
			g.ref.PCIBusID = *gi.PCIBusID.Value
			gi.BARs, gi.BARsSource = pciBars(g.ref.PCIBusID)
		}
		// Totals are configuration: they belong to the inventory.
		fb := s.memory(g, 0)
		gi.FBTotal = store.Obs[uint64]{Value: fb.Total, API: fb.API, Status: fb.Status}
		gi.FBReserved = store.Obs[uint64]{Value: fb.Reserved, API: fb.API, Status: fb.Status}
		if fb.Status.OK() && fb.Reserved == nil {
			gi.FBReserved.Status = store.Status{Code: int(nvml.ERROR_NOT_SUPPORTED),
				Name: "NVML_ERROR_NOT_SUPPORTED (" + fb.Struct + " has no reserved field)"}
		}
		b1 := s.bar1(g, 0)
		gi.BAR1Total = store.Obs[uint64]{Value: b1.Total, API: b1.API, Status: b1.Status}
		gi.MIGMode = query(s, "nvmlDeviceGetMigMode", func() (int, nvml.Return) {
			cur, _, r := h.GetMigMode()
			return cur, r
		})
		gi.Persistence = query(s, "nvmlDeviceGetPersistenceMode", func() (int, nvml.Return) {
			m, r := h.GetPersistenceMode()
			return int(m), r
		})
		gi.ComputeMode = query(s, "nvmlDeviceGetComputeMode", func() (int, nvml.Return) {
			m, r := h.GetComputeMode()
			return int(m), r
		})
		gi.PCIeGen = query(s, "nvmlDeviceGetCurrPcieLinkGeneration", h.GetCurrPcieLinkGeneration)
		gi.PCIeWidth = query(s, "nvmlDeviceGetCurrPcieLinkWidth", h.GetCurrPcieLinkWidth)
		gi.PCIeMaxGen = query(s, "nvmlDeviceGetMaxPcieLinkGeneration", h.GetMaxPcieLinkGeneration)
		gi.PCIeMaxWidth = query(s, "nvmlDeviceGetMaxPcieLinkWidth", h.GetMaxPcieLinkWidth)
		if gi.MIGMode.Value != nil && *gi.MIGMode.Value == nvml.DEVICE_MIG_ENABLE {
			gi.MIG = s.migDevices(g)
		}
		s.gpus = append(s.gpus, g)
		inv.GPUs = append(inv.GPUs, gi)
	}
}

func (s *Sampler) migDevices(g *gpu) []store.MIGInventory {
	if !s.exported("nvmlDeviceGetMaxMigDeviceCount") || !s.exported("nvmlDeviceGetMigDeviceHandleByIndex") {
		return nil
	}
	n, r := g.h.GetMaxMigDeviceCount()
	if r != nvml.SUCCESS {
		return nil
	}
	var out []store.MIGInventory
	for i := 0; i < n; i++ {
		mh, r := g.h.GetMigDeviceHandleByIndex(i)
		if r != nvml.SUCCESS {
			continue // an empty slot
		}
		idx := i
		m := migDev{h: mh, ref: g.ref}
		m.ref.MIGIndex = &idx
		mi := store.MIGInventory{Index: i}
		mi.UUID = query(s, "nvmlDeviceGetUUID", mh.GetUUID)
		if mi.UUID.Value != nil {
			m.ref.MIGUUID = *mi.UUID.Value
		}
		mem, r := mh.GetMemoryInfo()
		mi.FBTotal = obs("nvmlDeviceGetMemoryInfo", mem.Total, r)
		g.mig = append(g.mig, m)
		out = append(out, mi)
	}
	return out
}

// window stamps a query's start and end on the run clock.
func (s *Sampler) window(smp *store.Sample, f func()) {
	smp.Start = s.clock()
	f()
	smp.End = s.clock()
}

func ptr(v uint64) *uint64 { return &v }

// memory queries framebuffer memory: nvmlDeviceGetMemoryInfo_v2 (which
// reports reserved separately), falling back to v1 once v2 proves missing
// or unsupported, and saying so in every v1 sample.
func (s *Sampler) memory(g *gpu, round uint64) store.Sample {
	smp := store.Sample{Round: round, GPU: g.ref, Kind: store.KindFramebuffer, Scope: store.ScopeDevice}
	if g.memWhy == "" {
		if !s.exported("nvmlDeviceGetMemoryInfo_v2") {
			g.memWhy = "nvmlDeviceGetMemoryInfo_v2 is not exported by the library"
		} else {
			var m nvml.Memory_v2
			var r nvml.Return
			s.window(&smp, func() { m, r = g.h.GetMemoryInfo_v2() })
			switch r {
			case nvml.SUCCESS:
				smp.API, smp.Struct, smp.Status = "nvmlDeviceGetMemoryInfo_v2", "nvmlMemory_v2_t", StatusOf(r)
				smp.Total, smp.Reserved, smp.Used, smp.Free = ptr(m.Total), ptr(m.Reserved), ptr(m.Used), ptr(m.Free)
				return smp
			case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND, nvml.ERROR_ARGUMENT_VERSION_MISMATCH:
				g.memWhy = "nvmlDeviceGetMemoryInfo_v2 returned " + StatusOf(r).Name
			default:
				smp.API, smp.Struct, smp.Status = "nvmlDeviceGetMemoryInfo_v2", "nvmlMemory_v2_t", StatusOf(r)
				return smp
			}
		}
	}
	smp.API, smp.Struct, smp.Fallback = "nvmlDeviceGetMemoryInfo", "nvmlMemory_t", g.memWhy
	var m nvml.Memory
	var r nvml.Return
	s.window(&smp, func() { m, r = g.h.GetMemoryInfo() })
	smp.Status = StatusOf(r)
	if r == nvml.SUCCESS {
		// v1 counts reserved memory as used; it has no reserved field.
		smp.Total, smp.Used, smp.Free = ptr(m.Total), ptr(m.Used), ptr(m.Free)
	}
	return smp
}

// bar1 queries the BAR1 aperture, always at whole-GPU scope.
func (s *Sampler) bar1(g *gpu, round uint64) store.Sample {
	smp := store.Sample{Round: round, GPU: g.ref, Kind: store.KindBAR1, Scope: store.ScopeAperture,
		API: "nvmlDeviceGetBAR1MemoryInfo", Struct: "nvmlBAR1Memory_t"}
	if !s.exported(smp.API) {
		smp.Status = statusFunctionNotFound
		return smp
	}
	var m nvml.BAR1Memory
	var r nvml.Return
	s.window(&smp, func() { m, r = g.h.GetBAR1MemoryInfo() })
	smp.Status = StatusOf(r)
	if r == nvml.SUCCESS {
		smp.Total, smp.Used, smp.Free = ptr(m.Bar1Total), ptr(m.Bar1Used), ptr(m.Bar1Free)
	}
	return smp
}

func (s *Sampler) processes(g *gpu, round uint64) store.Sample {
	smp := store.Sample{Round: round, GPU: g.ref, Kind: store.KindProcesses, Scope: store.ScopeProcess,
		API: s.procAPI, Struct: s.procStruct}
	if s.procAPI == "" {
		smp.API, smp.Status = "nvmlDeviceGetComputeRunningProcesses", statusFunctionNotFound
		return smp
	}
	var ps []nvml.ProcessInfo
	var r nvml.Return
	s.window(&smp, func() { ps, r = g.h.GetComputeRunningProcesses() })
	smp.Status = StatusOf(r)
	for _, p := range ps {
		u := store.ProcUsage{PID: p.Pid}
		if p.UsedGpuMemory != valueNotAvailable {
			u.Used = ptr(p.UsedGpuMemory)
		}
		if s.procStruct != "nvmlProcessInfo_v1_t" {
			gi, ci := p.GpuInstanceId, p.ComputeInstanceId
			if gi != 0xffffffff {
				u.GPUInstance = &gi
			}
			if ci != 0xffffffff {
				u.ComputeInstance = &ci
			}
		}
		smp.Processes = append(smp.Processes, u)
	}
	return smp
}

func (s *Sampler) migMemory(m migDev, round uint64) store.Sample {
	smp := store.Sample{Round: round, GPU: m.ref, Kind: store.KindFramebuffer, Scope: store.ScopeMIG,
		API: "nvmlDeviceGetMemoryInfo", Struct: "nvmlMemory_t"}
	var mem nvml.Memory
	var r nvml.Return
	s.window(&smp, func() { mem, r = m.h.GetMemoryInfo() })
	smp.Status = StatusOf(r)
	if r == nvml.SUCCESS {
		smp.Total, smp.Used, smp.Free = ptr(mem.Total), ptr(mem.Used), ptr(mem.Free)
	}
	return smp
}

// Round takes one round of samples: framebuffer, BAR1 and per-process
// usage (and each MIG instance's memory) of every GPU, starting with GPU
// first (the one a failure happened on; -1 for none) so that its state is
// read soonest. The samples of one round share its number.
func (s *Sampler) Round(round uint64, first int, triggers []store.Trigger) []store.Sample {
	if !s.ok {
		return nil
	}
	order := make([]*gpu, 0, len(s.gpus))
	if first >= 0 && first < len(s.gpus) {
		order = append(order, s.gpus[first])
	}
	for i, g := range s.gpus {
		if i != first {
			order = append(order, g)
		}
	}
	var out []store.Sample
	for _, g := range order {
		out = append(out, s.memory(g, round), s.bar1(g, round), s.processes(g, round))
		for _, m := range g.mig {
			out = append(out, s.migMemory(m, round))
		}
	}
	if len(triggers) > 0 {
		for i := range out {
			out[i].Triggers = triggers
		}
	}
	return out
}

// NormalizeBusID writes a PCI bus id as NVML does: 8-digit domain, lower
// case ("00000000:41:00.0"). CUDA's cuDeviceGetPCIBusId uses a 4-digit
// domain; both normalize to the same string.
func NormalizeBusID(id string) string {
	id = strings.ToLower(strings.TrimSpace(id))
	dom, rest, ok := strings.Cut(id, ":")
	if !ok || strings.Count(rest, ":") != 1 {
		return id
	}
	v, err := strconv.ParseUint(dom, 16, 32)
	if err != nil {
		return id
	}
	return fmt.Sprintf("%08x:%s", v, rest)
}

func cString(b []int8) string {
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	out := make([]byte, n)
	for i := range out {
		out[i] = byte(b[i])
	}
	return string(out)
}

// sysfsRoot is where PCI devices and IOMMU state are read.
const sysfsRoot = "/sys"

// pciBars reads the sizes of a PCI function's BAR regions from sysfs.
func pciBars(busID string) ([]store.PCIBar, string) {
	// sysfs names devices with a 4-digit domain.
	name := busID
	if len(name) == len("00000000:41:00.0") {
		name = name[4:]
	}
	path := filepath.Join(sysfsRoot, "bus/pci/devices", name, "resource")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "sysfs: " + err.Error()
	}
	var bars []store.PCIBar
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if i > 5 {
			break // 6 BARs; then the expansion ROM and bridge windows
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		start, _ := strconv.ParseUint(f[0], 0, 64)
		end, _ := strconv.ParseUint(f[1], 0, 64)
		if start == 0 && end == 0 {
			continue
		}
		bars = append(bars, store.PCIBar{Index: i, Size: end - start + 1, Flags: f[2]})
	}
	return bars, path
}

// iommuActive reports whether the kernel runs with an IOMMU (a registered
// IOMMU device or any IOMMU group).
func iommuActive() (*bool, string) {
	for _, dir := range []string{"class/iommu", "kernel/iommu_groups"} {
		p := filepath.Join(sysfsRoot, dir)
		ents, err := os.ReadDir(p)
		if err != nil {
			continue
		}
		v := len(ents) > 0
		if v {
			return &v, p
		}
	}
	v := false
	return &v, filepath.Join(sysfsRoot, "class/iommu")
}

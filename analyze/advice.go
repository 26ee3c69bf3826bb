package analyze

import (
	"fmt"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
)

// nextSteps says what to try, fitted to a judgement: its capacity finding
// for memory problems, its decisive gaps when evidence was missing.
func (s *state) nextSteps(j *judgement) []string {
	switch j.attribution {
	case report.AttrMissingEvidence:
		var out []string
		for _, m := range j.missing {
			if m.Decisive {
				out = append(out, m.Fix)
			}
		}
		return out
	case report.AttrNotMemory:
		return []string{"fix what the code names (" + j.res.Name + ": " + j.res.Cause + ") before looking at memory"}
	}
	fd := &j.cap
	switch fd.capacity {
	case report.CapFBExhausted:
		return s.fbExhaustedSteps(j)
	case report.CapFBHadRoom:
		return []string{
			"fragmentation: a caching allocator may hold free but unusable blocks (PyTorch: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)",
			"per-process limits: MPS (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT), a container's or vGPU's GPU memory limit, a framework's memory fraction or a memory pool's maximum size",
			"an injected fault: a fault-injection or interposing library (LD_PRELOAD) in the process",
		}
	case report.CapBAR1Exhausted:
		return bar1Steps(fd)
	case report.CapPoolExhausted:
		return []string{
			fmt.Sprintf("raise the pool's limit (CUmemPoolProps.maxSize, now %s) or leave it unlimited, if the framebuffer has the room", report.HumanBytes(fd.pool.maxSize)),
			"free allocations from this pool (cuMemFreeAsync) before allocating again, and synchronize the stream so their memory returns to the pool",
		}
	case report.CapBAR1HadRoom:
		return []string{
			"the aperture had room: check peer access support between the GPUs (nvidia-smi topo -m, cuDeviceCanAccessPeer), the IOMMU and PCIe ACS settings",
			"check the kernel log for NVRM messages about the mapping",
		}
	case report.CapUnknown:
		if fd.miss != nil {
			return []string{fd.miss.Fix}
		}
	case report.CapNotApplicable:
		if j.f.sym.Creates.View() == cuda.ViewHost && j.res.Meaning == cuda.MeaningResource {
			return hostPinnedSteps()
		}
	}
	return []string{}
}

// hostPinnedSteps are the next steps when page-locked host memory could
// not be had (cuMemHostAlloc, cuMemAllocHost, cuMemHostRegister).
func hostPinnedSteps() []string {
	return []string{
		"pin less: smaller or fewer pinned buffers, released when done (cuMemFreeHost, cuMemHostUnregister); in PyTorch, DataLoader(pin_memory=False) or fewer workers and a smaller prefetch_factor",
		"check the locked-memory limits: ulimit -l (RLIMIT_MEMLOCK) of the process, and a container's memlock limit (docker run --ulimit memlock=-1:-1)",
		"check host RAM: pinned pages cannot be swapped or reclaimed, and count against a container's memory limit (the cgroup's memory.max); see free -m and the kernel log for the OOM killer",
	}
}

// fbExhaustedSteps are the next steps when the framebuffer ran out.
func (s *state) fbExhaustedSteps(j *judgement) []string {
	out := []string{}
	t := s.samples.targetOf(j.f)
	if t != nil {
		for _, p := range t.procUse() {
			if p.Used != nil && p.PID != j.f.e.PID && *p.Used > 0 {
				out = append(out, fmt.Sprintf("process %d held %s of the same GPU: stop it or move one of the two to another GPU",
					p.PID, report.HumanBytes(*p.Used)))
			}
		}
	}
	return append(out,
		"make the request fit: a smaller batch or sequence length, activation checkpointing, a smaller or quantized model, or more GPUs (sharding)",
		"a larger framebuffer does not come from BAR1: a bigger aperture creates no device memory")
}

// bar1Steps are the next steps when a mapping did not fit the aperture.
func bar1Steps(fd *finding) []string {
	var out []string
	if t := fd.apertureTotal(); t != nil && fd.sized && fd.size > *t {
		out = append(out, fmt.Sprintf("the request (%s) is larger than the whole aperture (%s): map it in smaller chunks, or use a GPU or BIOS setting with a large BAR1 (resizable BAR)",
			report.HumanBytes(fd.size), report.HumanBytes(*t)))
	}
	return append(out,
		"enable a large or resizable BAR1 (BIOS 'Above 4G decoding' and 'Re-Size BAR', or the GPU's large-BAR mode) so the aperture covers the framebuffer",
		"map smaller IPC or peer chunks, and fewer at once: close mappings no longer used (cuIpcCloseMemHandle, cuMemUnmap)",
		"route peer traffic over NVLink instead of PCIe where the GPUs have it (NCCL_P2P_LEVEL=NVL)")
}

package analyze

import (
	"fmt"
	"sort"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

// heldCtx is a CUDA context a process holds, as the replay knows it from
// the traced calls that created, retained, destroyed or released it.
type heldCtx struct {
	gpu     int   // NVML index, -1 when the record does not say
	dev     int32 // CUDA ordinal
	primary bool  // a device's primary context (retained, released)
	refs    int   // traced retains less releases, for a primary context
	gone    bool  // destroyed, or its last traced reference released
}

// A context's own memory (its state, local memory, the driver's internal
// allocations; some of it mapped for the CPU, which on many GPUs goes
// through the BAR1 aperture) is charged to neither view by a traced call:
// its release is a release of unknown size, in either GPU view.
const ctxMemory = "whose own memory no traced call sized"

// onGPU names a GPU for a message, or says nothing when it is unknown.
func onGPU(gpu int) string {
	if gpu < 0 {
		return ""
	}
	return fmt.Sprintf(" on GPU %d", gpu)
}

// held returns the replay's record of one of a process's contexts, making
// it on first sight.
func (p *replayer) held(pid uint32, h uint64) *heldCtx {
	m := p.ctxs[pid]
	if m == nil {
		m = map[uint64]*heldCtx{}
		p.ctxs[pid] = m
	}
	c := m[h]
	if c == nil {
		c = &heldCtx{gpu: -1, dev: -1}
		m[h] = c
	}
	return c
}

// contexts replays what a successful call did to its process's contexts.
// Creating a context, and retaining a primary context (the first
// reference makes it), takes memory for the context's own use: an
// allocation of unknown size on its GPU, in both views. Destroying one,
// and releasing a primary context (the last reference frees it), frees
// that memory: a release of unknown size.
func (p *replayer) contexts(e *store.Event, sym *cuda.Symbol) {
	switch sym.Ctx {
	case cuda.CtxCreate, cuda.CtxCreateIdle, cuda.CtxRetain:
		if e.Has&cuda.FieldPtr == 0 || e.Ptr == 0 {
			return
		}
		c := p.held(e.PID, e.Ptr)
		c.gpu, _ = p.dev.gpu(e.PID, e.Dev)
		c.dev, c.gone = e.Dev, false
		why := fmt.Sprintf("created a CUDA context%s, %s", onGPU(c.gpu), ctxMemory)
		if sym.Ctx == cuda.CtxRetain {
			c.primary = true
			c.refs++
			why = fmt.Sprintf("retained its primary CUDA context%s (made with the first reference), %s", onGPU(c.gpu), ctxMemory)
		}
		p.logOpaque(opaqueRel{at: e.End, gpu: c.gpu, view: viewMixed, pid: e.PID, ctx: true, acquire: true, why: why})
	case cuda.CtxDestroy:
		if e.Has&cuda.FieldTarget == 0 || e.Target == 0 {
			return
		}
		c := p.held(e.PID, e.Target)
		if c.gpu < 0 {
			c.gpu, _, _ = p.s.gpuOfDev(e.PID, p.s.ctxDevice(e.PID, e.Target))
		}
		c.gone = true
		p.logOpaque(opaqueRel{at: e.End, gpu: c.gpu, view: viewMixed, pid: e.PID, ctx: true,
			why: fmt.Sprintf("destroyed a CUDA context%s, %s", onGPU(c.gpu), ctxMemory)})
	case cuda.CtxRelease:
		gpu, _ := p.dev.gpu(e.PID, e.Dev)
		for _, c := range p.ctxs[e.PID] {
			if c.primary && !c.gone && e.Has&cuda.FieldDevice != 0 && c.dev == e.Device {
				c.refs--
				c.gone = c.refs <= 0
			}
		}
		p.logOpaque(opaqueRel{at: e.End, gpu: gpu, view: viewMixed, pid: e.PID, ctx: true,
			why: fmt.Sprintf("released its primary CUDA context%s (freed with the last reference), %s", onGPU(gpu), ctxMemory)})
	}
}

// exitContexts keeps, for a process followed from its start that exited
// at t, a release of unknown size on each GPU where it still held a
// context: one the replay saw created or retained and not freed, or one
// the record holds that the replay never saw made (its GPU, or any GPU
// when the record does not say).
func (p *replayer) exitContexts(pid uint32, t int64) {
	held := p.ctxs[pid]
	gpus := map[int]bool{}
	for _, c := range held {
		if !c.gone {
			gpus[c.gpu] = true
		}
	}
	if pr := p.s.procs[pid]; pr != nil {
		for _, rc := range pr.Contexts {
			if _, seen := held[rc.Handle]; !seen {
				g, _, _ := p.s.gpuOfDev(pid, rc.Device)
				gpus[g] = true
			}
		}
	}
	delete(p.ctxs, pid)
	order := make([]int, 0, len(gpus))
	for g := range gpus {
		order = append(order, g)
	}
	sort.Ints(order)
	for _, g := range order {
		p.logOpaque(opaqueRel{at: t, from: p.exitFrom(pid, t), gpu: g, view: viewMixed, pid: pid, ctx: true, exit: true,
			why: fmt.Sprintf("exited, freeing its CUDA context%s, %s", onGPU(g), ctxMemory)})
	}
}

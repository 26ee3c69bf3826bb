package recorder

import (
	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
	"os"
)

// procState is what the recorder knows of one process while recording.
type procState struct {
	rec store.Process
	// ctxs maps context handles to their records; stacks holds each
	// thread's context stack (top last).
	ctxs   map[uint64]*store.Context
	stacks map[uint32][]uint64
	// learned device identity, by CUDA ordinal.
	uuid, bus map[int32]string
	vis       visibility
	dirty     bool
	mapsAt    int64 // when its mappings were last read (run clock), 0 never
	// root holds open the process's root directory when it differs from
	// the recorder's (chroot, another mount namespace), so that a file it
	// mapped after its mappings were last read is still found by name
	// once it has exited (processRoot); rootRead says it was looked at.
	root     *os.File
	rootRead bool
	// watch looks for the interpreter of a program that links a shared
	// libpython while the loader maps it (libpython.go); nil when none.
	watch *pyWatch
}

func newProcState(p store.Process) *procState {
	return &procState{rec: p, ctxs: map[uint64]*store.Context{}, stacks: map[uint32][]uint64{},
		uuid: map[int32]string{}, bus: map[int32]string{}, vis: visibilityOf(p.Env), dirty: true}
}

// context returns the record of a context handle, registering it (device
// unknown) on first sight.
func (p *procState) context(h uint64) *store.Context {
	c, ok := p.ctxs[h]
	if !ok {
		c = &store.Context{Index: uint32(len(p.ctxs) + 1), Handle: h, Device: -1}
		p.ctxs[h] = c
		p.rec.Contexts = append(p.rec.Contexts, *c)
		p.dirty = true
	}
	return c
}

func (p *procState) setCtxDevice(c *store.Context, dev int32) {
	if c.Device == dev {
		return
	}
	c.Device = dev
	for i := range p.rec.Contexts {
		if p.rec.Contexts[i].Handle == c.Handle {
			p.rec.Contexts[i].Device = dev
		}
	}
	p.dirty = true
}

// current returns the context on top of a thread's stack, or nil.
func (p *procState) current(tid uint32) *store.Context {
	st := p.stacks[tid]
	if len(st) == 0 {
		return nil
	}
	return p.context(st[len(st)-1])
}

// annotate attributes a call to the thread's current context and device,
// then applies the call's effect on contexts and device identity. It
// follows the symbol table's CtxEffect and Identity columns only.
func (p *procState) annotate(e *store.Event, sym *cuda.Symbol, gpus []gpuID) {
	if cur := p.current(e.TID); cur != nil {
		e.Ctx = cur.Index
		e.Dev = cur.Device
	}
	// A call that names a device (context creation, identity queries,
	// cuMemCreate's location) runs against that device.
	if e.Has&cuda.FieldDevice != 0 {
		e.Dev = e.Device
	}
	// The devices an access grant names are matched to GPUs too, so the
	// analysis can say which GPU a peer is.
	for _, g := range e.Grants {
		if g.Type == cuda.LocationDevice && g.Device >= 0 {
			p.ensureDevice(g.Device, gpus)
		}
	}
	if e.Dev < 0 && len(gpus) == 1 && !gpus[0].MIGOn && p.vis.CUDAVisible == "" {
		// No context seen (a process attached late), but one GPU (not
		// split into MIG instances) and no restriction: the only ordinal
		// is 0.
		e.Dev = 0
		p.ensureDevice(0, gpus)
	}
	if e.Result != 0 {
		return
	}
	switch sym.Ctx {
	case cuda.CtxCreate:
		if e.Has&cuda.FieldPtr != 0 {
			c := p.context(e.Ptr)
			if e.Has&cuda.FieldDevice != 0 {
				p.setCtxDevice(c, e.Device)
			}
			p.stacks[e.TID] = append(p.stacks[e.TID], e.Ptr)
			e.Ctx = c.Index
		}
	case cuda.CtxRetain, cuda.CtxCreateIdle:
		if e.Has&cuda.FieldPtr != 0 && e.Has&cuda.FieldDevice != 0 {
			p.setCtxDevice(p.context(e.Ptr), e.Device)
		}
	case cuda.CtxAlias:
		// The green context's CUcontext runs on the green context's device.
		if e.Has&cuda.FieldPtr != 0 && e.Ptr != 0 {
			if g, ok := p.ctxs[e.Target]; ok && g.Device >= 0 {
				p.setCtxDevice(p.context(e.Ptr), g.Device)
			}
		}
	case cuda.CtxSet:
		st := p.stacks[e.TID]
		if e.Target == 0 {
			if len(st) > 0 {
				p.stacks[e.TID] = st[:len(st)-1]
			}
		} else if len(st) == 0 {
			p.stacks[e.TID] = append(st, e.Target)
		} else {
			st[len(st)-1] = e.Target
		}
		if e.Target != 0 {
			c := p.context(e.Target)
			e.Ctx, e.Dev = c.Index, c.Device
		}
	case cuda.CtxPush:
		p.stacks[e.TID] = append(p.stacks[e.TID], e.Target)
		c := p.context(e.Target)
		e.Ctx, e.Dev = c.Index, c.Device
	case cuda.CtxPop:
		if st := p.stacks[e.TID]; len(st) > 0 {
			p.stacks[e.TID] = st[:len(st)-1]
		}
	case cuda.CtxDestroy:
		for tid, st := range p.stacks {
			kept := st[:0]
			for _, h := range st {
				if h != e.Target {
					kept = append(kept, h)
				}
			}
			p.stacks[tid] = kept
		}
	}
	switch sym.Identity {
	case cuda.IdentityUUID:
		if e.Has&cuda.FieldKey != 0 && e.Has&cuda.FieldDevice != 0 {
			if u := moreSpecificUUID(p.uuid[e.Device], uuidString(e.Key), gpus); u != "" && p.uuid[e.Device] != u {
				p.uuid[e.Device] = u
				p.resolve(e.Device, gpus)
			}
		}
	case cuda.IdentityPCI:
		if e.Has&cuda.FieldKey != 0 && e.Has&cuda.FieldDevice != 0 {
			if b := cStringBytes(e.Key); b != "" && p.bus[e.Device] != b {
				p.bus[e.Device] = b
				p.resolve(e.Device, gpus)
			}
		}
	}
	if e.Dev >= 0 {
		p.ensureDevice(e.Dev, gpus)
	}
}

// ensureDevice resolves an ordinal the first time the process uses it.
func (p *procState) ensureDevice(ord int32, gpus []gpuID) {
	for _, d := range p.rec.Devices {
		if d.Ordinal == ord {
			return
		}
	}
	p.resolve(ord, gpus)
}

// resolve (re)computes the GPU of an ordinal from what is known now;
// identity learned later replaces an order-based match.
func (p *procState) resolve(ord int32, gpus []gpuID) {
	m := resolveDevice(ord, p.uuid[ord], p.bus[ord], p.vis, gpus)
	for i, d := range p.rec.Devices {
		if d.Ordinal == ord {
			if d != m {
				p.rec.Devices[i] = m
				p.dirty = true
			}
			return
		}
	}
	p.rec.Devices = append(p.rec.Devices, m)
	p.dirty = true
}

func cStringBytes(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

package analyze

import (
	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// observe hands one call to the observer, as a report.Call. The Call and
// its argument values are reused for the next call: an observer copies
// what it keeps.
func (p *replayer) observe(e *store.Event, sym *cuda.Symbol) error {
	if p.obs == nil {
		return nil
	}
	c := &p.call
	dev, gpu := p.callDevice(e, sym)
	*c = report.Call{Symbol: p.s.syms.name(e.Symbol), Operation: sym.Op.String(), Result: e.Result,
		PID: e.PID, TID: e.TID, StartNS: e.Start, EndNS: e.End, Depth: e.Depth, CUDADevice: dev, GPU: gpu,
		Context: e.Ctx, Frozen: e.Flags&store.EventFrozen != 0, LateAttach: e.Flags&store.EventLateAttach != 0,
		Stack: e.Stack}
	c.ResultName = resultName(e.Result)
	c.Args = p.args.of(&e.Fields)
	if sym.Identity == cuda.IdentityOrdinal {
		// cuDeviceGet returns a CUdevice, not an address.
		c.Args.DeviceHandle, c.Args.Ptr = c.Args.Ptr, nil
	}
	for _, g := range e.Grants {
		c.Args.Grants = append(c.Args.Grants, report.Grant{Location: locationName(g.Type), CUDADevice: g.Device,
			Access: accessName(uint64(g.Flags)), Peer: g.Type == cuda.LocationDevice && g.Device != e.Dev})
	}
	return p.obs.Call(c)
}

// callDevice is the CUDA device a call ran against and its GPU, for an
// export: the device of its thread's current context, or the device a
// context call names (the context it creates or retains). A call made
// before its thread had a context ran against none (cuInit; cuDeviceGet
// and the identity queries name their device in their own argument): -1.
// The recorder gives such calls the only GPU's ordinal so that a process
// attached late, whose contexts it never saw, keeps its device; for that
// process the recorded device stands.
func (p *replayer) callDevice(e *store.Event, sym *cuda.Symbol) (int32, int) {
	if e.Ctx == 0 && (sym.Op != cuda.OpContext || e.Has&cuda.FieldDevice == 0) {
		if pr := p.s.procs[e.PID]; pr == nil || !pr.AttachedLate {
			return -1, -1
		}
	}
	gpu, _ := p.dev.gpu(e.PID, e.Dev)
	return e.Dev, gpu
}

// resultName names a CUresult.
func resultName(code int32) string {
	if code == 0 {
		return "CUDA_SUCCESS"
	}
	return cuda.LookupResult(code).Name
}

// argValues holds the values a report.Args points to, reused per call so
// that handing a call to an observer allocates nothing.
type argValues struct {
	size, flags, ptr, target, peer, count uint64
	device                                int32
}

// of converts decoded call fields; absent fields stay nil.
func (v *argValues) of(f *cuda.Fields) report.Args {
	var a report.Args
	set := func(bit cuda.Field, dst *uint64, val uint64) *uint64 {
		if f.Has&bit == 0 {
			return nil
		}
		*dst = val
		return dst
	}
	a.Size = set(cuda.FieldSize, &v.size, f.Size)
	a.Flags = set(cuda.FieldFlags, &v.flags, f.Flags)
	a.Ptr = set(cuda.FieldPtr, &v.ptr, f.Ptr)
	a.Target = set(cuda.FieldTarget, &v.target, f.Target)
	a.Peer = set(cuda.FieldPeer, &v.peer, f.Peer)
	a.Count = set(cuda.FieldCount, &v.count, f.Count)
	if f.Has&cuda.FieldDevice != 0 {
		v.device = f.Device
		a.Device = &v.device
	}
	if f.Has&cuda.FieldKey != 0 {
		a.Key = f.Key
	}
	return a
}

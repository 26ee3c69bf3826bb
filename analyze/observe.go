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
	gpu, _ := p.dev.gpu(e.PID, e.Dev)
	*c = report.Call{Symbol: p.s.syms.name(e.Symbol), Operation: sym.Op.String(), Result: e.Result,
		PID: e.PID, TID: e.TID, StartNS: e.Start, EndNS: e.End, Depth: e.Depth, CUDADevice: e.Dev, GPU: gpu,
		Context: e.Ctx, Frozen: e.Flags&store.EventFrozen != 0, LateAttach: e.Flags&store.EventLateAttach != 0}
	c.ResultName = resultName(e.Result)
	c.Args = p.args.of(&e.Fields)
	for _, g := range e.Grants {
		c.Args.Grants = append(c.Args.Grants, report.Grant{Location: locationName(g.Type), CUDADevice: g.Device,
			Access: accessName(uint64(g.Flags)), Peer: g.Type == cuda.LocationDevice && g.Device != e.Dev})
	}
	return p.obs.Call(c)
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

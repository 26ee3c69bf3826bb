package parquetexport

import (
	"context"
	"encoding/hex"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

// callVals backs a call row's optional columns, so that filling a row
// allocates nothing (the row's pointers point here).
type callVals struct {
	rank, gpu, cudaDev, ctx, device, stack int32
	size, flags, ptr, target, peer, count  int64
	uuid, key                              string
}

// symbolFacts caches the symbol table's columns per name.
type symbolFacts struct {
	op      string
	primary bool
}

func (x *runExport) writeCalls(ctx context.Context, path string) error {
	bw, err := newBatchWriter[callRow](ctx, path, x.opt)
	if err != nil {
		return err
	}
	vals := make([]callVals, batchRows)
	facts := map[string]symbolFacts{}
	err = x.r.Events(func(e *store.Event) error {
		row, i, err := bw.next()
		if err == nil {
			x.fillCall(row, &vals[i], e, facts)
		}
		return err
	})
	x.calls = bw.count + int64(bw.n)
	return bw.close(err)
}

func (x *runExport) writeFailures(ctx context.Context, path string) error {
	bw, err := newBatchWriter[callRow](ctx, path, x.opt)
	if err != nil {
		return err
	}
	vals := make([]callVals, batchRows)
	facts := map[string]symbolFacts{}
	err = readFailures(x.r, func(e *store.Event) error {
		row, i, err := bw.next()
		if err == nil {
			x.fillCall(row, &vals[i], e, facts)
		}
		return err
	})
	x.failures = bw.count + int64(bw.n)
	return bw.close(err)
}

func factsOf(name string, cache map[string]symbolFacts) symbolFacts {
	f, ok := cache[name]
	if !ok {
		f.op = "unknown"
		if s, _, found := cuda.Lookup(name); found {
			f.op, f.primary = s.Op.String(), s.Op.Primary()
		}
		cache[name] = f
	}
	return f
}

// fillCall fills one call row from an event, with the columns of its
// process (rank, GPU) and wall times from the run's clock pairing.
func (x *runExport) fillCall(row *callRow, v *callVals, e *store.Event, facts map[string]symbolFacts) {
	f := factsOf(e.Name, facts)
	res := cuda.LookupResult(e.Result)
	*row = callRow{Symbol: e.Name, Operation: f.op, Primary: f.primary, Result: e.Result, ResultName: res.Name,
		ResultMeaning: res.Meaning.String(), PID: int64(e.PID), TID: int64(e.TID),
		StartNS: x.clock.unix(e.Start), EndNS: x.clock.unix(e.End), EndRunClockNS: e.End,
		Depth: int32(e.Depth), EventFlags: int64(e.Flags)}
	if p := x.procs.lookup(e.PID, e.End); p != nil {
		row.Rank = p.rank
		if d, ok := p.devs[e.Dev]; ok && e.Dev >= 0 && d.GPU >= 0 {
			v.gpu = int32(d.GPU)
			row.GPU = &v.gpu
			if v.uuid = x.uuidOf(d); v.uuid != "" {
				row.GPUUUID = &v.uuid // null, never "", when unknown
			}
		}
	}
	if e.Dev >= 0 {
		v.cudaDev = e.Dev
		row.CUDADevice = &v.cudaDev
	}
	if e.Ctx != 0 {
		v.ctx = int32(e.Ctx)
		row.Context = &v.ctx
	}
	if e.Stack >= 0 {
		v.stack = e.Stack
		row.StackID = &v.stack
	}
	fillArgs(row, v, &e.Fields)
}

// fillArgs sets the decoded arguments the call has; the others stay null.
func fillArgs(row *callRow, v *callVals, a *cuda.Fields) {
	set := func(bit cuda.Field, val uint64, dst *int64, col **int64) {
		if a.Has&bit != 0 {
			*dst = int64(val)
			*col = dst
		}
	}
	set(cuda.FieldSize, a.Size, &v.size, &row.Size)
	set(cuda.FieldFlags, a.Flags, &v.flags, &row.Flags)
	set(cuda.FieldPtr, a.Ptr, &v.ptr, &row.Ptr)
	set(cuda.FieldTarget, a.Target, &v.target, &row.Target)
	set(cuda.FieldPeer, a.Peer, &v.peer, &row.Peer)
	set(cuda.FieldCount, a.Count, &v.count, &row.Count)
	if a.Has&cuda.FieldDevice != 0 {
		v.device = a.Device
		row.Device = &v.device
	}
	if a.Has&cuda.FieldKey != 0 {
		v.key = hex.EncodeToString(a.Key)
		row.Key = &v.key
	}
}

// sampleVals backs a sample row's optional columns.
type sampleVals struct {
	value, pid int64
	mig        int32
	kept       string
}

func (x *runExport) writeSamples(ctx context.Context, path string) error {
	bw, err := newBatchWriter[sampleRow](ctx, path, x.opt)
	if err != nil {
		return err
	}
	vals := make([]sampleVals, batchRows)
	err = x.r.Samples(func(s *store.Sample) error {
		for _, f := range fieldsOf(s) {
			row, i, err := bw.next()
			if err != nil {
				return err
			}
			x.fillSample(row, &vals[i], s, f.name, f.v)
			if f.pid != nil {
				vals[i].pid = int64(*f.pid)
				row.PID = &vals[i].pid
			}
		}
		return nil
	})
	x.samples = bw.count + int64(bw.n)
	return bw.close(err)
}

// valueOf is one row of a sample: a field, its value, and for per-process
// rows the process.
type valueOf struct {
	name string
	v    *uint64
	pid  *uint32
}

// fieldsOf lists a sample's rows: one per field its kind returns. A failed
// query gives its kind's fields with null values, so its status shows; a
// field the struct version lacks (v1 has no reserved) gives no row.
func fieldsOf(s *store.Sample) []valueOf {
	switch s.Kind {
	case store.KindProcesses:
		if !s.Usable() || len(s.Processes) == 0 {
			return []valueOf{{name: "process_used"}}
		}
		out := make([]valueOf, len(s.Processes))
		for i := range s.Processes {
			p := &s.Processes[i]
			out[i] = valueOf{name: "process_used", v: p.Used, pid: &p.PID}
		}
		return out
	case store.KindBAR1:
		return memFields(s, false)
	}
	return memFields(s, true)
}

func memFields(s *store.Sample, reserved bool) []valueOf {
	if !s.Usable() {
		out := []valueOf{{name: "total"}, {name: "used"}, {name: "free"}}
		if reserved {
			out = append(out, valueOf{name: "reserved"})
		}
		return out
	}
	var out []valueOf
	for _, f := range []valueOf{{name: "total", v: s.Total}, {name: "reserved", v: s.Reserved},
		{name: "used", v: s.Used}, {name: "free", v: s.Free}} {
		if f.v != nil {
			out = append(out, f)
		}
	}
	return out
}

func viewOf(kind string) string {
	if kind == store.KindBAR1 {
		return "bar1"
	}
	return "framebuffer"
}

func (x *runExport) fillSample(row *sampleRow, v *sampleVals, s *store.Sample, field string, val *uint64) {
	*row = sampleRow{Seq: int64(s.Seq), Round: int64(s.Round), Kind: s.Kind, View: viewOf(s.Kind), Scope: s.Scope,
		Field: field, Status: s.Status.Name, StatusCode: int32(s.Status.Code), API: s.API, Struct: s.Struct,
		Fallback: s.Fallback, StartNS: x.clock.unix(s.Start), EndNS: x.clock.unix(s.End), EndRunClockNS: s.End,
		GPU: int32(s.GPU.Index), GPUUUID: s.GPU.UUID, PCIBusID: s.GPU.PCIBusID, Triggered: len(s.Triggers) > 0}
	if val != nil {
		v.value = int64(*val)
		row.Value = &v.value
	}
	if s.GPU.MIGIndex != nil {
		v.mig = int32(*s.GPU.MIGIndex)
		row.MIGIndex = &v.mig
	}
	if s.Kept != "" {
		v.kept = s.Kept
		row.Kept = &v.kept
	}
}

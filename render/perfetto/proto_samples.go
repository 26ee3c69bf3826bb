package perfetto

import (
	"strconv"

	"github.com/retrivium/forensic/report"
)

// viewName names the memory view a sample kind reads: per-process usage
// is framebuffer memory.
func viewName(kind string) string {
	switch kind {
	case "framebuffer", "processes":
		return "framebuffer"
	case "bar1":
		return "BAR1"
	}
	return kind
}

// Sample writes one sample value on its counter track. A failed or
// unsupported query is never a zero: it is an instant on the GPU's track
// naming the status, once each time the status changes.
func (t *Trace) Sample(v *report.SampleValue) error {
	if t.samples == nil {
		var err error
		if t.samples, err = t.pw.newSequence(v.TimeNS, 0, true, false); err != nil {
			return err
		}
	}
	if err := t.gpuTrack(v.GPU, v.UUID); err != nil {
		return err
	}
	mig := -1
	base := "GPU " + strconv.Itoa(v.GPU) + " "
	if v.MIG != nil {
		mig = *v.MIG
		base += "MIG " + strconv.Itoa(mig) + " "
	}
	sk := counterKey{gpu: v.GPU, mig: mig, kind: v.Kind}
	if !v.Usable {
		if last, ok := t.lastStatus[sk]; ok && last == v.Status {
			return nil
		}
		t.lastStatus[sk] = v.Status
		args := []annotation{{name: "api", kind: fAnnString, s: v.API}, {name: "status", kind: fAnnString, s: v.Status}}
		return t.instant(t.samples, gpuUUID(v.GPU), v.TimeNS, base+v.Kind+" not available: "+v.API+" "+v.Status, "nvml", args)
	}
	t.lastStatus[sk] = v.Status
	if v.Value == nil {
		return nil
	}
	sk.field = v.Field
	track, err := t.counterTrack(sk, base+viewName(v.Kind)+" "+v.Field)
	if err != nil {
		return err
	}
	p := t.pw.startPacket(t.samples, v.TimeNS)
	ev := appendVarintField(t.pw.ev[:0], fType, typeCounter)
	ev = appendVarintField(ev, fTrackUUID, track)
	ev = appendInt64Field(ev, fCounterValue, int64(*v.Value))
	t.pw.ev = ev
	return t.pw.finishPacket(p, fTrackEvent, ev)
}

// gpuTrack names a GPU's track once.
func (t *Trace) gpuTrack(gpu int, uuid string) error {
	if t.gpus[gpu] {
		return nil
	}
	t.gpus[gpu] = true
	name := "GPU " + strconv.Itoa(gpu) + " NVML samples"
	if uuid != "" {
		name += " (" + uuid + ")"
	}
	d := appendVarintField(nil, fTrackUUIDDesc, gpuUUID(gpu))
	d = appendStringField(d, fTrackName, name)
	return t.pw.descriptor(t.main, d)
}

// counterTrack returns the counter track of one field of one view of one
// GPU (or MIG instance), writing its descriptor the first time.
func (t *Trace) counterTrack(k counterKey, name string) (uint64, error) {
	if id, ok := t.counters[k]; ok {
		return id, nil
	}
	id := counterUUID(len(t.counters) + 1)
	t.counters[k] = id
	d := appendVarintField(nil, fTrackUUIDDesc, id)
	d = appendVarintField(d, fTrackParent, gpuUUID(k.gpu))
	d = appendStringField(d, fTrackName, name)
	d = appendBytesField(d, fTrackCounter, appendVarintField(nil, fCounterUnit, counterUnitBytes))
	return id, t.pw.descriptor(t.main, d)
}

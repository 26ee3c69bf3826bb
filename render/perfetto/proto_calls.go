package perfetto

import (
	"cmp"
	"encoding/hex"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/retrivium/forensic/report"
)

// Call writes one call as a slice on its thread's track. Calls come in
// the order they returned, so a call made inside another (Depth > 0)
// comes before its caller, which began earlier; such calls are held until
// their caller arrives and the group is written in the order the slices
// open and close.
func (t *Trace) Call(c *report.Call) error {
	th, err := t.thread(c.PID, c.TID)
	if err != nil {
		return err
	}
	if c.Depth > 0 && len(th.held) < maxHeld {
		th.held = append(th.held, cloneCall(c))
		return nil
	}
	if len(th.held) > 0 || c.Depth > 0 {
		return t.flushHeld(th, c)
	}
	if err := t.startThread(th, c.StartNS); err != nil {
		return err
	}
	if err := t.begin(th, c); err != nil {
		return err
	}
	return t.end(th, c)
}

// thread returns the state of a thread, naming its track (and its
// process's, for a process the report does not list) when first seen.
func (t *Trace) thread(pid, tid uint32) (*thread, error) {
	if th := t.last; th != nil && th.pid == pid && th.tid == tid {
		return th, nil
	}
	th := t.threads[[2]uint32{pid, tid}]
	if th != nil {
		t.last = th
		return th, nil
	}
	th = &thread{pid: pid, tid: tid}
	t.threads[[2]uint32{pid, tid}] = th
	t.last = th
	// A process whose record was lost is named by its pid.
	if err := t.process(pid, processName(&report.ProcessInfo{PID: pid}), nil); err != nil {
		return nil, err
	}
	name := report.ThreadTrackName(pid, tid, t.names[[2]uint32{pid, tid}])
	td := appendVarintField(nil, fThreadPID, uint64(pid))
	td = appendVarintField(td, fThreadTID, uint64(tid))
	td = appendStringField(td, fThreadName, name)
	d := appendVarintField(nil, fTrackUUIDDesc, threadUUID(pid, tid))
	d = appendVarintField(d, fTrackParent, processUUID(pid))
	d = appendBytesField(d, fTrackThread, td)
	return th, t.pw.descriptor(t.main, d)
}

// startThread starts the thread's packet sequence at its first event.
func (t *Trace) startThread(th *thread, at int64) error {
	if th.seq != nil {
		return nil
	}
	var err error
	th.seq, err = t.pw.newSequence(at, threadUUID(th.pid, th.tid), true, false)
	return err
}

// flushHeld writes the held calls and c (nil at the end of the trace) in
// the order their slices begin and end.
func (t *Trace) flushHeld(th *thread, c *report.Call) error {
	group := make([]*report.Call, 0, len(th.held)+1)
	for i := range th.held {
		group = append(group, &th.held[i])
	}
	if c != nil {
		group = append(group, c)
	}
	if len(group) == 0 {
		return nil
	}
	slices.SortStableFunc(group, func(a, b *report.Call) int {
		return cmp.Or(cmp.Compare(a.StartNS, b.StartNS), cmp.Compare(a.Depth, b.Depth))
	})
	if err := t.startThread(th, group[0].StartNS); err != nil {
		return err
	}
	var open []*report.Call
	for _, g := range group {
		for len(open) > 0 && open[len(open)-1].EndNS <= g.StartNS {
			if err := t.end(th, open[len(open)-1]); err != nil {
				return err
			}
			open = open[:len(open)-1]
		}
		if err := t.begin(th, g); err != nil {
			return err
		}
		open = append(open, g)
	}
	for i := len(open) - 1; i >= 0; i-- {
		if err := t.end(th, open[i]); err != nil {
			return err
		}
	}
	th.held = th.held[:0]
	return nil
}

// begin writes the packet that opens a call's slice: its name and
// category interned, and its arguments.
func (t *Trace) begin(th *thread, c *report.Call) error {
	s := th.seq
	p := t.pw.startPacket(s, c.StartNS)
	ev := t.pw.ev[:0]
	ev = appendVarintField(ev, fType, typeSliceBegin)
	ev = appendVarintField(ev, fNameIID, t.pw.iid(s, internNames, c.Symbol))
	ev = appendVarintField(ev, fCategoryIIDs, t.pw.iid(s, internCategories, c.Operation))
	ev = t.callArgs(ev, s, c)
	t.pw.ev = ev
	return t.pw.finishPacket(p, fTrackEvent, ev)
}

// end writes the packet that closes a call's slice and, for a failed
// call, an instant naming the failure.
func (t *Trace) end(th *thread, c *report.Call) error {
	s := th.seq
	at := max(c.EndNS, c.StartNS)
	p := t.pw.startPacket(s, at)
	ev := appendVarintField(t.pw.ev[:0], fType, typeSliceEnd)
	t.pw.ev = ev
	if err := t.pw.finishPacket(p, fTrackEvent, ev); err != nil || c.Result == 0 {
		return err
	}
	args := []annotation{{name: "result", kind: fAnnString, s: c.ResultName},
		{name: "code", kind: fAnnInt, u: uint64(int64(c.Result))}}
	return t.instant(s, 0, at, "FAILED "+c.Symbol+": "+c.ResultName, "failure", args)
}

// callArgs appends a call's arguments: its size when it has one; for a
// failed call its result, code and every decoded argument; and the flags
// that qualify a record (depth, frozen, attached late) when set.
func (t *Trace) callArgs(ev []byte, s *sequence, c *report.Call) []byte {
	arg := func(name string, kind protowire.Number, v uint64) {
		a := annotation{nameIID: t.pw.iid(s, internAnnNames, name), kind: kind, u: v}
		ev = appendAnnotation(ev, &a)
	}
	a := &c.Args
	if a.Size != nil {
		arg("size", fAnnUint, *a.Size)
	}
	if c.Result != 0 {
		r := annotation{nameIID: t.pw.iid(s, internAnnNames, "result"), kind: fAnnString, s: c.ResultName}
		ev = appendAnnotation(ev, &r)
		arg("code", fAnnInt, uint64(int64(c.Result)))
		ev = t.failedArgs(ev, s, c)
	}
	if c.Depth > 0 {
		arg("depth", fAnnUint, uint64(c.Depth))
	}
	if c.Frozen {
		arg("frozen", fAnnBool, 1)
	}
	if c.LateAttach {
		arg("attached_late", fAnnBool, 1)
	}
	return ev
}

// failedArgs appends the decoded arguments other than size.
func (t *Trace) failedArgs(ev []byte, s *sequence, c *report.Call) []byte {
	arg := func(name string, kind protowire.Number, v *uint64) {
		if v != nil {
			a := annotation{nameIID: t.pw.iid(s, internAnnNames, name), kind: kind, u: *v}
			ev = appendAnnotation(ev, &a)
		}
	}
	a := &c.Args
	arg("flags", fAnnUint, a.Flags)
	arg("ptr", fAnnPointer, a.Ptr)
	arg("device_handle", fAnnUint, a.DeviceHandle)
	arg("target", fAnnPointer, a.Target)
	arg("peer", fAnnPointer, a.Peer)
	arg("count", fAnnUint, a.Count)
	if a.Device != nil {
		v := uint64(int64(*a.Device))
		arg("device_arg", fAnnInt, &v)
	}
	if len(a.Key) > 0 {
		k := annotation{nameIID: t.pw.iid(s, internAnnNames, "key"), kind: fAnnString, s: hex.EncodeToString(a.Key)}
		ev = appendAnnotation(ev, &k)
	}
	if c.CUDADevice >= 0 {
		v := uint64(int64(c.CUDADevice))
		arg("cuda_device", fAnnInt, &v)
	}
	if c.Context != 0 {
		v := uint64(c.Context)
		arg("ctx", fAnnUint, &v)
	}
	return ev
}

// cloneCall copies a call and the values it points to (the analysis
// reuses them for the next call).
func cloneCall(c *report.Call) report.Call {
	d := *c
	a := &d.Args
	for _, p := range []**uint64{&a.Size, &a.Flags, &a.Ptr, &a.DeviceHandle, &a.Target, &a.Peer, &a.Count} {
		if *p != nil {
			v := **p
			*p = &v
		}
	}
	if a.Device != nil {
		v := *a.Device
		a.Device = &v
	}
	a.Key = slices.Clone(a.Key)
	a.Grants = slices.Clone(a.Grants)
	return d
}

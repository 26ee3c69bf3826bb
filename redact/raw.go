package redact

import (
	"encoding/binary"
	"encoding/json"

	"github.com/retrivium/forensic/stackname"
	"github.com/retrivium/forensic/store"
	"github.com/retrivium/forensic/unwind"
)

// A recording made before stacks were named by the recorder holds raw
// captures only. The copy leaves the raw bytes out, so it would lose
// those stacks: they are named here first, as analyze would name them on
// this machine, and the copy gets the named stacks (redacted like the
// rest) in their place.

// nameRaw names the raw captures of rd that have no named stack.
func (r *Redactor) nameRaw(rd *store.Reader) ([]store.NamedStack, error) {
	var keys [][]byte
	err := rd.Each(func(v store.Value) error {
		if v.Bucket == "captures" && len(v.Key) == 16 {
			keys = append(keys, append([]byte(nil), v.Key...))
		}
		return nil
	})
	if err != nil || len(keys) == 0 {
		return nil, err
	}
	procs, err := rd.Processes()
	if err != nil {
		return nil, err
	}
	if r.unw == nil {
		r.unw = unwind.New(unwind.LocalFiles{}, 0)
	}
	var out []store.NamedStack
	for _, k := range keys {
		pid, tid := binary.BigEndian.Uint32(k), binary.BigEndian.Uint32(k[4:])
		t := int64(binary.BigEndian.Uint64(k[8:]))
		if n, err := rd.NamedStack(pid, tid, t); n != nil || err != nil {
			continue // named by the recorder (or unreadable: left out)
		}
		c, err := rd.Capture(pid, tid, t)
		if err != nil || c == nil {
			continue
		}
		out = append(out, stackname.Name(r.unw, c, pythonOf(rd, procs, c)))
	}
	return out, nil
}

// pythonOf gathers what naming a raw capture's Python frames takes: the
// interpreter of the process that ran at the capture.
func pythonOf(rd *store.Reader, procs []store.Process, c *store.Capture) stackname.Python {
	var p *store.Process
	for i := range procs {
		if procs[i].PID == c.PID && procs[i].Start <= c.Time && (p == nil || procs[i].Start > p.Start) {
			p = &procs[i]
		}
	}
	if p == nil || p.Python == nil {
		return stackname.Python{}
	}
	py := stackname.Python{Interp: p.Python}
	if p.Python.Error == "" {
		py.Stack, py.Err = rd.PyStack(c.PID, c.TID, c.Time)
		if py.Err == nil && py.Stack != nil {
			py.Codes, py.Err = rd.PyCodes(c.PID)
		}
	}
	return py
}

// learnNamed learns the strings of stacks named here.
func (r *Redactor) learnNamed(named []store.NamedStack) error {
	for i := range named {
		js, err := json.Marshal(&named[i])
		if err != nil {
			return err
		}
		doc, err := decode(js)
		if err != nil {
			return err
		}
		r.learn(doc, "")
	}
	return nil
}

// namedValues are the stacks named here as redacted values of the copy.
func (r *Redactor) namedValues(named []store.NamedStack) ([]store.Value, error) {
	var out []store.Value
	for i := range named {
		n := &named[i]
		js, err := json.Marshal(n)
		if err != nil {
			return nil, err
		}
		key := store.CaptureKey(n.PID, n.TID, n.Time)
		red, err := r.redactJSON("named", key, js)
		if err != nil {
			return nil, err
		}
		v, err := store.NamedValue(red)
		if err != nil {
			return nil, err
		}
		out = append(out, store.Value{Bucket: "named", Key: key, Val: v})
	}
	r.sum.Named += len(out)
	return out, nil
}

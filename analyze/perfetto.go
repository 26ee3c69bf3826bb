package analyze

import (
	"encoding/hex"
	"errors"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"sync/atomic"
	"unicode/utf8"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

// WritePerfetto writes the run as Chrome trace-event JSON, which the
// Perfetto UI (ui.perfetto.dev) and chrome://tracing open:
//
//   - one track per thread, with a complete slice ("X") per call, named by
//     symbol, its arguments and result in args;
//   - process and thread names as metadata ("M") events;
//   - counter tracks ("C") per GPU from the NVML samples, one counter name
//     per view and field ("GPU 0 framebuffer used", "GPU 0 BAR1 free"):
//     framebuffer and BAR1 are never put in one counter, so no viewer
//     stacks or adds them;
//   - instant events ("i") for each failed call, each kernel log line and
//     each marker.
//
// Time zero is the run's clock start; ts and dur are microseconds with
// nanosecond precision. The export streams: events are written as they are
// read, so memory does not grow with the number of calls.
func WritePerfetto(w io.Writer, r *store.Reader) error {
	p := &perfettoWriter{w: w, buf: make([]byte, 0, perfettoBuf+4096), t0: r.Run().ClockStart,
		threads: map[[2]uint32]bool{}, last: [2]uint32{^uint32(0), ^uint32(0)}, procs: map[uint32]bool{}, results: map[int32][]byte{},
		syms: resolveSymbols(r.SymbolNames())}
	return p.write(r)
}

// gpuTrackPID is the pseudo process id that holds a GPU's counter tracks;
// Linux pids stay below 2^22, so these never collide with a real process.
func gpuTrackPID(gpu int) int64 { return 1<<30 + int64(gpu) }

// perfettoBuf is how much output is gathered before each write.
const perfettoBuf = 256 << 10

type perfettoWriter struct {
	w       io.Writer
	buf     []byte // output not yet written
	t0      int64
	n       int // trace events written
	threads map[[2]uint32]bool
	last    [2]uint32 // the thread of the previous event (named already)
	procs   map[uint32]bool
	// Per symbol id: the file's symbols resolved, and the start of its X
	// event up to `"pid":`.
	syms   []*cuda.Symbol
	prefix [][]byte
	// Per result code: `"CUDA_…"` quoted.
	results map[int32][]byte
}

// begin starts one trace event.
func (p *perfettoWriter) begin() {
	if p.n > 0 {
		p.buf = append(p.buf, ",\n"...)
	}
	p.n++
}

// flush writes the gathered output once there is enough of it.
func (p *perfettoWriter) flush() error {
	if len(p.buf) < perfettoBuf {
		return nil
	}
	return p.flushAll()
}

func (p *perfettoWriter) flushAll() error {
	_, err := p.w.Write(p.buf)
	p.buf = p.buf[:0]
	return err
}

func (p *perfettoWriter) write(r *store.Reader) error {
	run := r.Run()
	p.buf = append(p.buf[:0], `{"displayTimeUnit":"ns","otherData":{"producer":"forensic export --format perfetto","run_id":`...)
	p.buf = appendJSONString(p.buf, run.ID)
	p.buf = append(p.buf, `,"clock":`...)
	p.buf = appendJSONString(p.buf, run.Clock)
	p.buf = append(p.buf, `,"clock_start_ns":`...)
	p.buf = strconv.AppendInt(p.buf, run.ClockStart, 10)
	p.buf = append(p.buf, `,"wall_start":`...)
	p.buf = appendJSONString(p.buf, run.WallStart.UTC().Format("2006-01-02T15:04:05.000000000Z07:00"))
	p.buf = append(p.buf, `,"time_zero":"ts 0 is clock_start_ns; ts and dur are microseconds","views":"framebuffer and BAR1 counters are separate views and are never added"},`+"\n"+`"traceEvents":[`+"\n"...)
	procs, err := r.Processes()
	if err != nil {
		return err
	}
	sort.SliceStable(procs, func(i, j int) bool { return procs[i].Start < procs[j].Start })
	var order []uint32
	names := map[uint32]string{}
	for _, pr := range procs {
		name := filepath.Base(pr.Exe)
		if pr.Exe == "" {
			name = pr.Comm
		}
		if name == "" || name == "." || name == "/" {
			name = "pid " + strconv.FormatUint(uint64(pr.PID), 10)
		}
		if _, seen := names[pr.PID]; !seen {
			order = append(order, pr.PID)
		}
		names[pr.PID] = name // the latest record of a reused pid wins
	}
	for i, pid := range order {
		p.procs[pid] = true
		if err := p.meta("process_name", int64(pid), int64(pid), "name", names[pid], 0); err != nil {
			return err
		}
		if err := p.meta("process_sort_index", int64(pid), int64(pid), "sort_index", "", int64(100+i)); err != nil {
			return err
		}
	}

	inv, err := r.Inventory()
	if err != nil {
		return err
	}
	gpuNamed := map[int]bool{}
	nameGPU := func(gpu int, uuid string) error {
		if gpuNamed[gpu] {
			return nil
		}
		gpuNamed[gpu] = true
		label := "GPU " + strconv.Itoa(gpu) + " NVML samples"
		if uuid != "" {
			label += " (" + uuid + ")"
		}
		pid := gpuTrackPID(gpu)
		if err := p.meta("process_name", pid, pid, "name", label, 0); err != nil {
			return err
		}
		return p.meta("process_sort_index", pid, pid, "sort_index", "", int64(gpu))
	}
	if inv != nil {
		for _, g := range inv.GPUs {
			uuid := ""
			if g.UUID.Value != nil {
				uuid = *g.UUID.Value
			}
			if err := nameGPU(g.Index, uuid); err != nil {
				return err
			}
		}
	}

	if err := p.events(r); err != nil {
		return err
	}

	// Counters: each (GPU, view, field) is its own counter name. A failed
	// or unsupported query is never a zero: it is an instant event naming
	// the status, once each time the status changes.
	lastStatus := map[string]string{}
	err = r.Samples(func(s *store.Sample) error {
		if err := nameGPU(s.GPU.Index, s.GPU.UUID); err != nil {
			return err
		}
		base := "GPU " + strconv.Itoa(s.GPU.Index) + " "
		if s.GPU.MIGIndex != nil {
			base += "MIG " + strconv.Itoa(*s.GPU.MIGIndex) + " "
		}
		pid := gpuTrackPID(s.GPU.Index)
		skey := base + s.Kind
		if !s.Usable() {
			if lastStatus[skey] != s.Status.Name {
				lastStatus[skey] = s.Status.Name
				return p.instant("p", pid, pid, base+s.Kind+" not available: "+s.API+" "+s.Status.Name, "nvml", s.Start, func() {
					p.argStr("api", s.API)
					p.argStr("status", s.Status.Name)
					p.argInt("status_code", int64(s.Status.Code))
				})
			}
			return nil
		}
		lastStatus[skey] = s.Status.Name
		switch s.Kind {
		case store.KindFramebuffer:
			if err := p.counter(pid, base+"framebuffer used", s.Start, s.Used); err != nil {
				return err
			}
			if err := p.counter(pid, base+"framebuffer free", s.Start, s.Free); err != nil {
				return err
			}
			return p.counter(pid, base+"framebuffer reserved", s.Start, s.Reserved)
		case store.KindBAR1:
			if err := p.counter(pid, base+"BAR1 used", s.Start, s.Used); err != nil {
				return err
			}
			return p.counter(pid, base+"BAR1 free", s.Start, s.Free)
		case store.KindProcesses:
			for _, u := range s.Processes {
				if err := p.counter(pid, base+"framebuffer used by pid "+strconv.FormatUint(uint64(u.PID), 10), s.Start, u.Used); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}

	kl, err := r.KernelLog()
	if err != nil {
		return err
	}
	for _, l := range kl {
		name := "kernel: " + clip(l.Text, 80)
		if l.Xid != nil {
			name = "Xid " + strconv.Itoa(*l.Xid) + ": " + clip(l.Text, 80)
		}
		if err := p.instant("g", 0, 0, name, "kernel", l.Time, func() {
			p.argStr("text", l.Text)
			if l.Xid != nil {
				p.argInt("xid", int64(*l.Xid))
			}
		}); err != nil {
			return err
		}
	}
	ms, err := r.Markers()
	if err != nil {
		return err
	}
	for _, m := range ms {
		if err := p.instant("g", 0, 0, "mark: "+m.Label, "marker", m.Time, func() { p.argStr("label", m.Label) }); err != nil {
			return err
		}
	}
	p.buf = append(p.buf, "\n]}\n"...)
	return p.flushAll()
}

// meta writes a metadata event with one argument (string or int).
func (p *perfettoWriter) meta(name string, pid, tid int64, key, sval string, ival int64) error {
	p.begin()
	p.buf = append(p.buf, `{"ph":"M","name":"`...)
	p.buf = append(p.buf, name...)
	p.buf = append(p.buf, `","pid":`...)
	p.buf = strconv.AppendInt(p.buf, pid, 10)
	p.buf = append(p.buf, `,"tid":`...)
	p.buf = strconv.AppendInt(p.buf, tid, 10)
	p.buf = append(p.buf, `,"args":{"`...)
	p.buf = append(p.buf, key...)
	p.buf = append(p.buf, `":`...)
	if sval != "" {
		p.buf = appendJSONString(p.buf, sval)
	} else {
		p.buf = strconv.AppendInt(p.buf, ival, 10)
	}
	p.buf = append(p.buf, "}}"...)
	return p.flush()
}

// counter writes one counter value; a missing value writes nothing.
func (p *perfettoWriter) counter(pid int64, name string, t int64, v *uint64) error {
	if v == nil {
		return nil
	}
	p.begin()
	p.buf = append(p.buf, `{"ph":"C","name":`...)
	p.buf = appendJSONString(p.buf, name)
	p.buf = append(p.buf, `,"cat":"nvml","pid":`...)
	p.buf = strconv.AppendInt(p.buf, pid, 10)
	p.buf = append(p.buf, `,"tid":`...)
	p.buf = strconv.AppendInt(p.buf, pid, 10)
	p.buf = append(p.buf, `,"ts":`...)
	p.buf = appendMicros(p.buf, t-p.t0)
	p.buf = append(p.buf, `,"args":{"bytes":`...)
	p.buf = strconv.AppendUint(p.buf, *v, 10)
	p.buf = append(p.buf, "}}"...)
	return p.flush()
}

// instant writes an instant event; args writes its arguments with argStr
// and argInt.
func (p *perfettoWriter) instant(scope string, pid, tid int64, name, cat string, t int64, args func()) error {
	p.begin()
	p.buf = append(p.buf, `{"ph":"i","s":"`...)
	p.buf = append(p.buf, scope...)
	p.buf = append(p.buf, `","name":`...)
	p.buf = appendJSONString(p.buf, name)
	p.buf = append(p.buf, `,"cat":"`...)
	p.buf = append(p.buf, cat...)
	p.buf = append(p.buf, `","pid":`...)
	p.buf = strconv.AppendInt(p.buf, pid, 10)
	p.buf = append(p.buf, `,"tid":`...)
	p.buf = strconv.AppendInt(p.buf, tid, 10)
	p.buf = append(p.buf, `,"ts":`...)
	p.buf = appendMicros(p.buf, t-p.t0)
	p.buf = append(p.buf, `,"args":{`...)
	if args != nil {
		args()
	}
	p.buf = append(p.buf, "}}"...)
	return p.flush()
}

// argStr and argInt append one argument inside an open args object.
func (p *perfettoWriter) argStr(k, v string) {
	p.argKey(k)
	p.buf = appendJSONString(p.buf, v)
}

func (p *perfettoWriter) argInt(k string, v int64) {
	p.argKey(k)
	p.buf = strconv.AppendInt(p.buf, v, 10)
}

func (p *perfettoWriter) argUint(k string, v uint64) {
	p.argKey(k)
	p.buf = strconv.AppendUint(p.buf, v, 10)
}

func (p *perfettoWriter) argHex(k string, v uint64) {
	p.argKey(k)
	p.buf = append(p.buf, `"0x`...)
	p.buf = strconv.AppendUint(p.buf, v, 16)
	p.buf = append(p.buf, '"')
}

func (p *perfettoWriter) argKey(k string) {
	if c := p.buf[len(p.buf)-1]; c != '{' {
		p.buf = append(p.buf, ',')
	}
	p.buf = append(p.buf, '"')
	p.buf = append(p.buf, k...)
	p.buf = append(p.buf, `":`...)
}

// evBatch is a batch of events copied out of the reader, so that decoding
// (in the reader's goroutine) and formatting (in another) overlap. Keys
// are copied into a fixed arena: a batch never grows.
type evBatch struct {
	ev   []store.Event
	keys []byte
}

const (
	batchEvents = 4096
	maxKeyBytes = 64 // store's bound on a decoded key
)

func (b *evBatch) add(e *store.Event) {
	b.ev = append(b.ev, *e)
	c := &b.ev[len(b.ev)-1]
	c.Key = nil
	if len(e.Key) > 0 {
		k := e.Key[:min(len(e.Key), maxKeyBytes)]
		off := len(b.keys)
		b.keys = append(b.keys, k...)
		c.Key = b.keys[off:len(b.keys):len(b.keys)]
	}
}

// events streams every call event through a small pipeline: the reader
// decodes into fixed-size batches while this writer formats the previous
// ones. Memory is a few batches, whatever the number of calls.
func (p *perfettoWriter) events(r *store.Reader) error {
	const nBatches = 4
	free := make(chan *evBatch, nBatches)
	full := make(chan *evBatch, nBatches)
	for i := 0; i < nBatches; i++ {
		free <- &evBatch{ev: make([]store.Event, 0, batchEvents), keys: make([]byte, 0, batchEvents*maxKeyBytes)}
	}
	var failed atomic.Bool
	done := make(chan error, 1)
	go func() {
		var err error
		for b := range full {
			for i := range b.ev {
				if err != nil {
					break
				}
				err = p.event(&b.ev[i])
			}
			if err != nil {
				failed.Store(true)
			}
			b.ev, b.keys = b.ev[:0], b.keys[:0]
			free <- b
		}
		done <- err
	}()
	cur := <-free
	rerr := r.Events(func(e *store.Event) error {
		if failed.Load() {
			return errStopEvents
		}
		cur.add(e)
		if len(cur.ev) == batchEvents {
			full <- cur
			cur = <-free
		}
		return nil
	})
	if len(cur.ev) > 0 {
		full <- cur
	}
	close(full)
	werr := <-done
	if werr != nil {
		return werr
	}
	return rerr
}

var errStopEvents = errors.New("perfetto export stopped")

var successName = []byte(`"CUDA_SUCCESS"`)

func (p *perfettoWriter) resultName(code int32) []byte {
	if code == 0 {
		return successName
	}
	b, ok := p.results[code]
	if !ok {
		b = appendJSONString(nil, cuda.LookupResult(code).Name)
		p.results[code] = b
	}
	return b
}

// event writes one call as a complete slice on its thread's track, and a
// failed call also as an instant event.
func (p *perfettoWriter) event(e *store.Event) error {
	tk := [2]uint32{e.PID, e.TID}
	if tk != p.last && !p.threads[tk] {
		p.threads[tk] = true
		if !p.procs[e.PID] {
			// A process whose record was lost: name it by pid.
			p.procs[e.PID] = true
			if err := p.meta("process_name", int64(e.PID), int64(e.PID), "name", "pid "+strconv.FormatUint(uint64(e.PID), 10), 0); err != nil {
				return err
			}
		}
		name := "thread " + strconv.FormatUint(uint64(e.TID), 10)
		if e.TID == e.PID {
			name = "main thread " + strconv.FormatUint(uint64(e.TID), 10)
		}
		if err := p.meta("thread_name", int64(e.PID), int64(e.TID), "name", name, 0); err != nil {
			return err
		}
	}
	p.last = tk
	for int(e.Symbol) >= len(p.prefix) {
		p.prefix = append(p.prefix, nil)
	}
	pre := p.prefix[e.Symbol]
	if pre == nil {
		pre = append([]byte(`{"ph":"X","name":`), appendJSONString(nil, e.Name)...)
		pre = append(pre, `,"cat":"`...)
		pre = append(pre, symbolAt(p.syms, e.Symbol).Op.String()...)
		pre = append(pre, `","pid":`...)
		p.prefix[e.Symbol] = pre
	}
	p.begin()
	p.buf = append(p.buf, pre...)
	p.buf = strconv.AppendUint(p.buf, uint64(e.PID), 10)
	p.buf = append(p.buf, `,"tid":`...)
	p.buf = strconv.AppendUint(p.buf, uint64(e.TID), 10)
	p.buf = append(p.buf, `,"ts":`...)
	p.buf = appendMicros(p.buf, e.Start-p.t0)
	p.buf = append(p.buf, `,"dur":`...)
	p.buf = appendMicros(p.buf, max(e.End-e.Start, 0))
	p.buf = append(p.buf, `,"args":{"result":`...)
	p.buf = append(p.buf, p.resultName(e.Result)...)
	p.callArgs(e)
	p.buf = append(p.buf, "}}"...)
	if err := p.flush(); err != nil {
		return err
	}
	if e.Result == 0 {
		return nil
	}
	res := cuda.LookupResult(e.Result)
	return p.instant("p", int64(e.PID), int64(e.TID), "FAILED "+e.Name+": "+res.Name, "failure", e.End, func() {
		p.argStr("symbol", e.Name)
		p.argStr("result", res.Name)
		p.argStr("meaning", res.Meaning.String())
		p.callArgs(e)
	})
}

// callArgs appends the decoded call fields to an open args object.
func (p *perfettoWriter) callArgs(e *store.Event) {
	if e.Result != 0 {
		p.argInt("code", int64(e.Result))
	}
	if e.Has&cuda.FieldSize != 0 {
		p.argUint("size", e.Size)
	}
	if e.Has&cuda.FieldFlags != 0 {
		p.argHex("flags", e.Fields.Flags)
	}
	if e.Has&cuda.FieldPtr != 0 {
		p.argHex("ptr", e.Ptr)
	}
	if e.Has&cuda.FieldTarget != 0 {
		p.argHex("target", e.Target)
	}
	if e.Has&cuda.FieldDevice != 0 {
		p.argInt("device_arg", int64(e.Device))
	}
	if e.Has&cuda.FieldPeer != 0 {
		p.argHex("peer", e.Peer)
	}
	if e.Has&cuda.FieldCount != 0 {
		p.argUint("count", e.Count)
	}
	if e.Has&cuda.FieldKey != 0 && len(e.Key) > 0 {
		p.argKey("key")
		p.buf = append(p.buf, '"')
		p.buf = hex.AppendEncode(p.buf, e.Key)
		p.buf = append(p.buf, '"')
	}
	if e.Dev >= 0 {
		p.argInt("cuda_device", int64(e.Dev))
	}
	if e.Ctx != 0 {
		p.argUint("ctx", uint64(e.Ctx))
	}
	if e.Depth > 0 {
		p.argUint("depth", uint64(e.Depth))
	}
	if e.Flags&store.EventFrozen != 0 {
		p.argKey("frozen")
		p.buf = append(p.buf, "true"...)
	}
	if e.Flags&store.EventLateAttach != 0 {
		p.argKey("attached_late")
		p.buf = append(p.buf, "true"...)
	}
}

// appendMicros appends ns as microseconds with three decimals (exact).
func appendMicros(b []byte, ns int64) []byte {
	if ns < 0 {
		b = append(b, '-')
		ns = -ns
	}
	b = strconv.AppendInt(b, ns/1000, 10)
	f := ns % 1000
	return append(b, '.', byte('0'+f/100), byte('0'+f/10%10), byte('0'+f%10))
}

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes
// U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hexd = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\t':
				b = append(b, '\\', 't')
			case '\r':
				b = append(b, '\\', 'r')
			default:
				b = append(b, '\\', 'u', '0', '0', hexd[c>>4], hexd[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, `\u202`...)
			b = append(b, hexd[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

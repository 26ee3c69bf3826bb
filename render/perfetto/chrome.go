package perfetto

import (
	"bufio"
	"encoding/hex"
	"io"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/retrivium/forensic/report"
)

// ChromeJSON writes a run as Chrome trace-event JSON, which the Perfetto UI
// (ui.perfetto.dev) and chrome://tracing open:
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
// nanosecond precision. It is a report.Observer: pass it to the analysis,
// then call Finish with the report. It streams, so memory does not grow
// with the number of calls.
type ChromeJSON struct {
	w          *bufio.Writer
	n          int // trace events written
	t0         int64
	threads    map[[2]uint32]bool
	names      threadNames
	last       [2]uint32 // the thread of the previous event (named already)
	procs      map[uint32]bool
	gpus       map[int]bool
	lastStatus map[string]string
	prefix     map[string][]byte // per symbol: the start of its X event up to "pid":
	results    map[int32][]byte  // per result code: the quoted name
	scratch    []byte            // the event being written
}

// NewChromeJSON returns a writer of trace-event JSON to w.
func NewChromeJSON(w io.Writer) *ChromeJSON {
	return &ChromeJSON{w: bufio.NewWriterSize(w, 256<<10), threads: map[[2]uint32]bool{}, last: [2]uint32{^uint32(0), ^uint32(0)},
		procs: map[uint32]bool{}, gpus: map[int]bool{}, lastStatus: map[string]string{}, prefix: map[string][]byte{},
		results: map[int32][]byte{}}
}

// gpuTrackPID is the pseudo process id that holds a GPU's counter tracks;
// Linux pids stay below 2^22, so these never collide with a real process.
func gpuTrackPID(gpu int) int64 { return 1<<30 + int64(gpu) }

// buf is a small scratch the event writers append to.
func (p *ChromeJSON) write(b []byte) error {
	p.scratch = b[:0]
	_, err := p.w.Write(b)
	return err
}

// begin starts one trace event in the scratch buffer (b is always nil:
// the scratch is reused, so writing an event allocates nothing).
func (p *ChromeJSON) begin(b []byte) []byte {
	b = p.scratch[:0]
	if p.n > 0 {
		b = append(b, ",\n"...)
	}
	p.n++
	return b
}

// Begin writes the header.
func (p *ChromeJSON) Begin(rep *report.Report) error {
	run := &rep.Run
	p.t0 = run.StartNS
	p.names = namesOf(rep)
	b := []byte(`{"displayTimeUnit":"ns","otherData":{"producer":"forensic export --format chrome-json","run_id":`)
	b = appendJSONString(b, run.ID)
	b = append(b, `,"clock":`...)
	b = appendJSONString(b, run.Clock)
	b = append(b, `,"clock_start_ns":`...)
	b = strconv.AppendInt(b, run.StartNS, 10)
	b = append(b, `,"wall_start":`...)
	b = appendJSONString(b, run.WallStart)
	b = append(b, `,"time_zero":"ts 0 is clock_start_ns; ts and dur are microseconds","views":"framebuffer and BAR1 counters are separate views and are never added"},`+"\n"+`"traceEvents":[`+"\n"...)
	return p.write(b)
}

// Finish writes what only the finished report knows (process and GPU
// names, the kernel log, markers) and ends the document.
func (p *ChromeJSON) Finish(rep *report.Report) error {
	named := map[uint32]bool{}
	for i, pr := range rep.Processes {
		name := processName(&pr)
		named[pr.PID] = true
		if err := p.meta("process_name", int64(pr.PID), int64(pr.PID), "name", name, 0); err != nil {
			return err
		}
		if err := p.meta("process_sort_index", int64(pr.PID), int64(pr.PID), "sort_index", "", int64(100+i)); err != nil {
			return err
		}
	}
	var unnamed []uint32
	for pid := range p.procs {
		if !named[pid] {
			unnamed = append(unnamed, pid)
		}
	}
	slices.Sort(unnamed)
	for _, pid := range unnamed {
		// A process whose record was lost: named by pid.
		if err := p.meta("process_name", int64(pid), int64(pid), "name", "pid "+strconv.FormatUint(uint64(pid), 10), 0); err != nil {
			return err
		}
	}
	for _, k := range rep.KernelLog {
		name := "kernel: " + clip(k.Text, 80)
		if k.Xid != nil {
			name = "Xid " + strconv.Itoa(*k.Xid) + ": " + clip(k.Text, 80)
		}
		args := [][2]string{{"text", quote(k.Text)}}
		if k.Xid != nil {
			args = append(args, [2]string{"xid", strconv.Itoa(*k.Xid)})
		}
		if err := p.instant("g", 0, 0, name, "kernel", k.TimeNS, args); err != nil {
			return err
		}
	}
	for _, m := range rep.Markers {
		if err := p.instant("g", 0, 0, "mark: "+m.Label, "marker", m.TimeNS, [][2]string{{"label", quote(m.Label)}}); err != nil {
			return err
		}
	}
	if err := p.write([]byte("\n]}\n")); err != nil {
		return err
	}
	return p.w.Flush()
}

// meta writes a metadata event with one argument (string or int).
func (p *ChromeJSON) meta(name string, pid, tid int64, key, sval string, ival int64) error {
	b := p.begin(nil)
	b = append(b, `{"ph":"M","name":"`...)
	b = append(b, name...)
	b = append(b, `","pid":`...)
	b = strconv.AppendInt(b, pid, 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendInt(b, tid, 10)
	b = append(b, `,"args":{"`...)
	b = append(b, key...)
	b = append(b, `":`...)
	if sval != "" {
		b = appendJSONString(b, sval)
	} else {
		b = strconv.AppendInt(b, ival, 10)
	}
	return p.write(append(b, "}}"...))
}

// instant writes an instant event with arguments (values already JSON).
func (p *ChromeJSON) instant(scope string, pid, tid int64, name, cat string, t int64, args [][2]string) error {
	b := p.begin(nil)
	b = append(b, `{"ph":"i","s":"`...)
	b = append(b, scope...)
	b = append(b, `","name":`...)
	b = appendJSONString(b, name)
	b = append(b, `,"cat":"`...)
	b = append(b, cat...)
	b = append(b, `","pid":`...)
	b = strconv.AppendInt(b, pid, 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendInt(b, tid, 10)
	b = append(b, `,"ts":`...)
	b = appendMicros(b, t-p.t0)
	b = append(b, `,"args":{`...)
	for i, a := range args {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, a[0])
		b = append(b, ':')
		b = append(b, a[1]...)
	}
	return p.write(append(b, "}}"...))
}

func quote(s string) string { return string(appendJSONString(nil, s)) }

// nameGPU names a GPU's counter track once.
func (p *ChromeJSON) nameGPU(gpu int, uuid string) error {
	if p.gpus[gpu] {
		return nil
	}
	p.gpus[gpu] = true
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

// Sample writes one sample value as a counter. A failed or unsupported
// query is never a zero: it is an instant event naming the status, once
// each time the status changes.
func (p *ChromeJSON) Sample(v *report.SampleValue) error {
	if err := p.nameGPU(v.GPU, v.UUID); err != nil {
		return err
	}
	base := "GPU " + strconv.Itoa(v.GPU) + " "
	if v.MIG != nil {
		base += "MIG " + strconv.Itoa(*v.MIG) + " "
	}
	view := map[string]string{"framebuffer": "framebuffer", "bar1": "BAR1", "processes": "framebuffer"}[v.Kind]
	pid := gpuTrackPID(v.GPU)
	skey := base + v.Kind
	if !v.Usable {
		if p.lastStatus[skey] == v.Status {
			return nil
		}
		p.lastStatus[skey] = v.Status
		return p.instant("p", pid, pid, base+v.Kind+" not available: "+v.API+" "+v.Status, "nvml", v.TimeNS,
			[][2]string{{"api", quote(v.API)}, {"status", quote(v.Status)}})
	}
	p.lastStatus[skey] = v.Status
	if v.Value == nil {
		return nil
	}
	b := p.begin(nil)
	b = append(b, `{"ph":"C","name":`...)
	b = appendJSONString(b, base+view+" "+v.Field)
	b = append(b, `,"cat":"nvml","pid":`...)
	b = strconv.AppendInt(b, pid, 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendInt(b, pid, 10)
	b = append(b, `,"ts":`...)
	b = appendMicros(b, v.TimeNS-p.t0)
	b = append(b, `,"args":{"bytes":`...)
	b = strconv.AppendUint(b, *v.Value, 10)
	return p.write(append(b, "}}"...))
}

// Call writes one call as a complete slice on its thread's track, and a
// failed call also as an instant event.
func (p *ChromeJSON) Call(c *report.Call) error {
	if err := p.nameThread(c); err != nil {
		return err
	}
	pre := p.prefix[c.Symbol]
	if pre == nil {
		pre = append([]byte(`{"ph":"X","name":`), appendJSONString(nil, c.Symbol)...)
		pre = append(pre, `,"cat":"`...)
		pre = append(pre, c.Operation...)
		pre = append(pre, `","pid":`...)
		p.prefix[c.Symbol] = pre
	}
	b := p.begin(nil)
	b = append(b, pre...)
	b = strconv.AppendUint(b, uint64(c.PID), 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendUint(b, uint64(c.TID), 10)
	b = append(b, `,"ts":`...)
	b = appendMicros(b, c.StartNS-p.t0)
	b = append(b, `,"dur":`...)
	b = appendMicros(b, max(c.EndNS-c.StartNS, 0))
	b = append(b, `,"args":{"result":`...)
	b = append(b, p.resultName(c)...)
	b = callArgs(b, c)
	if err := p.write(append(b, "}}"...)); err != nil {
		return err
	}
	if c.Result == 0 {
		return nil
	}
	b = p.begin(nil)
	b = append(b, `{"ph":"i","s":"p","name":`...)
	b = appendJSONString(b, "FAILED "+c.Symbol+": "+c.ResultName)
	b = append(b, `,"cat":"failure","pid":`...)
	b = strconv.AppendUint(b, uint64(c.PID), 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendUint(b, uint64(c.TID), 10)
	b = append(b, `,"ts":`...)
	b = appendMicros(b, c.EndNS-p.t0)
	b = append(b, `,"args":{"symbol":`...)
	b = appendJSONString(b, c.Symbol)
	b = append(b, `,"result":`...)
	b = appendJSONString(b, c.ResultName)
	b = callArgs(b, c)
	return p.write(append(b, "}}"...))
}

// nameThread names a thread's track (and a process seen first here) once.
func (p *ChromeJSON) nameThread(c *report.Call) error {
	tk := [2]uint32{c.PID, c.TID}
	if tk == p.last || p.threads[tk] {
		p.last = tk
		return nil
	}
	p.last = tk
	p.threads[tk] = true
	p.procs[c.PID] = true // named by Finish
	name := report.ThreadTrackName(c.PID, c.TID, p.names[tk])
	return p.meta("thread_name", int64(c.PID), int64(c.TID), "name", name, 0)
}

var successName = []byte(`"CUDA_SUCCESS"`)

func (p *ChromeJSON) resultName(c *report.Call) []byte {
	if c.Result == 0 {
		return successName
	}
	b, ok := p.results[c.Result]
	if !ok {
		b = appendJSONString(nil, c.ResultName)
		p.results[c.Result] = b
	}
	return b
}

// callArgs appends the decoded call fields to an open args object.
func callArgs(b []byte, c *report.Call) []byte {
	key := func(k string) {
		b = append(b, ',', '"')
		b = append(b, k...)
		b = append(b, '"', ':')
	}
	u := func(k string, v *uint64) {
		if v != nil {
			key(k)
			b = strconv.AppendUint(b, *v, 10)
		}
	}
	hx := func(k string, v *uint64) {
		if v != nil {
			key(k)
			b = append(b, `"0x`...)
			b = strconv.AppendUint(b, *v, 16)
			b = append(b, '"')
		}
	}
	if c.Result != 0 {
		key("code")
		b = strconv.AppendInt(b, int64(c.Result), 10)
	}
	a := &c.Args
	u("size", a.Size)
	hx("flags", a.Flags)
	hx("ptr", a.Ptr)
	u("device_handle", a.DeviceHandle)
	hx("target", a.Target)
	if a.Device != nil {
		key("device_arg")
		b = strconv.AppendInt(b, int64(*a.Device), 10)
	}
	hx("peer", a.Peer)
	u("count", a.Count)
	if len(a.Key) > 0 {
		key("key")
		b = append(b, '"')
		b = hex.AppendEncode(b, a.Key)
		b = append(b, '"')
	}
	if c.CUDADevice >= 0 {
		key("cuda_device")
		b = strconv.AppendInt(b, int64(c.CUDADevice), 10)
	}
	if c.Context != 0 {
		key("ctx")
		b = strconv.AppendUint(b, uint64(c.Context), 10)
	}
	if c.Depth > 0 {
		key("depth")
		b = strconv.AppendUint(b, uint64(c.Depth), 10)
	}
	if c.Frozen {
		key("frozen")
		b = append(b, "true"...)
	}
	if c.LateAttach {
		key("attached_late")
		b = append(b, "true"...)
	}
	return b
}

// clip shortens s to n runes, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
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

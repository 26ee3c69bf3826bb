// Package bpf loads forensic's eBPF program and decodes what it emits.
//
// The C program (forensic.bpf.c) and its header (forensic.h) are the single
// definition of the records, flags, limits and counters; bpf2go generates
// the Go types and constants from them (abi.go gives those readable names).
// One generic entry/return program pair serves every attached libcuda
// symbol: the attach cookie is the symbol's id in [cuda.Symbols], and the
// capture configuration for each id is derived from that table by [Load].
package bpf

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"

	"github.com/retrivium/forensic/cuda"
)

// Call is one completed call of an attached symbol, as the probes emitted
// it: an fx_call record, or an fx_call_array for a symbol whose row
// captures an array argument (then ArrayN elements are in Array). The
// bytes the row captures are in In, OutA and OutB, taken from the record's
// tail (Tail holds the tail as the record had it, zero past its length).
type Call struct {
	forensicFxCall
	In     [inLen]byte
	OutA   [outALen]byte
	OutB   [outBLen]byte
	ArrayN uint8
	Array  [arrayLen]byte
}

// Proc is one lifecycle change of a tracked process.
type Proc = forensicFxProc

// Hold is a recorded process mapping a libcuda file whose probes are not
// in: it is stopped at the mapping until user space continues it.
type Hold = forensicFxHold

// Options are fixed when the program is loaded.
type Options struct {
	// TraceAll records every process that calls an attached symbol, not only
	// tracked ones.
	TraceAll bool
	// FreezeOnFailure stops a process with SIGSTOP when a call of an
	// attached symbol fails.
	FreezeOnFailure bool
	// RingBytes is the ring buffer size, a power of two (default 16 MiB).
	RingBytes int
	// StackAll captures the user stack of successful calls of symbols whose
	// row asks for it (device allocations), not only of failures.
	StackAll bool
	// StackRate and StackBurst bound stack captures at call sites not
	// captured before (other than a process's first failure): per CPU,
	// StackRate a second on average (default 64), StackBurst at once
	// (default 256).
	StackRate, StackBurst int
	// Scope, when not empty, limits TraceAll to the processes of these
	// cgroup v2 cgroups and of the cgroups below them: any other process
	// is neither recorded nor held at a mapping, decided in the kernel.
	Scope []Cgroup
	// NamedFilesOnly: only the files the caller names are attached
	// (--libcuda), so the map hook holds a process only until its exec
	// record is read (HoldUnread), never at a libcuda whose probes are
	// not in.
	NamedFilesOnly bool
	// maxTracked replaces the size of the tracked-process map (tests fill
	// it to see what the probes count when it is full).
	maxTracked uint32
}

// Cgroup is a cgroup v2 cgroup a recording is scoped to: its id (the
// inode number of its directory) and its level (the root is level 0, its
// children 1, ...).
type Cgroup struct {
	ID    uint64
	Level int
}

// MaxScopes and ScopeLevels bound a scope: at most MaxScopes cgroups, each
// at a level below ScopeLevels.
const (
	MaxScopes   = int(forensicFxConstFX_MAX_SCOPES)
	ScopeLevels = int(forensicFxConstFX_SCOPE_LEVELS)
)

// scopeLevels is the bit set of the levels the scope's cgroups lie at,
// what the probes read as scope_levels (0: no scope).
func scopeLevels(scope []Cgroup) (uint32, error) {
	if len(scope) > MaxScopes {
		return 0, fmt.Errorf("%d cgroups to scope to, at most %d", len(scope), MaxScopes)
	}
	var levels uint32
	for _, c := range scope {
		if c.Level < 0 || c.Level >= ScopeLevels {
			return 0, fmt.Errorf("cgroup %d is at level %d, the probes look %d levels deep", c.ID, c.Level, ScopeLevels)
		}
		levels |= 1 << c.Level
	}
	return levels, nil
}

// Objects are the loaded program and its maps.
type Objects struct {
	objs forensicObjects
	// multi: the call programs were loaded for uprobe_multi links (one
	// link per program and library instead of one per symbol).
	multi bool
}

// DefaultRingBytes is the default ring buffer size.
const DefaultRingBytes = 16 << 20

// Default bounds of stack captures at new call sites, per CPU.
const (
	DefaultStackRate  = 64  // a second, on average
	DefaultStackBurst = 256 // at once
)

// Load loads the program into the kernel and fills the capture
// configuration from the symbol table.
func Load(opts Options) (*Objects, error) {
	if len(cuda.Symbols) > maxSymbols {
		return nil, fmt.Errorf("symbol table has %d rows, the probes take %d", len(cuda.Symbols), maxSymbols)
	}
	if opts.RingBytes == 0 {
		opts.RingBytes = DefaultRingBytes
	}
	if opts.StackRate <= 0 {
		opts.StackRate = DefaultStackRate
	}
	if opts.StackBurst <= 0 {
		opts.StackBurst = DefaultStackBurst
	}
	if opts.RingBytes&(opts.RingBytes-1) != 0 || opts.RingBytes < 4096 {
		return nil, fmt.Errorf("ring buffer size %d is not a power of two of at least 4096", opts.RingBytes)
	}
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK.
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("raise memlock limit: %w", err)
	}
	spec, err := loadForensic()
	if err != nil {
		return nil, fmt.Errorf("parse BPF object: %w", err)
	}
	spec.Maps[forensicMapEvents].MaxEntries = uint32(opts.RingBytes)
	if opts.maxTracked > 0 {
		spec.Maps[forensicMapTracked].MaxEntries = opts.maxTracked
	}
	if err := sizeScratch(spec); err != nil {
		return nil, err
	}
	set := func(name string, v any) error {
		vs, ok := spec.Variables[name]
		if !ok {
			return fmt.Errorf("BPF object has no variable %s", name)
		}
		return vs.Set(v)
	}
	if err := set(forensicVarTraceAll, boolByte(opts.TraceAll)); err != nil {
		return nil, err
	}
	if err := set(forensicVarFreezeOnFailure, boolByte(opts.FreezeOnFailure)); err != nil {
		return nil, err
	}
	if err := set(forensicVarNamedFilesOnly, boolByte(opts.NamedFilesOnly)); err != nil {
		return nil, err
	}
	levels, err := scopeLevels(opts.Scope)
	if err != nil {
		return nil, err
	}
	if len(opts.Scope) > 0 && !opts.TraceAll {
		return nil, errors.New("a cgroup scope applies to TraceAll only")
	}
	if err := set(forensicVarScopeLevels, levels); err != nil {
		return nil, err
	}
	// The recorder never holds itself at a mapping.
	if err := set(forensicVarSelfTgid, uint32(os.Getpid())); err != nil {
		return nil, err
	}
	// Wake the reader after every eighth of the ring's records per CPU,
	// so a burst cannot overrun a reader that only polls.
	if err := set(forensicVarWakeupEvery, max(uint64(64), uint64(opts.RingBytes/recordBytes/8))); err != nil {
		return nil, err
	}
	if err := set(forensicVarStackRateNs, uint64(1e9)/uint64(opts.StackRate)); err != nil {
		return nil, err
	}
	if err := set(forensicVarStackBurst, uint64(opts.StackBurst)); err != nil {
		return nil, err
	}
	o := &Objects{}
	// Closing a per-symbol uprobe link waits for the kernel (about 100 ms
	// each here): detaching ~150 of them took 15 s. A uprobe_multi link
	// (Linux 6.6+) attaches every symbol of a file at once and detaches at
	// once; the cookies still name each symbol.
	if features.HaveBPFLinkUprobeMulti() == nil {
		o.multi = true
		spec.Programs[forensicProgCallEntry].AttachType = ebpf.AttachTraceUprobeMulti
		spec.Programs[forensicProgCallReturn].AttachType = ebpf.AttachTraceUprobeMulti
	}
	if err := spec.LoadAndAssign(&o.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load BPF program (verifier): %+v", ve)
		}
		return nil, fmt.Errorf("load BPF program: %w", err)
	}
	if err := o.fillPyLayouts(); err != nil {
		o.Close()
		return nil, err
	}
	for _, c := range opts.Scope {
		if err := o.objs.ScopeCgroups.Put(c.ID, uint8(1)); err != nil {
			o.Close()
			return nil, fmt.Errorf("scope to cgroup %d: %w", c.ID, err)
		}
	}
	for id := range cuda.Symbols {
		cfg, err := SymCfg(&cuda.Symbols[id], opts.StackAll)
		if err == nil {
			err = o.objs.Symcfg.Put(uint32(id), cfg)
		}
		if err != nil {
			o.Close()
			return nil, fmt.Errorf("configure symbol %s: %w", cuda.Symbols[id].Name, err)
		}
	}
	return o, nil
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// SymCfg is the capture configuration the probes use for one row. A row
// asking for more than the record holds is an error.
func SymCfg(s *cuda.Symbol, stackAll bool) (forensicFxSymcfg, error) {
	c := forensicFxSymcfg{InArg: -1, OutaArg: -1, OutbArg: -1, ArrArg: -1, ArrCountArg: -1}
	if int(s.In.Len) > inLen || int(s.OutA.Len) > outALen || int(s.OutB.Len) > outBLen {
		return c, fmt.Errorf("%s: capture longer than the record's buffers", s.Name)
	}
	if s.In.Len > 0 {
		c.InArg, c.InLen = s.In.Arg, s.In.Len
		if s.In.FromStack {
			c.InArg = inStack
		}
	}
	if s.OutA.Len > 0 {
		c.OutaArg, c.OutaLen = s.OutA.Arg, s.OutA.Len
	}
	if s.OutB.Len > 0 {
		c.OutbArg, c.OutbLen = s.OutB.Arg, s.OutB.Len
	}
	if stackAll && s.Stack {
		c.Stack = 1
	}
	t := tailOf(s)
	c.TailOutb, c.TailIn, c.TailLen = uint8(t.outB), uint8(t.in), uint8(t.n)
	if a := s.Array; a.Len > 0 {
		if int(a.Max) > arrayMax || int(a.Max)*int(a.Len) > arrayLen || a.Count.Src != cuda.SrcArg || a.Count.Index > 5 {
			return c, fmt.Errorf("%s: array capture %+v does not fit the probes' limits", s.Name, a)
		}
		c.ArrArg, c.ArrLen, c.ArrMax = a.Arg, a.Len, a.Max
		c.ArrCountArg, c.ArrCountWidth = int8(a.Count.Index), a.Count.Width
	}
	return c, nil
}

// tail is where a row's captures lie in a call record's tail (struct
// fx_call): the first out parameter at 0, the second at outB, the input
// struct at in, each at a multiple of 8 bytes; n bytes in all.
type tail struct{ outB, in, n int }

func tailOf(s *cuda.Symbol) tail {
	round := func(n uint8) int { return (int(n) + 7) &^ 7 }
	var t tail
	t.outB = round(s.OutA.Len)
	t.in = t.outB + round(s.OutB.Len)
	t.n = t.in + round(s.In.Len)
	return t
}

// RingBytes is how many bytes the ring holds for one call of a symbol (its
// record and the kernel's 8-byte header, rounded up to 8): 96 for a call
// with nothing to read, 104 for an allocation's returned pointer, at most
// 168 without an array argument.
func RingBytes(s *cuda.Symbol) int {
	n := callSize
	switch t := tailOf(s); {
	case s.Array.Len > 0:
		n = callArraySize
	case t.n == 0:
		n = callFixed
	case t.n <= 8 && s.OutB.Len == 0 && s.In.Len == 0:
		n = callFixed + 8
	}
	return (n + ringHeader + 7) &^ 7
}

// Close unloads the program and its maps (links must be closed first).
func (o *Objects) Close() error { return o.objs.Close() }

// Track starts recording a process (and, through the fork tracepoint, the
// processes it forks from now on).
func (o *Objects) Track(pid uint32) error {
	return o.objs.Tracked.Put(pid, uint32(1))
}

// Tracked reports whether pid is tracked.
func (o *Objects) Tracked(pid uint32) bool {
	var v uint32
	return o.objs.Tracked.Lookup(pid, &v) == nil
}

// UnreadExec returns the timestamp of a process's exec record that user
// space has not yet marked read; ok is false once it has (or when the
// process exited, or never executed a program while tracked).
func (o *Objects) UnreadExec(pid uint32) (ts uint64, ok bool) {
	return ts, o.objs.UnreadExecs.Lookup(pid, &ts) == nil
}

// MarkExecRead says user space has read the exec record of pid stamped
// ts: the map hook stops holding the process at its libcuda mappings. A
// later exec's entry (another timestamp) stays. The check and the delete
// are two steps: an exec landing between them is taken as read, which
// loses only that exec's hold, never a record.
func (o *Objects) MarkExecRead(pid uint32, ts uint64) {
	if cur, ok := o.UnreadExec(pid); ok && cur == ts {
		o.objs.UnreadExecs.Delete(pid)
	}
}

// NewReader opens a reader on the ring buffer.
func (o *Objects) NewReader() (*ringbuf.Reader, error) {
	return ringbuf.NewReader(o.objs.Events)
}

// Stats reads the loss and health counters, combined over CPUs.
func (o *Objects) Stats() (Stats, error) {
	var per []forensicFxStats
	if err := o.objs.Stats.Lookup(uint32(0), &per); err != nil {
		return Stats{}, err
	}
	return sumCPUs(per), nil
}

// StackFrame is one user stack frame as the kernel stored it: a build id
// and a file offset (Status 1), or only an address when the kernel could not
// read the file's build id (Status 2).
type StackFrame struct {
	Status  int32
	BuildID [20]byte
	Value   uint64 // file offset (Status 1) or address (Status 2)
}

// Stack status values (enum bpf_stack_build_id_status).
const (
	StackEmpty   = 0
	StackBuildID = 1
	StackIP      = 2
)

// Stack reads the user stack of a stack id, innermost frame first.
func (o *Objects) Stack(id int32) ([]StackFrame, error) {
	var raw [stackDepth]StackFrame
	if err := o.objs.Stacks.Lookup(uint32(id), &raw); err != nil {
		return nil, err
	}
	n := 0
	for n < len(raw) && raw[n].Status != StackEmpty {
		n++
	}
	return append([]StackFrame(nil), raw[:n]...), nil
}

// AttachLifecycle attaches the fork, exec and exit tracepoints that follow
// tracked processes. Close the returned links to detach.
func (o *Objects) AttachLifecycle() ([]link.Link, error) {
	var links []link.Link
	for _, p := range []*ebpf.Program{o.objs.ProcFork, o.objs.ProcExec, o.objs.ProcExit} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			for _, l := range links {
				l.Close()
			}
			return nil, fmt.Errorf("attach %s: %w", p, err)
		}
		links = append(links, l)
	}
	return links, nil
}

// AttachMapHook attaches the program that holds a recorded process at
// its first executable mapping of a libcuda file not yet marked with
// MarkAttached (see Hold). Close the link to detach.
func (o *Objects) AttachMapHook() (link.Link, error) {
	l, err := link.AttachTracing(link.TracingOptions{Program: o.objs.MapFile})
	if err != nil {
		return nil, fmt.Errorf("attach %s: %w", o.objs.MapFile, err)
	}
	return l, nil
}

// NewHoldReader opens a reader on the holds ring buffer.
func (o *Objects) NewHoldReader() (*ringbuf.Reader, error) {
	return ringbuf.NewReader(o.objs.Holds)
}

// MarkAttached tells the map hook that a file (the kernel's dev_t and
// inode, as in Hold) needs no hold any more.
func (o *Objects) MarkAttached(dev uint32, ino uint64) error {
	return o.objs.AttachedFiles.Put(forensicFxFile{Dev: uint64(dev), Ino: ino}, uint32(1))
}

// UnmarkAttached undoes MarkAttached: the map hook holds the next process
// that maps the file again (its probes were taken off).
func (o *Objects) UnmarkAttached(dev uint32, ino uint64) error {
	err := o.objs.AttachedFiles.Delete(forensicFxFile{Dev: uint64(dev), Ino: ino})
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

// Attach puts the return and entry probes on symbols ids of the ELF file
// at path, at the given file offsets (one per id). Return probes go first:
// a call entered between the two attachments is then counted as an
// unmatched return instead of leaving a stale entry behind.
func (o *Objects) Attach(path string, ids []int, offsets []uint64) ([]link.Link, error) {
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, err
	}
	if o.multi {
		cookies := make([]uint64, len(ids))
		for i, id := range ids {
			cookies[i] = uint64(id)
		}
		opts := &link.UprobeMultiOptions{Addresses: offsets, Cookies: cookies}
		ret, err := ex.UretprobeMulti(nil, o.objs.CallReturn, opts)
		if err != nil {
			return nil, fmt.Errorf("uretprobe_multi on %s: %w", path, err)
		}
		ent, err := ex.UprobeMulti(nil, o.objs.CallEntry, opts)
		if err != nil {
			ret.Close()
			return nil, fmt.Errorf("uprobe_multi on %s: %w", path, err)
		}
		return []link.Link{ret, ent}, nil
	}
	var links []link.Link
	for i, id := range ids {
		name := cuda.Symbols[id].Name
		opts := &link.UprobeOptions{Address: offsets[i], Cookie: uint64(id)}
		ret, err := ex.Uretprobe(name, o.objs.CallReturn, opts)
		if err != nil {
			CloseLinks(links)
			return nil, fmt.Errorf("uretprobe %s: %w", name, err)
		}
		links = append(links, ret)
		ent, err := ex.Uprobe(name, o.objs.CallEntry, opts)
		if err != nil {
			CloseLinks(links)
			return nil, fmt.Errorf("uprobe %s: %w", name, err)
		}
		links = append(links, ent)
	}
	return links, nil
}

// CloseLinks detaches links concurrently: each close of a per-symbol uprobe
// waits for the kernel, and those waits overlap.
func CloseLinks(links []link.Link) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, l := range links {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			l.Close()
			<-sem
		}()
	}
	wg.Wait()
}

// ProgramNames are the names the kernel knows the programs by; a test can
// look for leftovers after a recorder is killed.
var ProgramNames = []string{"call_entry", "call_return", "proc_fork", "proc_exec", "proc_exit", "map_file"}

// ErrShortRecord: a ring buffer record shorter than its kind's layout.
var ErrShortRecord = errors.New("short ring buffer record")

// Decode interprets one ring buffer record. It accepts any bytes: a record
// of unknown kind or wrong size, or a call of a symbol not in the table, is
// an error, never a panic. Both call record kinds decode into call and
// return KindCall.
func Decode(rec []byte, call *Call, proc *Proc) (kind uint8, err error) {
	if len(rec) == 0 {
		return 0, ErrShortRecord
	}
	switch rec[0] {
	case KindCall:
		if err := decodeCall(rec, call); err != nil {
			return 0, err
		}
		call.ArrayN = 0
		return KindCall, nil
	case KindCallArray:
		if len(rec) < callArraySize {
			return 0, fmt.Errorf("%w: call record of %d bytes", ErrShortRecord, len(rec))
		}
		if err := decodeCall(rec[:callSize], call); err != nil {
			return 0, err
		}
		a := (*forensicFxCallArray)(unsafe.Pointer(&rec[0]))
		call.ArrayN, call.Array = a.N, a.Data
		return KindCall, nil
	case KindProc:
		if len(rec) < procSize {
			return 0, fmt.Errorf("%w: process record of %d bytes", ErrShortRecord, len(rec))
		}
		*proc = *(*Proc)(unsafe.Pointer(&rec[0]))
		return KindProc, nil
	}
	return 0, fmt.Errorf("unknown ring buffer record kind %d", rec[0])
}

// decodeCall reads a call record's fixed part and the tail its symbol's
// row captures.
func decodeCall(rec []byte, call *Call) error {
	if len(rec) < callFixed {
		return fmt.Errorf("%w: call record of %d bytes", ErrShortRecord, len(rec))
	}
	call.forensicFxCall = forensicFxCall{}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&call.forensicFxCall)), callSize), rec)
	if int(call.Symbol) >= len(cuda.Symbols) {
		return fmt.Errorf("call record of symbol %d, the table has %d", call.Symbol, len(cuda.Symbols))
	}
	s := &cuda.Symbols[call.Symbol]
	t := tailOf(s)
	if len(rec) < callFixed+t.n {
		return fmt.Errorf("%w: call record of %d bytes, %s's is %d", ErrShortRecord, len(rec), s.Name, callFixed+t.n)
	}
	tl := call.Tail[:]
	call.OutA, call.OutB, call.In = [outALen]byte{}, [outBLen]byte{}, [inLen]byte{}
	copy(call.OutA[:min(int(s.OutA.Len), outALen)], tl)
	copy(call.OutB[:min(int(s.OutB.Len), outBLen)], tl[min(t.outB, tailLen):])
	copy(call.In[:min(int(s.In.Len), inLen)], tl[min(t.in, tailLen):])
	return nil
}

// DecodeHold interprets one record of the holds ring. It accepts any
// bytes: a record of another kind or too short is an error, never a panic.
func DecodeHold(rec []byte, h *Hold) error {
	if len(rec) == 0 || rec[0] != KindHold {
		return fmt.Errorf("not a hold record")
	}
	if len(rec) < holdSize {
		return fmt.Errorf("%w: hold record of %d bytes", ErrShortRecord, len(rec))
	}
	*h = *(*Hold)(unsafe.Pointer(&rec[0]))
	return nil
}

// Raw converts a call's captured bytes into the decoder's input.
func (c *Call) Raw() cuda.Raw {
	r := cuda.Raw{Args: c.Args, In: c.In, OutA: c.OutA, OutB: c.OutB}
	r.InOK = c.Flags&CallInFault == 0
	r.OutAOK = c.Result == 0 && c.Flags&CallOutAFault == 0
	r.OutBOK = c.Result == 0 && c.Flags&CallOutBFault == 0
	if c.Kind == KindCallArray && c.Flags&CallArrayFault == 0 {
		r.Arr, r.ArrN, r.ArrOK = c.Array, c.ArrayN, true
	}
	return r
}

// CString converts a NUL-terminated C char array.
func CString(b []int8) string {
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	out := make([]byte, n)
	for i := 0; i < n; i++ {
		out[i] = byte(b[i])
	}
	return string(out)
}

// Argv returns the argv an exec or first-call record carries: exactly the
// bytes the probe copied (the rest of the record's buffer is whatever the
// ring held before), each argument as it was, empty ones included. Under
// ProcArgsCut the last argument may be cut; nil when nothing was copied.
func (p *Proc) Argv() []string {
	n := min(int(p.ArgsLen), len(p.Args))
	return Args(p.Args[:n])
}

// Exe returns the path of the file a process runs, as an exec or
// first-call record names it (/proc/PID/exe's name for it); a path cut to
// its last components begins with "...". "" when the record names none.
func (p *Proc) Exe() string {
	n := min(int(p.FilenameLen), len(p.Filename))
	if n == 0 {
		return ""
	}
	name := CString(p.Filename[len(p.Filename)-n:])
	if p.Flags&ProcFilenameCut != 0 {
		return "..." + name
	}
	return name
}

// Args splits an argv area as a process holds it (and /proc/PID/cmdline
// shows it): each argument NUL terminated, an empty argument an empty
// string. A last argument without its NUL (a cut copy) is kept as it is.
func Args[T byte | int8](b []T) []string {
	if len(b) == 0 {
		return nil
	}
	if b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	out := []string{}
	start := 0
	for i := 0; i <= len(b); i++ {
		if i == len(b) || b[i] == 0 {
			s := make([]byte, i-start)
			for j := range s {
				s[j] = byte(b[start+j])
			}
			out = append(out, string(s))
			start = i + 1
		}
	}
	return out
}

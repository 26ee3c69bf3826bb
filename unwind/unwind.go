package unwind

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
)

// Mapping is one executable mapping of the process at the time of capture,
// as /proc/PID/maps lists it (and run.db's processes records keep it).
type Mapping struct {
	Start, End uint64 // [Start, End)
	Offset     uint64 // file offset mapped at Start
	Path       string // as the process sees it; "" or "[vdso]" for memory without a file
	Host       string // where this machine reads the file, when not Path
	BuildID    string // hex GNU build id, when known
}

func (m Mapping) name() string {
	if m.Path == "" {
		return fmt.Sprintf("anonymous mapping %#x-%#x", m.Start, m.End)
	}
	return m.Path
}

// key identifies the file for the module cache.
func (m Mapping) key() string {
	if m.BuildID != "" {
		return "id:" + m.BuildID
	}
	return "path:" + m.Host + "\x00" + m.Path
}

// Registers are the values captured at one instant, by DWARF register
// number. Known marks the captured ones: a walk never uses an unknown
// register.
type Registers struct {
	Value [NumRegs]uint64
	Known uint32
}

// Set records one captured register.
func (r *Registers) Set(reg int, v uint64) {
	r.Value[reg] = v
	r.Known |= 1 << reg
}

// Has reports whether reg is known.
func (r *Registers) Has(reg int) bool { return r.Known&(1<<reg) != 0 }

// Stack is a copy of user memory starting at the stack pointer.
type Stack struct {
	Addr uint64 // address of Data[0]
	Data []byte
}

// errPastStack and errBelowStack are the two ways a read misses the copy.
var (
	errPastStack  = errors.New("read past the copied stack")
	errBelowStack = errors.New("read outside the stack (below the stack pointer or far from it)")
)

// read returns size bytes at addr, little-endian.
func (s Stack) read(addr uint64, size int) (uint64, error) {
	if addr < s.Addr {
		return 0, errBelowStack
	}
	off := addr - s.Addr
	if off > uint64(len(s.Data)) || uint64(len(s.Data))-off < uint64(size) {
		return 0, errPastStack
	}
	var b [8]byte
	copy(b[:], s.Data[off:off+uint64(size)])
	return binary.LittleEndian.Uint64(b[:]), nil
}

// Capture is everything a walk starts from.
type Capture struct {
	Regs     Registers
	Stack    Stack
	Mappings []Mapping // executable mappings
}

// Via says how a frame's address was found.
type Via uint8

const (
	// ViaRegisters: the instruction pointer captured.
	ViaRegisters Via = iota
	// ViaCFI: a return address located by the callee's CFI.
	ViaCFI
	// ViaFramePointer: a return address read above the callee's saved
	// frame pointer, where the callee had no CFI.
	ViaFramePointer
)

// String returns the method's name: registers, cfi or frame-pointer.
func (v Via) String() string {
	switch v {
	case ViaRegisters:
		return "registers"
	case ViaCFI:
		return "cfi"
	case ViaFramePointer:
		return "frame-pointer"
	}
	return fmt.Sprintf("Via(%d)", v)
}

// Frame is one frame of a walk, innermost first.
type Frame struct {
	// Addr is the captured instruction pointer for the first frame and a
	// return address for the others.
	Addr uint64
	Via  Via
	// Slot is the stack address Addr was read from (0 for the first frame).
	Slot uint64
	// Mapped is false for an address outside every executable mapping;
	// the fields below are then empty.
	Mapped     bool
	Path       string
	BuildID    string
	FileOffset uint64 // of Addr in Path
	Symbol            // the function, when a symbol table names it
}

// Stop says why a walk ended.
type Stop uint8

const (
	// StopOutermost: the CFI of the last frame marks the return address
	// undefined (glibc's _start and clone3, a thread's start). The only
	// complete ending.
	StopOutermost Stop = iota + 1
	// StopStackEnd: the next return address or saved register lies
	// beyond the copied stack.
	StopStackEnd
	// StopNoCFI: the file has no CFI for the address and the frame
	// pointer does not point into the stack.
	StopNoCFI
	// StopNoFile: the file of the frame could not be opened (not at hand,
	// another build, no file such as the vDSO) and the frame pointer does
	// not point into the stack.
	StopNoFile
	// StopOutsideMappings: an address outside every executable mapping: a
	// corrupted or garbage return address, 0 included.
	StopOutsideMappings
	// StopBadCFI: the CFI could not be applied: an unsupported rule, a
	// register that is not known, a frame that does not move up the
	// stack.
	StopBadCFI
	// StopDepth: the walk reached its frame limit.
	StopDepth
)

var stopNames = [...]string{
	StopOutermost:       "outermost",
	StopStackEnd:        "stack-end",
	StopNoCFI:           "no-cfi",
	StopNoFile:          "no-file",
	StopOutsideMappings: "outside-mappings",
	StopBadCFI:          "bad-cfi",
	StopDepth:           "depth-limit",
}

var stopText = [...]string{
	StopOutermost:       "reached the outermost frame",
	StopStackEnd:        "ran past the copied stack",
	StopNoCFI:           "no CFI for this address and no usable frame pointer",
	StopNoFile:          "the file of this address is not at hand and no usable frame pointer",
	StopOutsideMappings: "an address outside every executable mapping",
	StopBadCFI:          "the CFI could not be applied",
	StopDepth:           "reached the frame limit",
}

// String returns the stop's short name ("outermost", "stack-end", ...).
func (s Stop) String() string {
	if int(s) < len(stopNames) && stopNames[s] != "" {
		return stopNames[s]
	}
	return fmt.Sprintf("Stop(%d)", s)
}

// ParseStop returns the stop a short name names (the inverse of String);
// false for a name it does not know.
func ParseStop(name string) (Stop, bool) {
	for i, n := range stopNames {
		if n != "" && n == name {
			return Stop(i), true
		}
	}
	return 0, false
}

// Text returns the stop as a phrase for people.
func (s Stop) Text() string {
	if int(s) < len(stopText) && stopText[s] != "" {
		return stopText[s]
	}
	return s.String()
}

// Result is a walk: its frames and why it ended.
type Result struct {
	Frames []Frame
	Stop   Stop
	// Detail says more about the stop: the address, file or rule.
	Detail string
}

// Complete reports whether the walk reached the outermost frame.
func (r Result) Complete() bool { return r.Stop == StopOutermost }

// DefaultMaxDepth bounds a walk, as perf's default
// kernel.perf_event_max_stack does.
const DefaultMaxDepth = 127

// Unwinder walks captured stacks. It caches each file's parsed CFI and
// symbols, so one Unwinder should serve every walk of an analysis. It is
// safe for concurrent use.
type Unwinder struct {
	files    Files
	maxDepth int
	mu       sync.Mutex
	modules  map[string]*module
	retain   int // see Retain
}

// Retain bounds the files the Unwinder keeps parsed to n (0, the
// default: every file, for one analysis); past it the cache is emptied.
// With a bound, a file that could not be opened is not kept either, so
// the next walk that needs it tries again: a recorder that runs for days
// names stacks of processes that come and go, and a file another process
// could not show may be readable through the next one.
func (u *Unwinder) Retain(n int) {
	u.mu.Lock()
	u.retain = n
	u.mu.Unlock()
}

// New returns an Unwinder that opens files through files, walking at most
// maxDepth frames (DefaultMaxDepth when 0).
func New(files Files, maxDepth int) *Unwinder {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	return &Unwinder{files: files, maxDepth: maxDepth, modules: map[string]*module{}}
}

// module returns the cached module of m's file.
func (u *Unwinder) module(m Mapping) *module {
	u.mu.Lock()
	defer u.mu.Unlock()
	k := m.key()
	mod, ok := u.modules[k]
	if !ok {
		mod = loadModule(u.files, m)
		if u.retain > 0 && mod.err != nil {
			return mod
		}
		if u.retain > 0 && len(u.modules) >= u.retain {
			clear(u.modules)
		}
		u.modules[k] = mod
	}
	return mod
}

// Symbolize names the code at a file offset of m's file. ret says the
// address is a return address: the function is looked up at the byte
// before it, so that a call ending a function is attributed to it.
func (u *Unwinder) Symbolize(m Mapping, fileOffset uint64, ret bool) (Symbol, bool) {
	mod := u.module(m)
	if mod.err != nil {
		return Symbol{}, false
	}
	look := fileOffset
	if ret && look > 0 {
		look--
	}
	v, ok := mod.vaddr(look)
	if !ok {
		return Symbol{}, false
	}
	t := mod.symbols()
	s, ok := t.lookup(v)
	if !ok {
		return Symbol{}, false
	}
	return Symbol{Function: Demangle(s.name), Raw: s.name, Offset: v + (fileOffset - look) - s.addr, Source: t.source}, true
}

// mappingOf returns the mapping holding addr.
func mappingOf(maps []Mapping, addr uint64) (Mapping, bool) {
	for _, m := range maps {
		if m.Start <= addr && addr < m.End {
			return m, true
		}
	}
	return Mapping{}, false
}

// base returns the file name of a path, for details.
func base(p string) string {
	if p == "" {
		return "?"
	}
	return filepath.Base(p)
}

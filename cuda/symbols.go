package cuda

import (
	"fmt"
	"regexp"
)

// Op is the operation class of a symbol of the table.
type Op uint8

const (
	// OpOther: initialization and device identity (cuInit, cuDeviceGet*).
	OpOther Op = iota
	// OpAllocation: device memory allocation (framebuffer).
	OpAllocation
	// OpHostAllocation: page-locked host memory allocation.
	OpHostAllocation
	// OpMapping: mapping, registration, import/export, peer and IPC access.
	OpMapping
	// OpContext: context creation, retention and selection.
	OpContext
	// OpFree: release of something an earlier call created.
	OpFree
)

var opNames = [...]string{
	OpOther:          "other",
	OpAllocation:     "allocation",
	OpHostAllocation: "host-allocation",
	OpMapping:        "mapping",
	OpContext:        "context",
	OpFree:           "free",
}

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", o)
}

// Primary reports whether a failure of this class can be the first failed
// operation of a run: allocations, mappings and context calls are; frees,
// initialization and identity queries only when nothing else failed.
func (o Op) Primary() bool {
	return o == OpAllocation || o == OpHostAllocation || o == OpMapping || o == OpContext
}

// BAR1 says whether a call's path can use the BAR1 aperture: peer access
// over PCIe, IPC of another device's memory, CPU or third-party-device
// mapping of device memory (the bar1-only-on-aperture-paths rule in
// docs/rules.md).
type BAR1 uint8

const (
	// BAR1Never: the path does not use the aperture (device allocation,
	// host registration, virtual address reservation, handle export).
	BAR1Never BAR1 = iota
	// BAR1May: the path can map device memory through the aperture.
	BAR1May
	// BAR1Peer: only when the call grants a device other than the one that
	// owns the memory (cuMemSetAccess).
	BAR1Peer
)

func (b BAR1) String() string {
	switch b {
	case BAR1Never:
		return "never"
	case BAR1May:
		return "may"
	case BAR1Peer:
		return "peer"
	}
	return fmt.Sprintf("BAR1(%d)", b)
}

// View is the memory view a resource occupies. Views are never added to
// each other.
type View uint8

const (
	ViewNone View = iota
	// ViewFramebuffer: device memory.
	ViewFramebuffer
	// ViewHost: page-locked host memory.
	ViewHost
	// ViewBAR1: device memory mapped through the aperture for another
	// device or the CPU.
	ViewBAR1
)

func (v View) String() string {
	switch v {
	case ViewFramebuffer:
		return "framebuffer"
	case ViewHost:
		return "host-pinned"
	case ViewBAR1:
		return "bar1"
	}
	return "none"
}

// Resource is the kind of thing a call creates or releases, so that a free
// can be matched to the allocation it returns.
type Resource uint8

const (
	ResNone       Resource = iota
	ResDevPtr              // cuMemAlloc*, released by cuMemFree*
	ResHostPtr             // cuMemAllocHost*, cuMemHostAlloc
	ResHostReg             // cuMemHostRegister*
	ResArray               // cuArrayCreate*, cuArray3DCreate*
	ResMipmap              // cuMipmappedArrayCreate
	ResMemHandle           // cuMemCreate, cuMemImportFromShareableHandle
	ResVAddr               // cuMemAddressReserve
	ResVMap                // cuMemMap
	ResAccess              // cuMemSetAccess to another device
	ResIPC                 // cuIpcOpenMemHandle*
	ResPoolImport          // cuMemPoolImportPointer
	ResPool                // cuMemPoolCreate
	ResPeer                // cuCtxEnablePeerAccess
	ResExtMem              // cuImportExternalMemory
	ResExtBuf              // cuExternalMemoryGetMappedBuffer
	ResContext             // cuCtxCreate*, cuGreenCtxCreate
)

var resNames = [...]string{
	ResNone: "none", ResDevPtr: "device-pointer", ResHostPtr: "host-pointer",
	ResHostReg: "host-registration", ResArray: "array", ResMipmap: "mipmapped-array",
	ResMemHandle: "memory-handle", ResVAddr: "address-range", ResVMap: "mapped-range",
	ResAccess: "peer-access-range", ResIPC: "ipc-mapping", ResPoolImport: "pool-import",
	ResPool: "memory-pool", ResPeer: "peer-access", ResExtMem: "external-memory",
	ResExtBuf: "external-buffer", ResContext: "context",
}

func (r Resource) String() string {
	if int(r) < len(resNames) {
		return resNames[r]
	}
	return fmt.Sprintf("Resource(%d)", r)
}

// View says which memory view a live resource of this kind occupies.
func (r Resource) View() View {
	switch r {
	case ResDevPtr, ResArray, ResMipmap, ResMemHandle:
		return ViewFramebuffer
	case ResHostPtr, ResHostReg:
		return ViewHost
	case ResIPC, ResPoolImport, ResPeer, ResAccess:
		return ViewBAR1
	}
	return ViewNone
}

// CreatedBy returns the operation class of the calls that create this
// kind of resource (from the symbol table), or OpOther when none does.
func (r Resource) CreatedBy() Op {
	for i := range Symbols {
		if Symbols[i].Creates == r {
			return Symbols[i].Op
		}
	}
	return OpOther
}

// CtxEffect is what a context call does to the calling thread's context
// stack, so that every call can be attributed to a device.
type CtxEffect uint8

const (
	CtxNone CtxEffect = iota
	// CtxCreate: Ptr is a new context on Device, pushed as current.
	CtxCreate
	// CtxRetain: Ptr is the primary context of Device (not made current).
	CtxRetain
	// CtxSet: Target replaces the top of the stack (NULL pops it).
	CtxSet
	// CtxPush: Target is pushed.
	CtxPush
	// CtxPop: the top is popped (its handle is written to Ptr).
	CtxPop
	// CtxDestroy: Target is destroyed and leaves every stack.
	CtxDestroy
	// CtxRelease: the primary context of Device loses a reference; the
	// driver frees it with the last.
	CtxRelease
	// CtxCreateIdle: Ptr is a new context on Device that is not made
	// current (a green context: the thread's stack is unchanged; it is made
	// current only through the CUcontext cuCtxFromGreenCtx gives for it).
	CtxCreateIdle
	// CtxAlias: Ptr is the CUcontext of the green context Target, on its
	// device; it takes no memory of its own.
	CtxAlias
)

// Identity is device identity a call reveals about a CUDA device ordinal.
type Identity uint8

const (
	IdentityNone Identity = iota
	// IdentityOrdinal: Ptr is the CUdevice for ordinal Device.
	IdentityOrdinal
	// IdentityUUID: Key holds the 16 UUID bytes of Device.
	IdentityUUID
	// IdentityPCI: Key holds the PCI bus id string of Device.
	IdentityPCI
)

// Src is where a captured value lies.
type Src uint8

const (
	SrcNone  Src = iota
	SrcArg       // an integer argument register
	SrcIn        // bytes read at entry through a pointer argument (or the stack)
	SrcOutA      // bytes read at return through the first out pointer
	SrcOutB      // bytes read at return through the second out pointer
	SrcArray     // bytes of the first element of the array argument (read at entry)
)

// Loc locates a field: argument Index (SrcArg) or byte offset Index into a
// captured buffer, Width bytes wide (values are little-endian, zero-extended).
type Loc struct {
	Src   Src
	Index uint8
	Width uint8
}

// Capture is what a probe reads through a pointer: Len bytes at the address
// in argument Arg (or, for FromStack, just above the return address where
// a struct passed by value lies).
type Capture struct {
	Arg       int8
	Len       uint8
	FromStack bool
}

// Elem says what the elements of an array argument are, for decoding.
type Elem uint8

const (
	// ElemOpaque elements are only counted.
	ElemOpaque Elem = iota
	// ElemAccessDesc elements are CUmemAccessDesc, decoded into
	// Fields.Grants.
	ElemAccessDesc
)

// ArrayCapture is an array argument the probes read at entry: the pointer
// in argument Arg to elements of Len bytes, as many as the argument at Count
// says, at most Max of them (the probes bound Max and Len×Max; when the
// caller passed more, the event's array-cut flag says so and Count keeps
// the true number).
type ArrayCapture struct {
	Arg   int8
	Len   uint8
	Count Loc // an integer argument (SrcArg)
	Max   uint8
	Elem  Elem
}

// Symbol is one row of the symbol table.
type Symbol struct {
	Name string
	// Family is the unversioned name (cuMemAlloc for cuMemAlloc_v2).
	Family string
	Op     Op
	BAR1   BAR1
	// Creates and Releases say which resources the call creates (keyed by
	// Ptr) or releases (keyed by Target).
	Creates  Resource
	Releases []Resource
	Ctx      CtxEffect
	Identity Identity
	// Exports: the call names a live resource of one of these kinds
	// (keyed by Target) with export bytes in Key (an IPC handle, a pool
	// export), so that a process importing those bytes can be sized by
	// the exporter's allocation.
	Exports []Resource
	// Imports: the call maps memory another process exported, named by
	// the bytes in Key; what it creates lies on the exporting GPU and has
	// the exported allocation's size.
	Imports bool
	// DrawsFrom: the allocation draws from a resource of this kind, named
	// by Target (a memory pool for cuMemAllocFromPoolAsync), whose own
	// limit can refuse it before the device's memory does.
	DrawsFrom Resource

	// What the probes read.
	In, OutA, OutB Capture
	// Array is the row's array argument, if it has one; its Count is also
	// the row's Count field.
	Array ArrayCapture

	// Where the decoder finds each field.
	Size, Flags, Ptr, Target, Device, Peer, Count, Key Loc
	// SizeFrom computes the size from several captured fields (pitch ×
	// height, array descriptors); it overrides Size.
	SizeFrom func(r *Raw) (uint64, bool)
	// Stack: capture the user stack of every call, not only failures
	// (device allocations, under --stacks).
	Stack bool
}

// UsesBAR1 reports whether the call's path can use the aperture, given the
// device that owns the memory and the device it is granted to (-1 when
// unknown).
func (s *Symbol) UsesBAR1(owner, peer int32) bool {
	switch s.BAR1 {
	case BAR1May:
		return true
	case BAR1Peer:
		return owner < 0 || peer < 0 || owner != peer
	}
	return false
}

func arg(i, w uint8) Loc  { return Loc{SrcArg, i, w} }
func in(o, w uint8) Loc   { return Loc{SrcIn, o, w} }
func outA(o, w uint8) Loc { return Loc{SrcOutA, o, w} }
func outB(o, w uint8) Loc { return Loc{SrcOutB, o, w} }
func arr(o, w uint8) Loc  { return Loc{SrcArray, o, w} }
func ptrTo(a int8, n uint8) Capture {
	return Capture{Arg: a, Len: n}
}

// arrayMax is the most elements an array capture keeps: the probes'
// FX_ARRAY_MAX (bpf checks every row against its limits).
const arrayMax = 8

// arrayOf is an array argument: pointer in argument a, elements of n
// bytes, their number in count; as many are kept as fit the probes'
// buffer (FX_ARRAY_LEN, 96 bytes), at most arrayMax.
func arrayOf(a int8, n uint8, count Loc, e Elem) ArrayCapture {
	return ArrayCapture{Arg: a, Len: n, Count: count, Max: uint8(min(arrayMax, len(Raw{}.Arr)/int(n))), Elem: e}
}

var none = Capture{Arg: -1}

// Symbols is the symbol table. The row index is the symbol's id: the BPF
// attach cookie and the number stored with each event (run.db keeps its own
// copy of the names, so reordering rows never breaks an old file).
var Symbols = buildSymbols()

// The x86-64 SysV ABI passes integer arguments in registers 0..5; a struct
// larger than 16 bytes passed by value (CUipcMemHandle) goes on the stack
// and takes no register, so the argument after it is register 1.
func buildSymbols() []Symbol {
	var t table
	t.allocations()
	t.hostAllocations()
	t.mappings()
	t.releases()
	t.contexts()
	return t
}

// table is the symbol table being built.
type table []Symbol

// add appends a row, completing what every row shares: the family defaults
// to the name, captures of no bytes read nothing, and an array's count is
// the row's Count.
func (t *table) add(s Symbol) {
	if s.Family == "" {
		s.Family = s.Name
	}
	for _, c := range []*Capture{&s.In, &s.OutA, &s.OutB} {
		if c.Len == 0 && !c.FromStack {
			c.Arg = -1
		}
	}
	if s.Array.Len == 0 {
		s.Array.Arg = -1
	} else {
		s.Count = s.Array.Count
	}
	*t = append(*t, s)
}

// variants adds one row per name, each of base's family.
func (t *table) variants(base Symbol, names ...string) {
	for _, n := range names {
		s := base
		s.Name = n
		s.Family = base.Name
		t.add(s)
	}
}

// allocations: device (framebuffer) allocation.
func (t *table) allocations() {
	alloc := Symbol{Op: OpAllocation, Creates: ResDevPtr, Stack: true}
	{
		s := alloc
		s.Name, s.OutA, s.Ptr, s.Size = "cuMemAlloc", ptrTo(0, 4), outA(0, 4), arg(1, 4)
		t.add(s)
		s.Name, s.Family, s.OutA, s.Ptr, s.Size = "cuMemAlloc_v2", "cuMemAlloc", ptrTo(0, 8), outA(0, 8), arg(1, 8)
		t.add(s)
	}
	{
		s := alloc
		s.Name, s.OutA, s.OutB, s.Ptr = "cuMemAllocPitch", ptrTo(0, 4), ptrTo(1, 4), outA(0, 4)
		s.SizeFrom = func(r *Raw) (uint64, bool) { return pitchSize(r, 4) }
		t.add(s)
		s.Name, s.Family, s.OutA, s.OutB, s.Ptr = "cuMemAllocPitch_v2", "cuMemAllocPitch", ptrTo(0, 8), ptrTo(1, 8), outA(0, 8)
		s.SizeFrom = func(r *Raw) (uint64, bool) { return pitchSize(r, 8) }
		t.add(s)
	}
	{
		s := alloc
		s.Name, s.OutA, s.Ptr, s.Size, s.Flags = "cuMemAllocManaged", ptrTo(0, 8), outA(0, 8), arg(1, 8), arg(2, 4)
		t.add(s)
	}
	{
		s := alloc
		s.Name, s.OutA, s.Ptr, s.Size = "cuMemAllocAsync", ptrTo(0, 8), outA(0, 8), arg(1, 8)
		t.variants(s, "cuMemAllocAsync", "cuMemAllocAsync_ptsz")
		s.Name, s.Target, s.DrawsFrom = "cuMemAllocFromPoolAsync", arg(2, 8), ResPool
		t.variants(s, "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz")
	}
	// CUmemAllocationProp: type@0, requestedHandleTypes@4, location{type@8, id@12}.
	t.add(Symbol{Name: "cuMemCreate", Op: OpAllocation, Creates: ResMemHandle, Stack: true,
		OutA: ptrTo(0, 8), Ptr: outA(0, 8), Size: arg(1, 8), In: ptrTo(2, 16),
		Device: in(12, 4), Flags: arg(3, 8)})
	// CUmemPoolProps: location{type@8, id@12}, maxSize@24.
	t.add(Symbol{Name: "cuMemPoolCreate", Op: OpAllocation, Creates: ResPool,
		OutA: ptrTo(0, 8), Ptr: outA(0, 8), In: ptrTo(1, 32), Device: in(12, 4), Size: in(24, 8)})
	{
		s := Symbol{Name: "cuArrayCreate", Op: OpAllocation, Creates: ResArray, Stack: true,
			OutA: ptrTo(0, 8), Ptr: outA(0, 8), In: ptrTo(1, 16)}
		s.SizeFrom = func(r *Raw) (uint64, bool) { return arraySize(r, 4, false) }
		t.add(s)
		s.Name, s.Family, s.In = "cuArrayCreate_v2", "cuArrayCreate", ptrTo(1, 24)
		s.SizeFrom = func(r *Raw) (uint64, bool) { return arraySize(r, 8, false) }
		t.add(s)
		s.Name, s.Family, s.In = "cuArray3DCreate", "cuArray3DCreate", ptrTo(1, 20)
		s.SizeFrom = func(r *Raw) (uint64, bool) { return arraySize(r, 4, true) }
		t.add(s)
		s.Name, s.Family, s.In = "cuArray3DCreate_v2", "cuArray3DCreate", ptrTo(1, 32)
		s.SizeFrom = func(r *Raw) (uint64, bool) { return arraySize(r, 8, true) }
		t.add(s)
		s.Name, s.Family, s.Creates, s.In, s.Count = "cuMipmappedArrayCreate", "", ResMipmap, ptrTo(1, 32), arg(2, 4)
		s.SizeFrom = mipmapSize
		t.add(s)
	}
}

// hostAllocations: page-locked host memory.
func (t *table) hostAllocations() {
	{
		s := Symbol{Name: "cuMemAllocHost", Op: OpHostAllocation, Creates: ResHostPtr,
			OutA: ptrTo(0, 8), Ptr: outA(0, 8), Size: arg(1, 4)}
		t.add(s)
		s.Name, s.Family, s.Size = "cuMemAllocHost_v2", "cuMemAllocHost", arg(1, 8)
		t.add(s)
		s.Name, s.Family, s.Flags = "cuMemHostAlloc", "", arg(2, 4)
		t.add(s)
	}
}

// mappings: mapping, registration, import/export, peer and IPC access.
func (t *table) mappings() {
	{
		s := Symbol{Name: "cuMemHostRegister", Op: OpMapping, Creates: ResHostReg,
			Ptr: arg(0, 8), Size: arg(1, 8), Flags: arg(2, 4)}
		t.variants(s, "cuMemHostRegister", "cuMemHostRegister_v2")
	}
	{
		s := Symbol{Name: "cuMemHostGetDevicePointer", Op: OpMapping,
			OutA: ptrTo(0, 4), Ptr: outA(0, 4), Target: arg(1, 8), Flags: arg(2, 4)}
		t.add(s)
		s.Name, s.Family, s.OutA, s.Ptr = "cuMemHostGetDevicePointer_v2", "cuMemHostGetDevicePointer", ptrTo(0, 8), outA(0, 8)
		t.add(s)
	}
	t.add(Symbol{Name: "cuMemAddressReserve", Op: OpMapping, Creates: ResVAddr,
		OutA: ptrTo(0, 8), Ptr: outA(0, 8), Size: arg(1, 8), Flags: arg(4, 8)})
	t.add(Symbol{Name: "cuMemMap", Op: OpMapping, Creates: ResVMap,
		Ptr: arg(0, 8), Size: arg(1, 8), Target: arg(3, 8), Flags: arg(4, 8)})
	{
		// CUarrayMapInfo is 96 bytes: one fits the probes' buffer.
		s := Symbol{Name: "cuMemMapArrayAsync", Op: OpMapping, Target: arg(0, 8),
			Array: arrayOf(0, 96, arg(1, 4), ElemOpaque)}
		t.variants(s, "cuMemMapArrayAsync", "cuMemMapArrayAsync_ptsz")
	}
	// CUmemAccessDesc: location{type@0, id@4}, flags@8, an array of
	// count. Each granted device other than the owner uses BAR1. Peer and
	// Flags are the first descriptor's (the owner's, as NCCL and PyTorch
	// order them); Grants has every descriptor read.
	t.add(Symbol{Name: "cuMemSetAccess", Op: OpMapping, BAR1: BAR1Peer, Creates: ResAccess,
		Ptr: arg(0, 8), Size: arg(1, 8), Peer: arr(4, 4), Flags: arr(8, 4),
		Array: arrayOf(2, accessDescBytes, arg(3, 8), ElemAccessDesc)})
	t.add(Symbol{Name: "cuMemExportToShareableHandle", Op: OpMapping,
		OutA: ptrTo(0, 8), Ptr: outA(0, 8), Target: arg(1, 8), Flags: arg(2, 4)})
	t.add(Symbol{Name: "cuMemImportFromShareableHandle", Op: OpMapping,
		OutA: ptrTo(0, 8), Ptr: outA(0, 8), Target: arg(1, 8), Flags: arg(2, 4)})
	// What an export names: a device allocation (cuMemAlloc*, a pool's) or
	// a physical allocation handle.
	exported := []Resource{ResDevPtr, ResMemHandle}
	t.add(Symbol{Name: "cuMemPoolExportPointer", Op: OpMapping, Exports: exported,
		OutA: ptrTo(0, 32), Key: outA(0, 32), Target: arg(1, 8)})
	t.add(Symbol{Name: "cuMemPoolImportPointer", Op: OpMapping, BAR1: BAR1May, Creates: ResPoolImport, Imports: true,
		OutA: ptrTo(0, 8), Ptr: outA(0, 8), Target: arg(1, 8), In: ptrTo(2, 32), Key: in(0, 32)})
	t.add(Symbol{Name: "cuIpcGetMemHandle", Op: OpMapping, Exports: exported,
		OutA: ptrTo(0, 32), Key: outA(0, 32), Target: arg(1, 8)})
	{
		// CUipcMemHandle (64 bytes) is passed by value, on the stack.
		s := Symbol{Name: "cuIpcOpenMemHandle", Op: OpMapping, BAR1: BAR1May, Creates: ResIPC, Imports: true,
			OutA: ptrTo(0, 8), Ptr: outA(0, 8), In: Capture{Arg: -1, Len: 32, FromStack: true},
			Key: in(0, 32), Flags: arg(1, 4)}
		t.variants(s, "cuIpcOpenMemHandle", "cuIpcOpenMemHandle_v2")
	}
	t.add(Symbol{Name: "cuCtxEnablePeerAccess", Op: OpMapping, BAR1: BAR1May, Creates: ResPeer,
		Ptr: arg(0, 8), Peer: arg(0, 8), Flags: arg(1, 4)})
	// CUDA_EXTERNAL_MEMORY_HANDLE_DESC: type@0, size@24.
	t.add(Symbol{Name: "cuImportExternalMemory", Op: OpMapping, Creates: ResExtMem,
		OutA: ptrTo(0, 8), Ptr: outA(0, 8), In: ptrTo(1, 32), Size: in(24, 8), Flags: in(0, 4)})
	// CUDA_EXTERNAL_MEMORY_BUFFER_DESC: offset@0, size@8, flags@16. The
	// external memory may be another device's: a third-party mapping.
	t.add(Symbol{Name: "cuExternalMemoryGetMappedBuffer", Op: OpMapping, BAR1: BAR1May, Creates: ResExtBuf,
		OutA: ptrTo(0, 8), Ptr: outA(0, 8), Target: arg(1, 8), In: ptrTo(2, 24), Size: in(8, 8), Flags: in(16, 4)})
	{
		// CUgraphicsResource handles, 8 bytes each.
		s := Symbol{Name: "cuGraphicsMapResources", Op: OpMapping, Target: arg(1, 8),
			Array: arrayOf(1, 8, arg(0, 4), ElemOpaque)}
		t.variants(s, "cuGraphicsMapResources", "cuGraphicsMapResources_ptsz")
	}
}

// releases: calls that release what an earlier call created.
func (t *table) releases() {
	free := func(name string, target Loc, rel ...Resource) Symbol {
		return Symbol{Name: name, Op: OpFree, Target: target, Releases: rel}
	}
	t.add(free("cuMemFree", arg(0, 4), ResDevPtr, ResExtBuf, ResPoolImport))
	s := free("cuMemFree_v2", arg(0, 8), ResDevPtr, ResExtBuf, ResPoolImport)
	s.Family = "cuMemFree"
	t.add(s)
	t.add(free("cuMemFreeHost", arg(0, 8), ResHostPtr))
	t.variants(free("cuMemFreeAsync", arg(0, 8), ResDevPtr, ResPoolImport), "cuMemFreeAsync", "cuMemFreeAsync_ptsz")
	t.add(free("cuMemHostUnregister", arg(0, 8), ResHostReg))
	t.add(free("cuMemRelease", arg(0, 8), ResMemHandle))
	s = free("cuMemUnmap", arg(0, 8), ResVMap, ResAccess)
	s.Size = arg(1, 8)
	t.add(s)
	s = free("cuMemAddressFree", arg(0, 8), ResVAddr)
	s.Size = arg(1, 8)
	t.add(s)
	t.add(free("cuIpcCloseMemHandle", arg(0, 8), ResIPC))
	s = free("cuCtxDisablePeerAccess", arg(0, 8), ResPeer)
	s.Peer = arg(0, 8)
	t.add(s)
	t.add(free("cuArrayDestroy", arg(0, 8), ResArray))
	t.add(free("cuMipmappedArrayDestroy", arg(0, 8), ResMipmap))
	t.add(free("cuMemPoolDestroy", arg(0, 8), ResPool))
	t.add(free("cuDestroyExternalMemory", arg(0, 8), ResExtMem))
	s = free("cuGraphicsUnmapResources", arg(1, 8))
	s.Count = arg(0, 4)
	t.variants(s, "cuGraphicsUnmapResources", "cuGraphicsUnmapResources_ptsz")
}

// contexts: initialization, context and device identity.
func (t *table) contexts() {
	t.add(Symbol{Name: "cuInit", Op: OpOther, Flags: arg(0, 4)})
	{
		c := Symbol{Name: "cuCtxCreate", Op: OpContext, Creates: ResContext, Ctx: CtxCreate,
			OutA: ptrTo(0, 8), Ptr: outA(0, 8), Flags: arg(1, 4), Device: arg(2, 4)}
		t.variants(c, "cuCtxCreate", "cuCtxCreate_v2")
		c.Flags, c.Device = arg(3, 4), arg(4, 4) // (pctx, params, n, flags, dev)
		t.variants(c, "cuCtxCreate_v3")
		c.Flags, c.Device = arg(2, 4), arg(3, 4) // (pctx, params, flags, dev)
		t.variants(c, "cuCtxCreate_v4")
	}
	{
		c := Symbol{Name: "cuCtxDestroy", Op: OpContext, Ctx: CtxDestroy, Target: arg(0, 8), Releases: []Resource{ResContext}}
		t.variants(c, "cuCtxDestroy", "cuCtxDestroy_v2")
	}
	// Green contexts (driver 550 on): cuGreenCtxCreate(phCtx, desc, dev,
	// flags), where desc is a pointer (CUdevResourceDesc) in a register.
	// A green context has its own state and memory on the device like any
	// context, and retains the device's primary context while it lives.
	t.add(Symbol{Name: "cuGreenCtxCreate", Op: OpContext, Creates: ResContext, Ctx: CtxCreateIdle,
		OutA: ptrTo(0, 8), Ptr: outA(0, 8), Device: arg(2, 4), Flags: arg(3, 4)})
	t.add(Symbol{Name: "cuCtxFromGreenCtx", Op: OpContext, Ctx: CtxAlias,
		OutA: ptrTo(0, 8), Ptr: outA(0, 8), Target: arg(1, 8)})
	t.add(Symbol{Name: "cuGreenCtxDestroy", Op: OpContext, Ctx: CtxDestroy, Target: arg(0, 8), Releases: []Resource{ResContext}})
	t.add(Symbol{Name: "cuDevicePrimaryCtxRetain", Op: OpContext, Ctx: CtxRetain,
		OutA: ptrTo(0, 8), Ptr: outA(0, 8), Device: arg(1, 4)})
	t.variants(Symbol{Name: "cuDevicePrimaryCtxRelease", Op: OpContext, Ctx: CtxRelease, Device: arg(0, 4)},
		"cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2")
	t.add(Symbol{Name: "cuCtxSetCurrent", Op: OpContext, Ctx: CtxSet, Target: arg(0, 8)})
	t.variants(Symbol{Name: "cuCtxPushCurrent", Op: OpContext, Ctx: CtxPush, Target: arg(0, 8)},
		"cuCtxPushCurrent", "cuCtxPushCurrent_v2")
	t.variants(Symbol{Name: "cuCtxPopCurrent", Op: OpContext, Ctx: CtxPop, OutA: ptrTo(0, 8), Ptr: outA(0, 8)},
		"cuCtxPopCurrent", "cuCtxPopCurrent_v2")
	t.add(Symbol{Name: "cuDeviceGet", Op: OpOther, Identity: IdentityOrdinal,
		OutA: ptrTo(0, 4), Ptr: outA(0, 4), Device: arg(1, 4)})
	t.variants(Symbol{Name: "cuDeviceGetUuid", Op: OpOther, Identity: IdentityUUID,
		OutA: ptrTo(0, 16), Key: outA(0, 16), Device: arg(1, 4)}, "cuDeviceGetUuid", "cuDeviceGetUuid_v2")
	t.add(Symbol{Name: "cuDeviceGetPCIBusId", Op: OpOther, Identity: IdentityPCI,
		OutA: ptrTo(0, 32), Key: outA(0, 32), Device: arg(2, 4)})
}

// byName indexes Symbols.
var byName = func() map[string]int {
	m := make(map[string]int, len(Symbols))
	for i, s := range Symbols {
		m[s.Name] = i
	}
	return m
}()

// Lookup returns the row of the named symbol and its id.
func Lookup(name string) (*Symbol, int, bool) {
	i, ok := byName[name]
	if !ok {
		return nil, -1, false
	}
	return &Symbols[i], i, true
}

// Families lists the unversioned names of every family in the table, in table
// order.
func Families() []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range Symbols {
		if !seen[s.Family] {
			seen[s.Family] = true
			out = append(out, s.Family)
		}
	}
	return out
}

var variantSuffix = regexp.MustCompile(`^(_v[0-9]+)?(_ptsz|_ptds)?$`)

// FamilyOf returns the table's family an exported libcuda name belongs to:
// the family's name followed by an optional _vN and an optional _ptsz or
// _ptds suffix. It is how forensic notices a variant that a newer driver
// exports and the table lacks.
func FamilyOf(export string) (string, bool) {
	best := ""
	for _, f := range Families() {
		if len(export) >= len(f) && export[:len(f)] == f && variantSuffix.MatchString(export[len(f):]) && len(f) > len(best) {
			best = f
		}
	}
	return best, best != ""
}

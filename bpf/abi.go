package bpf

import "unsafe"

// The names below are the header's (forensic.h) under readable Go names:
// each is derived from the constant or type bpf2go generated from it, never
// retyped.

// Record kinds (enum fx_kind): the first byte of every ring buffer record.
const (
	KindCall      = uint8(forensicFxKindFX_KIND_CALL)
	KindProc      = uint8(forensicFxKindFX_KIND_PROC)
	KindCallArray = uint8(forensicFxKindFX_KIND_CALL_ARRAY)
	KindHold      = uint8(forensicFxKindFX_KIND_HOLD)
)

// HoldStopped (enum fx_hold_flags): the process was sent SIGSTOP at the
// mapping and must be continued.
const HoldStopped = uint8(forensicFxHoldFlagsFX_HOLD_STOPPED)

// HoldUninspected (enum fx_hold_flags): the hook could not look at the
// mapping (its address space was locked), so Dev, Ino and maybe Name are
// unknown and the file may not be a libcuda: the mapping at Addr says.
const HoldUninspected = uint8(forensicFxHoldFlagsFX_HOLD_UNINSPECTED)

// HoldUnread (enum fx_hold_flags): the process mapped libcuda before user
// space read its last exec record (Objects.MarkExecRead); it is continued
// once that is read, even when the file's probes were in already.
const HoldUnread = uint8(forensicFxHoldFlagsFX_HOLD_UNREAD)

// Process lifecycle changes (enum fx_proc_what).
const (
	ProcFork      = uint8(forensicFxProcWhatFX_PROC_FORK)
	ProcExec      = uint8(forensicFxProcWhatFX_PROC_EXEC)
	ProcExit      = uint8(forensicFxProcWhatFX_PROC_EXIT)
	ProcFirstCall = uint8(forensicFxProcWhatFX_PROC_FIRST_CALL)
)

// Flags of a lifecycle record (enum fx_proc_flags).
const (
	// ProcArgsCut: argv was longer than the record holds; Argv returns
	// its beginning.
	ProcArgsCut = uint8(forensicFxProcFlagsFX_PROC_ARGS_CUT)
	// ProcArgsFault: argv could not be read; Argv returns nil.
	ProcArgsFault = uint8(forensicFxProcFlagsFX_PROC_ARGS_FAULT)
	// ProcFilenameCut: the executable's path did not fit; Exe returns
	// its last components after "...".
	ProcFilenameCut = uint8(forensicFxProcFlagsFX_PROC_FILENAME_CUT)
)

// Call flags (enum fx_call_flags). run.db stores the same bits with each
// event (store.Event.Flags): bits 0-7 are set by the probes, bits 8-15 by
// the recorder, bits 16-31 never stored.
const (
	CallFrozen     = uint32(forensicFxCallFlagsFX_CALL_FROZEN)
	CallInFault    = uint32(forensicFxCallFlagsFX_CALL_IN_FAULT)
	CallOutAFault  = uint32(forensicFxCallFlagsFX_CALL_OUTA_FAULT)
	CallOutBFault  = uint32(forensicFxCallFlagsFX_CALL_OUTB_FAULT)
	CallReordered  = uint32(forensicFxCallFlagsFX_CALL_REORDERED)
	CallArrayCut   = uint32(forensicFxCallFlagsFX_CALL_ARRAY_CUT)
	CallArrayFault = uint32(forensicFxCallFlagsFX_CALL_ARRAY_FAULT)
	CallLateAttach = uint32(forensicFxCallFlagsFX_CALL_LATE_ATTACH)
)

// Sizes and limits (enum fx_const).
const (
	maxSymbols = int(forensicFxConstFX_MAX_SYMBOLS)
	maxDepth   = int(forensicFxConstFX_MAX_DEPTH)
	inLen      = int(forensicFxConstFX_IN_LEN)
	outALen    = int(forensicFxConstFX_OUTA_LEN)
	outBLen    = int(forensicFxConstFX_OUTB_LEN)
	// tailLen and callFixed: a call record is its fixed part and up to
	// tailLen bytes of what its row captures.
	tailLen    = int(forensicFxConstFX_TAIL_LEN)
	callFixed  = int(forensicFxConstFX_CALL_FIXED)
	commLen    = int(forensicFxConstFX_COMM_LEN)
	fileLen    = int(forensicFxConstFX_FILENAME_LEN)
	argsLen    = int(forensicFxConstFX_ARGS_LEN)
	stackDepth = int(forensicFxConstFX_STACK_DEPTH)
	// inStack: read the in-struct from the stack, not through a register.
	inStack = int8(forensicFxConstFX_IN_STACK)
	// arrayMax and arrayLen bound what is read of an array argument.
	arrayMax = int(forensicFxConstFX_ARRAY_MAX)
	arrayLen = int(forensicFxConstFX_ARRAY_LEN)
	// nameLen is the bytes of a mapped file's name in a hold record.
	nameLen = int(forensicFxConstFX_NAME_LEN)
)

// counterMax is the number of loss and health counters (enum fx_counter).
const counterMax = int(forensicFxCounterFX_COUNTER_MAX)

// Record sizes, from the generated structs.
const (
	callSize      = int(unsafe.Sizeof(forensicFxCall{}))
	callArraySize = int(unsafe.Sizeof(forensicFxCallArray{}))
	procSize      = int(unsafe.Sizeof(forensicFxProc{}))
	holdSize      = int(unsafe.Sizeof(forensicFxHold{}))
)

// ringHeader is the kernel's per-record ring buffer header
// (BPF_RINGBUF_HDR_SZ); the kernel rounds header + record up to 8 bytes
// (kernel/bpf/ringbuf.c).
const ringHeader = 8

// recordBytes is what the largest call record without an array takes in
// the ring (most take less: 96 bytes for a call with nothing to read).
const recordBytes = (callSize + ringHeader + 7) &^ 7

package report

// Call is one recorded call as the analysis pass replays it, in time
// order, for exports that show every call (a Perfetto trace). Args holds
// the decoded arguments the call has. CUDADevice is the CUDA device the
// call ran against: its thread's current context's, or the one a context
// call names; -1 when unknown, and for a call made before its thread had a
// context (cuInit, cuDeviceGet: the identity queries name their device in
// Args.Device). GPU is the NVML index that device was matched to, -1 when
// unknown.
type Call struct {
	Symbol     string
	Operation  string
	Result     int32
	ResultName string
	PID, TID   uint32
	StartNS    int64
	EndNS      int64
	Depth      uint8
	CUDADevice int32
	GPU        int
	Context    uint32
	Frozen     bool
	LateAttach bool
	Args       Args
	// Stack is the recording's id of the call's stored stack (-1: none),
	// which tells its call sites apart within the run.
	Stack int32
}

// Args are the decoded arguments of a call; each is nil when the call has
// none or the record lacks it. Ptr is an address (or an opaque handle the
// driver gives as a pointer) the call returned; DeviceHandle is the
// CUdevice a cuDeviceGet returned, which is not an address.
type Args struct {
	Size, Flags, Ptr, Target, Peer, Count *uint64
	DeviceHandle                          *uint64
	Device                                *int32
	Key                                   []byte
	Grants                                []Grant
}

// SampleValue is one value of one NVML sample, for exports that draw
// counters: a view's field on one GPU (and MIG instance), or an
// unavailable query (Value nil, Status its NVML status).
type SampleValue struct {
	GPU    int
	MIG    *int
	UUID   string
	Kind   string // framebuffer, bar1, processes
	Field  string // used, free, reserved, total, or "used by pid N"
	PID    uint32 // for per-process values
	TimeNS int64
	Value  *uint64
	API    string
	Status string
	Usable bool
}

// Observer receives what the analysis pass streams: Begin once, with the
// report as far as it is known before the pass (Run, Processes, Coverage,
// KernelLog, Markers, Phases; no verdict yet), then every call in time
// order, then every sample value in sample order. A non-nil error stops
// the analysis and is returned by it. The values passed are reused: an
// observer copies what it keeps.
type Observer interface {
	Begin(rep *Report) error
	Call(c *Call) error
	Sample(v *SampleValue) error
}

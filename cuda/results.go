package cuda

import "fmt"

// Meaning is what a CUresult says about the nature of a failure.
type Meaning uint8

const (
	// MeaningSuccess is CUDA_SUCCESS.
	MeaningSuccess Meaning = iota
	// MeaningResource says a memory resource ran out (device or host).
	MeaningResource
	// MeaningMapping says a mapping, registration or peer/IPC operation
	// could not be made.
	MeaningMapping
	// MeaningArgument says the request itself was refused: a bad size,
	// flag or handle, or a request the platform does not support.
	MeaningArgument
	// MeaningNotMemory says the failure is not about memory at all:
	// initialization, device, context, driver or permission problems.
	MeaningNotMemory
	// MeaningSticky says the context carries an error left by an earlier
	// asynchronous fault (a kernel that faulted, ECC), which forensic does
	// not trace; the call that failed is a victim, not the cause.
	MeaningSticky
	// MeaningUnknown says the driver gave no reason (CUDA_ERROR_UNKNOWN) or
	// the code is not in this table.
	MeaningUnknown
)

var meaningNames = [...]string{
	MeaningSuccess:   "success",
	MeaningResource:  "resource",
	MeaningMapping:   "mapping",
	MeaningArgument:  "argument",
	MeaningNotMemory: "not-memory",
	MeaningSticky:    "sticky",
	MeaningUnknown:   "unknown",
}

func (m Meaning) String() string {
	if int(m) < len(meaningNames) {
		return meaningNames[m]
	}
	return fmt.Sprintf("Meaning(%d)", m)
}

// AboutMemory reports whether a failure with this meaning is judged by the
// operation that failed (allocation or mapping) rather than set aside.
func (m Meaning) AboutMemory() bool {
	return m == MeaningResource || m == MeaningMapping || m == MeaningArgument
}

// Result is one row of the CUresult table.
type Result struct {
	Code    int32
	Name    string
	Meaning Meaning
	// Cause says, in a few words, what the code means for a post-mortem.
	Cause string
}

// Results lists the CUresult codes of the CUDA 12 driver API, numbered as
// in cuda.h.
var Results = []Result{
	{0, "CUDA_SUCCESS", MeaningSuccess, "success"},
	{1, "CUDA_ERROR_INVALID_VALUE", MeaningArgument, "an argument (size, flag, pointer) was refused"},
	{2, "CUDA_ERROR_OUT_OF_MEMORY", MeaningResource, "the driver could not allocate the memory the call needed"},
	{3, "CUDA_ERROR_NOT_INITIALIZED", MeaningNotMemory, "the driver was not initialized (cuInit missing or failed)"},
	{4, "CUDA_ERROR_DEINITIALIZED", MeaningNotMemory, "the driver is shutting down"},
	{5, "CUDA_ERROR_PROFILER_DISABLED", MeaningNotMemory, "profiler disabled"},
	{6, "CUDA_ERROR_PROFILER_NOT_INITIALIZED", MeaningNotMemory, "profiler not initialized"},
	{7, "CUDA_ERROR_PROFILER_ALREADY_STARTED", MeaningNotMemory, "profiler already started"},
	{8, "CUDA_ERROR_PROFILER_ALREADY_STOPPED", MeaningNotMemory, "profiler already stopped"},
	{34, "CUDA_ERROR_STUB_LIBRARY", MeaningNotMemory, "the process loaded the CUDA stub library, not the driver"},
	{46, "CUDA_ERROR_DEVICE_UNAVAILABLE", MeaningNotMemory, "the device is unavailable (exclusive mode or in use)"},
	{100, "CUDA_ERROR_NO_DEVICE", MeaningNotMemory, "no CUDA-capable device is visible to the process"},
	{101, "CUDA_ERROR_INVALID_DEVICE", MeaningNotMemory, "the device ordinal is not valid"},
	{102, "CUDA_ERROR_DEVICE_NOT_LICENSED", MeaningNotMemory, "the device is not licensed for this use"},
	{200, "CUDA_ERROR_INVALID_IMAGE", MeaningNotMemory, "invalid kernel image"},
	{201, "CUDA_ERROR_INVALID_CONTEXT", MeaningNotMemory, "no valid current context"},
	{202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT", MeaningNotMemory, "context already current"},
	{205, "CUDA_ERROR_MAP_FAILED", MeaningMapping, "the mapping could not be made"},
	{206, "CUDA_ERROR_UNMAP_FAILED", MeaningMapping, "the unmapping failed"},
	{207, "CUDA_ERROR_ARRAY_IS_MAPPED", MeaningMapping, "the array is mapped"},
	{208, "CUDA_ERROR_ALREADY_MAPPED", MeaningMapping, "the resource is already mapped"},
	{209, "CUDA_ERROR_NO_BINARY_FOR_GPU", MeaningNotMemory, "no kernel image for this GPU"},
	{210, "CUDA_ERROR_ALREADY_ACQUIRED", MeaningMapping, "the resource is already acquired"},
	{211, "CUDA_ERROR_NOT_MAPPED", MeaningMapping, "the resource is not mapped"},
	{212, "CUDA_ERROR_NOT_MAPPED_AS_ARRAY", MeaningMapping, "the resource is not mapped as an array"},
	{213, "CUDA_ERROR_NOT_MAPPED_AS_POINTER", MeaningMapping, "the resource is not mapped as a pointer"},
	{214, "CUDA_ERROR_ECC_UNCORRECTABLE", MeaningSticky, "an uncorrectable ECC error was detected"},
	{215, "CUDA_ERROR_UNSUPPORTED_LIMIT", MeaningNotMemory, "unsupported limit"},
	{216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE", MeaningNotMemory, "the context is in use by another thread"},
	{217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", MeaningMapping, "peer access is not supported between these devices"},
	{218, "CUDA_ERROR_INVALID_PTX", MeaningNotMemory, "invalid PTX"},
	{219, "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT", MeaningNotMemory, "invalid graphics context"},
	{220, "CUDA_ERROR_NVLINK_UNCORRECTABLE", MeaningSticky, "an uncorrectable NVLink error was detected"},
	{221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", MeaningNotMemory, "the PTX JIT compiler is missing"},
	{222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", MeaningNotMemory, "unsupported PTX version"},
	{223, "CUDA_ERROR_JIT_COMPILATION_DISABLED", MeaningNotMemory, "JIT compilation disabled"},
	{224, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY", MeaningNotMemory, "unsupported execution affinity"},
	{225, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC", MeaningNotMemory, "unsupported device-side synchronization"},
	{300, "CUDA_ERROR_INVALID_SOURCE", MeaningNotMemory, "invalid source"},
	{301, "CUDA_ERROR_FILE_NOT_FOUND", MeaningNotMemory, "file not found"},
	{302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", MeaningNotMemory, "shared object symbol not found"},
	{303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", MeaningNotMemory, "shared object initialization failed"},
	{304, "CUDA_ERROR_OPERATING_SYSTEM", MeaningNotMemory, "an operating system call failed"},
	{400, "CUDA_ERROR_INVALID_HANDLE", MeaningArgument, "a handle (memory, IPC, pool, resource) was not valid"},
	{401, "CUDA_ERROR_ILLEGAL_STATE", MeaningNotMemory, "illegal state"},
	{402, "CUDA_ERROR_LOSSY_QUERY", MeaningNotMemory, "lossy query"},
	{500, "CUDA_ERROR_NOT_FOUND", MeaningNotMemory, "named symbol not found"},
	{600, "CUDA_ERROR_NOT_READY", MeaningNotMemory, "asynchronous work not complete"},
	{700, "CUDA_ERROR_ILLEGAL_ADDRESS", MeaningSticky, "a kernel accessed an illegal address; the context is unusable"},
	{701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", MeaningNotMemory, "a launch asked for more registers or threads than available"},
	{702, "CUDA_ERROR_LAUNCH_TIMEOUT", MeaningSticky, "a kernel ran past the watchdog; the context is unusable"},
	{703, "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", MeaningNotMemory, "incompatible texturing"},
	{704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", MeaningMapping, "peer access was already enabled"},
	{705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", MeaningMapping, "peer access was not enabled"},
	{708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", MeaningNotMemory, "the primary context is already active"},
	{709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", MeaningNotMemory, "the context was destroyed"},
	{710, "CUDA_ERROR_ASSERT", MeaningSticky, "a device-side assert fired; the context is unusable"},
	{711, "CUDA_ERROR_TOO_MANY_PEERS", MeaningMapping, "too many peer mappings"},
	{712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", MeaningMapping, "the host range is already registered"},
	{713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", MeaningMapping, "the host range is not registered"},
	{714, "CUDA_ERROR_HARDWARE_STACK_ERROR", MeaningSticky, "a kernel hit a hardware stack error; the context is unusable"},
	{715, "CUDA_ERROR_ILLEGAL_INSTRUCTION", MeaningSticky, "a kernel executed an illegal instruction; the context is unusable"},
	{716, "CUDA_ERROR_MISALIGNED_ADDRESS", MeaningSticky, "a kernel made a misaligned access; the context is unusable"},
	{717, "CUDA_ERROR_INVALID_ADDRESS_SPACE", MeaningSticky, "a kernel used an invalid address space; the context is unusable"},
	{718, "CUDA_ERROR_INVALID_PC", MeaningSticky, "a kernel jumped to an invalid PC; the context is unusable"},
	{719, "CUDA_ERROR_LAUNCH_FAILED", MeaningSticky, "a kernel launch failed; the context is unusable"},
	{720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", MeaningNotMemory, "cooperative launch too large"},
	{800, "CUDA_ERROR_NOT_PERMITTED", MeaningNotMemory, "the operation is not permitted"},
	{801, "CUDA_ERROR_NOT_SUPPORTED", MeaningArgument, "the request is not supported on this platform"},
	{802, "CUDA_ERROR_SYSTEM_NOT_READY", MeaningNotMemory, "the system is not ready (fabric manager, driver state)"},
	{803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", MeaningNotMemory, "the user-space driver does not match the kernel driver"},
	{804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", MeaningNotMemory, "forward compatibility is not supported on this device"},
	{805, "CUDA_ERROR_MPS_CONNECTION_FAILED", MeaningNotMemory, "could not connect to the MPS server"},
	{806, "CUDA_ERROR_MPS_RPC_FAILURE", MeaningNotMemory, "MPS remote call failed"},
	{807, "CUDA_ERROR_MPS_SERVER_NOT_READY", MeaningNotMemory, "the MPS server is not ready"},
	{808, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED", MeaningNotMemory, "the MPS server has too many clients"},
	{809, "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED", MeaningNotMemory, "the MPS server has too many connections"},
	{810, "CUDA_ERROR_MPS_CLIENT_TERMINATED", MeaningNotMemory, "the MPS client was terminated by the server"},
	{811, "CUDA_ERROR_CDP_NOT_SUPPORTED", MeaningNotMemory, "dynamic parallelism not supported"},
	{812, "CUDA_ERROR_CDP_VERSION_MISMATCH", MeaningNotMemory, "dynamic parallelism version mismatch"},
	{900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", MeaningNotMemory, "not allowed during stream capture"},
	{901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", MeaningNotMemory, "stream capture invalidated"},
	{902, "CUDA_ERROR_STREAM_CAPTURE_MERGE", MeaningNotMemory, "stream capture merge"},
	{903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", MeaningNotMemory, "stream capture unmatched"},
	{904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", MeaningNotMemory, "stream capture unjoined"},
	{905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", MeaningNotMemory, "stream capture isolation"},
	{906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", MeaningNotMemory, "implicit stream during capture"},
	{907, "CUDA_ERROR_CAPTURED_EVENT", MeaningNotMemory, "captured event"},
	{908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", MeaningNotMemory, "stream capture from the wrong thread"},
	{909, "CUDA_ERROR_TIMEOUT", MeaningNotMemory, "timeout"},
	{910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", MeaningNotMemory, "graph update failed"},
	{911, "CUDA_ERROR_EXTERNAL_DEVICE", MeaningSticky, "an external device reported an asynchronous error"},
	{912, "CUDA_ERROR_INVALID_CLUSTER_SIZE", MeaningNotMemory, "invalid cluster size"},
	{913, "CUDA_ERROR_FUNCTION_NOT_LOADED", MeaningNotMemory, "function not loaded"},
	{914, "CUDA_ERROR_INVALID_RESOURCE_TYPE", MeaningNotMemory, "invalid resource type"},
	{915, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION", MeaningNotMemory, "invalid resource configuration"},
	{999, "CUDA_ERROR_UNKNOWN", MeaningUnknown, "the driver reported an unknown error"},
}

// LookupResult returns the row for code. A code missing from the table gets
// a row named CUDA_ERROR_<code> with MeaningUnknown, so callers never guess.
func LookupResult(code int32) Result {
	if i, ok := resultIndex[code]; ok {
		return Results[i]
	}
	return Result{Code: code, Name: fmt.Sprintf("CUDA_ERROR_%d", code), Meaning: MeaningUnknown,
		Cause: "a result code forensic's table does not know"}
}

// resultIndex indexes Results by code (the first row of a code, as a scan
// would find it). It is built once and never changed.
var resultIndex = func() map[int32]int {
	m := make(map[int32]int, len(Results))
	for i, r := range Results {
		if _, ok := m[r.Code]; !ok {
			m[r.Code] = i
		}
	}
	return m
}()

package store

import (
	"time"

	"github.com/retrivium/forensic/cuda"
)

// Format is the value of meta/format in every run.db.
const Format = "forensic-run"

// SchemaVersion is the schema this package writes. Readers refuse files
// with a larger version and read every older one:
//
//   - 1: the first.
//   - 2: events may carry array arguments (presence bit 8: the elements
//     read and the access descriptors); event flags 8, 32 and 64 appear.
//   - 3: stacks are unwound and named by the recorder (bucket named); the
//     registers and stack bytes a probe copied (bucket captures) and the
//     Python frames and code objects it read (pystacks, pycode) are kept
//     only when the run asked for them (RunInfo.KeepStackBytes). A file of
//     schema 2 has raw captures and no named stacks; readers unwind those.
const SchemaVersion = 3

// ClockName names the run clock.
const ClockName = "CLOCK_MONOTONIC"

// RunInfo describes the recording: what was recorded and how.
type RunInfo struct {
	ID      string `json:"id"`
	Version string `json:"forensic_version"`
	// Clock, ClockStart and WallStart: the run clock and one reading of it
	// paired with wall time, taken together at the start.
	Clock      string    `json:"clock"`
	ClockStart int64     `json:"clock_start_ns"`
	WallStart  time.Time `json:"wall_start"`
	Hostname   string    `json:"hostname"`
	Kernel     string    `json:"kernel"`
	// Mode is "spawn" (forensic record -- CMD), "pid" or "all".
	Mode      string   `json:"mode"`
	Command   []string `json:"command,omitempty"`
	TargetPID uint32   `json:"target_pid,omitempty"`
	// Scope lists the cgroup directories an "all" run was limited to
	// (--cgroup, --pod), each with the cgroups below it; empty: none.
	Scope       []string `json:"scope,omitempty"`
	RecorderPID int      `json:"recorder_pid"`
	// Interval is the NVML sampling period; FlushInterval the longest an
	// event waits before it is committed.
	Interval      time.Duration `json:"interval_ns"`
	FlushInterval time.Duration `json:"flush_interval_ns"`
	RingBytes     int           `json:"ring_bytes"`
	Stacks        bool          `json:"stacks"`
	// KeepStackBytes: the raw stack captures (registers, a copy of the
	// thread's stack, Python frames and code objects as read) were kept
	// beside the named stacks, for debugging the unwinder. They hold
	// whatever the program had on its stack.
	KeepStackBytes  bool          `json:"keep_stack_bytes,omitempty"`
	FreezeOnFailure bool          `json:"freeze_on_failure"`
	FreezeLimit     time.Duration `json:"freeze_limit_ns,omitempty"`
	NVMLLibrary     string        `json:"nvml_library,omitempty"`
	// Env holds the GPU-relevant environment of the recorder's target
	// (an allowlist, see README); nothing else is stored.
	Env map[string]string `json:"env,omitempty"`
	// Identity says where the run was recorded (machine, boot), for which
	// job and rank, and how its clock relates to true time, read at the
	// start. Absent in files written before it existed.
	Identity *Identity `json:"identity,omitempty"`
}

// Identity makes a run self-describing when run.db files of many hosts are
// analyzed together: the machine and boot it was recorded on, the job and
// rank of the recorded workload, and the clock. It is read at the start
// (RunInfo.Identity) and again at the stop (StopInfo.Identity).
type Identity struct {
	Hostname string `json:"hostname"`
	// MachineID is /etc/machine-id; BootID /proc/sys/kernel/random/boot_id.
	// Two runs with the same boot id share one CLOCK_MONOTONIC.
	MachineID string `json:"machine_id,omitempty"`
	BootID    string `json:"boot_id,omitempty"`
	Kernel    string `json:"kernel,omitempty"`
	// Job is the job and rank identity of the recorded workload; nil when
	// nothing names one (and in --all mode, where each Process.Env keeps
	// its own).
	Job   *Job          `json:"job,omitempty"`
	Clock *ClockReading `json:"clock,omitempty"`
}

// Job is the job and rank a workload belongs to, from the launcher's
// environment variables and, for Kubernetes, the cgroup path.
type Job struct {
	// Source says whose environment was read: "spawn" (the command forensic
	// started), "pid" (/proc/PID/environ of the --pid target) or
	// "processes" (--all: the recorded processes agreed on it).
	Source string `json:"source"`
	// Env holds the job variables found (RANK, LOCAL_RANK, WORLD_SIZE,
	// GROUP_RANK, TORCHELASTIC_RUN_ID, SLURM_*, OMPI_COMM_WORLD_*,
	// JOB_COMPLETION_INDEX, POD_*), as strings.
	Env map[string]string `json:"env,omitempty"`
	// Rank and WorldSize are parsed from the first variable present, in
	// the order documented in docs/run-db.md; RankFrom and WorldSizeFrom
	// name it. Nil: no variable names one.
	Rank          *int   `json:"rank,omitempty"`
	RankFrom      string `json:"rank_from,omitempty"`
	WorldSize     *int   `json:"world_size,omitempty"`
	WorldSizeFrom string `json:"world_size_from,omitempty"`
	LocalRank     *int   `json:"local_rank,omitempty"`
	// Ranks (--all) lists the distinct ranks of the recorded processes;
	// Rank is set only when they are all one.
	Ranks []int `json:"ranks,omitempty"`
	// JobID is TORCHELASTIC_RUN_ID, else SLURM_JOB_ID.
	JobID string `json:"job_id,omitempty"`
	// PodUID comes from the cgroup path (kubepods...pod<uid>); PodName and
	// PodNamespace from POD_NAME and POD_NAMESPACE, or the namespace from
	// the pod's service account file.
	PodUID       string `json:"pod_uid,omitempty"`
	PodName      string `json:"pod_name,omitempty"`
	PodNamespace string `json:"pod_namespace,omitempty"`
}

// ClockReading pairs the run clock with the wall clock and says how far
// the wall clock may be from true time.
type ClockReading struct {
	// MonotonicNS (CLOCK_MONOTONIC, the run clock) and RealtimeNS
	// (CLOCK_REALTIME, Unix nanoseconds) were read adjacently: the pair
	// with the narrowest of Reads brackets of monotonic, realtime,
	// monotonic is kept, MonotonicNS is the bracket's midpoint and
	// PairUncertaintyNS half its width.
	MonotonicNS       int64 `json:"monotonic_ns"`
	RealtimeNS        int64 `json:"realtime_ns"`
	PairUncertaintyNS int64 `json:"pair_uncertainty_ns"`
	Reads             int   `json:"pair_reads"`
	// Adjtimex is the kernel's own view of the wall clock's error; nil if
	// the call failed (AdjtimexError says why).
	Adjtimex      *Adjtimex `json:"adjtimex,omitempty"`
	AdjtimexError string    `json:"adjtimex_error,omitempty"`
	// Chrony and PTP are what a time daemon reported, when one is present.
	Chrony *TimeDaemon `json:"chrony,omitempty"`
	PTP    *TimeDaemon `json:"ptp,omitempty"`
	// ErrorNS bounds |wall-clock time of an event - true time| for events
	// converted with this reading (at the start: this reading alone; at the
	// stop: the run's bound, from both readings, see docs/run-db.md). Nil
	// when the clock is unsynchronized or the bound unknown; ErrorWhy says
	// why.
	ErrorNS  *int64 `json:"clock_error_ns"`
	ErrorWhy string `json:"clock_error_why,omitempty"`
}

// Adjtimex is the kernel's NTP state (adjtimex(2) with no modes set).
type Adjtimex struct {
	// State is the call's return value: TIME_OK, TIME_INS, TIME_DEL,
	// TIME_OOP, TIME_WAIT or TIME_ERROR (the clock is not synchronized).
	State string `json:"state"`
	// Status is the raw status word; StatusFlags names its set bits
	// (STA_UNSYNC: no daemon vouches for the clock).
	Status      int32    `json:"status"`
	StatusFlags []string `json:"status_flags,omitempty"`
	Unsync      bool     `json:"unsync"`
	// MaxErrorNS is the kernel's maximum error of the wall clock (it grows
	// by 500 us per second until a daemon updates it); EstErrorNS its
	// estimated error. The kernel keeps both in microseconds.
	MaxErrorNS int64 `json:"maxerror_ns"`
	EstErrorNS int64 `json:"esterror_ns"`
	// OffsetNS and FreqPPB: the daemon's last phase offset and frequency
	// correction.
	OffsetNS int64 `json:"offset_ns"`
	FreqPPB  int64 `json:"freq_ppb"`
	TAI      int32 `json:"tai"`
}

// TimeDaemon is what a time daemon's own tool reported: the raw output
// (trimmed) and the values parsed from it where the format is known.
type TimeDaemon struct {
	Command string `json:"command"`
	Raw     string `json:"raw,omitempty"`
	Error   string `json:"error,omitempty"`
	// Parsed values; nil when absent from the output.
	Reference string `json:"reference,omitempty"`
	Stratum   *int   `json:"stratum,omitempty"`
	// OffsetNS is how far the system clock (chrony) or the PTP clock (PTP:
	// master_offset) was from the reference.
	OffsetNS *int64 `json:"offset_ns,omitempty"`
	// RootDelayNS and RootDispersionNS (chrony): a bound on the
	// reference's own error is RootDispersion + RootDelay/2.
	RootDelayNS      *int64 `json:"root_delay_ns,omitempty"`
	RootDispersionNS *int64 `json:"root_dispersion_ns,omitempty"`
	Leap             string `json:"leap,omitempty"`
	// Synchronized: chrony's leap status is not "Not synchronised"; PTP's
	// grandmaster is present.
	Synchronized *bool `json:"synchronized,omitempty"`
}

// Stats are the recorder's counters: what was delivered and what was lost.
type Stats struct {
	// Calls is the number of completed tracked calls the probes saw;
	// Events + LostCalls == Calls when nothing else went wrong.
	Calls         uint64 `json:"calls"`
	Events        uint64 `json:"events"`
	LostCalls     uint64 `json:"lost_calls"`
	LostFirst     int64  `json:"lost_first_ns,omitempty"` // exit time of the earliest lost call
	LostLast      int64  `json:"lost_last_ns,omitempty"`
	LostInflight  uint64 `json:"lost_inflight"`
	TooDeep       uint64 `json:"too_deep"`
	Unmatched     uint64 `json:"unmatched_returns"`
	LostProc      uint64 `json:"lost_proc"`
	LostProcFirst int64  `json:"lost_proc_first_ns,omitempty"`
	StackErrors   uint64 `json:"stack_errors"`
	Frozen        uint64 `json:"frozen"`
	// Untracked counts processes the probes' table of tracked processes
	// had no room for: a child forked then is not recorded at all; under
	// --all a process's calls are recorded but its exit is not (counted
	// once per thread that tried). UntrackedFirst is when the first was.
	Untracked      uint64 `json:"untracked_processes"`
	UntrackedFirst int64  `json:"untracked_first_ns,omitempty"`
	// LostHolds counts libcuda mappings that could not hold their process
	// (the holds ring was full, the stop signal was refused, or another
	// process such as a second recorder continued it before the probes
	// were in): calls through that file may have been made before its
	// probes were in.
	LostHolds uint64 `json:"lost_holds,omitempty"`
	// StackSkipped counts stack captures not made because of their rate
	// limit (a call site not captured before, past the per-CPU bucket, and
	// not a process's first failure); StackLost those made but not
	// delivered (ring buffer full, or another capture in progress on the
	// CPU). Such a call keeps its frame-pointer stack only.
	StackSkipped uint64 `json:"stack_skipped,omitempty"`
	StackLost    uint64 `json:"stack_lost,omitempty"`
	// UninspectedMaps counts executable mappings the map hook could not
	// look at (the process's address space was locked, as attaching
	// probes to a file it maps does): each was held all the same and
	// looked at in /proc. Not a loss; a hold that failed is in LostHolds.
	UninspectedMaps uint64 `json:"uninspected_maps,omitempty"`
	DecodeErrors    uint64 `json:"decode_errors"`
	Samples         uint64 `json:"samples"`
	// SamplesThinned are periodic samples left out by thinning (a quiet
	// stretch keeps only some).
	SamplesThinned uint64 `json:"samples_thinned"`
	KernelLines    uint64 `json:"kernel_lines"`
}

// Lost reports whether any evidence was lost.
func (s Stats) Lost() bool {
	return s.LostCalls+s.LostInflight+s.TooDeep+s.LostProc > 0
}

// Exit is how a process ended.
type Exit struct {
	Time   int64 `json:"time_ns"`
	Code   *int  `json:"code,omitempty"`   // exit status when it exited
	Signal *int  `json:"signal,omitempty"` // signal when a signal killed it
	Core   bool  `json:"core_dumped,omitempty"`
}

// Abnormal reports whether the process was killed by a signal.
func (e *Exit) Abnormal() bool { return e != nil && e.Signal != nil }

// ExitFromWaitStatus decodes a task exit code (wait status layout).
func ExitFromWaitStatus(t int64, status int32) *Exit {
	e := &Exit{Time: t}
	if sig := int(status & 0x7f); sig != 0 {
		e.Signal = &sig
		e.Core = status&0x80 != 0
	} else {
		code := int((status >> 8) & 0xff)
		e.Code = &code
	}
	return e
}

// DelayStats summarizes the delay from failed calls to their samples.
type DelayStats struct {
	Count  int   `json:"count"`
	Median int64 `json:"median_ns"`
	Max    int64 `json:"max_ns"`
}

// StopInfo is written once, when the recorder stops cleanly. Its absence
// means the run ended abruptly.
type StopInfo struct {
	Time   int64     `json:"time_ns"`
	Wall   time.Time `json:"wall"`
	Reason string    `json:"reason"` // workload-exited, target-exited, signal, stopped, disk-full, write-error, error
	// Signal names the signal that stopped the recorder (reason signal).
	Signal string `json:"signal,omitempty"`
	Error  string `json:"error,omitempty"`
	// Workload is the spawned command's exit.
	Workload     *Exit      `json:"workload,omitempty"`
	Stats        Stats      `json:"stats"`
	TriggerDelay DelayStats `json:"trigger_delay"`
	// KmsgOffset is how far the kernel log's printk clock was ahead of the
	// run clock (kernel lines are stored converted), measured at the start
	// within KmsgOffsetError (-1: not measured, lines unconverted).
	KmsgOffset      int64 `json:"kmsg_offset_ns"`
	KmsgOffsetError int64 `json:"kmsg_offset_error_ns"`
	// Identity is read again at the stop; its Clock.ErrorNS is the run's
	// clock_error_ns, combining the start and stop readings.
	Identity *Identity `json:"identity,omitempty"`
	// Hold summarizes how long processes were held at a libcuda mapping
	// until the probes were in, or until the recorder had read their last
	// exec (count, median, maximum).
	Hold DelayStats `json:"hold"`
}

// Library is one libcuda file the recorder attached to.
type Library struct {
	Path     string `json:"path"`      // as the process sees it
	HostPath string `json:"host_path"` // as the recorder opened it (through /proc/PID/root)
	BuildID  string `json:"build_id,omitempty"`
	Device   uint64 `json:"dev"`
	Inode    uint64 `json:"inode"`
	// Attached lists the symbols of the table the file exports, which the
	// probes were attached to; Absent those it does not. Unknown lists
	// exported names of the table's families that have no row.
	Attached []string `json:"attached"`
	Absent   []string `json:"absent"`
	Unknown  []string `json:"unknown,omitempty"`
	Error    string   `json:"error,omitempty"`
	Time     int64    `json:"time_ns"`
	// MappedBy is the process whose mapping of the file made the recorder
	// attach it (0: given with --libcuda); Held how long that process was
	// held at the mapping until the probes were in (0: it was not held,
	// the file was already mapped when recording started).
	MappedBy uint32 `json:"mapped_by,omitempty"`
	Held     int64  `json:"held_ns,omitempty"`
}

// File says which file a build id found in the stored stacks belongs to,
// resolved by the recorder when it stored the stack (the process that
// mapped it may be gone by the time the run is analyzed).
type File struct {
	BuildID string `json:"build_id"`
	Path    string `json:"path"`                // as the process saw it
	Open    string `json:"host_path,omitempty"` // as the recorder opened it, when that differs
	// Source says where the recorder found it: "maps" (the process's own
	// mappings), "seen" (a file another recorded process mapped or
	// executed, or an attached libcuda) or "ldconfig" (the loader's
	// library directories); each was checked by its build id.
	Source string `json:"source"`
}

// OpenPath is where this machine reads the file: Open when set, else Path.
func (f File) OpenPath() string {
	if f.Open != "" {
		return f.Open
	}
	return f.Path
}

// Event is one completed call of an attached symbol.
type Event struct {
	Symbol uint16 `json:"-"` // id in the file's symbols bucket
	Name   string `json:"symbol"`
	PID    uint32 `json:"pid"`
	TID    uint32 `json:"tid"`
	Start  int64  `json:"start_ns"`
	End    int64  `json:"time_ns"`
	Result int32  `json:"result"`
	Depth  uint8  `json:"depth,omitempty"`
	Flags  uint32 `json:"flags,omitempty"` // EventFrozen, ... (the probes' call flags, same bits)
	cuda.Fields
	// Ctx is the per-process index of the context current on the thread
	// (Process.Contexts), 0 when none.
	Ctx uint32 `json:"ctx,omitempty"`
	// Dev is the CUDA device ordinal the call ran against, -1 if unknown.
	Dev   int32 `json:"dev"`
	Stack int32 `json:"stack,omitempty"` // stack id, -1 when none
}

// Event flags: the bits of the probes' call flags (enum fx_call_flags in
// bpf/forensic.h; a test in package bpf checks every one against it).
// Bits 0-7 are set by the probes, bits 8-15 by the recorder; bits 16-31 are
// never stored, so a reader may use them for marks of its own.
const (
	EventFrozen     = 1 << 0 // the process was stopped at this failed call
	EventInFault    = 1 << 1 // the input struct could not be read
	EventOutFault   = 1 << 2 // the (first) out parameter could not be read; schema 1: either out parameter
	EventOutBFault  = 1 << 3 // the second out parameter could not be read (schema 2 on)
	EventReordered  = 1 << 4 // an inner call never returned (longjmp)
	EventArrayCut   = 1 << 5 // the array argument had more elements than were read (Count has them all)
	EventArrayFault = 1 << 6 // the array argument could not be read
	EventLateAttach = 1 << 8 // the process was running before the recorder attached
)

// Status is the outcome of one NVML query.
type Status struct {
	Code int    `json:"code"`
	Name string `json:"name"`
}

// OK reports NVML_SUCCESS.
func (s Status) OK() bool { return s.Code == 0 }

// Obs is one observed inventory value with its source. Value is nil when
// the query failed or is unsupported: never zero in its place.
type Obs[T any] struct {
	Value  *T     `json:"value"`
	API    string `json:"api"`
	Status Status `json:"status"`
}

// GPURef names a GPU (and MIG instance) as NVML identifies it.
type GPURef struct {
	Index    int    `json:"index"`
	UUID     string `json:"uuid,omitempty"`
	PCIBusID string `json:"pci_bus_id,omitempty"`
	// MIG instance, for samples of MIG scope.
	MIGIndex *int   `json:"mig_index,omitempty"`
	MIGUUID  string `json:"mig_uuid,omitempty"`
}

// Trigger names the failed call that a sample was taken for.
type Trigger struct {
	PID    uint32 `json:"pid"`
	TID    uint32 `json:"tid"`
	Symbol string `json:"symbol"`
	End    int64  `json:"call_time_ns"`
	Frozen bool   `json:"frozen"` // the process was stopped while sampling
	// Freeze is how long the process stayed stopped (0 when not frozen).
	Freeze int64 `json:"freeze_ns,omitempty"`
}

// ProcUsage is one row of a per-process query.
type ProcUsage struct {
	PID             uint32  `json:"pid"`
	Used            *uint64 `json:"used_bytes"` // nil: NVML reported it not available
	GPUInstance     *uint32 `json:"gpu_instance_id,omitempty"`
	ComputeInstance *uint32 `json:"compute_instance_id,omitempty"`
}

// Sample kinds.
const (
	KindFramebuffer = "framebuffer"
	KindBAR1        = "bar1"
	KindProcesses   = "processes"
)

// Sample scopes.
const (
	ScopeDevice   = "device"
	ScopeMIG      = "mig-instance"
	ScopeAperture = "aperture"
	ScopeProcess  = "process"
)

// Sample is one NVML query on one GPU: the values and where they came from.
type Sample struct {
	Seq   uint64 `json:"seq"`
	Round uint64 `json:"round"` // queries taken together share a round
	GPU   GPURef `json:"gpu"`
	Kind  string `json:"kind"`
	Scope string `json:"scope"`
	// API and Struct name the function and structure version used.
	API    string `json:"api"`
	Struct string `json:"struct,omitempty"`
	Status Status `json:"status"`
	// Fallback says why an older API version was used.
	Fallback string `json:"fallback,omitempty"`
	// Start and End bound the query on the run clock.
	Start int64 `json:"start_ns"`
	End   int64 `json:"end_ns"`
	// Values in bytes; nil when the query failed or the struct version has
	// no such field (v1 memory info has no reserved).
	Total     *uint64     `json:"total_bytes,omitempty"`
	Reserved  *uint64     `json:"reserved_bytes,omitempty"`
	Used      *uint64     `json:"used_bytes,omitempty"`
	Free      *uint64     `json:"free_bytes,omitempty"`
	Processes []ProcUsage `json:"processes,omitempty"`
	Triggers  []Trigger   `json:"triggers,omitempty"`
	// Kept says why a thinned-out period kept this sample.
	Kept string `json:"kept,omitempty"`
}

// Usable reports whether the sample carries values.
func (s *Sample) Usable() bool { return s.Status.OK() }

// PCIBar is one BAR region of the GPU's PCI function (sysfs).
type PCIBar struct {
	Index int    `json:"index"`
	Size  uint64 `json:"size_bytes"`
	Flags string `json:"flags"`
}

// MIGInventory is one MIG instance.
type MIGInventory struct {
	Index   int         `json:"index"`
	UUID    Obs[string] `json:"uuid"`
	FBTotal Obs[uint64] `json:"framebuffer_total_bytes"`
}

// GPUInventory is the configuration of one GPU.
type GPUInventory struct {
	Index        int            `json:"index"`
	UUID         Obs[string]    `json:"uuid"`
	Name         Obs[string]    `json:"name"`
	PCIBusID     Obs[string]    `json:"pci_bus_id"`
	FBTotal      Obs[uint64]    `json:"framebuffer_total_bytes"`
	FBReserved   Obs[uint64]    `json:"framebuffer_reserved_bytes"`
	BAR1Total    Obs[uint64]    `json:"bar1_total_bytes"`
	MIGMode      Obs[int]       `json:"mig_mode"`
	Persistence  Obs[int]       `json:"persistence_mode"`
	ComputeMode  Obs[int]       `json:"compute_mode"`
	PCIeGen      Obs[int]       `json:"pcie_generation"`
	PCIeWidth    Obs[int]       `json:"pcie_width"`
	PCIeMaxGen   Obs[int]       `json:"pcie_max_generation"`
	PCIeMaxWidth Obs[int]       `json:"pcie_max_width"`
	BARs         []PCIBar       `json:"pci_bars,omitempty"`
	BARsSource   string         `json:"pci_bars_source,omitempty"`
	MIG          []MIGInventory `json:"mig_devices,omitempty"`
}

// Inventory is the platform, taken once per run.
type Inventory struct {
	Time        int64          `json:"time_ns"`
	Library     string         `json:"nvml_library"`
	Init        Status         `json:"nvml_init"`
	InitAPI     string         `json:"nvml_init_api"`
	InitError   string         `json:"nvml_init_error,omitempty"`
	Driver      Obs[string]    `json:"driver_version"`
	NVMLVersion Obs[string]    `json:"nvml_version"`
	CUDADriver  Obs[int]       `json:"cuda_driver_version"`
	DeviceCount Obs[int]       `json:"device_count"`
	GPUs        []GPUInventory `json:"gpus"`
	// IOMMU: whether the kernel has an active IOMMU (sysfs).
	IOMMU       *bool  `json:"iommu_active,omitempty"`
	IOMMUSource string `json:"iommu_source,omitempty"`
}

// DeviceMap records how a process's CUDA device ordinal was matched to an
// NVML GPU, so that the match is never a silent guess.
type DeviceMap struct {
	Ordinal  int32  `json:"ordinal"`
	UUID     string `json:"uuid,omitempty"`
	PCIBusID string `json:"pci_bus_id,omitempty"`
	GPU      int    `json:"gpu"` // NVML index, -1 when unknown
	MIG      *int   `json:"mig_index,omitempty"`
	// Method: uuid, pci-bus-id, visible-devices-uuid,
	// visible-devices-index+order-pci-bus-id, visible-devices-index+order-same-model,
	// single-gpu, order-pci-bus-id, order-same-model, or unknown (with Why).
	// Why is also set when the GPU has MIG enabled and MIG is nil: the
	// device is one of its instances, and which one is not known.
	Method string `json:"method"`
	Why    string `json:"why,omitempty"`
	// WhyKind is what Why is about, as a value a reader decides from
	// (Why says it in words); set whenever Why is. Files written before
	// it existed get it from Why when read (see compat.go).
	WhyKind DeviceWhy `json:"why_kind,omitempty"`
}

// DeviceWhy is the kind of reason a CUDA device's GPU or MIG instance is
// not known.
type DeviceWhy string

// DeviceWhy values.
const (
	// WhyNoGPUs: NVML listed no GPUs.
	WhyNoGPUs DeviceWhy = "no-gpus"
	// WhyContainerVisible: NVIDIA_VISIBLE_DEVICES (set by a container
	// runtime) hides every GPU or names one the host does not have.
	WhyContainerVisible DeviceWhy = "nvidia-visible-devices"
	// WhyCUDAVisible: CUDA_VISIBLE_DEVICES cannot be matched to the GPUs.
	WhyCUDAVisible DeviceWhy = "cuda-visible-devices"
	// WhyOrder: CUDA's device order cannot be matched to NVML's.
	WhyOrder DeviceWhy = "order"
	// WhyMIGInstance: the GPU is known, the MIG instance is not.
	WhyMIGInstance DeviceWhy = "mig-instance"
)

// Context is a CUDA context seen in a process.
type Context struct {
	Index  uint32 `json:"index"`
	Handle uint64 `json:"handle"`
	Device int32  `json:"device"` // CUDA ordinal, -1 unknown
}

// Mapping is one file-backed executable mapping, for symbolizing stacks.
type Mapping struct {
	Start   uint64 `json:"start"`
	End     uint64 `json:"end"`
	Offset  uint64 `json:"offset"`
	Path    string `json:"path"`
	Host    string `json:"host_path,omitempty"` // through /proc/PID/root
	BuildID string `json:"build_id,omitempty"`
	// Dev (the kernel's dev_t, major << 20 | minor) and Inode name the
	// file as the kernel does; absent in files written before them.
	Dev   uint32 `json:"dev,omitempty"`
	Inode uint64 `json:"inode,omitempty"`
	// Name is the file's name as the probes read it, kept when its path
	// could not be found (Path is then empty).
	Name string `json:"name,omitempty"`
}

// Process is one recorded process.
type Process struct {
	PID      uint32   `json:"pid"`
	PPID     uint32   `json:"ppid"`
	Start    int64    `json:"start_ns"` // first seen on the run clock
	Comm     string   `json:"comm,omitempty"`
	Exe      string   `json:"exe,omitempty"`
	Args     []string `json:"args,omitempty"`
	ArgsCut  bool     `json:"args_cut,omitempty"` // Args is the beginning of a longer list (its last element may be cut)
	Cgroup   string   `json:"cgroup,omitempty"`
	CgroupID uint64   `json:"cgroup_id,omitempty"`
	// Pod is the Kubernetes pod the process ran in, when its cgroup path
	// names one (absent otherwise, and in files written before it existed).
	Pod *Pod `json:"pod,omitempty"`
	// Root: the spawned command or --pid target (not a descendant).
	Root bool `json:"root,omitempty"`
	// AttachedLate: the process had libcuda mapped before the recorder
	// attached, so calls it made earlier are not in the record.
	AttachedLate bool              `json:"attached_late,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	Exit         *Exit             `json:"exit,omitempty"`
	Devices      []DeviceMap       `json:"devices,omitempty"`
	Contexts     []Context         `json:"contexts,omitempty"`
	// Maps are the process's executable file mappings, for unwinding and
	// symbolizing its stacks: every mapping seen while it ran (read at its
	// exec, its first call and each stack capture), a newer one replacing
	// those it overlaps.
	Maps []Mapping `json:"maps,omitempty"`
	// Python is the CPython interpreter the process runs, when the
	// recorder found one (absent in files written before it existed).
	Python *Python `json:"python,omitempty"`
	// Threads name the process's threads that made a failed call, each
	// as the kernel named it at the thread's first failed call (absent in
	// files written before it existed).
	Threads []Thread `json:"threads,omitempty"`
}

// Thread is a thread's name (its comm, as pthread_setname_np or
// prctl(PR_SET_NAME) set it, at most 15 bytes) as the kernel had it at
// the return of the thread's first recorded failed call.
type Thread struct {
	TID  uint32 `json:"tid"`
	Name string `json:"name"`
	// Time is that failed call's return on the run clock.
	Time int64 `json:"time_ns"`
}

// ThreadName returns the name recorded for thread tid, "" when none was.
func (p *Process) ThreadName(tid uint32) string {
	for _, t := range p.Threads {
		if t.TID == tid {
			return t.Name
		}
	}
	return ""
}

// Python is the CPython interpreter a process runs, as the recorder
// located it: what a stack capture's Python frames are decoded with.
type Python struct {
	// Version is "3.11.2" (or "3.11" when the micro version is unknown).
	Version string `json:"version"`
	// Path is the interpreter's file (libpython3.X.so or python3.X).
	Path string `json:"path"`
	// Runtime and CodeType are the addresses of _PyRuntime and PyCode_Type
	// in the process (CodeType 0: not exported).
	Runtime  uint64 `json:"runtime"`
	CodeType uint64 `json:"code_type,omitempty"`
	// Error says why its Python frames are not read: a version or build
	// with no known layout, or a layout its own debug offsets contradict.
	Error string `json:"error,omitempty"`
	// ErrorKind is what Error is about, as a value a reader decides from;
	// set whenever Error is. Files written before it existed get it from
	// Error when read (see compat.go).
	ErrorKind PyError `json:"error_kind,omitempty"`
}

// PyError is the kind of reason a process's Python frames are not read.
type PyError string

// PyError values.
const (
	// PyUnlocated: the interpreter was not located while the process
	// lived (its mappings were read too late).
	PyUnlocated PyError = "unlocated"
	// PyUnsupported: a version or build with no known layout, or a layout
	// the interpreter's own debug offsets contradict.
	PyUnsupported PyError = "unsupported"
	// PyProbe: the probes could not be told where the interpreter is.
	PyProbe PyError = "probe"
)

// Pod names a Kubernetes pod: its UID from the cgroup path the kubelet
// made, its namespace and name from the pod's own files or environment
// (empty when they could not be read).
type Pod struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
}

// KernelLog is one NVRM or Xid line of the kernel log.
type KernelLog struct {
	Time     int64  `json:"time_ns"`   // run clock
	Printk   int64  `json:"printk_ns"` // as the kernel stamped it
	Seq      uint64 `json:"kmsg_seq"`
	Priority int    `json:"priority"`
	Text     string `json:"text"`
	Xid      *int   `json:"xid,omitempty"`
}

// Marker is a labelled point in the run (forensic mark).
type Marker struct {
	Time  int64  `json:"time_ns"`
	Label string `json:"label"`
}

// Frame is one user stack frame: a build id and a file offset, or only an
// address when the kernel could not read the file's build id.
type Frame struct {
	BuildID string `json:"build_id,omitempty"`
	Offset  uint64 `json:"offset,omitempty"`
	IP      uint64 `json:"ip,omitempty"`
}

// Drops is a reading of the loss counters.
type Drops struct {
	Time  int64 `json:"time_ns"`
	Stats Stats `json:"stats"`
}

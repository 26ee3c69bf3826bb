// Package report is the result of analyzing one recording: the types of the
// `forensic analyze --json` contract (docs/analyze-json.md,
// docs/analyze.schema.json) and the timeline series the HTML report draws.
//
// Every renderer (text, HTML, Perfetto, JSON) takes a *Report and nothing
// else; per-call exports also take the stream of Call values the analysis
// pass hands to an Observer. The package imports neither the store nor the
// CUDA tables, so a renderer cannot go back to the recording to compute
// more: what it shows is what the analysis decided.
//
// Fields are added, never renamed or removed, within a Schema version.
package report

import (
	"path"
	"strconv"
)

// Schema names the JSON layout.
const Schema = "forensic.analyze/1"

// Attribution says what kind of problem the first failed operation is.
type Attribution string

// Attribution values.
const (
	AttrAllocation      Attribution = "allocation"
	AttrMapping         Attribution = "mapping"
	AttrNotMemory       Attribution = "not-memory"
	AttrMissingEvidence Attribution = "missing-evidence"
	AttrNone            Attribution = "none"
)

// Capacity is what the one memory view that can explain a failure says.
type Capacity string

// Capacity values.
const (
	CapFBExhausted   Capacity = "framebuffer-exhausted"
	CapFBHadRoom     Capacity = "framebuffer-had-room"
	CapBAR1Exhausted Capacity = "bar1-exhausted"
	CapBAR1HadRoom   Capacity = "bar1-had-room"
	// CapPoolExhausted: an allocation from a memory pool created with a
	// maximum size did not fit what the pool had left under it.
	CapPoolExhausted Capacity = "pool-exhausted"
	CapNotApplicable Capacity = "not-applicable"
	CapUnknown       Capacity = "unknown"
)

// Report is the analysis of one run.
type Report struct {
	Schema string  `json:"schema"`
	Run    RunInfo `json:"run"`
	// FirstFailure is nil when no recorded call failed.
	FirstFailure *Failure    `json:"first_failure"`
	Attribution  Attribution `json:"attribution"`
	// Capacity is nil when there is no failure.
	Capacity *Capacity `json:"capacity"`
	// Verdict tells the story in two or three sentences. When the first
	// failure was recovered, it leads with the first unrecovered one.
	Verdict string `json:"verdict"`
	// FirstUnrecovered is the first failure the process did not recover
	// from, judged on its own, when the first failure was recovered; nil
	// when the first failure was not recovered or nothing failed.
	FirstUnrecovered *Judged `json:"first_unrecovered"`
	// NextSteps are what to try, fitted to the verdict.
	NextSteps []string `json:"next_steps"`
	// Cause names what the record shows caused a not-memory failure (an
	// earlier failed cuInit, ...), when it shows one.
	Cause       *Cause     `json:"cause"`
	Missing     []Missing  `json:"missing"`
	Evidence    []Evidence `json:"evidence"`
	MemoryViews []ViewRow  `json:"memory_views"`
	// MemoryViewNotes explain, in sentences, what the memory views show
	// where they could seem to contradict the verdict (no sample caught
	// the memory the traced calls held at their peak). Empty when none.
	MemoryViewNotes []string  `json:"memory_view_notes,omitempty"`
	Failures        []Failure `json:"failures"`
	// FailuresTruncated counts failures beyond those listed.
	FailuresTruncated int             `json:"failures_truncated,omitempty"`
	NearestSamples    *NearestSamples `json:"nearest_samples"`
	LiveAtFailure     []LiveBytes     `json:"live_at_first_failure"`
	Processes         []ProcessInfo   `json:"processes"`
	Coverage          []Library       `json:"coverage"`
	KernelLog         []KernelLine    `json:"kernel_log"`
	Markers           []Marker        `json:"markers"`
	Phases            []Phase         `json:"phases"`
	// PhasesFrom says whether phases come from markers ("markers") or,
	// without any, from the run's own landmarks ("landmarks: no markers
	// were recorded").
	PhasesFrom string      `json:"phases_from"`
	Loss       Loss        `json:"loss"`
	Sampling   Sampling    `json:"sampling"`
	Calls      []CallCount `json:"calls"`
	// Headroom is the least free memory per GPU and view over the run,
	// one entry per GPU and view that has a usable sample.
	Headroom []Headroom `json:"headroom"`
	// NearMiss says that no call failed, yet the least free framebuffer
	// of some GPU was under NearMissPercent of its total.
	NearMiss        bool    `json:"near_miss"`
	NearMissPercent float64 `json:"near_miss_percent"`
	// Budget is where the framebuffer (or, for a failed mapping, BAR1)
	// went at the first failure, as parts
	// that add up to its total (empty when no usable sample shows it).
	Budget []Budget `json:"budget"`
	// Jobs are the recording's jobs, each with its first failure, when
	// it holds more than one or one was selected; SubjectJob is the job
	// the verdict is about (the selected one, else the headline failure's)
	// and JobSelected says it was selected (analyze --job, --pid, --pod).
	Jobs        []Job  `json:"jobs,omitempty"`
	SubjectJob  string `json:"subject_job,omitempty"`
	JobSelected bool   `json:"job_selected,omitempty"`
	// Timeline is what the HTML report draws; it is not part of --json.
	Timeline *Timeline `json:"-"`
	// MultiRun is set when several runs of one job were analyzed together;
	// its fields then appear at the top level.
	*MultiRun
}

// Judged is a failure judged on its own: the fields of a Failure plus its
// attribution, capacity, verdict and the evidence for them.
type Judged struct {
	Failure
	Attribution Attribution `json:"attribution"`
	Capacity    *Capacity   `json:"capacity"`
	Verdict     string      `json:"verdict"`
	Evidence    []Evidence  `json:"evidence"`
	Missing     []Missing   `json:"missing"`
}

// RunInfo summarizes the recording.
type RunInfo struct {
	Path      string   `json:"path"`
	ID        string   `json:"id"`
	Mode      string   `json:"mode"`
	Command   []string `json:"command,omitempty"`
	TargetPID uint32   `json:"target_pid,omitempty"`
	// Scope lists the cgroup directories an "all" run was limited to
	// (record --all --cgroup/--pod), each with the cgroups below it.
	Scope        []string `json:"scope,omitempty"`
	Host         string   `json:"host"`
	Kernel       string   `json:"kernel"`
	Clock        string   `json:"clock"`
	StartNS      int64    `json:"start_ns"`
	EndNS        int64    `json:"end_ns"`
	WallStart    string   `json:"wall_start"`
	DurationNS   int64    `json:"duration_ns"`
	Ended        string   `json:"ended"` // clean, abrupt, or recording (a flight recording still being written); the reason is StopReason
	StopReason   string   `json:"stop_reason,omitempty"`
	StopError    string   `json:"stop_error,omitempty"`
	WorkloadExit *Exit    `json:"workload_exit,omitempty"`
	// Interrupted names the signal that stopped the run or its workload
	// when the user or forensic delivered it (SIGINT, SIGTERM, SIGHUP):
	// an interruption, not a crash. Empty otherwise.
	Interrupted string `json:"interrupted,omitempty"`
	Interval    int64  `json:"interval_ns"`
	Freeze      bool   `json:"freeze_on_failure"`
	Events      uint64 `json:"events"`
	Schema      uint32 `json:"file_schema"`
	Version     string `json:"recorded_by"`
	// BootID names the kernel boot the run was recorded on (runs of one
	// boot share the run clock); empty for a file that does not say.
	BootID string `json:"boot_id,omitempty"`
	// Rank, WorldSize and JobID are the job identity of the recorded
	// workload, when its environment named one.
	Rank      *int   `json:"rank"`
	WorldSize *int   `json:"world_size"`
	JobID     string `json:"job_id,omitempty"`
	// WallStartNS is the run clock's start as Unix nanoseconds, and
	// ClockErrorNS the bound on the wall clock's error; nil when the clock
	// was unsynchronized or the file does not say.
	WallStartNS  int64  `json:"wall_start_ns"`
	ClockErrorNS *int64 `json:"clock_error_ns"`
	// Flight says how a flight recording's segments were read; absent for
	// a single run.db.
	Flight *FlightRead `json:"flight,omitempty"`
}

// FlightRead says how a flight recording (a directory of segments) was
// read.
type FlightRead struct {
	// SegmentsRead are the segments read; NotRead those that could not be
	// (with why).
	SegmentsRead int      `json:"segments_read"`
	NotRead      []string `json:"segments_not_read"`
	// Live says how the segment the recorder was writing was read: "none"
	// (there was none: the recording is closed), "copy" (a copy its
	// recorder made when asked, at LiveTaken), "snapshot" (its newest
	// snapshot, taken at LiveTaken), "not-read".
	Live      string `json:"live"`
	LiveTaken string `json:"live_taken,omitempty"`
	// DroppedRanges and DroppedCalls are the stretches retention deleted
	// and the call events they held; DroppedWindowCut how many of those
	// stretches cut into the window kept around a failure (the windows
	// alone exceeded the size bound), as the index says.
	DroppedRanges    int    `json:"dropped_ranges"`
	DroppedCalls     uint64 `json:"dropped_calls"`
	DroppedWindowCut int    `json:"dropped_window_cut"`
	// SegmentsLost are the sequence numbers of closed segments the index
	// lists whose files are gone (also in NotRead), and LostCalls the call
	// events the index says they held: records lost, not deleted by
	// retention.
	SegmentsLost []uint64 `json:"segments_lost"`
	LostCalls    uint64   `json:"lost_calls"`
	// EventsRead are the call events in the segments read; EventsRecorded
	// the recorder's own count at the end of what was read (its stop
	// record, or its last counter reading), deleted stretches included.
	EventsRead     uint64 `json:"events_read"`
	EventsRecorded uint64 `json:"events_recorded"`
}

// Exit is how a process ended.
type Exit struct {
	Code   *int   `json:"code"`
	Signal *int   `json:"signal"`
	Name   string `json:"signal_name,omitempty"`
	TimeNS int64  `json:"time_ns"`
	// Core says the kernel wrote a core dump.
	Core bool `json:"core_dumped,omitempty"`
}

// Failure is one failed call.
type Failure struct {
	// RunPath is the run.db the failure was recorded in, and Rank the
	// failing process's rank (nil when its environment named none).
	RunPath    string  `json:"run_path"`
	Rank       *int    `json:"rank"`
	Symbol     string  `json:"symbol"`
	Operation  string  `json:"operation"`
	Result     int32   `json:"result"`
	ResultName string  `json:"result_name"`
	Meaning    string  `json:"meaning"`
	Size       *uint64 `json:"size"`
	// SizeSource says where Size came from when the call itself names no
	// size: the exporter's recorded allocation for an IPC or pool import.
	SizeSource string  `json:"size_source,omitempty"`
	Flags      *uint64 `json:"flags"`
	PID        uint32  `json:"pid"`
	TID        uint32  `json:"tid"`
	// ThreadName is the failing thread's name (its comm) as the kernel
	// had it at the call; nil when the record has none.
	ThreadName *string `json:"thread_name"`
	TimeNS     int64   `json:"time_ns"`
	StartNS    int64   `json:"start_ns"`
	Wall       string  `json:"wall_time"`
	// GPU is the UUID of the GPU the call ran against, when known.
	GPU      *string `json:"gpu"`
	GPUIndex *int    `json:"gpu_index"`
	MIGIndex *int    `json:"mig_index,omitempty"`
	// ApertureGPU is the NVML index of the GPU whose BAR1 aperture the
	// mapping uses when that is not the caller's: the exporter's for an
	// import of another GPU's memory, the peer's for peer access.
	ApertureGPU *int `json:"aperture_gpu,omitempty"`
	// ApertureOf says whose GPU ApertureGPU is: "exporter" or "peer" (for
	// peer access it is set even when the peer's GPU is unknown).
	ApertureOf string `json:"aperture_of,omitempty"`
	CUDADevice int32  `json:"cuda_device"`
	// Grants are the devices an access call grants (cuMemSetAccess), in
	// call order; GrantsCut says the recorder's bound cut the list, so
	// more devices were granted than are listed.
	Grants     []Grant `json:"grants,omitempty"`
	GrantsCut  bool    `json:"grants_cut,omitempty"`
	GPUMapping string  `json:"gpu_mapping"`
	Context    uint32  `json:"context,omitempty"`
	Recovered  bool    `json:"recovered"`
	// PossibleConsequence: after the first failure, in its process and
	// context.
	PossibleConsequence bool   `json:"possible_consequence"`
	Frozen              bool   `json:"frozen"`
	Phase               string `json:"phase,omitempty"`
	Stack               *Stack `json:"stack,omitempty"`
}

// Grant is one device an access call grants.
type Grant struct {
	// Location is what is granted: "device", or the raw location type.
	Location   string `json:"location"`
	CUDADevice int32  `json:"cuda_device"`
	// GPU is the NVML index of that device, nil when unknown.
	GPU *int `json:"gpu"`
	// Access is none, read or read-write.
	Access string `json:"access"`
	// Peer says the granted device is not the memory's owner, so its
	// accesses go through the owner's BAR1 aperture over PCIe.
	Peer bool `json:"peer"`
}

// Stack is a symbolized user stack, innermost frame first. For a
// CPython process the Python frames of the failing thread stand in for
// the evaluation loop's native frames that ran them.
type Stack struct {
	Frames []Frame `json:"frames"`
	// Partial: the walk did not reach the outermost frame (Stop says why
	// when it was unwound), or the frames are the kernel's frame-pointer
	// walk, which cannot tell.
	Partial bool   `json:"partial"`
	Note    string `json:"note,omitempty"`
	// Method is how the native frames were found: "unwound" (the
	// registers and stack copied at the call's return, unwound offline
	// with the files' call-frame information, frame pointers where a file
	// has none) or "frame-pointers" (the kernel's walk at the return).
	Method string `json:"method,omitempty"`
	// Stop is why an unwound walk ended: outermost (the only complete
	// ending), stack-end, no-cfi, no-file, outside-mappings, bad-cfi or
	// depth-limit (docs/stacks.md).
	Stop string `json:"stop,omitempty"`
	// Python says what became of the Python frames of a CPython process:
	// "ok", "truncated" (the outermost were not read), or why there are
	// none ("no-thread", "fault", "not-captured", an unsupported
	// version, ...). Empty for other processes.
	Python string `json:"python,omitempty"`
	// PythonStatus is Python as a value to decide from: ok, truncated,
	// no-thread, fault, not-captured, not-located (the interpreter was
	// never located while the process lived), not-read (located, but its
	// version or build is not read, or the probes could not be told
	// where it is), unreadable, or no-capture (the call's stack was not
	// captured). Empty for other processes.
	PythonStatus string `json:"python_status,omitempty"`
	// UserFrame is the index in Frames of the innermost frame of the
	// user's own code: not a framework's (Python's site-packages,
	// dist-packages or standard library; libcuda, the loader or a system
	// library). Nil when every frame is a framework's.
	UserFrame *int `json:"user_frame,omitempty"`
	// PythonVersion is the CPython version of the process ("3.13.5"),
	// when its interpreter was located; PythonBuild how it was built:
	// "static" (the interpreter in the executable, as Debian's) or
	// "shared" (in a libpython3.X.so, as pyenv's), and PythonFile that
	// file as the process named it.
	PythonVersion string `json:"python_version,omitempty"`
	PythonBuild   string `json:"python_build,omitempty"`
	PythonFile    string `json:"python_file,omitempty"`
	// SharedFrom is set when this call's site had been captured before:
	// the stack is that capture's, taken at this time (the run clock).
	SharedFrom *int64 `json:"shared_from_ns,omitempty"`
}

// PythonText is a stack's interpreter in words ("CPython 3.13.5, shared
// libpython3.13.so.1.0"); "" for a stack without one.
func (st *Stack) PythonText() string {
	if st == nil || st.PythonVersion == "" {
		return ""
	}
	s := "CPython " + st.PythonVersion
	switch st.PythonBuild {
	case "shared":
		s += ", shared " + path.Base(st.PythonFile)
	case "static":
		s += ", static in " + path.Base(st.PythonFile)
	}
	return s
}

// Frame is one stack frame.
type Frame struct {
	// Address is the instruction address (the first native frame's) or
	// a return address; 0 for Python frames.
	Address  uint64 `json:"address"`
	Function string `json:"function,omitempty"`
	Offset   uint64 `json:"offset"`
	Library  string `json:"library,omitempty"`
	// Language is "native" or "python".
	Language string `json:"language,omitempty"`
	// File and Line: a Python frame's file and the line it was running
	// (0 when unknown).
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
	// Via says how a native frame was found: registers, cfi or
	// frame-pointer.
	Via string `json:"via,omitempty"`
}

// Frame languages.
const (
	LangNative = "native"
	LangPython = "python"
)

// Cause is what the record shows behind a not-memory failure.
type Cause struct {
	Symbol     string `json:"symbol,omitempty"`
	Result     int32  `json:"result"`
	ResultName string `json:"result_name"`
	PID        uint32 `json:"pid"`
	TimeNS     int64  `json:"time_ns,omitempty"`
	Text       string `json:"text"`
}

// Names reports whether the cause is the failed call f (an earlier
// failure of the same process), not only a result code.
func (c *Cause) Names(f *Failure) bool {
	return c != nil && c.Symbol != "" && c.Symbol == f.Symbol && c.PID == f.PID && c.TimeNS == f.TimeNS
}

// Missing is one piece of evidence the verdict lacked, and how to get it.
type Missing struct {
	What string `json:"what"`
	Fix  string `json:"fix"`
	// Decisive says the gap changed the verdict (attribution
	// missing-evidence, or capacity unknown).
	Decisive bool `json:"decisive"`
}

// Evidence is one finding that decided the verdict.
type Evidence struct {
	Field  string  `json:"field"`
	Value  *uint64 `json:"value"`
	Text   string  `json:"text,omitempty"`
	Unit   string  `json:"unit"`
	Source string  `json:"source"` // API (and struct), or the traced call
	Status string  `json:"status"`
	TimeNS int64   `json:"time_ns"`
	GPU    *int    `json:"gpu,omitempty"`
	Scope  string  `json:"scope,omitempty"`
	Note   string  `json:"note,omitempty"`
	// Brief is Note in a few words ("at most: corrected for pid 41's
	// exit"), for the default text report; Note, the full account, is
	// shown with --explain. Empty when Note is short already.
	Brief string `json:"brief,omitempty"`
	// Rule names the rule of evidence that decided how this value was
	// used (docs/rules.md), when one did.
	Rule string `json:"rule,omitempty"`
	// Decisive marks the value the verdict compared the request with.
	Decisive bool `json:"decisive,omitempty"`
}

// ViewRow is one field of the memory-view table: one view, one scope, one
// GPU. Views are never combined.
type ViewRow struct {
	GPU      int    `json:"gpu"`
	GPUUUID  string `json:"gpu_uuid,omitempty"`
	Field    string `json:"field"`
	View     string `json:"view"` // framebuffer or bar1; traced rows say so in Scope
	Meaning  string `json:"meaning"`
	Unit     string `json:"unit"`
	Scope    string `json:"scope"`
	API      string `json:"api"`
	Struct   string `json:"struct,omitempty"`
	Support  string `json:"support"`
	Examines string `json:"examines"`
	PID      uint32 `json:"pid,omitempty"`
	MIGIndex *int   `json:"mig_index,omitempty"`
	// Values at the run's landmarks (nil: no usable value).
	Start  *uint64 `json:"start"`
	Before *uint64 `json:"before_first_failure"`
	At     *uint64 `json:"at_failure"`
	End    *uint64 `json:"end"`
	Peak   *uint64 `json:"peak"`
	Low    *uint64 `json:"low"`
	// Change is End - Start (signed), when both are known.
	Change *int64       `json:"change"`
	Phases []PhaseValue `json:"phases"`
}

// PhaseValue is a field's value over one phase.
type PhaseValue struct {
	Phase string  `json:"phase"`
	Last  *uint64 `json:"last"`
	Peak  *uint64 `json:"peak"`
}

// Phase is an interval of the run.
type Phase struct {
	Label   string `json:"label"`
	StartNS int64  `json:"start_ns"`
	EndNS   int64  `json:"end_ns"`
}

// NearestSamples are the samples around the first failure on its GPU.
type NearestSamples struct {
	GPU    int         `json:"gpu"`
	Before []SampleRef `json:"before"`
	At     []SampleRef `json:"at_failure"`
	After  []SampleRef `json:"after"`
}

// SampleRef is one sample as reported.
type SampleRef struct {
	Seq      uint64  `json:"seq"`
	Kind     string  `json:"kind"`
	Scope    string  `json:"scope"`
	API      string  `json:"api"`
	Struct   string  `json:"struct,omitempty"`
	Status   string  `json:"status"`
	StartNS  int64   `json:"start_ns"`
	EndNS    int64   `json:"end_ns"`
	Total    *uint64 `json:"total_bytes"`
	Reserved *uint64 `json:"reserved_bytes"`
	Used     *uint64 `json:"used_bytes"`
	Free     *uint64 `json:"free_bytes"`
	Fallback string  `json:"fallback,omitempty"`
	// DelayNS: sample start minus the failed call's return, for a sample
	// the failure triggered.
	DelayNS  *int64 `json:"delay_ns,omitempty"`
	Frozen   bool   `json:"frozen,omitempty"`
	FreezeNS int64  `json:"freeze_ns,omitempty"`
}

// LiveBytes is what a process held through traced calls on one GPU and
// view, at the first failure.
type LiveBytes struct {
	PID   uint32 `json:"pid"`
	GPU   *int   `json:"gpu"`
	MIG   *int   `json:"mig_index,omitempty"`
	View  string `json:"view"`
	Bytes uint64 `json:"bytes"`
	Count int    `json:"allocations"`
	// Unsized counts live resources whose size the record lacks.
	Unsized int `json:"unsized,omitempty"`
	// Kinds splits Count by the kind of resource (the symbol table's
	// names: device-pointer, ipc-mapping, ...), by kind name; absent in
	// reports of older versions.
	Kinds []KindCount `json:"kinds,omitempty"`
}

// KindCount is how many live resources of one kind there are.
type KindCount struct {
	Kind  string `json:"kind"`
	Count int    `json:"count"`
}

// ProcessInfo summarizes one recorded process.
type ProcessInfo struct {
	PID          uint32            `json:"pid"`
	PPID         uint32            `json:"ppid"`
	Exe          string            `json:"exe"`
	Args         []string          `json:"args"`
	ArgsCut      bool              `json:"args_cut,omitempty"` // Args is the beginning of a longer list
	Root         bool              `json:"root"`
	StartNS      int64             `json:"start_ns"`
	Exit         *Exit             `json:"exit"`
	Cgroup       string            `json:"cgroup,omitempty"`
	Pod          *Pod              `json:"pod,omitempty"`
	AttachedLate bool              `json:"attached_late"`
	Env          map[string]string `json:"env,omitempty"`
	Devices      []DeviceMap       `json:"devices"`
	Calls        uint64            `json:"calls"`
	Failed       uint64            `json:"failed_calls"`
	// Threads name the process's threads that made a failed call (absent
	// when none was named, and in reports of older versions).
	Threads []ThreadInfo `json:"threads,omitempty"`
}

// ThreadInfo is a thread's name (its kernel comm) as it was at the
// thread's first failed call.
type ThreadInfo struct {
	TID  uint32 `json:"tid"`
	Name string `json:"name"`
}

// ThreadTrackName names a thread's timeline track: by its name when the
// record has one ("pt_autograd_0 (thread 4250)"), else by its id ("thread
// 4250", "main thread 4242").
func ThreadTrackName(pid, tid uint32, name string) string {
	id := "thread " + strconv.FormatUint(uint64(tid), 10)
	if tid == pid {
		id = "main " + id
	}
	if name == "" {
		return id
	}
	return name + " (" + id + ")"
}

// Pod is the Kubernetes pod a process ran in (its UID from the cgroup
// path, its namespace and name when the recorder could read them).
type Pod struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
}

// DeviceMap is how a CUDA ordinal was matched to a GPU.
type DeviceMap struct {
	Ordinal int32  `json:"cuda_device"`
	GPU     *int   `json:"gpu"`
	UUID    string `json:"uuid,omitempty"`
	Method  string `json:"method"`
	Why     string `json:"why,omitempty"`
}

// Library is the coverage of one attached libcuda.
type Library struct {
	Path    string   `json:"path"`
	BuildID string   `json:"build_id"`
	Hooked  []string `json:"hooked"`
	Absent  []string `json:"absent"`
	Unknown []string `json:"unhooked_exports"`
	Error   string   `json:"error,omitempty"`
}

// KernelLine is one kernel log line of the run.
type KernelLine struct {
	TimeNS int64  `json:"time_ns"`
	Text   string `json:"text"`
	Xid    *int   `json:"xid"`
	// Relative to the first failure: before, after.
	Position string `json:"position,omitempty"`
}

// Marker is a labelled point (forensic mark).
type Marker struct {
	TimeNS int64  `json:"time_ns"`
	Label  string `json:"label"`
}

// Loss summarizes lost evidence.
type Loss struct {
	Calls        uint64 `json:"calls_seen"`
	Events       uint64 `json:"events_stored"`
	LostCalls    uint64 `json:"lost_calls"`
	LostFirstNS  int64  `json:"lost_first_ns,omitempty"`
	LostInflight uint64 `json:"lost_inflight"`
	TooDeep      uint64 `json:"too_deep"`
	Unmatched    uint64 `json:"unmatched_returns"`
	LostProc     uint64 `json:"lost_process_records"`
	DecodeErrors uint64 `json:"decode_errors"`
	// Untracked counts processes the recorder could not follow (its table
	// of tracked processes was full); LostHolds libcuda mappings at which a
	// process could not be held until the probes were in.
	Untracked uint64 `json:"untracked_processes"`
	LostHolds uint64 `json:"lost_holds"`
	// StackSkipped and StackLost: stack captures the rate limit did not
	// make, and captures made but not delivered (those calls keep the
	// frame-pointer walk). Absent when 0.
	StackSkipped  uint64 `json:"stack_captures_skipped,omitempty"`
	StackLost     uint64 `json:"stack_captures_lost,omitempty"`
	BeforeFailure bool   `json:"before_first_failure"`
	Known         bool   `json:"counters_known"`
	// CountersFrom says where the counters come from: "stop" (the
	// recorder's stop record: every call up to its stop), "reading" (its
	// last periodic reading, at CountersAtNS: calls after it are not
	// counted) or "none" (never read: Known is false).
	CountersFrom string `json:"counters_from"`
	CountersAtNS int64  `json:"counters_at_ns,omitempty"`
}

// Where a run's loss counters come from (Loss.CountersFrom).
const (
	CountersStop    = "stop"
	CountersReading = "reading"
	CountersNone    = "none"
)

// Sampling summarizes the NVML evidence.
type Sampling struct {
	NVMLInit    string   `json:"nvml_init"`
	NVMLLibrary string   `json:"nvml_library"`
	Samples     int      `json:"samples"`
	Thinned     uint64   `json:"thinned"`
	Triggered   int      `json:"triggered_rounds"`
	DelayMedian *int64   `json:"trigger_delay_median_ns"`
	DelayMax    *int64   `json:"trigger_delay_max_ns"`
	Unsupported []string `json:"unsupported"`
}

// CallCount is the number of calls per symbol.
type CallCount struct {
	Symbol    string `json:"symbol"`
	Operation string `json:"operation"`
	Calls     uint64 `json:"calls"`
	Failed    uint64 `json:"failed"`
}

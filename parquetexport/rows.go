package parquetexport

// The row types are the Parquet schemas of the tables (docs/parquet.md).
// Integers are signed (Spark and Trino have no unsigned types): a uint64
// field (a size, a pointer, flags) is stored as its bit pattern. Pointer
// fields are optional columns: nil is null, never 0 in its place. Times
// named *_ns without "run_clock" are Unix nanoseconds.

// callRow is one recorded call (table calls) or one failed call (table
// failures).
type callRow struct {
	Symbol        string  `parquet:"symbol,dict"`
	Operation     string  `parquet:"operation,dict"`
	Primary       bool    `parquet:"primary"`
	Result        int32   `parquet:"result"`
	ResultName    string  `parquet:"result_name,dict"`
	ResultMeaning string  `parquet:"result_meaning,dict"`
	PID           int64   `parquet:"pid"`
	TID           int64   `parquet:"tid"`
	Rank          *int32  `parquet:"rank,optional"`
	GPU           *int32  `parquet:"gpu,optional"`
	GPUUUID       *string `parquet:"gpu_uuid,optional,dict"`
	CUDADevice    *int32  `parquet:"cuda_device,optional"`
	Context       *int32  `parquet:"context,optional"`
	StartNS       int64   `parquet:"start_ns"`
	EndNS         int64   `parquet:"end_ns"`
	EndRunClockNS int64   `parquet:"end_run_clock_ns"`
	Depth         int32   `parquet:"depth"`
	EventFlags    int64   `parquet:"event_flags"`
	Size          *int64  `parquet:"size,optional"`
	Flags         *int64  `parquet:"flags,optional"`
	Ptr           *int64  `parquet:"ptr,optional"`
	Target        *int64  `parquet:"target,optional"`
	Device        *int32  `parquet:"device,optional"`
	Peer          *int64  `parquet:"peer,optional"`
	Count         *int64  `parquet:"count,optional"`
	Key           *string `parquet:"key,optional"`
	StackID       *int32  `parquet:"stack_id,optional"`
}

// sampleRow is one value of one NVML query (table samples).
type sampleRow struct {
	Seq           int64   `parquet:"seq"`
	Round         int64   `parquet:"round"`
	Kind          string  `parquet:"kind,dict"`
	View          string  `parquet:"view,dict"`
	Scope         string  `parquet:"scope,dict"`
	Field         string  `parquet:"field,dict"`
	Value         *int64  `parquet:"value,optional"`
	Status        string  `parquet:"status,dict"`
	StatusCode    int32   `parquet:"status_code"`
	API           string  `parquet:"api,dict"`
	Struct        string  `parquet:"struct,dict"`
	Fallback      string  `parquet:"fallback,dict"`
	StartNS       int64   `parquet:"start_ns"`
	EndNS         int64   `parquet:"end_ns"`
	EndRunClockNS int64   `parquet:"end_run_clock_ns"`
	GPU           int32   `parquet:"gpu"`
	GPUUUID       string  `parquet:"gpu_uuid,dict"`
	PCIBusID      string  `parquet:"pci_bus_id,dict"`
	MIGIndex      *int32  `parquet:"mig_index,optional"`
	PID           *int64  `parquet:"pid,optional"`
	Triggered     bool    `parquet:"triggered"`
	Kept          *string `parquet:"kept,optional,dict"`
}

// processRow is one recorded process (table processes).
type processRow struct {
	PID             int64    `parquet:"pid"`
	PPID            int64    `parquet:"ppid"`
	StartNS         int64    `parquet:"start_ns"`
	StartRunClockNS int64    `parquet:"start_run_clock_ns"`
	Comm            string   `parquet:"comm"`
	Exe             string   `parquet:"exe"`
	Args            []string `parquet:"args,list"`
	Cgroup          string   `parquet:"cgroup"`
	Root            bool     `parquet:"root"`
	AttachedLate    bool     `parquet:"attached_late"`
	Rank            *int32   `parquet:"rank,optional"`
	LocalRank       *int32   `parquet:"local_rank,optional"`
	WorldSize       *int32   `parquet:"world_size,optional"`
	Env             string   `parquet:"env_json"`
	Devices         string   `parquet:"devices_json"`
	ExitNS          *int64   `parquet:"exit_ns,optional"`
	ExitCode        *int32   `parquet:"exit_code,optional"`
	ExitSignal      *int32   `parquet:"exit_signal,optional"`
	CoreDumped      bool     `parquet:"core_dumped"`
}

// runRow is the run itself (table runs): one row per partition.
type runRow struct {
	Path            string   `parquet:"path"`
	Mode            string   `parquet:"mode"`
	Command         []string `parquet:"command,list"`
	ForensicVersion string   `parquet:"forensic_version"`
	FileSchema      int32    `parquet:"file_schema"`
	MachineID       string   `parquet:"machine_id"`
	BootID          string   `parquet:"boot_id"`
	Kernel          string   `parquet:"kernel"`
	StartNS         int64    `parquet:"start_ns"`
	EndNS           *int64   `parquet:"end_ns,optional"`
	StartRunClockNS int64    `parquet:"start_run_clock_ns"`
	ClockRealtimeNS int64    `parquet:"clock_realtime_ns"`
	ClockRunNS      int64    `parquet:"clock_run_clock_ns"`
	ClockErrorNS    *int64   `parquet:"clock_error_ns,optional"`
	ClockErrorWhy   string   `parquet:"clock_error_why"`
	Ended           string   `parquet:"ended"`
	StopReason      *string  `parquet:"stop_reason,optional"`
	Rank            *int32   `parquet:"rank,optional"`
	Ranks           []int32  `parquet:"ranks,list"`
	WorldSize       *int32   `parquet:"world_size,optional"`
	LocalRank       *int32   `parquet:"local_rank,optional"`
	JobID           string   `parquet:"job_id"`
	PodUID          string   `parquet:"pod_uid"`
	PodName         string   `parquet:"pod_name"`
	PodNamespace    string   `parquet:"pod_namespace"`
	Calls           int64    `parquet:"calls"`
	Failures        int64    `parquet:"failures"`
	Samples         int64    `parquet:"samples"`
	Processes       int64    `parquet:"processes"`
	LostCalls       *int64   `parquet:"lost_calls,optional"`
}

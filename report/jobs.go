package report

// Job is one job of a recording: the processes that belong together (a
// process tree, a container's cgroup, a pod, or the processes naming one
// job id), with the first failure among them.
type Job struct {
	// ID names the job, stably and readably: "pod:NAMESPACE/NAME",
	// "job:JOB_ID" (TORCHELASTIC_RUN_ID, SLURM_JOB_ID), "cgroup:PATH" (a
	// container's cgroup) or "tree:ROOT_PID" (a process tree).
	ID string `json:"id"`
	// By says how the processes were grouped: JobByPod, JobByVariable,
	// JobByCgroup or JobByTree.
	By string `json:"by"`
	// RootPID is the job's first process whose parent is not in the job;
	// Command its command line.
	RootPID uint32 `json:"root_pid"`
	Command string `json:"command"`
	// Pod and Namespace name the job's Kubernetes pod, when it ran in
	// one; Cgroup is its root process's cgroup path.
	Pod       string `json:"pod,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Cgroup    string `json:"cgroup,omitempty"`
	// PIDs are the job's recorded processes, ascending.
	PIDs []uint32 `json:"pids"`
	// FirstFailure is the first failure among the job's processes, chosen
	// by the same rule as the report's (the earliest failed allocation,
	// mapping or context call, else the earliest failure); nil when none
	// of its calls failed.
	FirstFailure *JobFailure `json:"first_failure"`
	// Attribution is the job's verdict: the report's own for the job it
	// judges; for another job, what the result code and the gaps before
	// its failure say (analyze that job with --job for its evidence).
	Attribution Attribution `json:"attribution"`
	// Headline says this is the job whose failure the report judges.
	Headline bool `json:"headline"`
}

// How a job's processes were grouped (Job.By).
const (
	JobByPod      = "pod"
	JobByVariable = "job-variable"
	JobByCgroup   = "cgroup"
	JobByTree     = "process-tree"
)

// JobFailure summarizes a job's first failure.
type JobFailure struct {
	Symbol     string  `json:"symbol"`
	Size       *uint64 `json:"size"`
	Result     string  `json:"result"`
	ResultCode int32   `json:"result_code"`
	AtNS       int64   `json:"at_ns"`
	PID        uint32  `json:"pid"`
}

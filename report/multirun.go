package report

// MultiRun is what an analysis of several runs of one job adds: the runs,
// whether their first failures could be ordered, the other candidates
// (each with its own verdict) when they could not, the failures that
// followed the first, and the ranks with no run. docs/multi-run.md gives
// the ordering rule.
type MultiRun struct {
	Runs []RunRef `json:"runs"`
	// GroupedBy says why the runs are taken for one job: "job-id" (they
	// name the same job id, JobID) or "overlap" (none names a job id, and
	// their recordings overlap in time).
	GroupedBy string `json:"grouped_by"`
	JobID     string `json:"job_id,omitempty"`
	// Order is certain (one failure was first, whatever the clocks'
	// error), uncertain, or none (no run failed).
	Order string `json:"order"`
	// Candidates are the runs' failures that could have been first when
	// Order is uncertain, each judged on its own; empty otherwise.
	Candidates []Candidate `json:"candidates"`
	// UnrecoveredOrder is set when the first failure was recovered and
	// another was not: whether the first failure no process recovered
	// from (the report's FirstUnrecovered, from whichever run) is certain
	// or uncertain by the same rule. UnrecoveredCandidates are the runs'
	// unrecovered failures that could have been first of those, each
	// judged by its run, when that order is uncertain.
	UnrecoveredOrder      string      `json:"unrecovered_order,omitempty"`
	UnrecoveredCandidates []Candidate `json:"unrecovered_candidates,omitempty"`
	// Consequences are the failures certainly after the one that matters
	// (the first, or the first unrecovered when the first was recovered: a
	// recovered failure has none), each with what ties it to that one
	// (Relation): not all are consequences.
	Consequences []Consequence `json:"consequences"`
	// WorldSize is the job's size the runs report; MissingRanks the ranks
	// below it that no run names.
	WorldSize    *int  `json:"world_size"`
	MissingRanks []int `json:"missing_ranks"`
}

// RunRef is one run of a multi-run analysis.
type RunRef struct {
	Path        string      `json:"path"`
	RunID       string      `json:"run_id"`
	Host        string      `json:"host"`
	BootID      string      `json:"boot_id,omitempty"`
	Rank        *int        `json:"rank"`
	Ranks       []int       `json:"ranks,omitempty"`
	Attribution Attribution `json:"attribution"`
	// ClockErrorNS bounds the run's wall-clock error; nil when unknown
	// (then its failures cannot be ordered against other hosts').
	ClockErrorNS *int64 `json:"clock_error_ns"`
	// WallStartNS and WallEndNS place the run on a common time axis
	// (Unix nanoseconds).
	WallStartNS int64 `json:"wall_start_ns"`
	WallEndNS   int64 `json:"wall_end_ns"`
	// Failed says the run recorded a failed call (a run whose failures
	// were all recovered is not placed after the first).
	Failed bool `json:"failed,omitempty"`
	// StartNS is the run's start on its own clock: the times of its
	// failures (a FirstUnrecovered from this run) count from it.
	StartNS int64 `json:"start_ns"`
}

// RunOf returns the run recorded in path, or nil.
func (m *MultiRun) RunOf(path string) *RunRef {
	for i := range m.Runs {
		if m.Runs[i].Path == path {
			return &m.Runs[i]
		}
	}
	return nil
}

// Candidate is a run's first failure that could have been the first of
// all, with where it lies in wall time and the runs it cannot be ordered
// against.
type Candidate struct {
	RunPath string `json:"run_path"`
	Rank    *int   `json:"rank"`
	Host    string `json:"host"`
	// WallNS estimates the failure's Unix time; EarliestNS and LatestNS
	// bound it (nil without a clock bound).
	WallNS     *int64      `json:"wall_ns"`
	EarliestNS *int64      `json:"earliest_ns"`
	LatestNS   *int64      `json:"latest_ns"`
	Unordered  []Unordered `json:"unordered"`
	// Judged is the run's own verdict on it.
	Judged *Judged `json:"judged"`
}

// Unordered is a run whose failure cannot be ordered against another's.
type Unordered struct {
	RunPath string `json:"run_path"`
	// Reason is overlap (the clock intervals overlap by OverlapNS),
	// no-clock-bound, or same-time.
	Reason    string `json:"reason"`
	OverlapNS *int64 `json:"overlap_ns,omitempty"`
}

// Consequence is a failure in another run certainly after the first, how
// long after, and what ties it to the first.
type Consequence struct {
	RunPath    string `json:"run_path"`
	Rank       *int   `json:"rank"`
	Host       string `json:"host"`
	Symbol     string `json:"symbol"`
	ResultName string `json:"result_name"`
	TimeNS     int64  `json:"time_ns"`
	DelayMinNS int64  `json:"delay_min_ns"`
	DelayMaxNS int64  `json:"delay_max_ns"`
	Exact      bool   `json:"exact"`
	// Relation is "same-gpu" (it ran on the first failure's GPU: likely a
	// consequence), "same-job" (another GPU, or one unknown, and nothing
	// of its own explains it: possibly a consequence, through the job) or
	// "independent" (it also failed, for a reason of its own: its own GPU
	// ran out, or its run began after the first failure's run had ended).
	// Basis says it in words.
	Relation string `json:"relation"`
	Basis    string `json:"basis"`
}

// Relations of a later failure to the first (Consequence.Relation).
const (
	RelationSameGPU     = "same-gpu"
	RelationSameJob     = "same-job"
	RelationIndependent = "independent"
)

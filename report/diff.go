package report

import (
	"encoding/json"
	"io"
)

// DiffSchema names the JSON layout of `forensic diff --json`
// (docs/diff.md).
const DiffSchema = "forensic.diff/1"

// Difference kinds, most able to explain a failure first when their bytes
// are equal (docs/diff.md says what each carries).
const (
	// DiffExtraProcess: a process in the failing run that no good run has
	// in its role (a neighbour, an extra worker), with its memory.
	DiffExtraProcess = "extra-process"
	// DiffCallSequence: the first call where a process's sequence of
	// allocation and mapping calls departs from the same process's in the
	// good run.
	DiffCallSequence = "call-sequence"
	// DiffLeastFree: the least free memory at any moment (the headroom:
	// samples corrected by the traced calls) on a GPU and view was lower
	// in the failing run.
	DiffLeastFree = "least-free"
	// DiffTracedPeak: the traced calls held more at their peak on a GPU
	// and view.
	DiffTracedPeak = "traced-peak"
	// DiffPhaseGrowth: the traced memory grew more in one phase.
	DiffPhaseGrowth = "phase-growth"
	// DiffInventory: the platform differs (driver, GPU model, framebuffer
	// or BAR1 size, MIG mode).
	DiffInventory = "inventory"
	// DiffMissingProcess: a process of the good run that the failing run
	// lacks in its role.
	DiffMissingProcess = "missing-process"
	// DiffPhaseDuration: a phase took much longer or shorter.
	DiffPhaseDuration = "phase-duration"
)

// Departures of a call sequence (Difference.Departure).
const (
	DepartExtraCall   = "extra-call"   // a call the good run did not make here
	DepartMissingCall = "missing-call" // the good run made a call here that the failing run did not
	DepartLarger      = "larger-size"  // the same call, asking for more
	DepartSmaller     = "smaller-size" // the same call, asking for less
	DepartOtherCall   = "other-call"   // another call in its place
	DepartFailed      = "failed"       // the same call, which failed here
	// DepartOtherSite: the same call, made from another call site (its
	// stack differs), before the calls themselves depart.
	DepartOtherSite = "other-call-site"
)

// Diff is the comparison of a failing run with one or more good runs of
// the same job: what the failing run has that the good ones do not,
// ordered by how much of the failure each difference can explain.
type Diff struct {
	Schema string `json:"schema"`
	// Headline is the sentence the text output opens with.
	Headline string `json:"headline"`
	// Bad is the failing run; Chosen says how it was picked: "last" (the
	// last run given) or "only-failing" (the last run had no failure and
	// exactly one run had one).
	Bad    DiffRun   `json:"failing"`
	Chosen string    `json:"failing_chosen"`
	Good   []DiffRun `json:"good"`
	// Explains is the memory view the failing run's first failure is
	// judged against ("framebuffer", "bar1"), whose differences rank
	// first; empty when the failure is not about a GPU view.
	Explains    string       `json:"explains_view"`
	Differences []Difference `json:"differences"`
	// Processes is how the processes were aligned with the first good
	// run's.
	Processes []ProcessPair `json:"processes"`
	// Notes say what the comparison could not see (phases without
	// markers, a sequence compared only in part, ...).
	Notes []string `json:"notes"`
}

// DiffRun is one compared run.
type DiffRun struct {
	Path        string      `json:"path"`
	ID          string      `json:"run_id"`
	Attribution Attribution `json:"attribution"`
	Capacity    *Capacity   `json:"capacity"`
	Verdict     string      `json:"verdict"`
	DurationNS  int64       `json:"duration_ns"`
	// FirstFailure names the first failed call (nil when none failed).
	FirstFailure *DiffCall `json:"first_failure"`
}

// Difference is one way the failing run differs from the good runs.
type Difference struct {
	Kind    string `json:"kind"`
	Summary string `json:"summary"`
	// Unique says no good run has what the failing run has here; with
	// several good runs, GoodRuns counts those that differ this way.
	Unique   bool `json:"unique"`
	GoodRuns int  `json:"good_runs_differing"`
	// Bytes is how much memory the difference stands for (the process's
	// memory, the call's size or extra size, the gap between the two
	// values), the ranking's measure; 0 for a difference not in bytes.
	Bytes uint64 `json:"bytes"`
	// GPU and View name the GPU (NVML index) and view a memory difference
	// is about; Phase the phase (by its label).
	GPU   *int   `json:"gpu,omitempty"`
	View  string `json:"view,omitempty"`
	Phase string `json:"phase,omitempty"`
	// Process is the process of an extra or missing process or of a
	// call sequence (the failing run's, or the good run's when missing).
	Process *DiffProcess `json:"process,omitempty"`
	// Departure, Call and GoodCall describe a call-sequence difference:
	// how it departs, the failing run's call (nil for a missing call) and
	// the good run's call in its place (nil for an extra call).
	Departure string    `json:"departure,omitempty"`
	Call      *DiffCall `json:"call,omitempty"`
	GoodCall  *DiffCall `json:"good_call,omitempty"`
	// Good and Failing are the two values a measured difference compares
	// (bytes, or nanoseconds for a phase duration), the good value from
	// the good run closest to the failing one; Field and the text values
	// an inventory difference.
	Good        *int64 `json:"good_value,omitempty"`
	Failing     *int64 `json:"failing_value,omitempty"`
	Field       string `json:"field,omitempty"`
	GoodText    string `json:"good_text,omitempty"`
	FailingText string `json:"failing_text,omitempty"`
	// Exact is false for a value that is a bound: NVML's figure for a
	// process (its samples may miss its highest moment), or a least free
	// that either run's headroom gives as a bound.
	Exact bool `json:"exact"`
}

// DiffProcess names a process of a compared run.
type DiffProcess struct {
	PID uint32 `json:"pid"`
	// Command is the command line as the recording has it; empty for a
	// process NVML listed that the recording did not follow.
	Command  string `json:"command"`
	Recorded bool   `json:"recorded"`
	Rank     *int   `json:"rank"`
	// NVMLPeak is the most NVML attributed to it on any GPU (nil when
	// never listed), TracedCalls its recorded calls.
	NVMLPeak    *uint64 `json:"nvml_peak_bytes"`
	TracedCalls uint64  `json:"calls"`
}

// DiffCall is one recorded call named in a difference.
type DiffCall struct {
	Symbol string  `json:"symbol"`
	Size   *uint64 `json:"size"`
	Result string  `json:"result_name"`
	PID    uint32  `json:"pid"`
	TimeNS int64   `json:"time_ns"`
	// Index is the call's position (from 0) in its process's sequence of
	// allocation and mapping calls.
	Index int    `json:"index"`
	Phase string `json:"phase"`
	Stack *Stack `json:"stack,omitempty"`
}

// ProcessPair is one process of the failing run and the good run's
// process in the same role (either nil when the other side has none).
type ProcessPair struct {
	Failing *DiffProcess `json:"failing"`
	Good    *DiffProcess `json:"good"`
	// By says how they were matched: "role" (executable, arguments and
	// rank), "executable" (executable and rank; the arguments differ), or
	// "" when unmatched.
	By string `json:"matched_by"`
}

// WriteDiffJSON writes a diff as the `forensic diff --json` contract.
func WriteDiffJSON(w io.Writer, d *Diff) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(d)
}

// Package jobenv reads which job and rank a process belongs to from the
// environment variables launchers set (torchrun/torchelastic, Slurm, Open
// MPI, Kubernetes indexed jobs). The recorder stores these variables; the
// analysis and the exports parse them back with the same rules.
package jobenv

import (
	"strconv"
	"strings"
)

// Variables lists the environment variables that name a workload's job
// and rank, as torchrun/torchelastic, Slurm, Open MPI and Kubernetes set
// them. The recorder stores exactly these (with its GPU allowlist), so a
// run.db says which rank each process was.
func Variables() []string {
	return []string{
		"RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID",
		"SLURM_JOB_ID", "SLURM_PROCID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_LOCALID",
		"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
		"JOB_COMPLETION_INDEX", "POD_NAME", "POD_NAMESPACE", "POD_UID",
	}
}

// The variables each value is read from, first present wins.
func rankVars() []string {
	return []string{"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "JOB_COMPLETION_INDEX"}
}
func worldVars() []string { return []string{"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"} }
func localVars() []string {
	return []string{"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}
}
func jobIDVars() []string { return []string{"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"} }

// Env is the job identity parsed from a process environment.
type Env struct {
	// Rank is the process's global rank and RankFrom the variable it came
	// from (RANK, then OMPI_COMM_WORLD_RANK, SLURM_PROCID,
	// JOB_COMPLETION_INDEX); nil when none holds a non-negative integer.
	Rank     *int
	RankFrom string
	// WorldSize: WORLD_SIZE, then OMPI_COMM_WORLD_SIZE, SLURM_NTASKS.
	WorldSize     *int
	WorldSizeFrom string
	// LocalRank: LOCAL_RANK, then OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID.
	LocalRank *int
	// JobID: TORCHELASTIC_RUN_ID, then SLURM_JOB_ID. torchrun sets
	// TORCHELASTIC_RUN_ID to "none" when no --rdzv-id was given: that value
	// is shared by unrelated jobs, so it names none.
	JobID string
}

// Empty reports whether the environment named no job at all.
func (j Env) Empty() bool {
	return j.Rank == nil && j.WorldSize == nil && j.LocalRank == nil && j.JobID == ""
}

// Parse reads the job identity from environment variables (a
// KEY->VALUE map, such as a stored Process.Env). A variable whose value is
// not a non-negative integer is skipped, so the next one in order is used.
func Parse(env map[string]string) Env {
	var j Env
	j.Rank, j.RankFrom = firstInt(env, rankVars())
	j.WorldSize, j.WorldSizeFrom = firstInt(env, worldVars())
	j.LocalRank, _ = firstInt(env, localVars())
	for _, k := range jobIDVars() {
		if v := ID(env[k]); v != "" {
			j.JobID = v
			break
		}
	}
	return j
}

// ID is the job id a variable's value names: empty for a blank value
// and for "none", torchrun's TORCHELASTIC_RUN_ID when no --rdzv-id was
// given, which unrelated jobs share (a run.db recorded before this rule
// may store it).
func ID(v string) string {
	if v = strings.TrimSpace(v); strings.EqualFold(v, "none") {
		return ""
	}
	return v
}

// firstInt is the first of keys that holds a non-negative integer, and
// that key.
func firstInt(env map[string]string, keys []string) (*int, string) {
	for _, k := range keys {
		v, ok := env[k]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err == nil && n >= 0 {
			return &n, k
		}
	}
	return nil, ""
}

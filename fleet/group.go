package fleet

import (
	"fmt"
	"slices"
	"strings"
)

// How the runs of a group were found to be one job.
const (
	// ByJobID: the runs name the same job id (TORCHELASTIC_RUN_ID,
	// SLURM_JOB_ID).
	ByJobID = "job-id"
	// ByOverlap: no run names a job id, and their recordings overlap in
	// time (each overlaps another of the group).
	ByOverlap = "overlap"
	// ByNone: a run alone: nothing ties it to any other run given.
	ByNone = "alone"
)

// Group is runs that are one job on the evidence, and what that evidence
// is.
type Group struct {
	// Runs are indexes into the runs given to Groups, in the order given.
	Runs []int `json:"runs"`
	// By is how the runs were grouped: ByJobID, ByOverlap or ByNone.
	By string `json:"by"`
	// JobID is the job id the runs share (ByJobID).
	JobID string `json:"job_id,omitempty"`
}

// Groups splits runs into jobs: only evidence makes several runs one job.
// Runs that name a job id are grouped by it, whatever their times (a job
// restarted, ranks on hosts whose clocks disagree); runs that name none
// are one job when their recordings overlap in time (on the shared run
// clock within one boot; else in wall time, widened by each clock's error
// bound), directly or through others of the group. A run naming a job id
// and one naming none are never grouped: nothing ties the second to that
// job. Groups are ordered by their first run in the order given.
func Groups(runs []Run) []Group {
	parent := make([]int, len(runs))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	union := func(a, b int) {
		if ra, rb := find(a), find(b); ra != rb {
			parent[max(ra, rb)] = min(ra, rb)
		}
	}
	byID := map[string]int{}
	for i, r := range runs {
		if r.JobID == "" {
			continue
		}
		if j, ok := byID[r.JobID]; ok {
			union(i, j)
		} else {
			byID[r.JobID] = i
		}
	}
	for i := range runs {
		for j := i + 1; j < len(runs); j++ {
			if runs[i].JobID == "" && runs[j].JobID == "" && mayOverlap(&runs[i], &runs[j]) {
				union(i, j)
			}
		}
	}
	return collect(runs, find)
}

// collect turns the union-find roots into groups, in the order given.
func collect(runs []Run, find func(int) int) []Group {
	var out []Group
	at := map[int]int{}
	for i, r := range runs {
		root := find(i)
		k, ok := at[root]
		if !ok {
			k = len(out)
			at[root] = k
			out = append(out, Group{By: ByNone, JobID: r.JobID})
		}
		out[k].Runs = append(out[k].Runs, i)
	}
	for k := range out {
		switch {
		case out[k].JobID != "":
			out[k].By = ByJobID
		case len(out[k].Runs) > 1:
			out[k].By = ByOverlap
		}
	}
	return out
}

// mayOverlap reports whether two recordings may have run at the same time.
// Within one boot their spans are compared on the run clock they share;
// across boots in wall time, each span widened by its clock's error bound
// (by nothing when the bound is unknown: the estimate is all there is).
// A run without a clock mapping overlaps nothing.
func mayOverlap(a, b *Run) bool {
	if a.BootID != "" && a.BootID == b.BootID {
		return a.StartNS <= b.EndNS && b.StartNS <= a.EndNS
	}
	if a.Clock == nil || b.Clock == nil {
		return false
	}
	aLo, aHi := a.wallSpan()
	bLo, bHi := b.wallSpan()
	return aLo <= bHi && bLo <= aHi
}

// wallSpan is the run's span in wall time, widened by its clock's bound.
func (r *Run) wallSpan() (lo, hi int64) {
	lo, hi = r.Clock.Wall(r.StartNS), r.Clock.Wall(max(r.EndNS, r.StartNS))
	if e := r.Clock.ErrorNS; e != nil && *e > 0 {
		lo, hi = lo-*e, hi+*e
	}
	return lo, hi
}

// Describe says in a few words which runs a group holds and why they are
// one: "job 42: a.db, b.db", "a.db, b.db (no job id; their recordings
// overlap in time)", "c.db (alone)".
func (g Group) Describe(runs []Run) string {
	names := make([]string, len(g.Runs))
	for i, k := range g.Runs {
		names[i] = runs[k].Path
	}
	list := strings.Join(names, " ")
	switch g.By {
	case ByJobID:
		return fmt.Sprintf("job %s: %s", g.JobID, list)
	case ByOverlap:
		return list + " (no job id; recorded at overlapping times)"
	}
	return list + " (no job id; no other run recorded at the same time)"
}

// GroupsText says in one line how runs split into groups and how to
// analyze one: for an error refusing to treat them as one job.
func GroupsText(runs []Run, groups []Group) string {
	parts := make([]string, len(groups))
	for i, g := range groups {
		parts[i] = fmt.Sprintf("(%d) %s", i+1, g.Describe(runs))
	}
	pick := slices.IndexFunc(groups, func(g Group) bool { return len(g.Runs) > 1 })
	if pick < 0 {
		pick = 0
	}
	var example []string
	for _, k := range groups[pick].Runs {
		example = append(example, shellWord(runs[k].Path))
	}
	return fmt.Sprintf("%d runs are %d separate jobs, not one: %s; give only one job's files, e.g. %s",
		len(runs), len(groups), strings.Join(parts, "; "), strings.Join(example, " "))
}

// shellWord quotes a path for a command line when it needs it.
func shellWord(p string) string {
	if p != "" && !strings.ContainsAny(p, " \t\n'\"\\$`*?[]();&|<>~#!{}") {
		return p
	}
	return "'" + strings.ReplaceAll(p, "'", `'\''`) + "'"
}

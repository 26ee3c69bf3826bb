package analyze

import (
	"slices"
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// analyzed is one run's report as the analysis of that run alone makes
// it: recorded on boot from start to end (seconds after clock0), of job
// (rank of world; -1: none), failing at fail (seconds after clock0; 0: no
// failure) on GPU gpu with capacity cp.
type analyzed struct {
	path, boot, job   string
	rank, world       int
	start, end, fail  float64
	gpu               int
	cp                report.Capacity
	result, attribute string
}

func (a analyzed) report() *report.Report {
	at := func(s float64) int64 { return clock0 + int64(s*float64(sec)) }
	rep := &report.Report{Run: report.RunInfo{Path: a.path, ID: a.path, Host: "node", BootID: a.boot, JobID: a.job,
		StartNS: at(a.start), EndNS: at(a.end), DurationNS: at(a.end) - at(a.start), WallStartNS: wall0 + at(a.start) - clock0},
		Attribution: report.AttrNone, Verdict: "No call failed.", Missing: []report.Missing{}, NextSteps: []string{"own step"}}
	if a.rank >= 0 {
		rank, world := a.rank, a.world
		rep.Run.Rank, rep.Run.WorldSize = &rank, &world
	}
	if a.fail > 0 {
		gpu, uuid := a.gpu, "GPU-"+string(rune('a'+a.gpu))
		cp := a.cp
		rep.FirstFailure = &report.Failure{Symbol: "cuMemAlloc_v2", ResultName: a.result, TimeNS: at(a.fail), GPU: &uuid, GPUIndex: &gpu,
			Rank: rep.Run.Rank}
		rep.Attribution, rep.Capacity = report.Attribution(a.attribute), &cp
		rep.Verdict = "The first failed operation is " + a.path + "'s."
	}
	return rep
}

func oom(path, boot, job string, rank int, start, end, fail float64, gpu int) analyzed {
	return analyzed{path, boot, job, rank, 4, start, end, fail, gpu, report.CapFBExhausted, "CUDA_ERROR_OUT_OF_MEMORY", "allocation"}
}

// Runs of different jobs are analyzed apart: nothing of one is ordered
// against, or called a consequence of, another's; within a job each later
// failure says what ties it to the first, ranks are missing only within
// the job, and the next steps ask for the missing ranks' files first.
func TestJobsOf(t *testing.T) {
	broken := oom("r3.db", "boot", "job42", 3, 0, 10, 1, 3)
	sameGPU := oom("r2.db", "boot", "job42", 2, 0, 10, 2, 3)
	ownGPU := oom("r0.db", "boot", "job42", 0, 0, 10, 3, 0)
	peer := analyzed{"r1.db", "boot", "job42", 1, 4, 0, 10, 4, 1, report.CapNotApplicable, "CUDA_ERROR_LAUNCH_FAILED", "not-memory"}
	other := oom("other.db", "boot", "job7", 0, 0, 10, 0.5, 3)
	unrelated := oom("old.db", "boot", "", -1, 100, 110, 101, 3)
	runs := []analyzed{broken, sameGPU, ownGPU, peer, other, unrelated}
	var reps []*report.Report
	for _, a := range runs {
		reps = append(reps, a.report())
	}
	j := jobsOf(reps)
	if len(j.Reports) != 3 {
		t.Fatalf("%d jobs, want 3 (job42, job7, the run with no job id)", len(j.Reports))
	}
	job := j.Reports[0]
	if job.MultiRun == nil || job.Run.Path != "r3.db" || job.Order != "certain" || job.GroupedBy != "job-id" || job.JobID != "job42" {
		t.Fatalf("job42: %+v first %s; want r3.db first, certainly, grouped by job id", job.MultiRun, job.Run.Path)
	}
	rel := map[string]string{}
	for _, c := range job.Consequences {
		rel[c.RunPath] = c.Relation
		if c.Basis == "" {
			t.Errorf("%s: no basis for its relation", c.RunPath)
		}
	}
	want := map[string]string{"r2.db": report.RelationSameGPU, "r0.db": report.RelationIndependent, "r1.db": report.RelationSameJob}
	if len(rel) != len(want) {
		t.Errorf("relations %v, want %v", rel, want)
	}
	for p, r := range want {
		if rel[p] != r {
			t.Errorf("%s: relation %q, want %q", p, rel[p], r)
		}
	}
	if strings.Contains(job.Verdict, "other.db") || strings.Contains(job.Verdict, "old.db") {
		t.Errorf("job42's verdict names another job's run: %s", job.Verdict)
	}
	if !slices.Equal(job.MissingRanks, []int{}) || job.Attribution != report.AttrAllocation {
		t.Errorf("job42 has ranks 0-3 of 4: missing %v, attribution %s", job.MissingRanks, job.Attribution)
	}
	for _, m := range job.Missing {
		if strings.Contains(m.What, "clock bound") {
			t.Errorf("runs of one boot share a clock, yet: %s", m.What)
		}
	}
	if !strings.Contains(job.Verdict, "likely a consequence") || !strings.Contains(job.Verdict, "for a reason of its own") {
		t.Errorf("the verdict does not say what ties the later failures to the first: %s", job.Verdict)
	}
	for _, k := range []int{1, 2} {
		if j.Reports[k].MultiRun != nil {
			t.Errorf("job %d is one run, yet reported as several: %+v", k, j.Reports[k].MultiRun)
		}
	}
	if _, err := j.one(); err == nil || !strings.Contains(err.Error(), "6 runs are 3 separate jobs") {
		t.Errorf("runs of three jobs taken as one: %v", err)
	}
}

// A rank with no run leaves the job's first failure unestablished, and the
// first next step asks for its file.
func TestJobsOfMissingRank(t *testing.T) {
	a, b := oom("r0.db", "boot", "job42", 0, 0, 10, 1, 0), oom("r1.db", "boot", "job42", 1, 0, 10, 2, 1)
	a.world, b.world = 3, 3
	j := jobsOf([]*report.Report{a.report(), b.report()})
	rep := j.Reports[0]
	if rep.Attribution != report.AttrMissingEvidence || !slices.Equal(rep.MissingRanks, []int{2}) {
		t.Fatalf("attribution %s, missing ranks %v; want missing-evidence, [2]", rep.Attribution, rep.MissingRanks)
	}
	if len(rep.NextSteps) == 0 || !strings.Contains(rep.NextSteps[0], "gather the run.db of rank 2") {
		t.Errorf("next steps %q: the first should ask for rank 2's file", rep.NextSteps)
	}
	if !slices.Contains(rep.NextSteps, "own step") {
		t.Errorf("next steps %q lost the first run's own", rep.NextSteps)
	}
}

// Without job ids, recordings that overlap in time are one job; one that
// ran at another time (a flight recording of another day) is not. A
// TORCHELASTIC_RUN_ID of "none" (torchrun's default, which unrelated jobs
// share; older run.db files store it) names no job.
func TestJobsOfByTime(t *testing.T) {
	a := oom("a.db", "boot", "none", -1, 0, 10, 5, 0)
	b := oom("b.db", "boot", "", -1, 8, 20, 9, 0)
	c := oom("c.db", "boot", "none", -1, 500, 900, 600, 0)
	j := jobsOf([]*report.Report{a.report(), b.report(), c.report()})
	if len(j.Reports) != 2 || j.Reports[0].MultiRun == nil || len(j.Reports[0].Runs) != 2 || j.Reports[0].GroupedBy != "overlap" {
		t.Fatalf("jobs %d, first %+v; want a.db with b.db, c.db alone", len(j.Reports), j.Reports[0].MultiRun)
	}
	if j.Reports[1].Run.Path != "c.db" || j.Reports[1].MultiRun != nil {
		t.Errorf("second job %s %+v, want c.db alone", j.Reports[1].Run.Path, j.Reports[1].MultiRun)
	}
}

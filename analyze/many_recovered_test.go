package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// Across runs of one job, as within one run, a recovered first failure
// stays the subject but the verdict leads with the first failure no run
// recovered from, judged by its own run (first_unrecovered, its next
// steps); the recovered failure has no consequences in other runs, and
// "no later failure went unrecovered" is never said of the job when one
// did.
func TestJobsOfRecoveredFirst(t *testing.T) {
	r0 := oom("r0.db", "boot", "j2", 0, 0, 10, 1, 0)
	r1 := analyzed{"r1.db", "boot", "j2", 1, 2, 0, 10, 1.3, 0, report.CapBAR1Exhausted, "CUDA_ERROR_MAP_FAILED", "mapping"}
	r0.world = 2
	rank0, rank1 := r0.report(), r1.report()
	rank0.FirstFailure.Recovered = true
	rank0.Verdict = "The first failed operation is r0.db's. It was recovered. No later failure went unrecovered."
	rank1.NextSteps = []string{"map it in smaller chunks"}
	job := jobsOf([]*report.Report{rank0, rank1}).Reports[0]

	if job.Run.Path != "r0.db" || job.FirstFailure == nil || !job.FirstFailure.Recovered {
		t.Fatalf("subject %s (%+v), want r0.db's recovered failure", job.Run.Path, job.FirstFailure)
	}
	u := job.FirstUnrecovered
	if u == nil || u.RunPath != "r1.db" || u.Attribution != report.AttrMapping || *u.Capacity != report.CapBAR1Exhausted {
		t.Fatalf("first unrecovered %+v, want r1.db's mapping failure judged by its run", u)
	}
	if job.UnrecoveredOrder != "certain" || len(job.Consequences) != 0 {
		t.Errorf("unrecovered order %q, consequences %+v: want certain, none", job.UnrecoveredOrder, job.Consequences)
	}
	lead := job.Verdict[:strings.Index(job.Verdict, "r1.db's.")]
	if !strings.Contains(lead, "the first failure no process recovered from is rank 1") {
		t.Errorf("the verdict does not lead with rank 1's failure: %s", job.Verdict)
	}
	for _, bad := range []string{"No later failure went unrecovered", "consequence)", "consequences)"} {
		if strings.Contains(job.Verdict, bad) {
			t.Errorf("the verdict says %q: %s", bad, job.Verdict)
		}
	}
	if !strings.Contains(job.Verdict, "was recovered") || len(job.NextSteps) == 0 || job.NextSteps[0] != "map it in smaller chunks" {
		t.Errorf("verdict %q, next steps %v: want the recovered one said, rank 1's steps", job.Verdict, job.NextSteps)
	}
}

package text

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/retrivium/forensic/report"
)

// Runs of several jobs: the list of jobs comes first, then each job's
// report under its own heading, the jobs that failed first (then in the
// order given), every line within the width (long paths wrap rather than
// overflow).
func TestWriteJobs(t *testing.T) {
	long := "/var/tmp/" + strings.Repeat("gathered/", 6)
	reps := []*report.Report{
		{Run: report.RunInfo{Path: long + "a.db"}, Attribution: report.AttrNone, Verdict: "No call failed in a."},
		{Run: report.RunInfo{Path: long + "b.db"}, Attribution: report.AttrAllocation, Verdict: "The first failed operation is b's."},
	}
	jobs := []string{"job 42: " + long + "a.db " + long + "c.db", long + "b.db (no job id; no other run recorded at the same time)"}
	var b bytes.Buffer
	if err := WriteJobs(&b, jobs, reps, Options{Width: 80}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for i, line := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(line); n > 80 {
			t.Errorf("line %d has %d columns: %q", i+1, n, line)
		}
	}
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"2 runs of 2 separate jobs", "2. job 42:", "1. " + long + "b.db", "JOB 2 OF 2: job 42:", "JOB 1 OF 2:"} {
		if !strings.Contains(flat, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if a, c := strings.Index(out, "No call failed in a."), strings.Index(out, "b's."); c < 0 || a < c || a < strings.Index(out, "JOB 2 OF 2") {
		t.Errorf("the failing job's report does not lead, each under its heading:\n%s", out)
	}
}

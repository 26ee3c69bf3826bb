package text

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/retrivium/forensic/report"
)

// A shared recording's report lists each job's first failure on its own
// line within 80 columns, marks the headline job and says whose failure
// the verdict is, or that it was selected.
func TestWriteSharedNodeJobs(t *testing.T) {
	size := uint64(8 << 30)
	jobs := []report.Job{
		{ID: "tree:4242", Command: "/usr/bin/python serve.py --model " + strings.Repeat("x", 60), Attribution: report.AttrNone},
		{ID: "pod:ml/train-0", Command: "train", Headline: true, Attribution: report.AttrAllocation,
			FirstFailure: &report.JobFailure{Symbol: "cuMemAlloc_v2", Size: &size, Result: "CUDA_ERROR_OUT_OF_MEMORY", AtNS: 1_500_000_000, PID: 77}},
	}
	tests := []struct {
		name     string
		selected bool
		want     []string
	}{
		{"headline", false, []string{"JOBS  2 on this recording; the verdict is pod:ml/train-0's failure",
			"  * pod:ml/train-0 (train): cuMemAlloc_v2 8.00 GiB", "    tree:4242 (python serve.py --model…): no call failed", "--job ID"}},
		{"selected", true, []string{"the verdict is pod:ml/train-0's alone (selected)", "neighbours"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := &report.Report{Attribution: report.AttrAllocation, Jobs: jobs, SubjectJob: "pod:ml/train-0", JobSelected: tt.selected}
			var b bytes.Buffer
			if err := Write(&b, rep, Options{Width: 80}); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("missing %q in:\n%s", w, out)
				}
			}
			for i, line := range strings.Split(out, "\n") {
				if n := utf8.RuneCountInString(line); n > 80 {
					t.Errorf("line %d has %d columns: %q", i+1, n, line)
				}
			}
		})
	}
}

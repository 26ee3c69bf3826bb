package text

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/retrivium/forensic/report"
)

func TestWriteDiffOpensWithTheSentenceAndFits80Columns(t *testing.T) {
	size, peak := uint64(2<<30), uint64(15<<30)
	proc := &report.DiffProcess{PID: 4242, Recorded: true, NVMLPeak: &peak,
		Command: "/opt/conda/bin/python3 -m vllm.entrypoints.openai.api_server --model meta-llama/Llama-3-8B --gpu-memory-utilization 0.9"}
	d := &report.Diff{Headline: "The failing run differs from the 3 good ones in: an extra cuMemAlloc_v2 of 2.00 GiB in phase \"serving\"; and 2 differences more.",
		Bad:  report.DiffRun{Path: "runs/bad.db", Attribution: report.AttrAllocation, Verdict: "The first failed operation is cuMemAlloc_v2."},
		Good: []report.DiffRun{{Path: "runs/good1.db"}, {Path: "runs/good2.db"}, {Path: "runs/good3.db"}}, Chosen: "last",
		Differences: []report.Difference{
			{Kind: report.DiffCallSequence, Unique: true, Summary: "process 4242 (python3 -m vllm...): an extra cuMemAlloc_v2 of 2.00 GiB in phase \"serving\", its call #9",
				Process: proc, Call: &report.DiffCall{Symbol: "cuMemAlloc_v2", Size: &size, Stack: &report.Stack{Frames: []report.Frame{
					{Function: "allocate_kv_cache_with_a_name_long_enough_to_wrap_the_line_of_the_frame", Offset: 0x8f, Library: "libtorch_cuda.so"}}}}},
			{Kind: report.DiffLeastFree, Summary: "least free framebuffer (NVML samples) on GPU 0: 1.00 GiB in the failing run, 3.00 GiB in the good run (2 of 3 good runs had the same)"},
		},
		Processes: []report.ProcessPair{{Failing: proc, Good: proc, By: "role"}, {Failing: &report.DiffProcess{PID: 77, NVMLPeak: &peak}}},
		Notes:     []string{"phases are compared only between runs with markers"}}
	cases := []struct {
		name, want string
	}{
		{"the sentence first", "The failing run differs from the 3 good ones in:"},
		{"the unique difference marked", "* 1. process 4242"},
		{"the departing call's stack", "allocate_kv_cache"},
		{"an unrecorded process named by pid", "pid 77, not recorded"},
		{"what was not compared", "NOT COMPARED"},
	}
	var buf bytes.Buffer
	if err := WriteDiff(&buf, d, Options{Width: 80}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			i := strings.Index(out, c.want)
			if i < 0 || (c.name == "the sentence first" && i != 0) {
				t.Errorf("%q at %d in:\n%s", c.want, i, out)
			}
		})
	}
	for i, l := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(l); n > 80 {
			t.Errorf("line %d has %d columns: %q", i+1, n, l)
		}
	}
}

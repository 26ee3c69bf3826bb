package html

import (
	"bytes"
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

func TestWriteDiffShowsTheDifferencesEscaped(t *testing.T) {
	peak := uint64(6 << 30)
	d := &report.Diff{Headline: "The failing run differs from the good one in: an extra process (python <evil>.py).",
		Bad: report.DiffRun{Path: "bad.db", Attribution: report.AttrAllocation}, Good: []report.DiffRun{{Path: "good.db"}}, Chosen: "last",
		Differences: []report.Difference{{Kind: report.DiffExtraProcess, Unique: true, Summary: "process 77 (python <evil>.py) held 6.00 GiB",
			Process: &report.DiffProcess{PID: 77, Recorded: true, Command: "python <evil>.py", NVMLPeak: &peak}},
			{Kind: report.DiffCallSequence, Summary: "an extra cuMemAlloc_v2", Call: &report.DiffCall{Symbol: "cuMemAlloc_v2",
				Stack: &report.Stack{Frames: []report.Frame{{Function: "allocate_kv", Library: "libtorch_cuda.so"}}}}}},
		Processes: []report.ProcessPair{{Failing: &report.DiffProcess{PID: 77, Recorded: true, Command: "python <evil>.py", NVMLPeak: &peak}}},
		Notes:     []string{"phases are compared only between runs with markers"}}
	var buf bytes.Buffer
	if err := WriteDiff(&buf, d); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	cases := []struct{ name, want string }{
		{"the sentence", "The failing run differs from the good one in:"},
		{"a unique difference in bold", `<tr class="unique"><td>1</td><td class="kind">extra-process</td>`},
		{"the departing call's stack", "allocate_kv (libtorch_cuda.so)"},
		{"the process's memory", "NVML peak 6.00 GiB"},
		{"a command line escaped", "python &lt;evil&gt;.py"},
		{"what was not compared", "phases are compared only between runs with markers"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(page, c.want) {
				t.Errorf("the page lacks %q:\n%s", c.want, page)
			}
		})
	}
	if strings.Contains(page, "<evil>") {
		t.Error("a command line is not escaped")
	}
}

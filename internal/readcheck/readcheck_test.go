package readcheck

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// Sentences run across wrapped lines, end at a full stop or at a line
// break the renderer did not make, and table rows are each their own.
func TestSentences(t *testing.T) {
	for _, tt := range []struct {
		name, text string
		want       []string
	}{
		{"wrapped prose", "  one two three four five six\n  seven. Eight nine.", []string{"one two three four five six seven.", "Eight nine."}},
		{"table rows", "  a: 1\n  b: 2", []string{"a: 1", "b: 2"}},
		{"a decimal is no stop", "  free 1.50 GiB. Next", []string{"free 1.50 GiB.", "Next"}},
		{"a command line starts anew", "  pid 7 (parent 1): exit 1, 5 calls\n      $ /a/long/path/to/simwork\n        init\n      CUDA device 0 is GPU 0",
			[]string{"pid 7 (parent 1): exit 1, 5 calls", "$ /a/long/path/to/simwork init", "CUDA device 0 is GPU 0"}},
	} {
		got := Sentences(tt.text, 30)
		if strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

// A long sentence and a first screen without the numbers are problems; a
// report that has both short and up front is not.
func TestProblems(t *testing.T) {
	size, free := uint64(1<<30), uint64(512<<20)
	rep := &report.Report{NextSteps: []string{"make the request fit"},
		FirstFailure: &report.Failure{Symbol: "cuMemAlloc_v2", Size: &size, PID: 7},
		Evidence:     []report.Evidence{{Field: "framebuffer free at the failure", Value: &free, Unit: "bytes", Decisive: true}},
		Processes:    []report.ProcessInfo{{PID: 7, Args: []string{"python3", "train.py"}}}}
	good := "VERDICT\n  cuMemAlloc_v2 of 1.00 GiB; 512.0 MiB free.\n  pid 7: python3 train.py\n  - make the request fit\n"
	long := good + "  " + strings.Repeat("word ", 40) + "\n"
	late := "VERDICT\n" + strings.Repeat("\n", 30) + good
	for _, tt := range []struct {
		name, text string
		want       string
	}{
		{"short and up front", good, ""},
		{"a long sentence", long, "a sentence of 40 words"},
		{"a long command line is no sentence", good + "      $ " + strings.Repeat("arg ", 40) + "\n", ""},
		{"numbers below the first screen", late, "lack the failed call"},
	} {
		got := strings.Join(Problems(tt.text, rep, 80), "\n")
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%s: problems %q, want %q", tt.name, got, tt.want)
		}
	}
}

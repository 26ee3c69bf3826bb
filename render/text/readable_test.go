package text

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// readableReport is a failed allocation whose free value was reconciled
// with the traced calls: its note is the long account, its brief the tag.
func readableReport() *report.Report {
	size, free, held, gpu, user := uint64(1<<30), uint64(512<<20), uint64(15<<30), 0, 1
	return &report.Report{Run: report.RunInfo{Path: "run.db"},
		Attribution: report.AttrAllocation, Verdict: "The first failed operation is cuMemAlloc_v2 of 1.00 GiB, returning CUDA_ERROR_OUT_OF_MEMORY.",
		NextSteps: []string{"make the request fit"},
		FirstFailure: &report.Failure{Symbol: "cuMemAlloc_v2", ResultName: "CUDA_ERROR_OUT_OF_MEMORY", Size: &size, PID: 41, TID: 43,
			GPUIndex: &gpu, Stack: &report.Stack{UserFrame: &user, Frames: []report.Frame{
				{Function: "alloc", File: "/usr/lib/python3/dist-packages/numba/api.py", Line: 3, Language: report.LangPython},
				{Function: "grow_kv_cache", File: "/home/me/kv.py", Line: 10, Language: report.LangPython}}}},
		Evidence: []report.Evidence{{Field: "framebuffer free at the failure", Value: &free, Text: "at most 512.0 MiB", Unit: "bytes",
			Source: "nvml", Decisive: true, Note: "15.50 GiB as sampled, taken because of this failure, the long account",
			Brief: "corrected for pid 41's exit"}},
		LiveAtFailure: []report.LiveBytes{{PID: 41, GPU: &gpu, View: "framebuffer", Bytes: held, Count: 11}},
		Processes:     []report.ProcessInfo{{PID: 41, Exe: "/usr/bin/python3.11", Args: []string{"python3", "worker.py", "--shard", "1"}}},
	}
}

// The summary under the verdict gives the numbers compared with their
// short tag, who held the memory, the process by its command line and
// thread, and where in the user's code; --explain swaps the tag for the
// full account in the evidence.
func TestSummaryAndExplain(t *testing.T) {
	rep := readableReport()
	for _, tt := range []struct {
		name    string
		explain bool
		want    []string
		not     []string
	}{
		{"default", false, []string{
			"compared 1.00 GiB requested; at most 512.0 MiB framebuffer free (corrected for pid 41's exit)",
			"held by pid 41 15.00 GiB in 11 allocations",
			"process pid 41: python3 worker.py --shard 1 (thread 43)",
			"code called from grow_kv_cache, kv.py:10",
			"grow_kv_cache (/home/me/kv.py:10) <- your code",
		}, []string{"the long account"}},
		{"explain", true, []string{"the long account"}, nil},
	} {
		var b strings.Builder
		if err := Write(&b, rep, Options{Width: 80, Explain: tt.explain}); err != nil {
			t.Fatal(err)
		}
		out := strings.Join(strings.Fields(b.String()), " ")
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: lacks %q:\n%s", tt.name, w, b.String())
			}
		}
		for _, n := range tt.not {
			if strings.Contains(out, n) {
				t.Errorf("%s: says %q:\n%s", tt.name, n, b.String())
			}
		}
	}
}

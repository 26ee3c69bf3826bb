package text

import (
	"bytes"
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// render writes a report at 80 columns and returns the text.
func render(t *testing.T, rep *report.Report, color bool) string {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, rep, Options{Width: 80, Color: color}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// oneLine joins the words of a text, so that a check does not depend on
// where lines wrap.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func u64(v uint64) *uint64 { return &v }

// Evidence with no time of its own (time_ns 0) prints none: never a time
// thousands of seconds before the run.
func TestEvidenceWithoutTime(t *testing.T) {
	start := int64(10_000_000_000_000)
	rep := &report.Report{Run: report.RunInfo{StartNS: start}, Evidence: []report.Evidence{
		{Field: "mapped size", Value: u64(64 << 20), Unit: "bytes", Source: "the exporter's allocation (pid 9, traced)", Status: "recorded"},
		{Field: "request size", Value: u64(1 << 30), Unit: "bytes", Source: "cuMemAlloc_v2 arguments (uprobe)", Status: "recorded",
			TimeNS: start + 1_500_000_000},
	}}
	out := oneLine(render(t, rep, false))
	for _, want := range []string{"from the exporter's allocation (pid 9, traced), recorded", "recorded, at +1.500 s"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "traced), recorded, at") || strings.Contains(out, "at -") {
		t.Errorf("a value without a time was given one:\n%s", out)
	}
}

// The VERDICT heading's colour means what the HTML report's does: red
// only for an allocation problem, never for a run where nothing failed.
func TestVerdictColour(t *testing.T) {
	tests := []struct {
		attr report.Attribution
		want string
	}{
		{report.AttrAllocation, "\x1b[1;31mVERDICT"},
		{report.AttrMapping, "\x1b[1;35mVERDICT"},
		{report.AttrNotMemory, "\x1b[1;33mVERDICT"},
		{report.AttrMissingEvidence, "\x1b[1;38;5;166mVERDICT"},
		{report.AttrNone, "\x1b[1;32mVERDICT"},
		{"something new", "\x1b[1mVERDICT"},
	}
	for _, tt := range tests {
		out := render(t, &report.Report{Attribution: tt.attr, Verdict: "x"}, true)
		if !strings.Contains(out, tt.want) {
			t.Errorf("%s: heading %q not found", tt.attr, tt.want)
		}
	}
}

// The loss line names only the losses that happened; the NVML line names
// its status once, and only when it is not success.
func TestLossAndSamplingWording(t *testing.T) {
	med, mx := int64(3_930_000), int64(3_930_000)
	tests := []struct {
		name      string
		loss      report.Loss
		sampling  report.Sampling
		want, not []string
	}{
		{"nothing lost", report.Loss{Known: true, Calls: 28, Events: 28},
			report.Sampling{NVMLInit: "NVML_SUCCESS", NVMLLibrary: "libnvidia-ml.so.1", Samples: 9, Triggered: 1, DelayMedian: &med, DelayMax: &mx},
			[]string{"28 calls seen, 28 events stored, none lost", "NVML (libnvidia-ml.so.1): 9 samples, 1 round triggered by failures; delay"},
			[]string{" 0 ", "NVML NVML_SUCCESS", "thinned"}},
		{"some lost", report.Loss{Known: true, Calls: 30, Events: 27, LostCalls: 2, TooDeep: 1, LostProc: 1},
			report.Sampling{NVMLInit: "NVML_SUCCESS", Samples: 3, Thinned: 4},
			[]string{"27 events stored; 2 calls lost (ring buffer full), 1 call nested too deeply in the library, 1 process lifecycle record lost",
				"NVML: 3 samples, 4 thinned out, none triggered by a failure"},
			[]string{"not followed", " 0 "}},
		{"NVML failed", report.Loss{Known: true, Calls: 1, Events: 1},
			report.Sampling{NVMLInit: "NVML_ERROR_LIBRARY_NOT_FOUND", NVMLLibrary: "libnvidia-ml.so.1"},
			[]string{"NVML (libnvidia-ml.so.1) did not initialize (NVML_ERROR_LIBRARY_NOT_FOUND); 0 samples"}, nil},
	}
	for _, tt := range tests {
		out := render(t, &report.Report{Loss: tt.loss, Sampling: tt.sampling}, false)
		loss := oneLine(out[strings.Index(out, "LOSS AND SAMPLING"):])
		for _, w := range tt.want {
			if !strings.Contains(loss, w) {
				t.Errorf("%s: lacks %q:\n%s", tt.name, w, loss)
			}
		}
		for _, n := range tt.not {
			if strings.Contains(strings.Replace(loss, " 0 samples", "", 1), n) {
				t.Errorf("%s: says %q:\n%s", tt.name, n, loss)
			}
		}
	}
}

// A phase whose two ends read the same is said once; the phase values say
// which phase each is and what "-" means, and each value is the growth
// within its phase; per-process rows name their
// process; the phases' origin is said without nested parentheses.
func TestPhasesWording(t *testing.T) {
	s := int64(1_000_000_000)
	rep := &report.Report{Run: report.RunInfo{StartNS: s}, PhasesFrom: "landmarks: no markers were recorded",
		Phases: []report.Phase{{Label: "before first allocation", StartNS: s, EndNS: s + 60_000_000},
			{Label: "up to first failure", StartNS: s + 60_000_000, EndNS: s + 60_085_000},
			{Label: "after first failure", StartNS: s + 60_085_000, EndNS: s + 900_000_000}},
		MemoryViews: []report.ViewRow{{GPU: 0, Field: "process used", Scope: "pid 42", PID: 42, Support: "supported",
			Phases: []report.PhaseValue{{Last: u64(0)}, {}, {Last: u64(1 << 30)}}}},
	}
	out := oneLine(render(t, rep, false))
	for _, want := range []string{
		"phases, split at the run's landmarks (no markers were recorded):",
		"before first allocation: +0.000 s to +0.060 s",
		"up to first failure: at +0.060 s, for 85 µs",
		"(before first allocation | up to first failure | after first failure), MiB; - where the phase has no value",
		"GPU 0 process used (pid 42): +0.0 - +1024.0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "+0.060 s to +0.060 s") || strings.Contains(out, "((") || strings.Contains(out, "))") {
		t.Errorf("an instant said twice, or nested parentheses:\n%s", out)
	}
}

// The memory views' notes (a peak no sample caught) are printed under the
// table.
func TestMemoryViewNotes(t *testing.T) {
	note := "GPU 0: no sample was taken while the traced processes' device memory was at its peak"
	out := oneLine(render(t, &report.Report{MemoryViewNotes: []string{note}}, false))
	if !strings.Contains(out, "note: "+note) {
		t.Errorf("the note is missing:\n%s", out)
	}
}

// The coverage line names only the counts that are not zero.
func TestCoverageCounts(t *testing.T) {
	tests := []struct {
		lib       report.Library
		want, not string
	}{
		{report.Library{Path: "/lib/libcuda.so.1", BuildID: "ab", Hooked: []string{"cuInit", "cuMemAlloc_v2"}},
			"/lib/libcuda.so.1 (build id ab): 2 symbols attached", "absent"},
		{report.Library{Path: "/lib/libcuda.so.1", BuildID: "ab", Hooked: []string{"cuInit"}, Absent: []string{"cuMemMap"},
			Unknown: []string{"cuMemAlloc_v9"}}, "1 symbol attached, 1 absent, 1 exported but not attached", " 0 "},
	}
	for _, tt := range tests {
		out := render(t, &report.Report{Coverage: []report.Library{tt.lib}}, false)
		out = oneLine(out[strings.Index(out, "COVERAGE"):strings.Index(out, "LOSS AND SAMPLING")])
		if !strings.Contains(out, tt.want) || strings.Contains(out, tt.not) {
			t.Errorf("want %q and not %q:\n%s", tt.want, tt.not, out)
		}
	}
}

// The FIRST FAILURE section names the MIG instance when the analysis
// matched one, as the verdict does.
func TestFirstFailureMIGInstance(t *testing.T) {
	gpu, mig := 0, 1
	uuid := "GPU-0"
	for _, tt := range []struct {
		mig  *int
		want string
	}{
		{&mig, "CUDA device 0 is GPU 0 MIG instance 1 GPU-0"},
		{nil, "CUDA device 0 is GPU 0 GPU-0"},
	} {
		rep := &report.Report{FirstFailure: &report.Failure{Symbol: "cuMemAlloc_v2", PID: 7, TID: 7,
			GPU: &uuid, GPUIndex: &gpu, MIGIndex: tt.mig, GPUMapping: "uuid"}}
		if out := oneLine(render(t, rep, false)); !strings.Contains(out, tt.want) {
			t.Errorf("lacks %q:\n%s", tt.want, out)
		}
	}
}

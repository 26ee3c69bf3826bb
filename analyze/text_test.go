package analyze

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// The human report fits a 100-column terminal, and has no colour unless
// asked (a TTY).
func TestTextFitsHundredColumns(t *testing.T) {
	size := uint64(1 << 30)
	gpu, idx := "GPU-b0ae225f-1d3a-d2cc-f557-bca7789e4f53", 0
	long := strings.Repeat("a very long explanation ", 20)
	ff := Failure{Symbol: "cuMemHostGetDevicePointer_v2", Operation: "mapping", Result: 712,
		ResultName: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", Size: &size, PID: 4194304, TID: 4194305,
		GPU: &gpu, GPUIndex: &idx, GPUMapping: "visible-devices-index+order-pci-bus-id", Phase: long,
		Stack:               &Stack{Partial: true, Note: long, Frames: []Frame{{Function: strings.Repeat("f", 90), Library: "libx.so"}}},
		PossibleConsequence: true, Recovered: true}
	v := uint64(150 << 30)
	ch := int64(150 << 30)
	rep := &Report{
		Run:          RunInfo{Path: "/very/long/" + strings.Repeat("dir/", 30) + "run.db", Command: strings.Fields(long)},
		FirstFailure: &ff, Attribution: AttrMapping, Verdict: long, Cause: &Cause{Text: long},
		Missing:  []Missing{{What: long, Fix: long, Decisive: true}},
		Evidence: []Evidence{{Field: long, Value: &v, Unit: "bytes", Source: long, Status: "NVML_SUCCESS", Note: long}},
		Failures: []Failure{ff, ff},
		MemoryViews: []ViewRow{{GPU: 7, Field: "framebuffer reserved", Scope: "pid 4194304", Support: long,
			Start: &v, Before: &v, At: &v, End: &v, Peak: &v, Change: &ch, Phases: []PhaseValue{{Phase: "x", Last: &v}}}},
		Phases:    []Phase{{Label: long}},
		Processes: []ProcessInfo{{PID: 4194304, Exe: "/" + strings.Repeat("x", 200), Devices: []DeviceMap{{Method: "unknown", Why: long}}}},
		Coverage:  []Library{{Path: long, Absent: strings.Fields(long)}},
		KernelLog: []KernelLine{{Text: long}},
	}
	var b bytes.Buffer
	if err := WriteText(&b, rep, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(b.String(), "\n") {
		if n := utf8.RuneCountInString(line); n > 100 {
			t.Errorf("line %d has %d columns: %q", i+1, n, line)
		}
	}
	if strings.Contains(b.String(), "\x1b[") {
		t.Error("colour escapes without a TTY")
	}
}

// The memory-view table's "at fail" column is the sample as read; when the
// verdict used a reconciled value, a note under the table says which, so the
// two never seem to disagree unexplained.
func TestTextNotesReconciledValue(t *testing.T) {
	free, sample := uint64(512<<20), uint64(15872<<20)
	gpu := 0
	tests := []struct {
		name     string
		evidence []Evidence
		want     string // "" when no note is expected
	}{
		{"exact", []Evidence{{Field: "framebuffer free at the failure (reconciled)", Value: &free, GPU: &gpu}},
			`GPU 0 "at fail" is the sample as read; framebuffer free at the failure was 512.0 MiB`},
		{"bounds", []Evidence{{Field: "BAR1 free at the failure (reconciled)", Value: &free, Text: "between 512.0 MiB and 1.00 GiB", GPU: &gpu}},
			`BAR1 free at the failure was between 512.0 MiB and 1.00 GiB`},
		{"sample only", []Evidence{{Field: "framebuffer free", Value: &sample, GPU: &gpu}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := &Report{Evidence: tt.evidence, MemoryViews: []ViewRow{{GPU: 0, Field: "framebuffer free",
				Support: "supported", At: &sample}}}
			var b bytes.Buffer
			if err := WriteText(&b, rep, TextOptions{}); err != nil {
				t.Fatal(err)
			}
			out := strings.Join(strings.Fields(b.String()), " ")
			if tt.want == "" {
				if strings.Contains(out, "is the sample as read") {
					t.Errorf("note without a reconciled value:\n%s", b.String())
				}
			} else if !strings.Contains(out, tt.want) {
				t.Errorf("want %q in:\n%s", tt.want, b.String())
			}
		})
	}
}

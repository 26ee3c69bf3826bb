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

package perfetto

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/retrivium/forensic/report"
)

// A call's arguments in the trace-event JSON: cuDeviceGet's CUdevice is a
// device handle, never a "ptr"; a call that ran against no CUDA device
// (before its thread had a context) carries no cuda_device.
func TestChromeCallArgs(t *testing.T) {
	h, p := uint64(0), uint64(0x1000)
	dev := int32(0)
	tests := []struct {
		name string
		call report.Call
		want map[string]any // nil value: the key must be absent
	}{
		{"cuInit before a context", report.Call{Symbol: "cuInit", Operation: "other", CUDADevice: -1, GPU: -1},
			map[string]any{"cuda_device": nil, "ptr": nil}},
		{"cuDeviceGet", report.Call{Symbol: "cuDeviceGet", Operation: "other", CUDADevice: -1, GPU: -1,
			Args: report.Args{DeviceHandle: &h, Device: &dev}},
			map[string]any{"device_handle": 0.0, "device_arg": 0.0, "ptr": nil, "cuda_device": nil}},
		{"an allocation in a context", report.Call{Symbol: "cuMemAlloc_v2", Operation: "allocation", CUDADevice: 0, GPU: 0,
			Context: 1, Args: report.Args{Ptr: &p}},
			map[string]any{"ptr": "0x1000", "cuda_device": 0.0, "device_handle": nil}},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		c := NewChromeJSON(&buf)
		if err := c.Begin(&report.Report{}); err != nil {
			t.Fatal(err)
		}
		if err := c.Call(&tt.call); err != nil {
			t.Fatal(err)
		}
		if err := c.Finish(&report.Report{}); err != nil {
			t.Fatal(err)
		}
		var doc struct {
			TraceEvents []struct {
				Ph   string         `json:"ph"`
				Args map[string]any `json:"args"`
			} `json:"traceEvents"`
		}
		if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
			t.Fatalf("%s: not JSON: %v", tt.name, err)
		}
		var args map[string]any
		for _, e := range doc.TraceEvents {
			if e.Ph == "X" {
				args = e.Args
			}
		}
		for k, want := range tt.want {
			got, ok := args[k]
			if want == nil && ok {
				t.Errorf("%s: has %s = %v", tt.name, k, got)
			}
			if want != nil && got != want {
				t.Errorf("%s: %s = %v, want %v", tt.name, k, got, want)
			}
		}
	}
}

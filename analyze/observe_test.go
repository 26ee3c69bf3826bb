package analyze

import (
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

// An export shows a call's CUDA device only once its thread has a context
// (or for the context call that names it), and cuDeviceGet's CUdevice as
// a device handle, not a pointer. A process attached late keeps the device
// the recorder gave it.
func TestExportedCallDevice(t *testing.T) {
	syms := []string{"cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuMemAlloc_v2"}
	noCtx := func(e store.Event) store.Event { e.Ctx = 0; return e }
	events := []store.Event{
		noCtx(call(0, tClock+10*ms, 0, cuda.Fields{Has: cuda.FieldFlags})),
		noCtx(call(1, tClock+11*ms, 0, cuda.Fields{Has: cuda.FieldPtr | cuda.FieldDevice, Ptr: 0, Device: 0})),
		noCtx(call(2, tClock+12*ms, 0, cuda.Fields{Has: cuda.FieldPtr | cuda.FieldDevice, Ptr: 0xabc0, Device: 0})),
		call(3, tClock+13*ms, 0, cuda.Fields{Has: cuda.FieldTarget, Target: 0xabc0}),
		alloc(4, tClock+14*ms, gib, 0x1000),
	}
	for _, late := range []bool{false, true} {
		procs := []store.Process{{PID: 7, Start: tClock, Exe: "/bin/app", Root: true, AttachedLate: late,
			Devices: []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}}}
		log := &sampleLog{}
		runSpec{symbols: syms, events: events, procs: procs}.analyze(t, log)
		want := map[string]int32{"cuInit": -1, "cuDeviceGet": -1, "cuDevicePrimaryCtxRetain": 0, "cuCtxSetCurrent": 0, "cuMemAlloc_v2": 0}
		if late {
			want["cuInit"], want["cuDeviceGet"] = 0, 0
		}
		if len(log.calls) != len(events) {
			t.Fatalf("%d calls exported, want %d", len(log.calls), len(events))
		}
		for _, c := range log.calls {
			if c.CUDADevice != want[c.Symbol] || (c.CUDADevice < 0) != (c.GPU < 0) {
				t.Errorf("attached late %v: %s has CUDA device %d (GPU %d), want %d", late, c.Symbol, c.CUDADevice, c.GPU, want[c.Symbol])
			}
			if c.Symbol == "cuDeviceGet" && (c.Args.Ptr != nil || c.Args.DeviceHandle == nil || *c.Args.DeviceHandle != 0) {
				t.Errorf("cuDeviceGet: ptr %v, device handle %v, want no ptr and handle 0", c.Args.Ptr, c.Args.DeviceHandle)
			}
			if c.Symbol == "cuDevicePrimaryCtxRetain" && (c.Args.Ptr == nil || c.Args.DeviceHandle != nil) {
				t.Errorf("cuDevicePrimaryCtxRetain: the context it returns is a pointer: ptr %v, handle %v", c.Args.Ptr, c.Args.DeviceHandle)
			}
		}
	}
}

package recorder

import (
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

// A failed call's event line names its class, size, process, pod and GPU
// from what the recorder knows of them, and leaves out what it does not.
func TestFailureOf(t *testing.T) {
	alloc, _, _ := cuda.Lookup("cuMemAlloc_v2")
	ctx, _, _ := cuda.Lookup("cuCtxCreate_v2")
	gpus := []gpuID{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"}}
	sized := store.Event{PID: 7, TID: 8, Result: 2}
	sized.Size, sized.Has = 100<<30, cuda.FieldSize
	for _, tc := range []struct {
		name                                string
		e                                   store.Event
		sym                                 *cuda.Symbol
		gpu                                 int
		p                                   *store.Process
		class, command, namespace, pod, uid string
		size                                uint64 // 0: none
	}{
		{"an allocation in a named pod", sized, alloc, 1,
			&store.Process{Comm: "python3", Pod: &store.Pod{UID: "u1", Namespace: "ml", Name: "train-0"}},
			"allocation", "python3", "ml", "train-0", "GPU-b", 100 << 30},
		{"a pod known by its UID only", sized, alloc, 0,
			&store.Process{Comm: "python3", Pod: &store.Pod{UID: "u1"}},
			"allocation", "python3", "", "u1", "GPU-a", 100 << 30},
		{"a context call outside a pod, no comm, unknown GPU", store.Event{PID: 9, Result: 101}, ctx, -1,
			&store.Process{Exe: "/usr/bin/simwork"},
			"context", "simwork", "", "", "", 0},
		{"a process not known", store.Event{PID: 9, Result: 2}, alloc, -1, nil,
			"allocation", "", "", "", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := failureOf(&tc.e, tc.sym, tc.gpu, tc.p, gpus)
			if f.Class != tc.class || f.Symbol != tc.sym.Name || f.Command != tc.command || f.Namespace != tc.namespace ||
				f.Pod != tc.pod || f.GPU != tc.gpu || f.GPUUUID != tc.uid || f.PID != tc.e.PID || f.ResultCode != tc.e.Result {
				t.Errorf("failureOf = %+v", f)
			}
			if f.Result != cuda.LookupResult(tc.e.Result).Name {
				t.Errorf("result %q", f.Result)
			}
			switch {
			case tc.size == 0 && f.Size != nil:
				t.Errorf("size %d for a call that names none", *f.Size)
			case tc.size != 0 && (f.Size == nil || *f.Size != tc.size):
				t.Errorf("size %v, want %d", f.Size, tc.size)
			}
		})
	}
}

// The memory gauges take the device-wide framebuffer and the BAR1
// readings of a round, and nothing of a MIG instance's, a process list or
// a failed query.
func TestSampleMetrics(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		name   string
		sample store.Sample
		used   bool
	}{
		{"device framebuffer", store.Sample{Kind: store.KindFramebuffer, Scope: store.ScopeDevice, Used: u(1), Free: u(2)}, true},
		{"BAR1", store.Sample{Kind: store.KindBAR1, Scope: store.ScopeAperture, Used: u(1), Free: u(2)}, true},
		{"a MIG instance", store.Sample{Kind: store.KindFramebuffer, Scope: store.ScopeMIG, Used: u(1), Free: u(2)}, false},
		{"a failed query", store.Sample{Kind: store.KindFramebuffer, Scope: store.ScopeDevice}, false},
		{"processes", store.Sample{Kind: store.KindProcesses, Scope: store.ScopeProcess}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			sampleMetricsTo(func(gpu int, kind string, used, free uint64) { got = append(got, kind) }, []store.Sample{tc.sample})
			if (len(got) == 1) != tc.used {
				t.Errorf("set %v, want used %v", got, tc.used)
			}
		})
	}
}

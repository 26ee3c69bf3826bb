package eventlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
)

// Each failed call is one line that parses as JSON and says what a log
// shipper's user filters on.
func TestOneJSONLinePerFailure(t *testing.T) {
	size := uint64(100 << 30)
	at := time.Date(2026, 12, 1, 22, 15, 35, 123456789, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		name string
		in   Failure
		want map[string]any
		not  []string
	}{
		{"an allocation in a pod",
			Failure{Time: at, Run: "r1", Class: "allocation", Symbol: "cuMemAlloc_v2", Result: "CUDA_ERROR_OUT_OF_MEMORY",
				ResultCode: 2, Size: &size, PID: 42, TID: 43, Command: "python3", Namespace: "ml", Pod: "train-0", GPU: 1, GPUUUID: "GPU-1"},
			map[string]any{"time": "2026-12-01T21:15:35.123456789Z", "event": "failed_call", "run": "r1", "class": "allocation",
				"symbol": "cuMemAlloc_v2", "result": "CUDA_ERROR_OUT_OF_MEMORY", "result_code": 2.0, "size_bytes": float64(size),
				"pid": 42.0, "tid": 43.0, "command": "python3", "namespace": "ml", "pod": "train-0", "gpu": 1.0, "gpu_uuid": "GPU-1"},
			nil},
		{"a context call on an unknown GPU outside a pod",
			Failure{Time: at, Class: "context", Symbol: "cuCtxCreate_v2", Result: "CUDA_ERROR_INVALID_DEVICE", ResultCode: 101, PID: 7, GPU: -1},
			map[string]any{"class": "context", "gpu": -1.0, "pid": 7.0},
			[]string{"size_bytes", "pod", "namespace", "gpu_uuid"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := New(&b).Failed(tc.in); err != nil {
				t.Fatal(err)
			}
			if strings.Count(b.String(), "\n") != 1 || !strings.HasSuffix(b.String(), "\n") {
				t.Fatalf("not one line: %q", b.String())
			}
			var got map[string]any
			if err := json.Unmarshal(b.Bytes(), &got); err != nil {
				t.Fatalf("%v: %s", err, b.String())
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %v (%T), want %v", k, got[k], got[k], v)
				}
			}
			for _, k := range tc.not {
				if _, ok := got[k]; ok {
					t.Errorf("%s present: %s", k, b.String())
				}
			}
		})
	}
}

// Lines written from several goroutines never interleave.
func TestConcurrentLinesStayWhole(t *testing.T) {
	var b bytes.Buffer
	w := New(&b)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				w.Failed(Failure{Symbol: strings.Repeat("x", 50+g), PID: uint32(i)})
			}
		}()
	}
	wg.Wait()
	sc := bufio.NewScanner(&b)
	n := 0
	for sc.Scan() {
		var f Failure
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("line %d: %v: %q", n, err, sc.Text())
		}
		n++
	}
	if n != 800 {
		t.Errorf("%d lines, want 800", n)
	}
}

package analyze

import (
	"testing"

	"github.com/retrivium/forensic/report"
)

// The user's frame is the innermost one outside the frameworks: Python
// files of site-packages, dist-packages and the standard library; native
// frames of libcuda, system libraries and the interpreter. In a Python
// stack only Python frames count.
func TestUserFrame(t *testing.T) {
	py := func(fn, file string) report.Frame {
		return report.Frame{Function: fn, File: file, Line: 10, Language: report.LangPython}
	}
	nat := func(fn, lib string) report.Frame {
		return report.Frame{Function: fn, Library: lib, Language: report.LangNative}
	}
	for _, tt := range []struct {
		name   string
		frames []report.Frame
		want   int // -1: none
	}{
		{"numba under the user's code", []report.Frame{
			nat("cuMemAlloc_v2", "libcuda.so.1"),
			py("_attempt_allocation", "/usr/lib/python3/dist-packages/numba/cuda/cudadrv/driver.py"),
			py("allocate", "/usr/local/lib/python3.11/site-packages/numba/cuda/api.py"),
			py("wrapper", "/usr/lib/python3.11/contextlib.py"),
			py("grow_kv_cache", "/home/me/kv.py"),
			py("<module>", "/home/me/kv.py"),
			nat("_PyEval_EvalFrameDefault", "python3.11"),
		}, 4},
		{"a C program", []report.Frame{
			nat("grow_kv_cache", "weights_oom"), nat("main", "weights_oom"), nat("__libc_start_main", "libc.so.6"),
		}, 0},
		{"under a library of the system", []report.Frame{
			nat("cudaMalloc", "libcudart.so.12"), nat("", "weights_oom"), nat("run", "app"),
		}, 2},
		{"only frameworks", []report.Frame{nat("cuMemAlloc_v2", "libcuda.so.1"), nat("start_thread", "libc.so.6")}, -1},
	} {
		got := userFrame(tt.frames)
		if (got == nil && tt.want != -1) || (got != nil && *got != tt.want) {
			t.Errorf("%s: user frame %v, want %d", tt.name, got, tt.want)
		}
	}
}

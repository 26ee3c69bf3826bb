package e2e

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/retrivium/forensic/internal/e2eenv"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// nvidia550Dir holds NVIDIA's driver-550 libraries (make nvidia-libs).
var nvidia550Dir = filepath.Join(repo, "build", "nvidia550")

// The memory and context calls both real drivers export without a row in
// the symbol table; COVERAGE lists them as exported but not attached.
var unhookedReal = []string{
	"cuCtxAttach", "cuCtxDetach", "cuCtxSetLimit", "cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxReset_v2",
	"cuExternalMemoryGetMappedMipmappedArray", "cuGraphicsEGLRegisterImage", "cuGraphicsGLRegisterBuffer",
	"cuGraphicsGLRegisterImage", "cuGraphicsUnregisterResource", "cuGraphicsVDPAURegisterOutputSurface",
	"cuGraphicsVDPAURegisterVideoSurface", "cuMemGetHandleForAddressRange", "cuMemPoolExportToShareableHandle",
	"cuMemPoolImportFromShareableHandle", "cuMemPoolSetAccess", "cuMemPoolTrimTo", "cuMemRetainAllocationHandle",
	"cuMulticastAddDevice", "cuMulticastBindAddr", "cuMulticastBindMem", "cuMulticastCreate", "cuMulticastUnbind",
}

var greenCalls = []string{"cuGreenCtxCreate", "cuCtxFromGreenCtx", "cuGreenCtxDestroy"}

// NVIDIA's real libcuda of drivers 535 and 550 on a machine without a GPU:
// the probes attach to each, the green context calls of 550 are attached
// (and their failures recorded with the real library's result), 535 lacks
// them, and COVERAGE and the missing evidence name the memory and context
// calls the table does not know.
func TestRealDriversCoverageAndGreenContexts(t *testing.T) {
	tests := []struct {
		driver, dir string
		green       bool // exports the green context calls
	}{
		{"535", nvidiaDir, false},
		{"550", nvidia550Dir, true},
	}
	for _, tt := range tests {
		t.Run(tt.driver, func(t *testing.T) {
			realCUDA := filepath.Join(tt.dir, "libcuda.so.1")
			realNVML := filepath.Join(tt.dir, "libnvidia-ml.so.1")
			e2eenv.Need(t, exists(realCUDA) && exists(realNVML), "NVIDIA's driver-"+tt.driver+" libraries are not in "+tt.dir+" (run make nvidia-libs)")
			w := newWorld(t)
			db := filepath.Join(w.dir, "run.db")
			cmd := binCommand(bin{}, "record", "-o", db, "--libcuda", realCUDA, "--libnvidia-ml", realNVML, "--",
				simwork, `init; green 0; alloc 1M`)
			cmd.Env = w.environ("SIMWORK_LIBCUDA=" + realCUDA)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("record: %v\n%s", err, out)
			}
			w.checkComplete(db)
			_, evs, _ := stored(t, db)
			results := map[string]int32{}
			for _, e := range evs {
				if e.Depth == 0 {
					results[e.Name] = e.Result
				}
			}
			if r, ok := results["cuGreenCtxCreate"]; ok != tt.green || (ok && r != 3) {
				t.Errorf("cuGreenCtxCreate recorded %v with result %d, want recorded %v with 3 (CUDA_ERROR_NOT_INITIALIZED)", ok, r, tt.green)
			}
			rep, _ := analyzeJSON(t, db)
			if rep.Attribution != report.AttrNotMemory || rep.Cause == nil || rep.Cause.Symbol != "cuInit" {
				t.Errorf("verdict %s, cause %+v: want not-memory, the failed cuInit", rep.Attribution, rep.Cause)
			}
			if len(rep.Coverage) != 1 {
				t.Fatalf("coverage %+v, want the one real libcuda", rep.Coverage)
			}
			cov := rep.Coverage[0]
			for _, g := range greenCalls {
				if slices.Contains(cov.Hooked, g) != tt.green || slices.Contains(cov.Absent, g) == tt.green {
					t.Errorf("driver %s: %s attached %v, absent %v", tt.driver, g, slices.Contains(cov.Hooked, g), slices.Contains(cov.Absent, g))
				}
			}
			if !slices.Equal(cov.Unknown, unhookedReal) {
				t.Errorf("driver %s: exported but not attached\n got %v\nwant %v", tt.driver, cov.Unknown, unhookedReal)
			}
			said := false
			for _, m := range rep.Missing {
				said = said || (strings.Contains(m.What, realCUDA) && strings.Contains(m.What, "cuMulticastCreate"))
			}
			if !said {
				t.Errorf("the missing evidence does not name the untraced calls: %+v", rep.Missing)
			}
		})
	}
}

// A workload that allocates on a green context of device 1 while its
// primary context is device 0's: the allocation is on device 1, through
// the CUcontext cuCtxFromGreenCtx gave, and the recorder keeps both
// handles on device 1.
func TestGreenContextCallsOnItsDevice(t *testing.T) {
	w := newWorld(t, "SIMGPU_DEVICES=2")
	res := w.record(nil, simwork, `init; use 0; green 1; green-push; alloc 1M; free; ctx-pop; alloc 2M; free; green-destroy`)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	w.checkComplete(res.db)
	_, evs, _ := stored(t, res.db)
	devs := map[uint64]int32{}
	for _, e := range evs {
		if e.Name == "cuMemAlloc_v2" {
			devs[e.Size] = e.Dev
		}
	}
	if devs[1<<20] != 1 || devs[2<<20] != 0 {
		t.Errorf("allocations on devices %v, want 1 MiB on device 1 (the green context), 2 MiB on device 0", devs)
	}
	r, err := store.Open(res.db)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	procs, err := r.Processes()
	if err != nil || len(procs) != 1 {
		t.Fatalf("processes %+v, %v", procs, err)
	}
	onOne := 0
	for _, c := range procs[0].Contexts {
		if c.Device == 1 {
			onOne++
		}
	}
	if onOne != 2 {
		t.Errorf("contexts %+v: want the green context and its CUcontext, both on device 1", procs[0].Contexts)
	}
}

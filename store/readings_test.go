package store

import (
	"path/filepath"
	"reflect"
	"testing"
)

func TestReadingsAreTheFramebufferAndBAR1SamplesValues(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.db")
	w, err := Create(path, CreateOptions{}, testRun(), []string{"cuInit"})
	if err != nil {
		t.Fatal(err)
	}
	v := func(n uint64) *uint64 { return &n }
	mig := 2
	uuid := "GPU-0123456789abcdef-0123456789abcdef-0123456789abcdef-0123456789abcdef"
	samples := []Sample{
		{GPU: GPURef{Index: 0, UUID: uuid}, Kind: KindFramebuffer, Scope: ScopeDevice, Status: Status{Name: "NVML_SUCCESS"},
			Start: 10, End: 11, Total: v(100), Used: v(30), Free: v(70)},
		{GPU: GPURef{Index: 0, UUID: uuid}, Kind: KindProcesses, Scope: ScopeProcess, Status: Status{Name: "NVML_SUCCESS"},
			Start: 12, End: 13, Processes: []ProcUsage{{PID: 5, Used: v(30)}}},
		{GPU: GPURef{Index: 1, MIGIndex: &mig}, Kind: KindFramebuffer, Scope: ScopeMIG, Status: Status{Code: 3, Name: "NVML_ERROR_NOT_SUPPORTED"},
			Start: 14, End: 15},
		{GPU: GPURef{Index: 1}, Kind: KindBAR1, Scope: ScopeAperture, Status: Status{Name: "NVML_SUCCESS"},
			Start: 16, End: 17, Total: v(256), Used: v(4), Free: v(252)},
	}
	if err := w.Commit(&Batch{Samples: samples}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []Reading
	if err := r.Readings(func(rd *Reading) error { got = append(got, *rd); return nil }); err != nil {
		t.Fatal(err)
	}
	var want []Reading
	for _, s := range samples {
		if s.Kind != KindProcesses {
			want = append(want, Reading{GPU: s.GPU, Kind: s.Kind, Scope: s.Scope, Status: s.Status, Start: s.Start, End: s.End,
				Total: s.Total, Free: s.Free})
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("readings\n%+v\nwant\n%+v", got, want)
	}
}

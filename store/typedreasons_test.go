package store

import (
	"path/filepath"
	"testing"
)

// A file written before the typed reasons existed holds only their
// words; the reader fills the typed value in from them, and a typed value
// a newer recorder wrote is read as written, whatever its words say.
func TestReaderFillsTypedReasonsOfOlderFiles(t *testing.T) {
	tests := []struct {
		name     string
		why      string    // a device's reason
		whyKind  DeviceWhy // as written ("" for an older file)
		wantWhy  DeviceWhy
		pyErr    string // the interpreter's error
		errKind  PyError
		wantErr  PyError
		python   string // a named stack's Python status in words
		status   PyStatus
		wantStat PyStatus
	}{
		{name: "older file, container runtime, unlocated interpreter",
			why: `NVIDIA_VISIBLE_DEVICES entry "7" matches no GPU`, wantWhy: WhyContainerVisible,
			pyErr: "the interpreter (libpython3.13.so.1.0) was not located before the call returned", wantErr: PyUnlocated,
			python: "not read: the interpreter (libpython3.13.so.1.0) was not located before the call returned", wantStat: PyNotLocated},
		{name: "older file, no GPUs, unsupported version",
			why: "NVML listed no GPUs", wantWhy: WhyNoGPUs,
			pyErr: "/usr/bin/python3.14: CPython 3.14.0: unsupported", wantErr: PyUnsupported,
			python: "not read: /usr/bin/python3.14: CPython 3.14.0: unsupported", wantStat: PyNotRead},
		{name: "older file, CUDA_VISIBLE_DEVICES, unreadable frames",
			why: `CUDA_VISIBLE_DEVICES entry "3" matches no GPU`, wantWhy: WhyCUDAVisible,
			python: "unreadable: short read", wantStat: PyUnreadable},
		{name: "older file, MIG instance, a status word",
			why: "GPU 0 has MIG enabled. CUDA device 0 is one of its MIG instances, and which one is not recorded: x", wantWhy: WhyMIGInstance,
			python: "truncated", wantStat: PyTruncated},
		{name: "older file, order",
			why: "several unlike GPUs and CUDA's default order (fastest first) is not NVML's", wantWhy: WhyOrder,
			python: "not-captured", wantStat: PyNotCaptured},
		{name: "newer file: the typed values win over the words",
			why: "NVIDIA_VISIBLE_DEVICES looks involved", whyKind: WhyOrder, wantWhy: WhyOrder,
			pyErr: "was not located, says the text", errKind: PyProbe, wantErr: PyProbe,
			python: "not read: was not located", status: PyNotRead, wantStat: PyNotRead},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "run.db")
			w, err := Create(path, CreateOptions{}, testRun(), []string{"cuMemAlloc_v2"})
			if err != nil {
				t.Fatal(err)
			}
			p := Process{PID: 41, Start: 1, Devices: []DeviceMap{{Ordinal: 0, GPU: -1, Method: "unknown", Why: tt.why, WhyKind: tt.whyKind}}}
			if tt.pyErr != "" {
				p.Python = &Python{Path: "/usr/bin/python3", Error: tt.pyErr, ErrorKind: tt.errKind}
			}
			n := NamedStack{PID: 41, TID: 43, Time: 123456789, Stop: "outermost", Python: tt.python, PythonStatus: tt.status}
			if err := w.Commit(&Batch{Events: []Event{call(0, 41, 1, 2)}, Processes: []Process{p}, Named: []NamedStack{n}}); err != nil {
				t.Fatal(err)
			}
			w.Close()
			r, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			ps, err := r.Processes()
			if err != nil || len(ps) != 1 {
				t.Fatalf("processes %+v, %v", ps, err)
			}
			if got := ps[0].Devices[0].WhyKind; got != tt.wantWhy {
				t.Errorf("device why_kind %q, want %q", got, tt.wantWhy)
			}
			if tt.pyErr != "" && ps[0].Python.ErrorKind != tt.wantErr {
				t.Errorf("python error_kind %q, want %q", ps[0].Python.ErrorKind, tt.wantErr)
			}
			got, err := r.NamedStack(41, 43, 123456789)
			if err != nil || got == nil || got.PythonStatus != tt.wantStat {
				t.Errorf("named stack python_status %+v, %v; want %q", got, err, tt.wantStat)
			}
		})
	}
}

// A process that is no CPython and a device whose GPU is known get no
// typed reason: there is nothing to say.
func TestReaderLeavesNoReasonWhereThereIsNone(t *testing.T) {
	p := Process{PID: 1, Devices: []DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}}
	upgradeProcess(&p)
	n := NamedStack{}
	upgradeNamed(&n)
	if p.Devices[0].WhyKind != "" || p.Python != nil || n.PythonStatus != "" {
		t.Errorf("reasons made up: %+v, %+v", p, n)
	}
}

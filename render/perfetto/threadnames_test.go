package perfetto

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/retrivium/forensic/report"
)

// threadsReport is a report whose process 10 has two threads named by the
// record (its main thread, a worker) and one that is not.
func threadsReport() *report.Report {
	return &report.Report{Run: report.RunInfo{StartNS: 1000},
		Processes: []report.ProcessInfo{{PID: 10, Exe: "/usr/bin/python3", Args: []string{"python3", "train.py"},
			Threads: []report.ThreadInfo{{TID: 10, Name: "worker-main"}, {TID: 12, Name: "pt_autograd_0"}}}}}
}

// Both trace formats name a thread's track by the name the record gives
// it, with its id, and a thread without one by its id alone.
func TestTracksNamedByThreadName(t *testing.T) {
	want := map[[2]uint32]string{
		{10, 10}: "worker-main (main thread 10)",
		{10, 12}: "pt_autograd_0 (thread 12)",
		{10, 13}: "thread 13",
	}
	calls := []report.Call{
		{PID: 10, TID: 10, Symbol: "cuInit", ResultName: "CUDA_SUCCESS", StartNS: 2000, EndNS: 3000},
		{PID: 10, TID: 12, Symbol: "cuMemAlloc_v2", Result: 2, ResultName: "CUDA_ERROR_OUT_OF_MEMORY", StartNS: 4000, EndNS: 5000},
		{PID: 10, TID: 13, Symbol: "cuMemAlloc_v2", ResultName: "CUDA_SUCCESS", StartNS: 6000, EndNS: 7000},
	}
	t.Run("chrome-json", func(t *testing.T) {
		var buf bytes.Buffer
		w := NewChromeJSON(&buf)
		writeAll(t, w, calls, w.Finish)
		got := map[[2]uint32]string{}
		for _, e := range parsePerfetto(t, buf.Bytes()).TraceEvents {
			if e.Ph == "M" && e.Name == "thread_name" {
				var a struct{ Name string }
				if err := json.Unmarshal(e.Args, &a); err != nil {
					t.Fatal(err)
				}
				got[[2]uint32{uint32(e.PID), uint32(e.TID)}] = a.Name
			}
		}
		checkNames(t, got, want)
	})
	t.Run("perfetto protobuf", func(t *testing.T) {
		var buf bytes.Buffer
		w := NewTrace(&buf)
		writeAll(t, w, calls, w.Finish)
		got := map[[2]uint32]string{}
		for _, td := range decodeTrace(t, buf.Bytes()).tracks {
			if th := td.GetThread(); th != nil {
				got[[2]uint32{uint32(th.GetPid()), uint32(th.GetTid())}] = th.GetThreadName()
			}
		}
		checkNames(t, got, want)
	})
}

// writeAll streams the calls of threadsReport to an observer, then ends it.
func writeAll(t *testing.T, o report.Observer, calls []report.Call, finish func(*report.Report) error) {
	t.Helper()
	rep := threadsReport()
	if err := o.Begin(rep); err != nil {
		t.Fatal(err)
	}
	for i := range calls {
		if err := o.Call(&calls[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := finish(rep); err != nil {
		t.Fatal(err)
	}
}

func checkNames(t *testing.T, got, want map[[2]uint32]string) {
	t.Helper()
	for k, w := range want {
		if got[k] != w {
			t.Errorf("pid %d tid %d: track %q, want %q", k[0], k[1], got[k], w)
		}
	}
}

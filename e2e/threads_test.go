package e2e

import (
	"strings"
	"testing"
)

// A failed call is reported with the name its thread had at the call, read
// by the probe: a named worker thread, a main thread that renamed itself,
// and an unnamed main thread (the kernel gives it the program's name). The
// name is in --json, and on the first screen of the text report at 80
// columns beside the process, except the program's own name on a main
// thread, which says nothing the command line does not.
func TestFailureNamesItsThread(t *testing.T) {
	tests := []struct {
		name   string
		script string
		thread string // the name --json must give
		text   string // what the first screen must say of it ("": nothing)
		main   bool   // the failing thread is the process's main thread
	}{
		{"named worker thread", "init; threads 1 { thread-name pt_autograd_0; use 0; alloc 8G }", "pt_autograd_0",
			"(thread pt_autograd_0, tid ", false},
		{"renamed main thread", "thread-name worker-3; init; use 0; alloc 8G", "worker-3", "(main thread worker-3)", true},
		{"unnamed main thread", "init; use 0; alloc 8G", "simwork", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, "SIMGPU_FB_TOTAL=4G")
			res := w.record(nil, simwork, tt.script)
			rep, raw := analyzeJSON(t, res.db)
			f := rep.FirstFailure
			if f == nil || f.ResultName != "CUDA_ERROR_OUT_OF_MEMORY" {
				t.Fatalf("first failure %+v, want the out-of-memory allocation; recorder said:\n%s", f, res.stderr)
			}
			if (f.TID == f.PID) != tt.main {
				t.Errorf("failure on tid %d of pid %d; want main thread %v", f.TID, f.PID, tt.main)
			}
			ff, _ := raw["first_failure"].(map[string]any)
			if got, _ := ff["thread_name"].(string); got != tt.thread {
				t.Errorf("--json first_failure.thread_name = %v, want %q", ff["thread_name"], tt.thread)
			}
			screen := firstLines(textAt80(t, res.db), 25)
			words := strings.Join(strings.Fields(screen), " ")
			switch {
			case tt.text != "" && !strings.Contains(words, tt.text):
				t.Errorf("the first 25 lines at 80 columns do not name the thread (%q):\n%s", tt.text, screen)
			case tt.text == "" && strings.Contains(words, "thread "+tt.thread):
				t.Errorf("the first 25 lines name a main thread by its program's name:\n%s", screen)
			}
		})
	}
}

package report

import "testing"

// A failure's thread is named by its recorded name, else by its id. A
// main thread is mentioned only with a name of its own: not when none was
// recorded, nor when it is its program's name (the executable's, or the
// first or second argument's, as the kernel cuts it to 15 bytes).
func TestThreadTextNamesTheThread(t *testing.T) {
	name := func(s string) *string { return &s }
	python := &ProcessInfo{PID: 10, Exe: "/usr/bin/python3.11", Args: []string{"python3", "train.py"}}
	script := &ProcessInfo{PID: 10, Exe: "/usr/bin/python3.11", Args: []string{"/usr/bin/python3", "/app/serve_model_v2.py"}}
	tests := []struct {
		name string
		f    Failure
		p    *ProcessInfo
		want string
	}{
		{"named worker thread", Failure{PID: 10, TID: 12, ThreadName: name("pt_autograd_0")}, python, "thread pt_autograd_0, tid 12"},
		{"worker thread with the program's name", Failure{PID: 10, TID: 12, ThreadName: name("python3")}, python, "thread python3, tid 12"},
		{"named main thread", Failure{PID: 10, TID: 10, ThreadName: name("worker-3")}, python, "main thread worker-3"},
		{"main thread named as its argv[0]", Failure{PID: 10, TID: 10, ThreadName: name("python3")}, python, ""},
		{"main thread named as its executable", Failure{PID: 10, TID: 10, ThreadName: name("python3.11")}, python, ""},
		{"main thread named as its script, cut", Failure{PID: 10, TID: 10, ThreadName: name("serve_model_v2.")}, script, ""},
		{"named main thread, process unknown", Failure{PID: 10, TID: 10, ThreadName: name("python3")}, nil, "main thread python3"},
		{"unnamed worker thread", Failure{PID: 10, TID: 12}, python, "thread 12"},
		{"unnamed main thread", Failure{PID: 10, TID: 10}, python, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.f.ThreadText(tt.p); got != tt.want {
				t.Errorf("ThreadText() = %q, want %q", got, tt.want)
			}
		})
	}
}

package report

import "testing"

// A failure's thread is named by its recorded name, else by its id; a
// main thread without a recorded name is not mentioned.
func TestThreadTextNamesTheThread(t *testing.T) {
	name := func(s string) *string { return &s }
	tests := []struct {
		name string
		f    Failure
		want string
	}{
		{"named worker thread", Failure{PID: 10, TID: 12, ThreadName: name("pt_autograd_0")}, "thread pt_autograd_0, tid 12"},
		{"named main thread", Failure{PID: 10, TID: 10, ThreadName: name("worker-3")}, "main thread worker-3"},
		{"unnamed worker thread", Failure{PID: 10, TID: 12}, "thread 12"},
		{"unnamed main thread", Failure{PID: 10, TID: 10}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.f.ThreadText(); got != tt.want {
				t.Errorf("ThreadText() = %q, want %q", got, tt.want)
			}
		})
	}
}

package analyze

import (
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

// The first failure carries the name its thread had at the call, from the
// process record; a record without names (files written before they were
// recorded) and a name for another thread leave it null.
func TestFailureCarriesThreadName(t *testing.T) {
	oom := call(0, tClock+500*ms, 2, cuda.Fields{Has: cuda.FieldSize, Size: gib})
	oom.TID = 9
	tests := []struct {
		name    string
		threads []store.Thread
		want    string // "" for null
	}{
		{"named at its first failure", []store.Thread{{TID: 8, Name: "loader"}, {TID: 9, Name: "pt_autograd_0", Time: oom.End}},
			"pt_autograd_0"},
		{"another thread named only", []store.Thread{{TID: 8, Name: "loader"}}, ""},
		{"no names recorded", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			procs := []store.Process{{PID: 7, Start: tClock, Exe: "/bin/app", Root: true, Threads: tt.threads,
				Devices: []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}}}
			rep := runSpec{symbols: []string{"cuMemAlloc_v2"}, events: []store.Event{oom}, procs: procs}.analyze(t, nil)
			f := rep.FirstFailure
			if f == nil {
				t.Fatal("no first failure")
			}
			got := ""
			if f.ThreadName != nil {
				got = *f.ThreadName
			}
			if got != tt.want || (tt.want == "") != (f.ThreadName == nil) {
				t.Errorf("thread_name %v, want %q", f.ThreadName, tt.want)
			}
		})
	}
}

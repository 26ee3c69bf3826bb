package store

import (
	"path/filepath"
	"testing"
)

// A recording that never wrote its stop record ends at the latest thing
// it recorded, whichever kind that is, not at its last call.
func TestLastRecordEndIsTheLatestOfAnyKind(t *testing.T) {
	call := Event{Symbol: 1, PID: 5, TID: 5, Start: 10, End: 20}
	tests := []struct {
		name  string
		batch Batch
		want  int64
	}{
		{"calls only", Batch{Events: []Event{call}}, 20},
		{"a later sample", Batch{Events: []Event{call},
			Samples: []Sample{{Kind: KindFramebuffer, Start: 480, End: 500}, {Kind: KindFramebuffer, Start: 300, End: 310}}}, 500},
		{"a later counters reading", Batch{Events: []Event{call}, Drops: []Drops{{Time: 400}, {Time: 700}}}, 700},
		{"a later process exit", Batch{Events: []Event{call},
			Processes: []Process{{PID: 5, Start: 10, Exe: "/bin/x", Exit: &Exit{Time: 900}}}}, 900},
		{"a later kernel log line", Batch{Events: []Event{call}, Kmsg: []KernelLog{{Time: 650, Text: "NVRM: Xid"}}}, 650},
		{"a later marker", Batch{Events: []Event{call}, Markers: []Marker{{Time: 640, Label: "step"}}}, 640},
		{"no calls, samples only", Batch{Samples: []Sample{{Kind: KindFramebuffer, Start: 90, End: 95}}}, 95},
		{"nothing timed", Batch{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "run.db")
			w, err := Create(path, CreateOptions{}, testRun(), []string{"cuInit", "cuMemAlloc_v2"})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Commit(&tt.batch); err != nil {
				t.Fatal(err)
			}
			w.Close() // no stop record: as if killed
			r, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			got, err := r.LastRecordEnd()
			if err != nil || got != tt.want {
				t.Errorf("LastRecordEnd = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

package main

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrivium/forensic/logging"
	"github.com/retrivium/forensic/recorder"
	"github.com/retrivium/forensic/store"
)

// record's stop summary counts each kind of loss on its own, in the words
// analyze's LOSS AND SAMPLING uses: a lost process record is not a call.
func TestSummaryLosses(t *testing.T) {
	tests := []struct {
		name    string
		st      store.Stats
		want    []string
		notWant []string
	}{
		{"calls and a process record", store.Stats{Events: 3630, LostCalls: 396376, LostProc: 1, Samples: 132},
			[]string{"recorded 3630 calls, 132 samples;",
				"not in the record: 396376 calls lost (ring buffer full), 1 process lifecycle record lost (ring buffer full)"},
			[]string{"396377"}},
		{"not followed", store.Stats{Events: 5, LostInflight: 2, TooDeep: 1, Samples: 1},
			[]string{"2 calls not followed (too many calls in progress at once), 1 call nested too deeply in the library"}, nil},
		{"none", store.Stats{Events: 5, Samples: 1}, []string{"recorded 5 calls, 1 sample;"}, []string{"lost", "not in the record"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &cli{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
			var b bytes.Buffer
			c.summary(logging.New(&b, logging.Options{Format: logging.Text}), &recorder.Result{Path: filepath.Join(t.TempDir(), "none.db"),
				Stop: store.StopInfo{Reason: "signal", Stats: tt.st}})
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("want %q in:\n%s", w, b.String())
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(b.String(), w) {
					t.Errorf("%q in:\n%s", w, b.String())
				}
			}
		})
	}
}

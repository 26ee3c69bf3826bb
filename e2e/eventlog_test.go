package e2e

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// `record --events -` writes one JSON line per failed call on stdout,
// naming the call, its size, result, process and GPU; the text log on a
// pipe is one line per message with its time and level, whatever COLUMNS
// says, and the attached library is said at info level.
func TestEventsOnStdoutAndTextLog(t *testing.T) {
	w := newWorld(t)
	db := filepath.Join(w.dir, "ev.db")
	script := `"$S" 'init; use 0; alloc 1M; alloc 100G; alloc 200G; exit 0' > /dev/null 2>&1`
	r := runBin(t, bin{w: w, env: []string{"COLUMNS=40", "S=" + simwork}},
		append(sim(db), "--events", "-", "--", "/bin/sh", "-c", script)...)
	if r.code != 0 {
		t.Fatalf("record: exit %d\n%s", r.code, r.stderr)
	}
	var evs []map[string]any
	for _, l := range lines(r.stdout) {
		var ev map[string]any
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("stdout line %q is not a JSON event", l)
		}
		evs = append(evs, ev)
	}
	if len(evs) != 2 {
		t.Fatalf("%d event lines, want the 2 failed allocations:\n%s", len(evs), r.stdout)
	}
	for i, size := range []float64{100 << 30, 200 << 30} {
		ev := evs[i]
		for k, want := range map[string]any{"event": "failed_call", "class": "allocation", "symbol": "cuMemAlloc_v2",
			"result": "CUDA_ERROR_OUT_OF_MEMORY", "size_bytes": size, "command": "simwork", "gpu": 0.0} {
			if ev[k] != want {
				t.Errorf("event %d: %s = %v, want %v", i, k, ev[k], want)
			}
		}
		if pid, _ := ev["pid"].(float64); pid <= 0 {
			t.Errorf("event %d: pid %v", i, ev["pid"])
		}
	}
	logLine := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (INFO |WARN |ERROR) forensic: \S`)
	for _, l := range lines(r.stderr) {
		if !logLine.MatchString(l) {
			t.Errorf("%q is not one whole log line (COLUMNS=40 must not wrap a pipe)", l)
		}
	}
	if !regexp.MustCompile(`(?m) INFO  forensic: attached `).MatchString(r.stderr) || strings.Contains(r.stderr, "\n ") {
		t.Errorf("no attached line at info level, or a wrapped line:\n%s", r.stderr)
	}
}

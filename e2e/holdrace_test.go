package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retrivium/forensic/store"
)

// Two recorders with map hooks on one host both hold a process at its
// first mapping of libcuda, and the quicker continues it once its own
// probes are in: the process then runs its calls before the slower
// recorder's probes are in. The slower one must not take it for held: it
// counts a lost hold, says so, and analyze reports the missing evidence.
// The slower recorder's holds are lengthened (FORENSIC_TEST_HOLD_DELAY) so
// the other always wins.
func TestHeldProcessContinuedByAnotherRecorderIsCounted(t *testing.T) {
	w := newWorld(t)
	goFile := filepath.Join(w.dir, "go")
	launcher := exec.Command("sh", "-c", `while [ ! -e "$0" ]; do sleep 0.02; done; exec "$1" "$2"`,
		goFile, simwork, `init; use 0; alloc 16M; free-all`)
	launcher.Env = w.environ()
	if err := launcher.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { launcher.Process.Kill() })
	pid := strconv.Itoa(launcher.Process.Pid)

	slowDB, quickDB := filepath.Join(w.dir, "slow.db"), filepath.Join(w.dir, "quick.db")
	slow := w.startRecording(w.dir, []string{"FORENSIC_TEST_HOLD_DELAY=1s"},
		"record", "-o", slowDB, "--force", "--libnvidia-ml", simNVML, "--pid", pid)
	quick := w.startRecording(w.dir, nil, "record", "-o", quickDB, "--force", "--libnvidia-ml", simNVML, "--pid", pid)
	for _, r := range []*recordingProc{slow, quick} {
		if !waitFor(30*time.Second, func() bool { return strings.Contains(r.logText(), "recording") }) {
			t.Fatalf("recorder not ready:\n%s", r.logText())
		}
	}
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitExit(t, launcher, 60*time.Second)
	for _, r := range []*recordingProc{slow, quick} {
		if code := r.wait(60 * time.Second); code != 0 {
			t.Fatalf("recorder: exit %d:\n%s", code, r.logText())
		}
	}

	made := w.callsByPID()[uint32(launcher.Process.Pid)]
	if made == 0 {
		t.Fatal("the workload logged no call")
	}
	_, quickEvs, _ := stored(t, quickDB)
	if n := outerCalls(quickEvs); n != made {
		t.Fatalf("the quicker recorder stored %d calls of %d: it did not hold the process until its probes were in:\n%s",
			n, made, quick.logText())
	}
	_, slowEvs, stop := stored(t, slowDB)
	if n := outerCalls(slowEvs); n == made {
		t.Fatalf("the slower recorder stored all %d calls: the quicker one did not continue the process first:\n%s", made, slow.logText())
	}
	if stop.Stats.LostHolds == 0 {
		t.Errorf("the slower recorder stored %d of %d calls and counts no lost hold:\n%s", outerCalls(slowEvs), made, slow.logText())
	}
	if !strings.Contains(slow.logText(), "pid "+pid+", held at its mapping of libcuda.so.1, ran on before the probes were in") {
		t.Errorf("the slower recorder does not say the process ran on:\n%s", slow.logText())
	}
	checkRecordingReads(t, slowDB)
	rep, _ := analyzeJSON(t, slowDB)
	if rep.Loss.LostHolds == 0 {
		t.Errorf("analyze: loss %+v, want the lost hold", rep.Loss)
	}
}

// outerCalls counts the calls the application made (depth 0).
func outerCalls(evs []store.Event) int {
	n := 0
	for _, e := range evs {
		if e.Depth == 0 {
			n++
		}
	}
	return n
}

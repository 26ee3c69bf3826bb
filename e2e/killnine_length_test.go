package e2e

import (
	"bytes"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrivium/forensic/store"
)

// A recorder killed with -9 while the workload is quiet: the run's length
// reaches the last thing it recorded (the NVML samples and loss-counter
// readings it kept taking), not its last call.
func TestKillNineLengthReachesLastRecord(t *testing.T) {
	w := newWorld(t)
	db := filepath.Join(w.dir, "run.db")
	ready := filepath.Join(w.dir, "called")
	cmd := binCommand(bin{w: w}, "record", "-o", db, "--libcuda", simCUDA, "--libnvidia-ml", simNVML, "--",
		simwork, "init; use 0; alloc 1M; touch "+ready+"; sleep 4000")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if !waitFor(20*time.Second, func() bool { return exists(ready) }) {
		t.Fatalf("the workload made no call: %s", errb.String())
	}
	// Quiet for 2.5 s: samples every 100 ms, counters about once a second.
	const quiet = 2500 * time.Millisecond
	time.Sleep(quiet)
	killed := monotonic()
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait() // returns when the workload, which holds stderr, ends its sleep

	r, err := store.Open(db)
	if err != nil {
		t.Fatalf("run.db after kill -9: %v", err)
	}
	lastCall, err := r.LastEventEnd()
	if err != nil {
		t.Fatal(err)
	}
	var lastSample int64
	r.Samples(func(s *store.Sample) error {
		lastSample = max(lastSample, s.End)
		return nil
	})
	drops, _ := r.Drops()
	r.Close()
	var lastReading int64
	for _, d := range drops {
		lastReading = max(lastReading, d.Time)
	}
	if lastSample < lastCall+int64(time.Second) || lastReading <= lastCall {
		t.Fatalf("samples up to %v and counters up to %v after the last call: the recorder did not keep recording",
			time.Duration(lastSample-lastCall), time.Duration(lastReading-lastCall))
	}

	rep, _ := analyzeJSON(t, db)
	if rep.Run.Ended != "abrupt" {
		t.Fatalf("run ended %q, want abrupt", rep.Run.Ended)
	}
	end := rep.Run.EndNS
	if end < lastSample || end < lastReading || end > killed {
		t.Errorf("run ends %v after the last call, the last sample %v after it, the last counter reading %v, the kill %v: want the latest of what was recorded",
			time.Duration(end-lastCall), time.Duration(lastSample-lastCall), time.Duration(lastReading-lastCall), time.Duration(killed-lastCall))
	}
	if rep.Run.DurationNS != end-rep.Run.StartNS {
		t.Errorf("duration %d, want end %d less start %d", rep.Run.DurationNS, end, rep.Run.StartNS)
	}
	said := false
	for _, m := range rep.Missing {
		said = said || strings.Contains(m.What, "did not stop cleanly")
	}
	if !said {
		t.Errorf("the abrupt end is not listed as missing evidence: %+v", rep.Missing)
	}
}

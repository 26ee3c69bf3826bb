package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/retrivium/forensic/flight"
	"github.com/retrivium/forensic/report"
)

// runForensic runs forensic with args and returns its stdout, stderr and
// exit status.
func runForensic(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	case err != nil:
		t.Fatalf("forensic %v: %v", args, err)
	}
	return out.String(), errb.String(), 0
}

// Review finding 11. A flight recording under load is analyzed three times
// while it records: each time the recorder's count, stored with the data
// the copy of the live segment holds, equals the events read plus those
// in deleted stretches, never fewer than were read.
func TestReviewFixmLiveCounts(t *testing.T) {
	w := newWorld(t)
	fr := w.startFlight(`"$S" 'init; use 0; paced 20000 14' > paced.txt`, "--segment-age", "2s", "--libcuda", simCUDA)
	start := time.Now()
	fr.pollUntil(20*time.Second, "the first calls", func() bool {
		x, err := flight.ReadIndex(fr.dir)
		return err == nil && len(x.Segments) > 0 && x.Segments[0].Calls > 0
	})
	for i := 0; i < 3; i++ {
		at := start.Add(time.Duration(3+3*i) * time.Second)
		fr.pollUntil(30*time.Second, "the next read", func() bool { return time.Now().After(at) })
		out, _, code := runForensic(t, "analyze", "--json", fr.dir)
		if code != 0 {
			t.Fatalf("live analyze %d: exit %d", i, code)
		}
		var rep report.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		f := rep.Run.Flight
		if f == nil || f.Live != "copy" || f.EventsRead == 0 || f.EventsRecorded != f.EventsRead+f.DroppedCalls {
			t.Errorf("live read %d: %+v; want the recorder's count equal to the events read (and deleted)", i, f)
		}
		if hasMissing(rep.Missing, "are in no file read") {
			t.Errorf("live read %d: events unaccounted for: %+v", i, rep.Missing)
		}
	}
	if err := <-fr.done; err != nil {
		t.Fatalf("record: %v\n%s", err, fr.log.String())
	}
}

package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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

// Review finding 14. A flight recording in small segments whose
// workload fails twice is copied as an operator would, and a segment is
// removed from the copy. Without its last segment the recording is not
// said to have stopped uncleanly: segment N is missing and its records are
// lost, named once, with advice to restore it, and stderr says so.
// Without the segment of the first failure, the second cannot be
// established as the first.
func TestReviewFixmLostSegment(t *testing.T) {
	w := newWorld(t)
	fr := w.startFlight(`"$S" 'init; use 0; alloc 1G; sleep 1500; alloc 100G; sleep 2500; alloc 200G; sleep 2500'`,
		"--segment-age", "1s", "--libcuda", simCUDA)
	select {
	case err := <-fr.done:
		if err != nil {
			t.Fatalf("record: %v\n%s", err, fr.log.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the flight recording did not end:\n%s", fr.log.String())
	}
	x, err := flight.ReadIndex(fr.dir)
	if err != nil || len(x.Segments) < 4 {
		t.Fatalf("index %+v %v: want several segments", x, err)
	}
	var failed []int
	for i, s := range x.Segments {
		if s.Failures > 0 {
			failed = append(failed, i)
		}
	}
	if len(failed) != 2 || failed[1] == len(x.Segments)-1 {
		t.Fatalf("segments %+v: want the two failures in two segments before the last", x.Segments)
	}
	last := x.Segments[len(x.Segments)-1]
	cp := copyDir(t, fr.dir, filepath.Join(w.dir, "copy-last"), last.File)
	out, stderr, code := runForensic(t, "analyze", cp)
	if code != 0 || !strings.Contains(stderr, "segment "+itoa(int(last.Seq))+" is missing") {
		t.Errorf("analyze without the last segment: exit %d, stderr %q", code, stderr)
	}
	for _, bad := range []string{"did not stop cleanly", "ended abruptly", "take a snapshot of the live segment"} {
		if strings.Contains(out, bad) {
			t.Errorf("without its last segment the report says %q:\n%s", bad, out)
		}
	}
	if !strings.Contains(out, "segment "+itoa(int(last.Seq))+" is missing: its records are lost") ||
		strings.Count(out, filepath.Base(last.File)) != 1 {
		t.Errorf("the missing segment is not named once as lost records:\n%s", out)
	}
	js, _, _ := runForensic(t, "analyze", "--json", cp)
	rep := decodeReport(t, []byte(js))
	if rep.Run.Ended != "clean" || rep.Run.Flight == nil || !slices.Equal(rep.Run.Flight.SegmentsLost, []uint64{last.Seq}) {
		t.Errorf("ended %q, flight %+v; want clean with segment %d lost", rep.Run.Ended, rep.Run.Flight, last.Seq)
	}

	first := x.Segments[failed[0]]
	cp = copyDir(t, fr.dir, filepath.Join(w.dir, "copy-first"), first.File)
	js, _, _ = runForensic(t, "analyze", "--json", cp)
	rep = decodeReport(t, []byte(js))
	if rep.Attribution != report.AttrMissingEvidence || !hasMissing(rep.Missing, "segment "+itoa(int(first.Seq))+" is missing") {
		t.Errorf("without the first failure's segment: attribution %s, missing %+v", rep.Attribution, rep.Missing)
	}

}

// copyDir copies a flight recording's directory without one file.
func copyDir(t *testing.T, from, to, without string) string {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o700)
		}
		if rel == without || !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), data, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return to
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
		if f == nil || f.Live != "copy" || f.EventsRead == 0 || f.EventsRecorded != f.EventsRead+f.DroppedCalls+f.LostCalls {
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

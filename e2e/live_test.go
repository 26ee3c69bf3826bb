package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/retrivium/forensic/flight"
	"github.com/retrivium/forensic/report"
)

// Analysis of a flight recording while it is still being written: what
// the live segment holds, counters that are a reading rather than a
// total, and losses named as missing evidence.

// What analyze says on stderr about a live flight recording (how its
// live segment was read) wraps at an 80-column terminal like record's
// messages do, here with a long directory name.
func TestLiveNoteWraps(t *testing.T) {
	w := newWorld(t)
	fr := w.startFlight(`$S 'init; use 0; alloc 1M'; touch started; while [ ! -e stop ]; do sleep 0.05; done`)
	fr.pollUntil(20*time.Second, "the workload ran", func() bool { return exists(filepath.Join(fr.work, "started")) })
	cmd := binCommand(bin{}, "analyze", "--no-color", fr.dir)
	cmd.Env = append(os.Environ(), "COLUMNS=80")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		t.Errorf("analyze: %v: %s", err, errb.String())
	}
	os.WriteFile(filepath.Join(fr.work, "stop"), nil, 0o644)
	if err := <-fr.done; err != nil {
		t.Errorf("record: %v\n%s", err, fr.log.String())
	}
	said := errb.String()
	if !strings.Contains(strings.Join(strings.Fields(said), " "), "the live one from a copy its recorder made now") {
		t.Errorf("analyze did not say how it read the live segment: %q", said)
	}
	for _, l := range strings.Split(said, "\n") {
		if n := utf8.RuneCountInString(l); n > 80 {
			t.Errorf("a %d-column line on stderr: %q", n, l)
		}
	}
}

// A live flight recording analyzed just after the
// workload's out-of-memory failure: the loss counters come from the
// recorder's last periodic reading and say so; the text never says "none
// lost" of calls after that reading, and a failure after it cannot be
// established as the first (a lost call may hide an earlier one). Once the
// recorder stops, its stop record counts every call.
func TestLiveCountersAreAReading(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=4G")
	fr := w.startFlight(`"$S" 'init; use 0; alloc 2G; alloc 2G; exit 1'; touch failed; sleep 8`)
	fr.pollUntil(30*time.Second, "the workload's failure", func() bool { return exists(filepath.Join(fr.work, "failed")) })
	fr.pollUntil(10*time.Second, "the failure in a live copy", func() bool {
		rep, _ := analyzeDir(t, fr.dir)
		return rep.FirstFailure != nil
	})
	rep, _ := analyzeDir(t, fr.dir)
	text, _, _ := runBin(t, bin{env: []string{"COLUMNS=80"}}, "analyze", fr.dir).outputs()
	checkLiveCounters(t, rep, text)
	fr.cmd.Process.Signal(os.Interrupt)
	<-fr.done
	rep, _ = analyzeDir(t, fr.dir)
	if l := rep.Loss; l.CountersFrom != report.CountersStop || l.Calls == 0 || l.Calls != l.Events {
		t.Errorf("stopped: counters %+v, want the stop record's, every call stored", l)
	}
}

// checkLiveCounters: a live analysis's counters are a reading, said as
// such; one taken before the failure leaves it missing evidence.
func checkLiveCounters(t *testing.T, rep *report.Report, text string) {
	t.Helper()
	l := rep.Loss
	if rep.FirstFailure != nil {
		t.Logf("live: counters read at %d, failure at %d: %s", l.CountersAtNS, rep.FirstFailure.TimeNS, rep.Attribution)
	}
	if rep.FirstFailure == nil || l.CountersFrom != report.CountersReading {
		t.Fatalf("live: failure %v, counters from %q; want the failure, counters from a reading", rep.FirstFailure != nil, l.CountersFrom)
	}
	loss := strings.Join(strings.Fields(text[strings.Index(text, "LOSS AND SAMPLING"):]), " ")
	if !strings.Contains(loss, "as of the recorder's last reading of its counters") {
		t.Errorf("live: the loss section does not say its counters are a reading:\n%s", loss)
	}
	decisive := false
	for _, m := range rep.Missing {
		decisive = decisive || (m.Decisive && strings.Contains(m.What, "loss counters were last read"))
	}
	if before := l.CountersAtNS < rep.FirstFailure.TimeNS; before != decisive || (before && rep.Attribution != report.AttrMissingEvidence) {
		t.Errorf("live: counters read at %d, failure at %d, decisive gap %v, attribution %s",
			l.CountersAtNS, rep.FirstFailure.TimeNS, decisive, rep.Attribution)
	}
}

// A call storm through a small ring buffer
// loses calls while a flight recording is live: the live analysis names
// the loss as decisive missing evidence (or, before a reading counted it,
// the counters that do not reach the end), never a confident verdict.
func TestLiveLossIsMissingEvidence(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=4G")
	fr := w.startFlight(`"$S" 'init; use 0; stress 200000; alloc 2G; alloc 2G; exit 1'; touch failed; sleep 8`, "--ring-size", "4096")
	fr.pollUntil(60*time.Second, "the end of the storm", func() bool { return exists(filepath.Join(fr.work, "failed")) })
	end := time.Now().Add(1500 * time.Millisecond) // a counter reading after it
	fr.pollUntil(10*time.Second, "a reading after the storm", func() bool { return time.Now().After(end) })
	rep, _ := analyzeDir(t, fr.dir)
	text, _, _ := runBin(t, bin{env: []string{"COLUMNS=80"}}, "analyze", fr.dir).outputs()
	fr.cmd.Process.Signal(os.Interrupt)
	<-fr.done
	missing := text[strings.Index(text, "MISSING EVIDENCE"):]
	if rep.Attribution != report.AttrMissingEvidence {
		t.Errorf("live, calls lost: attribution %s, want missing-evidence: %s", rep.Attribution, rep.Verdict)
	}
	switch {
	case rep.Loss.LostCalls > 0 && !strings.Contains(missing, "! "+report.Plural(int(rep.Loss.LostCalls), "call")+" were lost"):
		t.Errorf("live: %d calls lost, not in MISSING EVIDENCE:\n%s", rep.Loss.LostCalls, missing)
	case rep.Loss.LostCalls == 0 && !strings.Contains(missing, "loss counters were"):
		t.Errorf("live: no loss counted and no counter gap said:\n%s", missing)
	}
}

// An IPC mapping live at the first failure is listed as a mapping of
// imported memory, not as an allocation.
func TestLiveIPCMappingNamed(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=4G")
	h := filepath.Join(w.dir, "handle")
	script := fmt.Sprintf(`%[1]s 'init; use 0; alloc 64M; ipc-export %[2]s; sleep 1000' &
sleep 0.3
%[1]s 'init; use 0; ipc-open %[2]s; alloc 8G; exit 1'
wait`, simwork, h)
	res := w.record(nil, "/bin/bash", "-c", script)
	rep, _ := analyzeJSON(t, res.db)
	if rep.FirstFailure == nil {
		t.Fatalf("no failure: %s", rep.Verdict)
	}
	var kinds []report.KindCount
	for _, l := range rep.LiveAtFailure {
		if l.PID == rep.FirstFailure.PID && l.View == "bar1" {
			kinds = l.Kinds
		}
	}
	if len(kinds) != 1 || kinds[0] != (report.KindCount{Kind: "ipc-mapping", Count: 1}) {
		t.Errorf("live BAR1 kinds of the importer %+v: %+v", kinds, rep.LiveAtFailure)
	}
	text := textAt80(t, res.db)
	if !strings.Contains(text, "bar1: 64.0 MiB in 1 mapping of imported memory (IPC)") {
		t.Errorf("LIVE AT THE FIRST FAILURE does not name the IPC mapping:\n%s", text)
	}
}

// A flight recording under load is analyzed three times
// while it records: each time the recorder's count, stored with the data
// the copy of the live segment holds, equals the events read plus those
// in deleted stretches, never fewer than were read.
func TestLiveCountsNeverFewerThanRead(t *testing.T) {
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
		out, _, code := runBin(t, bin{}, "analyze", "--json", fr.dir).outputs()
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

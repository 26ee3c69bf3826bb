package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrivium/forensic/report"
)

// Review2 finding 2. Rank 0 of job j2 runs out of framebuffer, frees its
// cache and retries: recovered. Rank 1 dies afterwards of a BAR1 mapping
// larger than its whole aperture. The job's verdict leads with rank 1's
// unrecovered failure, judged by its run; rank 0's recovered failure stays
// the subject but is nobody's consequence, and "no later failure went
// unrecovered" is not said of the job.
func TestReview2FixjRecoveredAcrossRuns(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=8G")
	dir := filepath.Join(w.dir, "job2")
	os.MkdirAll(dir, 0o755)
	job := func(rank string, extra ...string) []string {
		return append([]string{"TORCHELASTIC_RUN_ID=j2", "RANK=" + rank, "WORLD_SIZE=2"}, extra...)
	}
	w.recordJob(dir, map[string][]string{
		"rank0.db": job("0"),
		"rank1.db": job("1", "SIMGPU_STATE="+filepath.Join(w.dir, "rank1.state"), "SIMGPU_DEVICES=2", "SIMGPU_BAR1_TOTAL=64M"),
	}, map[string]string{
		"rank0.db": "init; use 0; alloc 3G; alloc 3G; alloc 2G; free; free; alloc 2G; sleep 600; exit 1",
		"rank1.db": "init; use 0; sleep 300; vmm 128M 0 1; exit 1",
	})
	out, _, code := runForensic(t, "analyze", "--json", dir)
	if code != 0 {
		t.Fatalf("analyze --json: exit %d", code)
	}
	if err := report.ValidateReportJSON([]byte(out)); err != nil {
		t.Errorf("the job's report does not match the schema: %v", err)
	}
	rep := decodeReport(t, []byte(out))
	f, u := rep.FirstFailure, rep.FirstUnrecovered
	if f == nil || !f.Recovered || !strings.HasSuffix(f.RunPath, "rank0.db") {
		t.Fatalf("first failure %+v, want rank 0's recovered allocation", f)
	}
	if u == nil || !strings.HasSuffix(u.RunPath, "rank1.db") || u.Symbol != "cuMemSetAccess" || u.Attribution != report.AttrMapping {
		t.Fatalf("first unrecovered %+v, want rank 1's mapping failure judged by its run", u)
	}
	if rep.UnrecoveredOrder != "certain" || len(rep.Consequences) != 0 {
		t.Errorf("unrecovered order %q, consequences %+v: want certain, none of a recovered failure", rep.UnrecoveredOrder, rep.Consequences)
	}
	lead, _, _ := strings.Cut(rep.Verdict, "In that run")
	if !strings.Contains(lead, "the first failure no process recovered from is rank 1") ||
		strings.Contains(rep.Verdict, "No later failure went unrecovered") || strings.Contains(rep.Verdict, "likely a consequence") {
		t.Errorf("the verdict does not lead with rank 1's unrecovered failure: %s", rep.Verdict)
	}
	text, _, _ := runForensicEnv(t, []string{"COLUMNS=80"}, "analyze", dir)
	sec := text[strings.Index(text, "FIRST UNRECOVERED FAILURE"):]
	if !strings.Contains(sec, "run       rank 1, host ") || !strings.Contains(text, "order of the failures no process recovered") ||
		strings.Contains(text, "after the first failure, in other runs") {
		t.Errorf("the text does not place rank 1's failure as the one that matters:\n%s", text)
	}
	for _, l := range strings.Split(text, "\n") {
		if len([]rune(l)) > 80 {
			t.Errorf("wider than 80 columns: %q", l)
		}
	}
}

// Review2 finding 4. A live flight recording analyzed just after the
// workload's out-of-memory failure: the loss counters come from the
// recorder's last periodic reading and say so; the text never says "none
// lost" of calls after that reading, and a failure after it cannot be
// established as the first (a lost call may hide an earlier one). Once the
// recorder stops, its stop record counts every call.
func TestReview2FixjLiveCounters(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=4G")
	fr := w.startFlight(`"$S" 'init; use 0; alloc 2G; alloc 2G; exit 1'; touch failed; sleep 8`)
	fr.pollUntil(30*time.Second, "the workload's failure", func() bool { return exists(filepath.Join(fr.work, "failed")) })
	fr.pollUntil(10*time.Second, "the failure in a live copy", func() bool {
		rep, _ := analyzeDir(t, fr.dir)
		return rep.FirstFailure != nil
	})
	rep, _ := analyzeDir(t, fr.dir)
	text, _, _ := runForensicEnv(t, []string{"COLUMNS=80"}, "analyze", fr.dir)
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

// Review2 finding 11's tail. A call storm through a small ring buffer
// loses calls while a flight recording is live: the live analysis names
// the loss as decisive missing evidence (or, before a reading counted it,
// the counters that do not reach the end), never a confident verdict.
func TestReview2FixjLiveLoss(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=4G")
	fr := w.startFlight(`"$S" 'init; use 0; stress 200000; alloc 2G; alloc 2G; exit 1'; touch failed; sleep 8`, "--ring-size", "4096")
	fr.pollUntil(60*time.Second, "the end of the storm", func() bool { return exists(filepath.Join(fr.work, "failed")) })
	end := time.Now().Add(1500 * time.Millisecond) // a counter reading after it
	fr.pollUntil(10*time.Second, "a reading after the storm", func() bool { return time.Now().After(end) })
	rep, _ := analyzeDir(t, fr.dir)
	text, _, _ := runForensicEnv(t, []string{"COLUMNS=80"}, "analyze", fr.dir)
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

package e2e

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrivium/forensic/internal/readcheck"
	"github.com/retrivium/forensic/report"
)

// Under --pid, calls before the attach are missing but the capacity is
// evidenced: the verdict's numbers lead, then the one uncertain thing.
func TestReadableReportUnderPID(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=4G")
	target := w.startWorkload("init; use 0; alloc 1G; wait-signal; alloc 1G; alloc 2G; sleep 100; exit 1")
	if !waitFor(5*time.Second, func() bool { return mapsFile(target.Process.Pid, simCUDA) }) {
		t.Fatal("the target did not map the simulated libcuda")
	}
	rec, db, stderr := w.startRecorder("--pid", strconv.Itoa(target.Process.Pid))
	time.Sleep(300 * time.Millisecond)
	target.Process.Signal(syscall.SIGUSR1)
	waitExit(t, target, 20*time.Second)
	waitExit(t, rec, 20*time.Second)
	rep, _ := analyzeJSON(t, db)
	if rep.FirstFailure == nil {
		t.Fatalf("no failure; recorder said:\n%s", stderr)
	}
	text := checkReadable(t, db)
	verdict := strings.Join(strings.Fields(rep.Verdict), " ")
	numbers, doubt := strings.Index(verdict, "2.00 GiB requested"), strings.Index(verdict, "This may not be the job's first failure: calls before the attach at +")
	if rep.Attribution == "missing-evidence" && (numbers < 0 || doubt < numbers) {
		t.Errorf("the verdict does not give the numbers before the doubt: %s\n%s", rep.Verdict, text)
	}
}

// checkReadable renders db's text report at 80 columns and reports every
// readability problem; it returns the text.
func checkReadable(t *testing.T, db string) string {
	t.Helper()
	rep, _ := analyzeJSON(t, db)
	return checkReport(t, db, rep)
}

// checkRecordingReads holds every recording a test makes to the same
// rules, whatever the test checks itself: the default text report of each
// scenario the suite records reads at 3 a.m. A recording that does not
// analyze is left to its test. Its verdict is held to its golden file
// (checkVerdictGolden), so that any drift in a verdict shows.
func checkRecordingReads(t *testing.T, db string) {
	t.Helper()
	if os.Getenv("FORENSIC_E2E_RACE") != "" {
		// The suite's second pass, against the -race build: the same
		// code renders the same reports, checked in the first pass; the
		// race build's analyses are slower, and make test's time counts.
		return
	}
	r := runBin(t, bin{}, "analyze", "--json", db)
	checkVerdictGolden(t, r.code, []byte(r.stdout))
	if r.code != 0 {
		return
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Errorf("analyze --json of %s is not a report: %v", db, err)
		return
	}
	checkReport(t, db, &rep)
}

// checkReport checks the text report of db at 80 columns against rep,
// its --json, and returns the text.
func checkReport(t *testing.T, db string, rep *report.Report) string {
	t.Helper()
	text := textAt80(t, db)
	for _, p := range readcheck.Problems(text, rep, 80) {
		t.Error(p)
	}
	if t.Failed() {
		t.Logf("the report at 80 columns:\n%s", text)
	}
	return text
}

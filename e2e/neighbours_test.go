package e2e

import (
	"bytes"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// TestBudgetNamesANeighbourStartedOutsideTheRecording: a process the
// recording does not follow holds 2 GiB of the GPU when a recorded job
// runs out of memory. The budget at the failure names it by its command
// line (as /proc showed it) and its user, with the bytes the simulated
// GPU says it holds; the text report shows both; and a redacted copy of
// the run.db keeps the part and its bytes but no trace of the
// neighbour's argument or its user's name.
func TestBudgetNamesANeighbourStartedOutsideTheRecording(t *testing.T) {
	const reserved = 512 << 20
	w := newWorld(t, "SIMGPU_FB_RESERVED=512M", "SIMGPU_CTX_MEM=0")
	ready := filepath.Join(w.dir, "neighbour-ready")
	const mark = "neighbour-zebra-7731"
	neighbour := w.startWorkload("init; use 0; alloc 2G; print " + mark + "; touch " + ready + "; wait-signal; free-all")
	if !waitFor(20e9, func() bool { return exists(ready) }) {
		t.Fatal("the neighbour did not allocate")
	}
	// The job reads the GPU's free memory before it allocates anything:
	// with no context memory, what is neither reserved nor free is what
	// the simulated GPU counts as the neighbour's.
	res := w.record(nil, simwork, "init; use 0; meminfo; sleep 200; alloc 12G; alloc 4G; sleep 300")
	m := regexp.MustCompile(`(?m)^meminfo \d+ (\d+) (\d+)$`).FindStringSubmatch(res.stdout)
	if m == nil {
		t.Fatalf("no meminfo line in the job's output:\n%s", res.stdout)
	}
	free0, _ := strconv.ParseUint(m[1], 10, 64)
	total, _ := strconv.ParseUint(m[2], 10, 64)
	held := total - reserved - free0
	if held != 2<<30 {
		t.Fatalf("the simulated GPU counts %d bytes held by others, want the neighbour's 2 GiB", held)
	}
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}

	rep, _ := analyzeJSON(t, res.db)
	if rep.Capacity == nil || *rep.Capacity != report.CapFBExhausted || len(failureBudgets(rep)) != 1 {
		t.Fatalf("capacity %v, budgets %d: want an exhausted framebuffer and its budget", rep.Capacity, len(failureBudgets(rep)))
	}
	part := neighbourPart(t, failureBudgets(rep)[0], uint32(neighbour.Process.Pid))
	if part.Bytes != held || part.Bound != "exact" {
		t.Errorf("the neighbour's part: %d bytes (%s), want the %d the simulated GPU counts, exact", part.Bytes, part.Bound, held)
	}
	if want := simwork + " init; use 0; alloc 2G; print " + mark; !strings.HasPrefix(part.Command, want) {
		t.Errorf("the neighbour's command %q, want it to begin %q", part.Command, want)
	}
	if part.User != me.Username {
		t.Errorf("the neighbour's user %q, want %q", part.User, me.Username)
	}

	// The text report names it, one line for the command, one for whose.
	text := string(forensicOK(t, "analyze", "--no-color", res.db))
	if !strings.Contains(text, "not recorded (pid "+strconv.Itoa(neighbour.Process.Pid)+")") ||
		!strings.Contains(text, "      $ "+simwork[:min(len(simwork), 30)]) ||
		!strings.Contains(text, "      user "+me.Username) {
		t.Errorf("the text budget does not name the neighbour by command line and user:\n%s", text)
	}

	// A redacted copy keeps the part, not the argument or the user.
	copyDB := filepath.Join(w.dir, "ticket.db")
	forensicOK(t, "redact", "-o", copyDB, res.db)
	if data := fileText(t, copyDB); bytes.Contains(data, []byte(mark)) {
		t.Errorf("the redacted copy holds the neighbour's argument %q", mark)
	}
	red, _ := analyzeJSON(t, copyDB)
	rp := neighbourPart(t, failureBudgets(red)[0], uint32(neighbour.Process.Pid))
	if rp.Bytes != held || strings.Contains(rp.Command, mark) || !strings.HasPrefix(rp.User, "<user-") {
		t.Errorf("the redacted copy's part %+v: want %d bytes, the argument and the user replaced", rp, held)
	}
}

// neighbourPart is the budget's part of a process not recorded.
func neighbourPart(t *testing.T, b report.Budget, pid uint32) report.BudgetPart {
	t.Helper()
	for _, p := range b.Parts {
		if p.Kind == "process-not-recorded" && p.PID != nil && *p.PID == pid {
			return p
		}
	}
	t.Fatalf("no part of pid %d not recorded: %+v", pid, b.Parts)
	return report.BudgetPart{}
}

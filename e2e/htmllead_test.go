package e2e

import (
	"path/filepath"
	"strings"
	"testing"
)

// Two runs of one job given good run first (`forensic report r0.db
// r1.db`): the page leads with the failing run as the text report does.
// Its header is that run's, its verdict panel names that failure before
// any other section, and its runs table lists that run's row first.
func TestHTMLLeadsWithTheFailingRun(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=4G")
	scripts := []string{"init; use 0; alloc 1G; free", "init; use 0; alloc 64G"}
	var dbs []string
	for rank, script := range scripts {
		db := filepath.Join(w.dir, rankDB(rank))
		cmd := binCommand(bin{}, "record", "-o", db, "--libcuda", simCUDA, "--libnvidia-ml", simNVML, "--", simwork, script)
		cmd.Env = w.environ("RANK="+itoa(rank), "WORLD_SIZE=2", "TORCHELASTIC_RUN_ID=lead")
		if out, err := cmd.CombinedOutput(); err != nil && cmd.ProcessState == nil {
			t.Fatalf("rank %d: %v %s", rank, err, out)
		}
		dbs = append(dbs, db)
	}
	if rep, _ := analyzeJSON(t, dbs[0]); rep.FirstFailure != nil { // the good run alone
		t.Fatalf("rank 0 failed: %+v", rep.FirstFailure)
	}
	page := filepath.Join(w.dir, "report.html")
	if out, err := binCommand(bin{}, append([]string{"report"}, append(dbs, "-o", page)...)...).CombinedOutput(); err != nil {
		t.Fatalf("forensic report: %v\n%s", err, out)
	}
	s := string(mustRead(t, page))
	body := s[strings.Index(s, "<body"):]
	named := strings.Index(body, "CUDA_ERROR_OUT_OF_MEMORY")
	if named < 0 {
		t.Fatal("the page does not name the failure")
	}
	if strings.Contains(body[:named], "<h2") {
		t.Errorf("a section comes before the failure is named: %s", clipText(body[:named], 400))
	}
	table := body[strings.Index(body, ">The runs<"):]
	r0, r1 := strings.Index(table, rankDB(0)), strings.Index(table, rankDB(1))
	if r0 < 0 || r1 < 0 || r1 > r0 {
		t.Errorf("the runs table does not list the failing run (%s) first: %s", rankDB(1), clipText(table, 2000))
	}
}

// clipText is s cut to n bytes, for a message.
func clipText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

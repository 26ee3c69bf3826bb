package analyze

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/retrivium/forensic/render/text"
	"github.com/retrivium/forensic/report"
)

// jobOfRanks is a job of n ranks, each recorded by its own run (their
// files listed in text order: rank-0, rank-1, rank-10, ...): rank bad
// fails first, at 1 s; every other rank fails 0.9 to 1.0 s after it, on
// one of eight GPUs.
func jobOfRanks(n, bad int) *report.Report {
	paths := make([]string, n)
	for r := range paths {
		paths[r] = fmt.Sprintf("/scratch/job/recordings/rank-%d/run.db", r)
	}
	order := make([]int, n)
	for r := range order {
		order[r] = r
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(paths[a], paths[b]) })
	var reps []*report.Report
	for _, r := range order {
		fail := 1.9 + 0.1*float64(r%11)/10
		if r == bad {
			fail = 1
		}
		a := oom(paths[r], "boot", "job42", r, 0, 10, fail, r%8)
		a.world = n
		reps = append(reps, a.report())
	}
	return jobsOf(reps).Reports[0]
}

// A job of many ranks reads as one page: the failing rank leads the RUNS
// section on the first screen, the ranks that agree are one line in
// numeric order, and --explain still lists every run.
func TestManyRanksReadAsOnePage(t *testing.T) {
	for _, tt := range []struct {
		ranks, bad, maxLines int
	}{
		{128, 77, 60},
		{1024, 77, 110},
	} {
		t.Run(fmt.Sprint(tt.ranks), func(t *testing.T) {
			rep := jobOfRanks(tt.ranks, tt.bad)
			var b, full strings.Builder
			if err := text.Write(&b, rep, text.Options{Width: 80}); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(b.String(), "\n")
			if len(lines) > tt.maxLines {
				t.Errorf("%d lines for %d ranks, want at most %d:\n%s", len(lines), tt.ranks, tt.maxLines, b.String())
			}
			lead := fmt.Sprintf("  rank %d: allocation, failed first", tt.bad)
			at := indexOfLine(lines, lead)
			if at < 0 || at >= 25 {
				t.Errorf("the failing rank's line %q is on line %d, want within the first 25:\n%s", lead, at+1, b.String())
			}
			if !strings.Contains(b.String(), " ranks: 0–4, 6–12, 14–20,") {
				t.Errorf("the ranks that agree are not one list in numeric order:\n%s", b.String())
			}
			if err := text.Write(&full, rep, text.Options{Width: 80, Explain: true}); err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(full.String(), "/run.db ") + strings.Count(full.String(), "/run.db\n"); n < tt.ranks {
				t.Errorf("--explain names %d runs' files, want every one of %d", n, tt.ranks)
			}
			ten, two := strings.Index(full.String(), "rank 10,"), strings.Index(full.String(), "rank 2,")
			if ten < two {
				t.Errorf("--explain lists rank 10 before rank 2: ranks sorted as text")
			}
		})
	}
}

// indexOfLine is the index of the first line that starts with prefix, or
// -1.
func indexOfLine(lines []string, prefix string) int {
	for i, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return i
		}
	}
	return -1
}

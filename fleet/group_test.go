package fleet

import (
	"reflect"
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

// span builds a run recorded on boot from run-clock time start to end,
// whose clock pairs run-clock 0 with wall time t0 (+ skew).
func span(path, boot, job string, start, end, skew int64, errNS *int64) Run {
	return Run{Path: path, ID: path, Host: "h-" + boot, BootID: boot, JobID: job, StartNS: start, EndNS: end,
		Clock: &Clock{MonotonicNS: 0, RealtimeNS: t0 + skew, ErrorNS: errNS}}
}

func TestGroups(t *testing.T) {
	sec := int64(1_000_000_000)
	tests := []struct {
		name   string
		runs   []Run
		groups [][]int
		by     []string
	}{
		{
			name:   "one job id, whatever the times",
			runs:   []Run{span("a.db", "b1", "job42", 0, sec, 0, nil), span("b.db", "b2", "job42", 0, sec, 3600*sec, nil)},
			groups: [][]int{{0, 1}}, by: []string{ByJobID},
		},
		{
			name: "two job ids that overlap in time are two jobs",
			runs: []Run{span("a.db", "b1", "job1", 0, 10*sec, 0, nil), span("b.db", "b1", "job2", sec, 2*sec, 0, nil),
				span("c.db", "b1", "job1", 5*sec, 6*sec, 0, nil)},
			groups: [][]int{{0, 2}, {1}}, by: []string{ByJobID, ByJobID},
		},
		{
			name: "no job ids: overlapping recordings of one boot are one job, a later one is not",
			runs: []Run{span("a.db", "b1", "", 0, 10*sec, 0, nil), span("b.db", "b1", "", 9*sec, 20*sec, 0, nil),
				span("c.db", "b1", "", 21*sec, 30*sec, 0, nil)},
			groups: [][]int{{0, 1}, {2}}, by: []string{ByOverlap, ByNone},
		},
		{
			name: "no job ids, other boots: wall spans widened by each clock's bound",
			runs: []Run{span("a.db", "b1", "", 0, 10*sec, 0, bound(sec)), span("b.db", "b2", "", 0, 10*sec, 11*sec+sec/2, bound(sec)),
				span("c.db", "b3", "", 0, 10*sec, 60*sec, bound(sec))},
			groups: [][]int{{0, 1}, {2}}, by: []string{ByOverlap, ByNone},
		},
		{
			name:   "a run with a job id and one without are not grouped by time",
			runs:   []Run{span("a.db", "b1", "job42", 0, 10*sec, 0, nil), span("b.db", "b1", "", sec, 2*sec, 0, nil)},
			groups: [][]int{{0}, {1}}, by: []string{ByJobID, ByNone},
		},
		{
			name: "overlap is transitive: a chain of recordings is one group",
			runs: []Run{span("a.db", "b1", "", 0, 10*sec, 0, nil), span("b.db", "b1", "", 30*sec, 40*sec, 0, nil),
				span("c.db", "b1", "", 8*sec, 32*sec, 0, nil)},
			groups: [][]int{{0, 1, 2}}, by: []string{ByOverlap},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gs := Groups(tt.runs)
			var got [][]int
			var by []string
			for _, g := range gs {
				got, by = append(got, g.Runs), append(by, g.By)
			}
			if !reflect.DeepEqual(got, tt.groups) || !reflect.DeepEqual(by, tt.by) {
				t.Errorf("groups %v by %v, want %v by %v", got, by, tt.groups, tt.by)
			}
		})
	}
}

// The refusal names every group and gives a command for one of them.
func TestGroupsText(t *testing.T) {
	runs := []Run{span("runs/r0.db", "b1", "job42", 0, 10, 0, nil), span("runs/old run.db", "b1", "", 100, 200, 0, nil),
		span("runs/r1.db", "b1", "job42", 0, 10, 0, nil)}
	got := GroupsText(runs, Groups(runs))
	for _, want := range []string{"3 runs are 2 separate jobs", "(1) job job42: runs/r0.db runs/r1.db",
		"(2) runs/old run.db (no job id; no other run recorded at the same time)", "give only one job's files, e.g. runs/r0.db runs/r1.db"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "\n") {
		t.Errorf("not one line: %q", got)
	}
}

// What ties a later failure to the first: the same GPU, the job alone, or
// nothing (its own GPU ran out; its run began after the first's ended).
func TestRelations(t *testing.T) {
	fail := func(r Run, at int64, gpu, own string) Run {
		r.Failure = &Failure{TimeNS: at, Symbol: "cuMemAlloc_v2", ResultName: "CUDA_ERROR_OUT_OF_MEMORY", GPU: gpu, OwnCause: own}
		return r
	}
	first := fail(span("first.db", "b1", "j", 0, 1000, 0, nil), 100, "GPU-0", "")
	tests := []struct {
		name  string
		later Run
		rel   string
		basis string
	}{
		{"same GPU", fail(span("l.db", "b1", "j", 0, 1000, 0, nil), 200, "GPU-0", "its framebuffer ran out"),
			report.RelationSameGPU, "same GPU"},
		{"another GPU that ran out on its own", fail(span("l.db", "b1", "j", 0, 1000, 0, nil), 200, "GPU-1", "GPU 1's framebuffer was exhausted"),
			report.RelationIndependent, "also failed, on another GPU: GPU 1's framebuffer was exhausted"},
		{"another GPU, no cause of its own", fail(span("l.db", "b1", "j", 0, 1000, 0, nil), 200, "GPU-1", ""),
			report.RelationSameJob, "possibly a consequence"},
		{"GPU unknown", fail(span("l.db", "b1", "j", 0, 1000, 0, nil), 200, "", "its own"),
			report.RelationSameJob, "not both known"},
		{"begun after the first run ended", fail(span("l.db", "b1", "j", 2000, 3000, 0, nil), 2500, "GPU-0", ""),
			report.RelationIndependent, "began after the first failure's run had ended (on the same GPU"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Order([]Run{first, tt.later})
			if len(res.Consequences) != 1 {
				t.Fatalf("consequences %+v, want one", res.Consequences)
			}
			c := res.Consequences[0]
			if c.Relation != tt.rel || !strings.Contains(c.Basis, tt.basis) {
				t.Errorf("relation %s (%s), want %s (%s)", c.Relation, c.Basis, tt.rel, tt.basis)
			}
		})
	}
}

// Runs of one boot share a clock: no note asks for a bound they do not
// need; a failure on another boot does need one.
func TestBoundNotesOnlyAcrossBoots(t *testing.T) {
	a := sameBoot(synthetic("a.db", "vm", "boot-1", ip(0), 0, nil), 1_000_000_000)
	b := sameBoot(synthetic("b.db", "vm", "boot-1", ip(1), 0, nil), 1_000_100_000)
	res := Order([]Run{a, b})
	if res.Order != OrderCertain {
		t.Fatalf("order %s, want certain on the shared clock", res.Order)
	}
	for _, n := range res.Notes {
		if n.Kind == NoteNoClockBound || n.Kind == NoteNoClockMapping {
			t.Errorf("a note asks for a clock bound within one boot: %s", n)
		}
	}
	c := synthetic("c.db", "other", "boot-2", ip(2), 0, nil)
	res = Order([]Run{a, b, c})
	notes := noteText(res.Notes)
	bounds := 0
	for _, n := range res.Notes {
		if n.Kind == NoteNoClockBound {
			bounds++
		}
	}
	if bounds != 3 {
		t.Errorf("note kinds %v, want a missing clock bound for each of the 3 runs", kindsOf(res.Notes))
	}
	for _, want := range []string{"a.db (host vm) has no clock bound", "c.db (host other) has no clock bound"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
}
func ip(v int) *int { return &v }

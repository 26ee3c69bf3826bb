package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrivium/forensic/report"
)

// sharedNode records two jobs on one simulated GPU with --all, each a
// process tree started apart after the recorder: job A (a root whose
// forked child fails a 20 GiB allocation after 400 ms) and job B (started
// later, failing a 30 GiB allocation at once, so before A's). It returns
// the run.db and the two roots' pids.
func sharedNode(t *testing.T) (db string, a, b int) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=16G")
	rec, db, stderr := w.startRecorder("--all", "--libcuda", simCUDA)
	jobA := exec.Command(simwork, "init; use 0; alloc 1G; fork { init; use 0; alloc 1G; sleep 400; alloc 20G; sleep 100 }; sleep 50; wait; free-all")
	jobA.Env = w.environ()
	if err := jobA.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	jobB := exec.Command(simwork, "init; use 0; alloc 2G; alloc 30G; sleep 100; free-all")
	jobB.Env = w.environ()
	if err := jobB.Start(); err != nil {
		t.Fatal(err)
	}
	waitExit(t, jobA, 20*time.Second)
	waitExit(t, jobB, 20*time.Second)
	rec.Process.Signal(syscall.SIGINT)
	waitExit(t, rec, 20*time.Second)
	if !exists(db) {
		t.Fatalf("no run.db: %s", stderr)
	}
	return db, jobA.Process.Pid, jobB.Process.Pid
}

// analyzeSelected runs `forensic analyze --json` with flags, checks the
// output against the published schema and decodes it.
func analyzeSelected(t *testing.T, db string, flags ...string) *report.Report {
	t.Helper()
	out, err := exec.Command(binPath, append(append([]string{"analyze", "--json"}, flags...), db)...).Output()
	if err != nil {
		t.Fatalf("forensic analyze --json %v: %v", flags, err)
	}
	if err := report.ValidateReportJSON(out); err != nil {
		t.Fatalf("analyze --json %v breaks the schema: %v", flags, err)
	}
	var rep report.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	return &rep
}

func tree(pid int) string { return "tree:" + strconv.Itoa(pid) }

// jobByID returns the job of a report with id, or nil.
func jobByID(rep *report.Report, id string) *report.Job {
	for i := range rep.Jobs {
		if rep.Jobs[i].ID == id {
			return &rep.Jobs[i]
		}
	}
	return nil
}

// Two jobs under --all: the list gives each job its own first failure,
// and the headline is the earliest failing job's, job B's rather than A's,
// and says so. The node is shared for real: other tests' workloads on this
// machine may be recorded too, as other tenants' jobs.
func TestSharedNodeListsEachJobsFirstFailure(t *testing.T) {
	db, a, b := sharedNode(t)
	rep := analyzeSelected(t, db)
	ja, jb := jobByID(rep, tree(a)), jobByID(rep, tree(b))
	if ja == nil || jb == nil || rep.JobSelected {
		t.Fatalf("jobs %+v selected %v; want %s and %s listed", rep.Jobs, rep.JobSelected, tree(a), tree(b))
	}
	if ja.By != report.JobByTree || ja.RootPID != uint32(a) || len(ja.PIDs) != 2 || !slices.Contains(ja.PIDs, uint32(a)) {
		t.Errorf("job A %+v, want tree:%d holding its root and its child", ja, a)
	}
	if f := ja.FirstFailure; f == nil || f.Size == nil || *f.Size != 20<<30 || f.PID == uint32(a) || !slices.Contains(ja.PIDs, f.PID) ||
		f.Result != "CUDA_ERROR_OUT_OF_MEMORY" || ja.Attribution != report.AttrAllocation || ja.Headline {
		t.Fatalf("job A's first failure %+v (%s, headline %v), want its child's 20 GiB allocation, not the headline", f, ja.Attribution, ja.Headline)
	}
	if f := jb.FirstFailure; jb.RootPID != uint32(b) || f == nil || f.PID != uint32(b) || f.Size == nil || *f.Size != 30<<30 || f.AtNS >= ja.FirstFailure.AtNS {
		t.Fatalf("job B %+v first failure %+v, want its 30 GiB allocation, before A's", jb, f)
	}
	// The headline is the earliest failure of any job: B's, unless another
	// tenant's failed before it.
	var first *report.Job
	for i, j := range rep.Jobs {
		if f := j.FirstFailure; f != nil && (first == nil || f.AtNS < first.FirstFailure.AtNS) {
			first = &rep.Jobs[i]
		}
	}
	if !first.Headline || rep.SubjectJob != first.ID || rep.FirstFailure == nil || !slices.Contains(first.PIDs, rep.FirstFailure.PID) {
		t.Fatalf("subject %q, first failure %+v; want the earliest failing job %s as the headline", rep.SubjectJob, rep.FirstFailure, first.ID)
	}
	r := runBin(t, bin{}, "analyze", "--no-color", db)
	if !strings.Contains(r.stdout, fmt.Sprintf("the verdict is %s's failure", first.ID)) ||
		!strings.Contains(r.stdout, "* "+first.ID+" (") || !strings.Contains(r.stdout, "    "+tree(a)+" (") {
		t.Errorf("text report does not list the jobs and name the headline's:\n%s", r.stdout)
	}
}

// Each job is judged as its own with --job or --pid: its own first
// failure, the other job's failures never listed; a selection that
// matches nothing is one line and a non-zero exit.
func TestSharedNodeJudgesEachJobAlone(t *testing.T) {
	db, a, b := sharedNode(t)
	cases := []struct {
		name  string
		flags []string
		job   string
		size  uint64
	}{
		{"job A by id", []string{"--job", tree(a)}, tree(a), 20 << 30},
		{"job A by its root's pid", []string{"--pid", strconv.Itoa(a)}, tree(a), 20 << 30},
		{"job B by id", []string{"--job", tree(b)}, tree(b), 30 << 30},
		{"job B by pid", []string{"--pid", strconv.Itoa(b)}, tree(b), 30 << 30},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := analyzeSelected(t, db, c.flags...)
			job := jobByID(rep, c.job)
			if job == nil || !job.Headline || rep.SubjectJob != c.job || !rep.JobSelected {
				t.Fatalf("jobs %+v subject %q: want %s selected", rep.Jobs, rep.SubjectJob, c.job)
			}
			f := rep.FirstFailure
			if f == nil || f.Size == nil || *f.Size != c.size || !slices.Contains(job.PIDs, f.PID) || rep.Attribution != report.AttrAllocation {
				t.Fatalf("first failure %+v (%s), want the job's own %d-byte allocation", f, rep.Attribution, c.size)
			}
			for _, g := range rep.Failures {
				if !slices.Contains(job.PIDs, g.PID) {
					t.Errorf("failure of pid %d listed: another job's failure judged in %s's verdict", g.PID, c.job)
				}
			}
		})
	}
	for _, flags := range [][]string{{"--job", "tree:1"}, {"--pid", "1"}, {"--pod", "ml/serve-0"}} {
		r := runBin(t, bin{}, append(append([]string{"analyze"}, flags...), db)...)
		if r.code == 0 || len(lines(r.stderr)) != 1 || !strings.Contains(r.stderr, "matches no job of this recording (its jobs: tree:") {
			t.Errorf("analyze %v: exit %d, stderr %q; want one line naming the jobs, non-zero", flags, r.code, r.stderr)
		}
	}
}

// Ranks started apart that name one job id (torchrun's
// TORCHELASTIC_RUN_ID) are one job, another id another: job r1's rank 1
// fails, job r2 never does, and each is judged as its own.
func TestSharedNodeGroupsByJobVariable(t *testing.T) {
	w := newWorld(t, "SIMGPU_FB_TOTAL=16G")
	rec, db, stderr := w.startRecorder("--all", "--libcuda", simCUDA)
	// Ids of this test's own, so that other tests' ranks on the node
	// never join them.
	id1, id2 := fmt.Sprintf("r1-%d", os.Getpid()), fmt.Sprintf("r2-%d", os.Getpid())
	var ps []*exec.Cmd
	for _, p := range []struct{ id, rank, script string }{
		{id1, "0", "init; use 0; alloc 1G; sleep 300; free-all"},
		{id1, "1", "init; use 0; alloc 1G; sleep 100; alloc 30G; sleep 200; free-all"},
		{id2, "0", "init; use 0; alloc 1G; sleep 300; free-all"},
	} {
		// The recorder reads a process's environment at its first call:
		// each stays a while after it.
		c := exec.Command(simwork, p.script)
		c.Env = w.environ("TORCHELASTIC_RUN_ID="+p.id, "RANK="+p.rank, "WORLD_SIZE=2")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		ps = append(ps, c)
	}
	for _, c := range ps {
		waitExit(t, c, 20*time.Second)
	}
	rec.Process.Signal(syscall.SIGINT)
	waitExit(t, rec, 20*time.Second)
	if !exists(db) {
		t.Fatalf("no run.db: %s", stderr)
	}
	r1, r2 := uint32(ps[1].Process.Pid), uint32(ps[2].Process.Pid)
	rep := analyzeSelected(t, db, "--job", "job:"+id1)
	j := jobByID(rep, "job:"+id1)
	if j == nil || j.By != report.JobByVariable || !slices.Contains(j.PIDs, uint32(ps[0].Process.Pid)) || !slices.Contains(j.PIDs, r1) {
		t.Fatalf("job r1 %+v, want both its ranks grouped by job variable", j)
	}
	if f := rep.FirstFailure; f == nil || f.PID != r1 || f.Size == nil || *f.Size != 30<<30 || rep.Attribution != report.AttrAllocation {
		t.Errorf("job r1's verdict: first failure %+v (%s), want rank 1's 30 GiB allocation", f, rep.Attribution)
	}
	rep = analyzeSelected(t, db, "--pid", strconv.Itoa(int(r2)))
	if rep.SubjectJob != "job:"+id2 || rep.FirstFailure != nil || rep.Attribution != report.AttrNone || len(rep.Failures) != 0 {
		t.Errorf("job r2's verdict: subject %q, first failure %+v (%s), %d failures; want none of job r1's",
			rep.SubjectJob, rep.FirstFailure, rep.Attribution, len(rep.Failures))
	}
}

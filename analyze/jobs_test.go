package analyze

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// groupedAs is the grouping as "id by pids..." strings, for comparison.
func groupedAs(jobs []report.Job) []string {
	var out []string
	for _, j := range jobs {
		s := j.ID + " " + j.By
		for _, pid := range j.PIDs {
			s += " " + itoa(pid)
		}
		out = append(out, s)
	}
	return out
}

func itoa(pid uint32) string { return strconv.FormatUint(uint64(pid), 10) }

const dockerCgroup = "/system.slice/docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope"

func TestGroupJobs(t *testing.T) {
	session := "/user.slice/user-0.slice/session-3.scope"
	pod := &store.Pod{UID: "11111111-2222-3333-4444-555555555555", Namespace: "ml", Name: "serve-0"}
	tests := []struct {
		name  string
		procs []store.Process
		want  []string
	}{
		{"two process trees started apart are two jobs, each child with its parent", []store.Process{
			{PID: 10, PPID: 1, Start: 1, Cgroup: session},
			{PID: 11, PPID: 10, Start: 2, Cgroup: session},
			{PID: 20, PPID: 1, Start: 3, Cgroup: session},
			{PID: 21, PPID: 20, Start: 4, Cgroup: session},
		}, []string{"tree:10 process-tree 10 11", "tree:20 process-tree 20 21"}},
		{"a shared login session's cgroup names no job", []store.Process{
			{PID: 10, PPID: 1, Start: 1, Cgroup: session},
			{PID: 20, PPID: 2, Start: 2, Cgroup: session},
		}, []string{"tree:10 process-tree 10", "tree:20 process-tree 20"}},
		{"a container's cgroup is one job across unrelated trees", []store.Process{
			{PID: 10, PPID: 1, Start: 1, Cgroup: dockerCgroup},
			{PID: 20, PPID: 2, Start: 2, Cgroup: dockerCgroup},
			{PID: 30, PPID: 1, Start: 3, Cgroup: session},
		}, []string{"cgroup:" + dockerCgroup + " cgroup 10 20", "tree:30 process-tree 30"}},
		{"a pod outranks its container's cgroup and job variables", []store.Process{
			{PID: 10, PPID: 1, Start: 1, Pod: pod, Cgroup: dockerCgroup, Env: map[string]string{"SLURM_JOB_ID": "9"}},
			{PID: 11, PPID: 1, Start: 2, Env: map[string]string{"POD_NAME": "serve-0", "POD_NAMESPACE": "ml"}},
		}, []string{"pod:ml/serve-0 pod 10 11"}},
		{"ranks naming one job id are one job; torchrun's 'none' names none", []store.Process{
			{PID: 10, PPID: 1, Start: 1, Env: map[string]string{"TORCHELASTIC_RUN_ID": "r7", "RANK": "0"}},
			{PID: 20, PPID: 2, Start: 2, Env: map[string]string{"TORCHELASTIC_RUN_ID": "r7", "RANK": "1"}},
			{PID: 30, PPID: 3, Start: 3, Env: map[string]string{"TORCHELASTIC_RUN_ID": "none", "RANK": "0"}},
		}, []string{"job:r7 job-variable 10 20", "tree:30 process-tree 30"}},
		{"a child that names nothing joins its parent's job", []store.Process{
			{PID: 10, PPID: 1, Start: 1, Env: map[string]string{"SLURM_JOB_ID": "77"}},
			{PID: 11, PPID: 10, Start: 2},
		}, []string{"job:77 job-variable 10 11"}},
		{"a spawned root starts its own tree under a recorded parent", []store.Process{
			{PID: 10, PPID: 1, Start: 1},
			{PID: 11, PPID: 10, Start: 2, Root: true},
		}, []string{"tree:10 process-tree 10", "tree:11 process-tree 11"}},
		{"a reused parent pid started later is not the parent", []store.Process{
			{PID: 11, PPID: 10, Start: 1},
			{PID: 10, PPID: 1, Start: 2},
		}, []string{"tree:11 process-tree 11", "tree:10 process-tree 10"}},
		{"no processes, no jobs", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := groupedAs(GroupJobs(tt.procs)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("jobs %q, want %q", got, tt.want)
			}
		})
	}
}

// A job is described by its root: the first process whose parent is not
// in it.
func TestGroupJobsDescribesRoot(t *testing.T) {
	pod := &store.Pod{UID: "u", Namespace: "ml", Name: "serve-0"}
	jobs := GroupJobs([]store.Process{
		{PID: 11, PPID: 10, Start: 2, Args: []string{"worker"}, Pod: pod, Cgroup: "/kubepods/podu/c2"},
		{PID: 10, PPID: 1, Start: 1, Args: []string{"python", "serve.py"}, Pod: pod, Cgroup: "/kubepods/podu/c1"},
	})
	want := report.Job{ID: "pod:ml/serve-0", By: report.JobByPod, RootPID: 10, Command: "python serve.py",
		Pod: "serve-0", Namespace: "ml", Cgroup: "/kubepods/podu/c1", PIDs: []uint32{10, 11}}
	if len(jobs) != 1 || !reflect.DeepEqual(jobs[0], want) {
		t.Errorf("jobs %+v, want %+v", jobs, want)
	}
}

func TestSelectJob(t *testing.T) {
	jobs := GroupJobs([]store.Process{
		{PID: 10, PPID: 1, Start: 1},
		{PID: 11, PPID: 10, Start: 2},
		{PID: 20, PPID: 1, Start: 3, Pod: &store.Pod{UID: "u", Namespace: "ml", Name: "serve-0"}},
	})
	tests := []struct {
		name string
		sel  JobSelector
		want string // job id, or "" for no match
	}{
		{"by id", JobSelector{ID: "tree:10"}, "tree:10"},
		{"by a child's pid", JobSelector{PID: 11}, "tree:10"},
		{"by pod", JobSelector{Pod: "ml/serve-0"}, "pod:ml/serve-0"},
		{"an unknown id", JobSelector{ID: "tree:11"}, ""},
		{"a pid not recorded (a neighbour NVML saw)", JobSelector{PID: 99}, ""},
		{"a pod of another namespace", JobSelector{Pod: "prod/serve-0"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := SelectJob(jobs, tt.sel)
			if tt.want == "" {
				var no *NoJobError
				if !errors.As(err, &no) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "tree:10, pod:ml/serve-0") {
					t.Errorf("got %v, %v; want a one-line NoJobError naming the jobs", j, err)
				}
				return
			}
			if err != nil || j.ID != tt.want {
				t.Errorf("got %+v, %v; want %s", j, err, tt.want)
			}
		})
	}
}

// twoJobs is a recording of two process trees: job A (pid 7) fails at
// 50 ms, job B (pid 9) earlier, at 20 ms; a neighbour no job names (pid
// 5) is only in NVML's samples.
func twoJobs() runSpec {
	dev := []store.DeviceMap{{Ordinal: 0, GPU: 0, Method: "uuid"}}
	oom := func(pid uint32, end int64, size uint64) store.Event {
		e := call(0, end, 2, cuda.Fields{Has: cuda.FieldSize, Size: size})
		e.PID, e.TID = pid, pid
		return e
	}
	b := alloc(0, tClock+10*ms, gib, 0x1000)
	b.PID, b.TID = 9, 9
	return runSpec{symbols: []string{"cuMemAlloc_v2"},
		events: []store.Event{alloc(0, tClock+5*ms, gib, 0x2000), b, oom(9, tClock+20*ms, 8*gib), oom(7, tClock+50*ms, 2*gib)},
		samples: []store.Sample{fbSample(tClock+15*ms, 12*gib),
			procSample(tClock+16*ms, "NVML_SUCCESS", map[uint32]uint64{5: 10 * gib, 7: gib, 9: gib})},
		procs: []store.Process{
			{PID: 7, PPID: 1, Start: tClock, Exe: "/bin/serve", Args: []string{"serve"}, Devices: dev},
			{PID: 9, PPID: 2, Start: tClock + ms, Exe: "/bin/train", Args: []string{"train"}, Devices: dev},
		}}
}

func analyzeJob(t *testing.T, sp runSpec, sel *JobSelector) (*report.Report, error) {
	t.Helper()
	r, err := store.Open(sp.write(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	return Analyze(r, Options{Job: sel})
}

// Each job gets its own first failure as the verdict; the other job's
// failure is never the subject, and without a selection the headline is
// the earliest job's, the list naming both.
func TestAnalyzeJobScope(t *testing.T) {
	tests := []struct {
		name      string
		sel       *JobSelector
		wantPID   uint32
		wantSize  uint64
		subject   string
		failures  int
		selected  bool
		headlines []bool
	}{
		{"no selection: the host's first failure, job B's", nil, 9, 8 * gib, "tree:9", 2, false, []bool{false, true}},
		{"job A by id: its own later failure", &JobSelector{ID: "tree:7"}, 7, 2 * gib, "tree:7", 1, true, []bool{true, false}},
		{"job B by pid", &JobSelector{PID: 9}, 9, 8 * gib, "tree:9", 1, true, []bool{false, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := analyzeJob(t, twoJobs(), tt.sel)
			if err != nil {
				t.Fatal(err)
			}
			f := rep.FirstFailure
			if f == nil || f.PID != tt.wantPID || f.Size == nil || *f.Size != tt.wantSize {
				t.Fatalf("first failure %+v, want pid %d's", f, tt.wantPID)
			}
			if rep.Attribution != report.AttrAllocation || len(rep.Failures) != tt.failures {
				t.Errorf("attribution %s, %d failures listed; want allocation, %d", rep.Attribution, len(rep.Failures), tt.failures)
			}
			if rep.SubjectJob != tt.subject || rep.JobSelected != tt.selected || len(rep.Jobs) != 2 {
				t.Fatalf("subject %q selected %v, %d jobs; want %q %v, 2", rep.SubjectJob, rep.JobSelected, len(rep.Jobs), tt.subject, tt.selected)
			}
			for i, j := range rep.Jobs {
				if j.Headline != tt.headlines[i] || j.FirstFailure == nil || j.Attribution != report.AttrAllocation ||
					j.FirstFailure.Result != "CUDA_ERROR_OUT_OF_MEMORY" {
					t.Errorf("job %d %+v (first failure %+v), want headline %v, an allocation failure", i, j, j.FirstFailure, tt.headlines[i])
				}
			}
			scoped := false
			for _, e := range rep.Evidence {
				scoped = scoped || e.Rule == ruleJobScope
			}
			if scoped != tt.selected {
				t.Errorf("job-scope evidence %v, want %v", scoped, tt.selected)
			}
		})
	}
}

// A selected job that never failed has no failure, although the other
// job's failed; a selection matching nothing is an error.
func TestAnalyzeJobWithoutFailure(t *testing.T) {
	sp := twoJobs()
	sp.events = sp.events[:3] // job A's failure never happened
	rep, err := analyzeJob(t, sp, &JobSelector{PID: 7})
	if err != nil {
		t.Fatal(err)
	}
	if rep.FirstFailure != nil || rep.Attribution != report.AttrNone || rep.Jobs[0].FirstFailure != nil || rep.Jobs[1].FirstFailure == nil {
		t.Errorf("first failure %+v attribution %s jobs %+v: want job A's none, B's listed", rep.FirstFailure, rep.Attribution, rep.Jobs)
	}
	var no *NoJobError
	if _, err := analyzeJob(t, sp, &JobSelector{PID: 5}); !errors.As(err, &no) {
		t.Errorf("the neighbour NVML saw, with no process record: %v, want NoJobError", err)
	}
}

// A recording of one job lists no jobs: its report is unchanged.
func TestAnalyzeOneJobListsNone(t *testing.T) {
	sp := twoJobs()
	sp.procs[1].PPID = 7 // job B's process is job A's child
	rep, err := analyzeJob(t, sp, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Jobs != nil || rep.SubjectJob != "" {
		t.Errorf("jobs %+v subject %q, want none for one job", rep.Jobs, rep.SubjectJob)
	}
}

// Another job's process crashing before a job's failure hides nothing of
// that job's: without a selection the recording's first failure is not
// established (hidden-failure), with the job selected it is; in the list,
// each job's gaps are its own.
func TestJobScopedGaps(t *testing.T) {
	segv := 11
	sp := twoJobs()
	sp.events = []store.Event{sp.events[0], sp.events[1], sp.events[3]} // job B never fails...
	sp.procs[1].Exit = &store.Exit{Time: tClock + 30*ms, Signal: &segv} // ...it crashes before A's failure
	tests := []struct {
		name       string
		sel        *JobSelector
		want       report.Attribution
		wantListed report.Attribution // job A's attribution in the list
	}{
		{"the recording's verdict", nil, report.AttrMissingEvidence, report.AttrMissingEvidence},
		{"job A's verdict", &JobSelector{ID: "tree:7"}, report.AttrAllocation, report.AttrAllocation},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := analyzeJob(t, sp, tt.sel)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Attribution != tt.want || len(rep.Jobs) != 2 || rep.Jobs[0].Attribution != tt.wantListed {
				t.Errorf("attribution %s, jobs %+v; want %s, job A listed %s", rep.Attribution, rep.Jobs, tt.want, tt.wantListed)
			}
		})
	}
}

// In the list, another job's failure is missing evidence when its
// process was attached late, and its gaps are read as its own: the
// selected job's neighbour crash does not spoil it.
func TestJobListAttribution(t *testing.T) {
	sp := twoJobs()
	sp.procs[1].AttachedLate = true
	rep, err := analyzeJob(t, sp, &JobSelector{ID: "tree:7"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Jobs[1].Attribution != report.AttrMissingEvidence || rep.Jobs[0].Attribution != report.AttrAllocation {
		t.Errorf("jobs %+v: want job B missing evidence (attached late), job A allocation", rep.Jobs)
	}
}

// A failing process with no process record (its record was lost) is a
// job of its own, with no command; a neighbour NVML saw that made no
// call is in no job.
func TestJobOfUnrecordedProcess(t *testing.T) {
	sp := twoJobs()
	lost := sp.events[2]
	lost.PID, lost.TID, lost.End = 8, 8, tClock+10*ms
	sp.events = append([]store.Event{sp.events[0], sp.events[1], lost}, sp.events[2:]...)
	rep, err := analyzeJob(t, sp, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range rep.Jobs {
		ids = append(ids, j.ID)
	}
	if want := []string{"tree:7", "tree:9", "tree:8"}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("jobs %q, want %q (pid 5, only in NVML's samples, in none)", ids, want)
	}
	if j := rep.Jobs[2]; !j.Headline || j.Command != "" || j.FirstFailure == nil || j.FirstFailure.PID != 8 || rep.SubjectJob != "tree:8" {
		t.Errorf("job %+v subject %q: want the unrecorded pid 8's job, the headline", j, rep.SubjectJob)
	}
}

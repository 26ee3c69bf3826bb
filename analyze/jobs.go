package analyze

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/jobenv"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// ruleJobScope names the rule that scopes a verdict to one job: the first
// failure is chosen among the job's processes only; other jobs' processes
// stay in the memory views and live bytes as neighbours, never as the
// subject (docs/rules.md).
const ruleJobScope = "job-scope"

// JobSelector chooses the job whose verdict an analysis gives; one field
// is set.
type JobSelector struct {
	// ID is a job id as GroupJobs names it ("tree:4242", "pod:ns/name").
	ID string
	// PID selects the job of a recorded process.
	PID uint32
	// Pod selects the job of a pod, as NAMESPACE/NAME.
	Pod string
}

// String names the selector as the command line gives it.
func (j JobSelector) String() string {
	switch {
	case j.ID != "":
		return "--job " + j.ID
	case j.PID != 0:
		return fmt.Sprintf("--pid %d", j.PID)
	}
	return "--pod " + j.Pod
}

// NoJobError says a selector matched none of a recording's jobs.
type NoJobError struct {
	Selector JobSelector
	// Jobs are the ids of the recording's jobs.
	Jobs []string
}

func (e *NoJobError) Error() string {
	known := "it holds no recorded process"
	if len(e.Jobs) > 0 {
		const shown = 4
		ids := e.Jobs
		if len(ids) > shown {
			ids = append(slices.Clone(ids[:shown]), "...")
		}
		known = "its jobs: " + strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s matches no job of this recording (%s)", e.Selector, known)
}

// containerID matches the container id a runtime puts in a cgroup path
// (docker-<id>.scope, cri-containerd-<id>.scope, crio-<id>, libpod-<id>,
// or a bare /docker/<id>).
var containerID = regexp.MustCompile(`(^|[/-])[0-9a-f]{64}(\.scope)?$`)

// containerCgroup reports whether a cgroup path is a container's: one
// cgroup per container, so its processes are one job. A login session's
// or a service's cgroup holds unrelated processes and names no job.
func containerCgroup(path string) bool {
	return containerID.MatchString(path)
}

// jobLabel is how one process names its job by itself (its pod, job
// variables or container cgroup), or "" when it names none.
func jobLabel(p *store.Process) (id, by string) {
	if pod := p.Pod; pod != nil {
		ns, name := pod.Namespace, pod.Name
		if name == "" {
			return "pod:" + pod.UID, report.JobByPod
		}
		return "pod:" + ns + "/" + name, report.JobByPod
	}
	if name := p.Env["POD_NAME"]; name != "" {
		return "pod:" + p.Env["POD_NAMESPACE"] + "/" + name, report.JobByPod
	}
	if id := jobenv.Parse(p.Env).JobID; id != "" {
		return "job:" + id, report.JobByVariable
	}
	if containerCgroup(p.Cgroup) {
		return "cgroup:" + p.Cgroup, report.JobByCgroup
	}
	return "", ""
}

// GroupJobs groups a recording's processes into jobs, oldest first. A
// process belongs to the job it names itself (pod, then job variable,
// then container cgroup); one that names none belongs to its nearest
// recorded ancestor's, and a process tree that names none anywhere up
// its chain is a job of its own, "tree:ROOT_PID". A spawned or attached
// root starts its tree even when its parent was recorded. Processes of
// several records of one pid (a reused pid) count once, by the latest.
func GroupJobs(procs []store.Process) []report.Job {
	latest := map[uint32]*store.Process{}
	for i := range procs {
		p := &procs[i]
		if q, ok := latest[p.PID]; !ok || p.Start >= q.Start {
			latest[p.PID] = p
		}
	}
	ordered := make([]*store.Process, 0, len(latest))
	for _, p := range latest {
		ordered = append(ordered, p)
	}
	sort.Slice(ordered, func(i, j int) bool {
		if ordered[i].Start != ordered[j].Start {
			return ordered[i].Start < ordered[j].Start
		}
		return ordered[i].PID < ordered[j].PID
	})
	g := &grouper{procs: latest, label: map[uint32]jobKey{}}
	var jobs []*report.Job
	byID := map[string]*report.Job{}
	for _, p := range ordered {
		k := g.key(p, 0)
		j := byID[k.id]
		if j == nil {
			j = &report.Job{ID: k.id, By: k.by}
			byID[k.id] = j
			jobs = append(jobs, j)
		}
		j.PIDs = append(j.PIDs, p.PID)
	}
	out := make([]report.Job, len(jobs))
	for i, j := range jobs {
		g.describe(j)
		out[i] = *j
	}
	return out
}

// jobKey is a job's id and how it was found.
type jobKey struct{ id, by string }

// grouper resolves each process's job once.
type grouper struct {
	procs map[uint32]*store.Process
	label map[uint32]jobKey
}

// parent is a process's recorded parent: one started no later than it
// (a later one reused the pid), and none for a spawned or attached root.
func (g *grouper) parent(p *store.Process) *store.Process {
	q := g.procs[p.PPID]
	if p.Root || q == nil || q.PID == p.PID || q.Start > p.Start {
		return nil
	}
	return q
}

// key is the job of p; depth bounds the walk up a (corrupt) cycle.
func (g *grouper) key(p *store.Process, depth int) jobKey {
	if k, ok := g.label[p.PID]; ok {
		return k
	}
	var k jobKey
	k.id, k.by = jobLabel(p)
	if k.id == "" {
		if q := g.parent(p); q != nil && depth < 64 {
			k = g.key(q, depth+1)
		} else {
			k = jobKey{"tree:" + strconv.FormatUint(uint64(p.PID), 10), report.JobByTree}
		}
	}
	g.label[p.PID] = k
	return k
}

// describe fills a job's root, command, pod and cgroup from its first
// process whose parent is not in the job, and sorts its pids.
func (g *grouper) describe(j *report.Job) {
	in := map[uint32]bool{}
	for _, pid := range j.PIDs {
		in[pid] = true
	}
	for _, pid := range j.PIDs {
		p := g.procs[pid]
		if q := g.parent(p); q != nil && in[q.PID] {
			continue
		}
		j.RootPID, j.Command, j.Cgroup = p.PID, commandOf(p), p.Cgroup
		if p.Pod != nil {
			j.Pod, j.Namespace = p.Pod.Name, p.Pod.Namespace
		} else if name := p.Env["POD_NAME"]; name != "" {
			j.Pod, j.Namespace = name, p.Env["POD_NAMESPACE"]
		}
		break
	}
	slices.Sort(j.PIDs)
}

// SelectJob returns the job a selector names among jobs, or a
// *NoJobError.
func SelectJob(jobs []report.Job, sel JobSelector) (*report.Job, error) {
	for i := range jobs {
		j := &jobs[i]
		switch {
		case sel.ID != "" && j.ID == sel.ID,
			sel.PID != 0 && slices.Contains(j.PIDs, sel.PID),
			sel.Pod != "" && j.Pod != "" && j.Namespace+"/"+j.Pod == sel.Pod:
			return j, nil
		}
	}
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return nil, &NoJobError{Selector: sel, Jobs: ids}
}

// jobState is what an analysis knows of the recording's jobs: the jobs,
// the selected job's processes (nil: no job was selected), and each
// process's first failures.
type jobState struct {
	jobs     []report.Job
	selected *report.Job
	subject  map[uint32]bool
	// firstPrimary and firstAny are each process's earliest failed
	// allocation, mapping or context call and earliest failure.
	firstPrimary, firstAny map[uint32]*failed
}

// groupJobs groups the processes and resolves Options.Job.
func (s *state) groupJobs() error {
	js := &jobState{jobs: GroupJobs(s.procList), firstPrimary: map[uint32]*failed{}, firstAny: map[uint32]*failed{}}
	s.jobs = js
	if s.opts.Job == nil {
		return nil
	}
	j, err := SelectJob(js.jobs, *s.opts.Job)
	if err != nil {
		return err
	}
	js.selected = j
	js.subject = map[uint32]bool{}
	for _, pid := range j.PIDs {
		js.subject[pid] = true
	}
	return nil
}

// inSubject reports whether a process is of the job the verdict is about:
// every process when no job was selected.
func (s *state) inSubject(pid uint32) bool {
	return s.jobs == nil || s.jobs.subject == nil || s.jobs.subject[pid]
}

// noteJobFailure keeps a process's first failures for its job's line and
// reports whether the failure is the subject job's.
func (s *state) noteJobFailure(e *store.Event, sym *cuda.Symbol) bool {
	js := s.jobs
	if js == nil {
		return true
	}
	keep := func(m map[uint32]*failed) {
		if f := m[e.PID]; f == nil || e.End < f.e.End {
			ev := store.Event{PID: e.PID, End: e.End, Result: e.Result, Symbol: e.Symbol}
			ev.Size, ev.Has = e.Size, e.Has
			m[e.PID] = &failed{sym: sym, name: s.syms.name(e.Symbol), e: ev}
		}
	}
	keep(js.firstAny)
	if sym.Op.Primary() {
		keep(js.firstPrimary)
	}
	return s.inSubject(e.PID)
}

// jobsReport fills the report's jobs: each job's first failure and
// attribution, and whose failure the verdict is about. A recording of
// one job, none selected, lists none.
func (s *state) jobsReport() {
	js := s.jobs
	if js == nil {
		return
	}
	jobs := js.jobs
	grouped := map[uint32]bool{}
	for _, j := range jobs {
		for _, pid := range j.PIDs {
			grouped[pid] = true
		}
	}
	// A failing process with no process record is a tree of its own.
	var unrecorded []uint32
	for pid := range js.firstAny {
		if !grouped[pid] {
			unrecorded = append(unrecorded, pid)
		}
	}
	slices.Sort(unrecorded)
	for _, pid := range unrecorded {
		jobs = append(jobs, report.Job{ID: "tree:" + strconv.FormatUint(uint64(pid), 10), By: report.JobByTree,
			RootPID: pid, PIDs: []uint32{pid}})
	}
	subject := ""
	switch {
	case js.selected != nil:
		subject = js.selected.ID
	case s.first != nil:
		if j, err := SelectJob(jobs, JobSelector{PID: s.first.e.PID}); err == nil {
			subject = j.ID
		}
	}
	if len(jobs) < 2 && js.selected == nil {
		return
	}
	out := make([]report.Job, len(jobs))
	for i, j := range jobs {
		j.PIDs = slices.Clone(j.PIDs)
		j.Attribution = attribution(attributionFacts{})
		if f := s.jobFirst(j.PIDs); f != nil {
			j.FirstFailure = jobFailure(f)
			j.Attribution = s.jobAttribution(f, j.PIDs)
		}
		if j.ID == subject {
			j.Headline, j.Attribution = true, s.rep.Attribution
		}
		out[i] = j
	}
	s.rep.Jobs, s.rep.SubjectJob, s.rep.JobSelected = out, subject, js.selected != nil
}

// jobFirst is the first failure among pids, by the report's own rule.
func (s *state) jobFirst(pids []uint32) *failed {
	earliest := func(m map[uint32]*failed) *failed {
		var first *failed
		for _, pid := range pids {
			if f := m[pid]; f != nil && (first == nil || f.e.End < first.e.End) {
				first = f
			}
		}
		return first
	}
	if f := earliest(s.jobs.firstPrimary); f != nil {
		return f
	}
	return earliest(s.jobs.firstAny)
}

// jobAttribution is another job's verdict in brief: its result code's
// attribution, missing evidence when its process was attached late or a
// gap before its failure could hide an earlier one, the gaps read as that
// job's own (the subject is that job's processes for the while).
func (s *state) jobAttribution(f *failed, pids []uint32) report.Attribution {
	facts := attributionFacts{failed: f.sym, meaning: cuda.LookupResult(f.e.Result).Meaning}
	if p := s.procs[f.e.PID]; p != nil && p.AttachedLate {
		facts.hidden = true
		return attribution(facts)
	}
	js := s.jobs
	saved := js.subject
	js.subject = map[uint32]bool{}
	for _, pid := range pids {
		js.subject[pid] = true
	}
	facts.hidden = len(s.hiding(f.e.End)) > 0
	js.subject = saved
	return attribution(facts)
}

// failedOutside reports whether a process of a job other than the
// subject has a failed call recorded: what may have ended it (its
// recovery is not followed outside the subject).
func (s *state) failedOutside(pid uint32) bool {
	return s.jobs != nil && !s.failedPIDs[pid] && s.jobs.firstAny[pid] != nil
}

// jobFailure summarizes a job's first failure.
func jobFailure(f *failed) *report.JobFailure {
	out := &report.JobFailure{Symbol: f.name, Result: cuda.LookupResult(f.e.Result).Name,
		ResultCode: f.e.Result, AtNS: f.e.End, PID: f.e.PID}
	if f.e.Has&cuda.FieldSize != 0 {
		out.Size = ptr(f.e.Size)
	}
	return out
}

// jobEvidence says, in the selected job's verdict, which job it is and
// that other jobs' processes are neighbours.
func (s *state) jobEvidence() []report.Evidence {
	js := s.jobs
	if js == nil || js.selected == nil {
		return nil
	}
	j := js.selected
	others := max(len(s.procs)-len(j.PIDs), 0)
	return []report.Evidence{{Field: "job", Text: fmt.Sprintf("%s (%s)", j.ID, report.Plural(len(j.PIDs), "process")),
		Source: "process records (" + j.By + ")", Status: "recorded", Rule: ruleJobScope,
		Note: fmt.Sprintf("the verdict is this job's; %s of other jobs are neighbours", report.Plural(others, "process"))}}
}

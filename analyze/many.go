package analyze

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/retrivium/forensic/fleet"
	"github.com/retrivium/forensic/jobenv"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// Jobs is several runs analyzed and split into the jobs they are
// (fleet.Groups): one report per group, in the groups' order.
type Jobs struct {
	// Runs are what the grouping read of each run, in the order given.
	Runs   []fleet.Run
	Groups []fleet.Group
	// Reports holds each group's report: the run's own for a group of
	// one, else the group's analysis as one job (AnalyzeMany).
	Reports []*report.Report
	// Unread are the files named that could not be analyzed, in the order
	// given; every report names them under its missing evidence.
	Unread []Unread
}

// Unread is a file named among several runs that could not be analyzed.
type Unread struct {
	Path string
	Err  error
}

// NotOneJobError is AnalyzeMany's refusal of runs that are not one job:
// it lists the groups and says how to give one.
type NotOneJobError struct {
	Runs   []fleet.Run
	Groups []fleet.Group
}

func (e *NotOneJobError) Error() string { return fleet.GroupsText(e.Runs, e.Groups) }

// AnalyzeJobs analyzes several runs, splits them into jobs on the evidence
// (the same job id; without one, recordings that overlap in time: the
// rule of docs/multi-run.md), and analyzes each job on its own: failures
// of different jobs are never ordered against each other nor called each
// other's consequences, and ranks are missing only within a job. Options
// apply to every run (an Observer sees none of them).
//
// Among several files, one that cannot be analyzed (empty, truncated, of
// another program, still being recorded) does not stop the others: each
// report names it (noteUnread). A single file, or files none of which can
// be analyzed, is an error.
func AnalyzeJobs(paths []string, opts Options) (*Jobs, error) {
	opts.Observer = nil
	var reps []*report.Report
	var unread []Unread
	for _, p := range paths {
		rep, err := analyzeFile(p, opts)
		if err != nil {
			if len(paths) == 1 {
				return nil, err
			}
			unread = append(unread, Unread{Path: p, Err: err})
			continue
		}
		reps = append(reps, rep)
	}
	if len(reps) == 0 {
		return nil, fmt.Errorf("none of the %d files is a readable run (the first: %w)", len(paths), unread[0].Err)
	}
	reps, copies := dropCopies(reps)
	j := jobsOf(reps)
	j.Unread = unread
	for _, rep := range j.Reports {
		noteUnread(rep, unread)
		rep.Missing = append(rep.Missing, copies...)
	}
	return j, nil
}

// dropCopies keeps the first of runs that are one recording (the same run
// id and start: a copy, such as the one forensic redact writes beside the
// original), so that a copy is not read as another rank or run of the
// job, and notes each one left out.
func dropCopies(reps []*report.Report) ([]*report.Report, []report.Missing) {
	type runKey struct {
		id    string
		start int64
	}
	first := map[runKey]string{}
	var kept []*report.Report
	var notes []report.Missing
	for _, r := range reps {
		k := runKey{r.Run.ID, r.Run.StartNS}
		if orig, ok := first[k]; ok && k.id != "" {
			notes = append(notes, report.Missing{What: fmt.Sprintf("%s is a copy of %s (the same run, %s): it was read once", r.Run.Path, orig, k.id),
				Fix: "give each run once (a redacted copy beside its original is the same run)"})
			continue
		}
		first[k] = r.Run.Path
		kept = append(kept, r)
	}
	return kept, notes
}

// noteUnread names, in a report, the files given with its runs that could
// not be analyzed. A file that may be a run (empty, truncated, still being
// recorded, of a newer forensic) could hold the job's first failure, as a
// rank with no run could: the report cannot establish its first failure
// (nor that nothing failed), and says so. A file that is certainly no run
// (a database of another program) is only noted.
func noteUnread(rep *report.Report, unread []Unread) {
	var hidden []report.Missing
	for _, u := range unread {
		m := report.Missing{What: unreadText(u), Fix: "check the file: a run.db copied while it was written, or from a node that crashed, may be truncated; analyze a complete copy with the others"}
		if errors.Is(u.Err, store.ErrForeign) {
			m.Fix = "give only forensic runs (a directory is read for its *.db files)"
			rep.Missing = append(rep.Missing, m)
			continue
		}
		m.Decisive = true
		hidden = append(hidden, m)
	}
	if len(hidden) == 0 {
		return
	}
	rep.Missing = append(rep.Missing, hidden...)
	rep.Attribution = attribution(attributionFacts{judged: rep.Attribution, hidden: true})
	rep.NextSteps = append([]string{hidden[0].Fix}, rep.NextSteps...)
	what := "the first failure of the job"
	if rep.FirstFailure == nil {
		what = "that no call of the job failed"
	}
	rep.Verdict += fmt.Sprintf(" The record cannot establish %s: %s.", what, whats(hidden))
}

// unreadText says which file could not be analyzed and why, without
// naming the file twice (the store's errors name it already).
func unreadText(u Unread) string {
	msg := u.Err.Error()
	if !strings.Contains(msg, u.Path) {
		msg = u.Path + ": " + msg
	}
	return "a file given with these runs could not be analyzed, and its run, if it is one, is not in this report (" + msg + ")"
}

// jobsOf splits analyzed runs into jobs and makes each job's report.
func jobsOf(reps []*report.Report) *Jobs {
	j := &Jobs{Runs: make([]fleet.Run, len(reps))}
	for i, rep := range reps {
		j.Runs[i] = fleetRun(rep)
	}
	j.Groups = fleet.Groups(j.Runs)
	for _, g := range j.Groups {
		if len(g.Runs) == 1 {
			j.Reports = append(j.Reports, reps[g.Runs[0]])
			continue
		}
		runs := make([]fleet.Run, len(g.Runs))
		grp := make([]*report.Report, len(g.Runs))
		for k, i := range g.Runs {
			runs[k], grp[k] = j.Runs[i], reps[i]
		}
		j.Reports = append(j.Reports, oneJob(grp, runs, g))
	}
	return j
}

// AnalyzeMany analyzes several runs of one job (one run.db per rank or
// node) as one: each run is analyzed alone, their first failures are
// ordered by the rule of docs/multi-run.md (package fleet), and the report
// is the single-run report of the run whose failure came first, with the
// runs, the order, the candidates that could not be ordered (each with its
// own verdict), the failures that followed and what ties each to the
// first, and the ranks with no run. Runs that are not one job on the
// evidence are refused with a *NotOneJobError (AnalyzeJobs analyzes each
// job).
func AnalyzeMany(paths []string, opts Options) (*report.Report, error) {
	j, err := AnalyzeJobs(paths, opts)
	if err != nil {
		return nil, err
	}
	return j.one()
}

// one returns the report of runs that are one job, and refuses others.
func (j *Jobs) one() (*report.Report, error) {
	if len(j.Groups) > 1 {
		return nil, &NotOneJobError{Runs: j.Runs, Groups: j.Groups}
	}
	return j.Reports[0], nil
}

// oneJob is the report of several runs that are one job.
func oneJob(reps []*report.Report, runs []fleet.Run, g fleet.Group) *report.Report {
	order := fleet.Order(runs)
	out := pick(reps, order)
	// The chosen run's own list of jobs would describe that run alone.
	out.Jobs, out.SubjectJob, out.JobSelected = nil, "", false
	out.MultiRun = multiRun(reps, order)
	out.MultiRun.GroupedBy, out.MultiRun.JobID = g.By, g.JobID
	own := out.Verdict
	if u := jobUnrecovered(out, reps, order); u != nil {
		own = "In that run, " + strings.ToLower(u.Verdict[:1]) + u.Verdict[1:] + " " + recoveredInJob(out.FirstFailure)
	}
	explainOrder(out, order, own)
	return out
}

// analyzeFile analyzes one run; errors name the file (store.Open's do).
func analyzeFile(path string, opts Options) (*report.Report, error) {
	open := opts.Open
	if open == nil {
		open = func(path string) (Source, func() error, error) {
			r, err := store.Open(path)
			if err != nil {
				return nil, nil, err
			}
			return r, r.Close, nil
		}
	}
	r, closeRun, err := open(path)
	if err != nil {
		return nil, err
	}
	defer closeRun()
	rep, err := Analyze(r, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rep, nil
}

// fleetRun is what the grouping and the ordering need of one analyzed
// run.
func fleetRun(rep *report.Report) fleet.Run {
	ri := &rep.Run
	fr := fleet.Run{Path: ri.Path, ID: ri.ID, Host: ri.Host, BootID: ri.BootID, Rank: ri.Rank, WorldSize: ri.WorldSize,
		JobID: jobenv.ID(ri.JobID), StartNS: ri.StartNS, EndNS: max(ri.EndNS, ri.StartNS+ri.DurationNS)}
	var jobIDs []string
	for _, p := range rep.Processes {
		j := jobenv.Parse(p.Env)
		if j.JobID != "" && !slices.Contains(jobIDs, j.JobID) {
			jobIDs = append(jobIDs, j.JobID)
		}
		if j.Rank != nil && !containsInt(fr.Ranks, *j.Rank) {
			fr.Ranks = append(fr.Ranks, *j.Rank)
			if fr.WorldSize == nil {
				fr.WorldSize = j.WorldSize
			}
		}
	}
	if fr.JobID == "" && len(jobIDs) == 1 {
		fr.JobID = jobIDs[0] // an --all run whose processes name one job
	}
	if fr.Rank == nil && len(fr.Ranks) == 1 {
		fr.Rank, fr.Ranks = &fr.Ranks[0], nil
	}
	fr.Clock = &fleet.Clock{MonotonicNS: ri.StartNS, RealtimeNS: ri.WallStartNS, ErrorNS: ri.ClockErrorNS}
	if f := rep.FirstFailure; f != nil {
		fr.Failure = fleetFailure(f, rep.Capacity)
		switch u := rep.FirstUnrecovered; {
		case !f.Recovered:
			fr.Unrecovered = fr.Failure
		case u != nil:
			fr.Unrecovered = fleetFailure(&u.Failure, u.Capacity)
		}
	}
	return fr
}

// fleetFailure is what the ordering needs of one failure its run judged
// with capacity c.
func fleetFailure(f *report.Failure, c *report.Capacity) *fleet.Failure {
	out := &fleet.Failure{TimeNS: f.TimeNS, Symbol: f.Symbol, ResultName: f.ResultName, PID: f.PID, TID: f.TID,
		Rank: f.Rank, OwnCause: ownCause(f, c), Recovered: f.Recovered}
	if f.GPU != nil {
		out.GPU = *f.GPU
	}
	return out
}

// ownCause says what a run's own verdict (capacity c) found behind one of
// its failures that needs no other run: its own GPU's framebuffer ran
// out. Other findings (a mapping through another GPU's aperture, a
// not-memory code a peer's death can cause) leave the tie to other runs
// open.
func ownCause(f *report.Failure, c *report.Capacity) string {
	if c == nil || *c != report.CapFBExhausted || f.GPU == nil {
		return ""
	}
	gpu := "its GPU"
	if f.GPUIndex != nil {
		gpu = fmt.Sprintf("its GPU %d", *f.GPUIndex)
	}
	return gpu + " ran out of framebuffer memory (framebuffer-exhausted in its own run)"
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// pick returns the report of the run whose failure came first (the first
// run's when none failed).
func pick(reps []*report.Report, order fleet.Result) *report.Report {
	if order.FirstFailure != nil {
		for _, rep := range reps {
			if rep.Run.Path == order.FirstFailure.RunPath {
				return rep
			}
		}
	}
	return reps[0]
}

// multiRun describes the runs and the order of their failures.
func multiRun(reps []*report.Report, order fleet.Result) *report.MultiRun {
	byPath := map[string]*report.Report{}
	m := &report.MultiRun{Order: order.Order, Candidates: []report.Candidate{}, Consequences: []report.Consequence{},
		WorldSize: order.WorldSize, MissingRanks: order.MissingRanks}
	for i, r := range order.Runs {
		rep := reps[i]
		byPath[r.Path] = rep
		m.Runs = append(m.Runs, report.RunRef{Path: r.Path, RunID: r.ID, Host: r.Host, BootID: r.BootID, Rank: r.Rank,
			Ranks: r.Ranks, Attribution: rep.Attribution, ClockErrorNS: rep.Run.ClockErrorNS,
			WallStartNS: rep.Run.WallStartNS, WallEndNS: rep.Run.WallStartNS + rep.Run.DurationNS, StartNS: rep.Run.StartNS,
			Failed: rep.FirstFailure != nil})
	}
	if order.Order == fleet.OrderUncertain {
		for _, c := range order.Candidates {
			if c.PossiblyFirst {
				m.Candidates = append(m.Candidates, orderCandidate(c, byPath[c.RunPath], false))
			}
		}
	}
	m.UnrecoveredOrder = order.UnrecoveredOrder
	if order.UnrecoveredOrder == fleet.OrderUncertain {
		for _, c := range order.UnrecoveredCandidates {
			if c.PossiblyFirst {
				m.UnrecoveredCandidates = append(m.UnrecoveredCandidates, orderCandidate(c, byPath[c.RunPath], true))
			}
		}
	}
	for _, c := range order.Consequences {
		m.Consequences = append(m.Consequences, report.Consequence{RunPath: c.RunPath, Rank: c.Rank, Host: c.Host,
			Symbol: c.Failure.Symbol, ResultName: c.Failure.ResultName, TimeNS: c.Failure.TimeNS,
			DelayMinNS: c.DelayMinNS, DelayMaxNS: c.DelayMaxNS, Exact: c.Exact, Relation: c.Relation, Basis: c.Basis})
	}
	return m
}

// orderCandidate is a failure that could have been first (of the
// unrecovered ones: its run's first unrecovered failure), with its run's
// own verdict on it.
func orderCandidate(c fleet.Candidate, rep *report.Report, unrecovered bool) report.Candidate {
	out := report.Candidate{RunPath: c.RunPath, Rank: c.Rank, Host: c.Host, WallNS: c.WallNS, EarliestNS: c.EarliestNS,
		LatestNS: c.LatestNS, Unordered: append([]report.Unordered{}, c.Unordered...)}
	if rep != nil && rep.FirstFailure != nil && unrecovered {
		out.Judged = judgedUnrecovered(rep)
	} else if rep != nil && rep.FirstFailure != nil {
		out.Judged = &report.Judged{Failure: *rep.FirstFailure, Attribution: rep.Attribution, Capacity: rep.Capacity,
			Verdict: rep.Verdict, Evidence: rep.Evidence, Missing: rep.Missing}
	}
	return out
}

// explainOrder says what the order adds to the chosen run's verdict: which
// run and rank failed first, what followed and what ties it to the first,
// and what could hide an earlier failure (runs whose failures cannot be
// ordered, ranks with no run), which makes the first failure unestablished
// and leads the next steps.
func explainOrder(rep *report.Report, order fleet.Result, own string) {
	lead := []string{fmt.Sprintf("Across %s:", report.Plural(len(order.Runs), "run"))}
	if f := order.FirstFailure; f != nil {
		lead = append(lead, firstText(order))
		if after := afterText(rep.MultiRun.Consequences); after != "" {
			lead = append(lead, after)
		}
	} else {
		lead = append(lead, "no run recorded a failed call.")
	}
	hidden := hiddenByOrder(order)
	if order.FirstUnrecovered != nil && order.Order == fleet.OrderUncertain {
		rep.Missing = append(rep.Missing, report.Missing{
			What: "the runs' first failures cannot be ordered: " + unorderedText(order.FirstFailure) + "; those that could be first were recovered, so it decides nothing",
			Fix:  fleet.FixClockBound})
	}
	for _, n := range order.Notes {
		// Missing ranks and an uncertain order are said from the
		// order's fields, by hiddenByOrder, as decisive.
		if !n.Kind.Restates() {
			rep.Missing = append(rep.Missing, report.Missing{What: n.Text, Fix: n.Kind.Fix()})
		}
	}
	rep.Missing = append(rep.Missing, hidden...)
	rep.Attribution = attribution(attributionFacts{judged: rep.Attribution, hidden: len(hidden) > 0})
	if len(hidden) > 0 {
		var steps []string
		for _, m := range hidden {
			steps = append(steps, m.Fix)
		}
		rep.NextSteps = append(steps, rep.NextSteps...)
	}
	verdict := strings.Join(lead, " ") + " " + own
	if len(hidden) > 0 {
		verdict += " This may not be the job's first failure: " + whats(hidden) + "."
	}
	rep.Verdict = verdict
}

// firstText says which run failed first and, when that failure was
// recovered, which failure no process recovered from came first.
func firstText(order fleet.Result) string {
	f := order.FirstFailure
	where := func(c *fleet.Candidate) string {
		return fmt.Sprintf("%s (host %s)'s, in %s", rankName(c.Rank), c.Host, c.RunPath)
	}
	s := "the first failure is " + where(f)
	if order.Order != fleet.OrderCertain {
		s = fmt.Sprintf("the earliest estimate of the first failure is %s, but it cannot be ordered against %s",
			where(f), report.Plural(len(f.Unordered), "other run"))
	}
	if !f.Failure.Recovered {
		return s + "."
	}
	u := order.FirstUnrecovered
	switch {
	case u == nil:
		return s + ", and it was recovered, as was every failure of the other runs."
	case u.RunPath == f.RunPath && order.UnrecoveredOrder == fleet.OrderCertain:
		return s + ", and it was recovered; the first failure no process recovered from is in the same run."
	case order.UnrecoveredOrder == fleet.OrderCertain:
		return s + ", and it was recovered; the first failure no process recovered from is " + where(u) + "."
	}
	return fmt.Sprintf("%s, and it was recovered; of the failures no process recovered from, the earliest estimate is %s, but it cannot be ordered against %s.",
		s, where(u), report.Plural(len(u.Unordered), "other run"))
}

// jobUnrecovered makes the job's first unrecovered failure, judged by its
// own run, the report's FirstUnrecovered when the first failure (rep's)
// was recovered, with that run's next steps, and returns it when it is in
// another run than rep's (rep's own verdict then does not lead with it).
func jobUnrecovered(rep *report.Report, reps []*report.Report, order fleet.Result) *report.Judged {
	if order.FirstFailure == nil || !order.FirstFailure.Failure.Recovered {
		return nil
	}
	u := order.FirstUnrecovered
	if u == nil {
		rep.FirstUnrecovered = nil
		return nil
	}
	for _, r := range reps {
		if r.Run.Path != u.RunPath || r == rep {
			continue // rep's own verdict leads with its own already
		}
		j := judgedUnrecovered(r)
		rep.FirstUnrecovered, rep.NextSteps = j, r.NextSteps
		return j
	}
	return nil
}

// judgedUnrecovered is a run's own verdict on its first unrecovered
// failure: its FirstUnrecovered, or its first failure when that was not
// recovered.
func judgedUnrecovered(r *report.Report) *report.Judged {
	var j report.Judged
	if r.FirstUnrecovered != nil {
		j = *r.FirstUnrecovered
	} else {
		j = report.Judged{Failure: *r.FirstFailure, Attribution: r.Attribution, Capacity: r.Capacity,
			Verdict: r.Verdict, Evidence: r.Evidence, Missing: r.Missing}
	}
	j.RunPath = r.Run.Path // the run whose clock its times count on
	return &j
}

// recoveredInJob says that the job's first failure was survived and so
// caused nothing in the other runs.
func recoveredInJob(f *report.Failure) string {
	what := f.Symbol
	if f.Size != nil {
		what += " of " + report.HumanBytes(*f.Size)
	}
	return fmt.Sprintf("The job's first failed operation, %s by pid %d in %s (%s), was recovered. The same process later succeeded at the same operation for at least the same size. So no failure in another run is its consequence.",
		what, f.PID, f.RunPath, f.ResultName)
}

// hiddenByOrder is what could hide the job's first failure: runs whose
// failures cannot be ordered, and ranks with no run.
func hiddenByOrder(order fleet.Result) []report.Missing {
	var hidden []report.Missing
	const fix = fleet.FixClockBound
	switch {
	case order.FirstUnrecovered != nil:
		// The recovered first failures' order decides nothing: the
		// failure that matters is the first unrecovered one.
		if order.UnrecoveredOrder == fleet.OrderUncertain {
			hidden = append(hidden, report.Missing{Decisive: true, Fix: fix,
				What: "the runs' unrecovered failures cannot be ordered: " + unorderedText(order.FirstUnrecovered)})
		}
	case order.Order == fleet.OrderUncertain:
		hidden = append(hidden, report.Missing{Decisive: true, Fix: fix,
			What: "the runs' failures cannot be ordered: " + unorderedText(order.FirstFailure)})
	}
	if len(order.MissingRanks) > 0 {
		hidden = append(hidden, report.Missing{Decisive: true,
			What: fmt.Sprintf("no run was given for %s of the job's %d, and the rank that failed first is often the one whose file is missing",
				report.RankRanges(order.MissingRanks), *order.WorldSize),
			Fix: fmt.Sprintf("gather the run.db of %s (from the node that ran it, even if that node crashed) and analyze it with the others; if it was not recorded, record every rank next time (forensic record --all on each node)",
				report.RankRanges(order.MissingRanks))})
	}
	return hidden
}

// afterText says what came after the first failure in other runs, by
// what ties each to it.
func afterText(cs []report.Consequence) string {
	n := map[string]int{}
	for _, c := range cs {
		n[c.Relation]++
	}
	say := func(k int, one, many string) string {
		if k == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %s", k, many)
	}
	var parts []string
	if k := n[report.RelationSameGPU]; k > 0 {
		parts = append(parts, say(k, "on the same GPU (likely a consequence)", "on the same GPU (likely consequences)"))
	}
	if k := n[report.RelationSameJob]; k > 0 {
		parts = append(parts, say(k, "tied to it only by the job (possibly a consequence)", "tied to it only by the job (possibly consequences)"))
	}
	if k := n[report.RelationIndependent]; k > 0 {
		parts = append(parts, say(k, "for a reason of its own (not a consequence)", "for reasons of their own (not consequences)"))
	}
	if len(parts) == 0 {
		return ""
	}
	// One short sentence, however many runs: the RUNS section and --json
	// have each one.
	return "Later failures in other runs: " + strings.Join(parts, "; ") + "."
}

func rankName(r *int) string {
	if r == nil {
		return "a run with no rank"
	}
	return fmt.Sprintf("rank %d", *r)
}

// unorderedText says which runs a failure cannot be ordered against.
func unorderedText(f *fleet.Candidate) string {
	if f == nil {
		return "no failure"
	}
	var parts []string
	for _, u := range f.Unordered {
		switch u.Reason {
		case fleet.ReasonOverlap:
			parts = append(parts, fmt.Sprintf("%s (clock intervals overlap by %s)", u.RunPath, report.Duration(*u.OverlapNS)))
		case fleet.ReasonNoBound:
			parts = append(parts, u.RunPath+" (a clock with no error bound)")
		default:
			parts = append(parts, u.RunPath+" (the same instant)")
		}
	}
	return fmt.Sprintf("%s's failure against %s", f.RunPath, strings.Join(parts, ", "))
}

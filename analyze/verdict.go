package analyze

import (
	"fmt"
	"strings"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
)

// Rules of evidence, by the names docs/rules.md gives them. An evidence
// row names the rule that decided how its value was used.
const (
	ruleViewsApart  = "views-apart"
	ruleBAR1Path    = "bar1-only-on-aperture-paths"
	ruleAttribution = "attribution-by-result-code"
	ruleHidden      = "hidden-failure"
	ruleReference   = "reference-sample"
	ruleReconcile   = "reconciled-with-traced-calls"
	ruleRecovered   = "recovered"
	ruleInterrupted = "interrupted-is-not-crashed"
	rulePeerCost    = "peer-grant-cost"
	rulePoolLimit   = "pool-limit"
)

// judgement is the verdict on one failure: its attribution, what hid it
// (missing evidence that makes it unestablished), its capacity finding,
// the cause behind a not-memory code, and the evidence and missing items
// that go with it.
type judgement struct {
	f           *failed
	res         cuda.Result
	facts       attributionFacts
	attribution report.Attribution // attribution(facts)
	hidden      []report.Missing   // decisive: the failure cannot be established
	cap         finding
	cause       *report.Cause
	evidence    []report.Evidence
	missing     []report.Missing
}

// judge decides one failure, whose hiding gaps are those before it.
func (s *state) judge(f *failed) *judgement {
	j := &judgement{f: f, res: cuda.LookupResult(f.e.Result)}
	j.hidden = s.hiding(f.e.End)
	j.facts = attributionFacts{failed: f.sym, meaning: j.res.Meaning, hidden: len(j.hidden) > 0}
	j.attribution = attribution(j.facts)
	j.missing = append(j.missing, j.hidden...)
	j.evidence = append(j.evidence, report.Evidence{Field: "result", Text: j.res.Name, Unit: "CUresult",
		Source: f.name + " return value (uretprobe)", Status: "recorded", TimeNS: f.e.End, Note: j.res.Cause,
		Rule: ruleAttribution})
	if f.e.Has&cuda.FieldSize != 0 {
		j.evidence = append(j.evidence, report.Evidence{Field: "request size", Value: ptr(f.e.Size), Unit: "bytes",
			Source: f.name + " arguments (uprobe)", Status: "recorded", TimeNS: f.e.Start})
	}
	switch j.res.Meaning {
	case cuda.MeaningNotMemory:
		j.cause = s.notMemoryCause(f, j.res, &j.evidence)
	case cuda.MeaningSticky:
		j.missing = append(j.missing, report.Missing{Decisive: true,
			What: j.res.Name + " is a sticky error left by an earlier asynchronous fault (a kernel, ECC, NVLink) that forensic does not trace; " + f.name + " only reported it",
			Fix:  "rerun with CUDA_LAUNCH_BLOCKING=1 (and compute-sanitizer) to find the faulting kernel; check the kernel log for Xid lines"})
		j.evidence = append(j.evidence, s.xidEvidence()...)
	case cuda.MeaningUnknown:
		j.missing = append(j.missing, report.Missing{Decisive: true,
			What: fmt.Sprintf("%s (%d) says nothing about the cause", j.res.Name, j.res.Code),
			Fix:  "check the kernel log and the driver's own logs (nvidia-bug-report.sh)"})
	}
	j.cap = s.capacity(f, j.res.Meaning, j.attribution)
	j.evidence = append(j.evidence, j.cap.evidence(s)...)
	if m := j.cap.missing(s); m != nil {
		j.missing = append(j.missing, *m)
	}
	return j
}

// xidEvidence lists the Xid lines of the kernel log.
func (s *state) xidEvidence() []report.Evidence {
	var out []report.Evidence
	for _, k := range s.rep.KernelLog {
		if k.Xid != nil {
			x := uint64(*k.Xid)
			out = append(out, report.Evidence{Field: "Xid", Value: &x, Text: k.Text, Unit: "Xid code", Source: "/dev/kmsg (NVRM)",
				Status: "recorded", TimeNS: k.TimeNS, Note: k.Position + " the first failure"})
		}
	}
	return out
}

// notMemoryCause names what the record shows behind a not-memory failure:
// the earliest failed call before it in the same process.
func (s *state) notMemoryCause(f *failed, res cuda.Result, ev *[]report.Evidence) *report.Cause {
	for _, g := range s.failures {
		if g.e.PID == f.e.PID && g.e.End < f.e.End {
			gr := cuda.LookupResult(g.e.Result)
			*ev = append(*ev, report.Evidence{Field: "earlier failure", Text: g.name + " " + gr.Name, Unit: "CUresult",
				Source: g.name + " return value (uretprobe)", Status: "recorded", TimeNS: g.e.End, Note: gr.Cause})
			return &report.Cause{Symbol: g.name, Result: g.e.Result, ResultName: gr.Name, PID: g.e.PID, TimeNS: g.e.End,
				Text: fmt.Sprintf("%s failed earlier with %s: %s", g.name, gr.Name, gr.Cause)}
		}
	}
	return &report.Cause{Result: f.e.Result, ResultName: res.Name, PID: f.e.PID, TimeNS: f.e.End, Text: res.Cause}
}

// verdict decides the report's attribution and capacity, says what was
// missing and what to do next.
func (s *state) verdict() {
	rep := s.rep
	rep.Missing = append(rep.Missing, s.generalGaps()...)
	if s.first == nil {
		s.verdictNoFailure()
		return
	}
	j := s.judge(s.first)
	s.budgetAtFailure(j)
	facts := j.facts
	c := j.cap.capacity
	rep.Capacity = &c
	rep.Cause = j.cause
	rep.Evidence = append(rep.Evidence, j.evidence...)
	rep.Evidence = append(rep.Evidence, s.liveEvidence(j)...)
	rep.Missing = append(rep.Missing, j.missing...)
	if sp := s.samples; sp != nil {
		rep.NearestSamples = sp.nearest
	}
	story := s.story(j)
	rep.NextSteps = s.nextSteps(j)
	switch {
	case s.unrecovered != nil:
		u := s.judge(s.unrecovered)
		rep.FirstUnrecovered = s.judged(u)
		// Lead with the failure the job did not survive.
		story = rep.FirstUnrecovered.Verdict + " " + s.recoveredNote(j, false)
		rep.NextSteps = s.nextSteps(u)
	case s.first.recovered:
		story += " " + s.recoveredNote(j, true) + s.allRecovered(&facts)
	}
	rep.Attribution = attribution(facts)
	rep.Verdict = strings.TrimSpace(story)
}

// allRecovered decides a run whose every failure was recovered: a process
// that then ended badly died of something the record does not hold, and
// the evidence is missing (facts.endedBadly); otherwise the failure did
// no harm, and making the request fit is not the advice. It returns the
// verdict's last words.
func (s *state) allRecovered(facts *attributionFacts) string {
	rep := s.rep
	ends := s.badEnds(s.first.e.End, 0)
	if len(ends) == 0 {
		rep.NextSteps = []string{"nothing needs fixing for this failure: the process recovered from it, as a caching allocator does when it frees cached blocks and retries. If the retries slow the job, leave more headroom (a smaller batch, or PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation)"}
		return " No later failure went unrecovered."
	}
	facts.endedBadly = true
	exits := s.exitGaps(ends)
	rep.Missing = append(rep.Missing, exits...)
	rep.NextSteps = nil
	for _, m := range exits {
		rep.NextSteps = append(rep.NextSteps, m.Fix)
	}
	// The verdict names who ended and how; why the record cannot say
	// what ended them, and the advice, are in MISSING EVIDENCE once.
	hows := make([]string, len(ends))
	for i, b := range ends {
		hows[i] = fmt.Sprintf("process %d (%s) %s", b.p.PID, exeName(&b.p), b.how)
	}
	return " No later failure went unrecovered, yet " + report.And(hows) + ": what ended " + pronoun(len(ends)) + " is not in the record."
}

// pronoun is "it" for one, "them" for more.
func pronoun(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// judged converts a judgement into the report's Judged.
func (s *state) judged(j *judgement) *report.Judged {
	c := j.cap.capacity
	out := &report.Judged{Failure: s.failure(j.f), Attribution: j.attribution, Capacity: &c, Verdict: s.story(j),
		Evidence: append(j.evidence, s.liveEvidence(j)...), Missing: j.missing}
	if out.Missing == nil {
		out.Missing = []report.Missing{}
	}
	out.Stack = s.stack(j.f)
	return out
}

// recoveredNote says that the first failure was survived: as "It" when
// the verdict's subject is the first failure itself. It is kept short:
// it comes before the numbers the verdict compared, on the first screen,
// and FIRST FAILURE says the same at length.
func (s *state) recoveredNote(j *judgement, subject bool) string {
	how := "its process later succeeded at it on the same device, for at least the same size"
	if handleCall(j.f) {
		how = "its process later succeeded at the same call on the same handle"
	}
	if subject {
		return "It was recovered: " + how + "."
	}
	what := j.f.name
	if j.f.e.Has&cuda.FieldSize != 0 {
		what += " of " + report.HumanBytes(j.f.e.Size)
	}
	if u := s.unrecovered; u == nil || u.e.PID != j.f.e.PID {
		what += fmt.Sprintf(" by pid %d", j.f.e.PID)
	}
	return fmt.Sprintf("The %s, %s at %s (%s), was recovered: %s.",
		s.firstName(), what, s.rel(j.f.e.End), j.res.Name, how)
}

// verdictNoFailure decides a run in which no recorded call failed.
func (s *state) verdictNoFailure() {
	rep := s.rep
	hidden := s.hiding(0)
	rep.Missing = append(rep.Missing, hidden...)
	n := uint64(0)
	for _, c := range s.replay.counts {
		n += c.Calls
	}
	calls := fmt.Sprintf("%s from %s", report.Plural(int(n), "traced call"), report.Plural(len(s.procList), "process"))
	rep.Attribution = attribution(attributionFacts{hidden: len(hidden) > 0})
	switch {
	case len(hidden) > 0:
		rep.Verdict = fmt.Sprintf("No recorded call failed (%s), but the record cannot rule a failure out: %s.", calls, whats(hidden))
	case rep.Run.Interrupted != "":
		rep.Verdict = fmt.Sprintf("The run was interrupted by %s at %s: stopped by the user or forensic, not a crash. No recorded call failed before it (%s), with no evidence lost.",
			rep.Run.Interrupted, s.rel(s.interruptTime()), calls)
	default:
		rep.Verdict = fmt.Sprintf("No recorded call failed: %s, with no evidence lost.", calls)
	}
	if rep.NearMiss {
		rep.Verdict += " " + s.nearMissText()
		rep.NextSteps = append(rep.NextSteps, "Leave more framebuffer free before this job meets a larger input or a neighbour: "+
			"lower the batch, sequence length or cache size, or the framework's memory fraction.")
	}
}

// nearMissText says how close the run came, on the GPU view with the
// least free framebuffer in percent of its total.
func (s *state) nearMissText() string {
	var low *report.Headroom
	for i := range s.rep.Headroom {
		h := &s.rep.Headroom[i]
		if h.View == cuda.ViewFramebuffer.String() && (low == nil || h.Percent < low.Percent) {
			low = h
		}
	}
	where := fmt.Sprintf("GPU %d", low.GPU)
	if low.MIG != nil {
		where += fmt.Sprintf(" MIG instance %d", *low.MIG)
	}
	bound := ""
	if !low.Exact {
		bound = "about "
	}
	txt := fmt.Sprintf("Near miss: %s had %s%s of framebuffer free (%.1f%% of %s) at %s", where, bound,
		report.HumanBytes(low.LeastFree), low.Percent, report.HumanBytes(low.Total), s.rel(low.AtNS))
	if c := low.Call; c != nil {
		txt += ", after " + c.Symbol
		if c.Size != nil {
			txt += " of " + report.HumanBytes(*c.Size)
		}
		txt += fmt.Sprintf(" by pid %d", c.PID)
	}
	return txt + "."
}

// interruptTime is when the interruption ended the run: the workload's
// death, else the stop.
func (s *state) interruptTime() int64 {
	if w := s.rep.Run.WorkloadExit; w != nil && w.TimeNS != 0 {
		return w.TimeNS
	}
	return s.rep.Run.EndNS
}

// whats joins the What of missing items.
func whats(ms []report.Missing) string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.What
	}
	return sentences(out)
}

func ptr(v uint64) *uint64 { return &v }

package html

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/retrivium/forensic/report"
)

// verdictView is the verdict section: the run's attribution and story,
// what to try next, and the failures it is about. When the first failure
// was recovered, the first unrecovered one comes first, judged on its
// own, and the recovered first failure after it.
type verdictView struct {
	Judgement judgement
	// Glance is the summary under the verdict: the numbers compared, who
	// held the memory, which process (the text report's, word for word).
	Glance      []report.GlanceLine
	NextSteps   []string
	Unrecovered *unrecoveredView
	First       *failureView
	Lead        *leadView
}

// judgement is an attribution, a capacity finding and the story, under
// a label (the run's verdict, or the first unrecovered failure's).
type judgement struct {
	Label, Class, Attribution, Capacity, Summary, Text string
}

// unrecoveredView is the first unrecovered failure with its own verdict,
// evidence and missing evidence.
type unrecoveredView struct {
	Judgement judgement
	Failure   failureView
	Evidence  evidenceView
	Missing   []missingRow
}

func newJudgement(label string, a report.Attribution, c *report.Capacity, text string) judgement {
	capacity := "none (no failure)"
	if c != nil {
		capacity = string(*c)
	}
	sum := attrSummary(a)
	return judgement{Label: label, Class: attrClass(a), Attribution: string(a), Capacity: capacity,
		Summary: strings.ToUpper(sum[:1]) + sum[1:], Text: text}
}

// attrClass is the CSS class suffix of an attribution's colour.
func attrClass(a report.Attribution) string {
	switch a {
	case report.AttrAllocation:
		return "alloc"
	case report.AttrMapping:
		return "map"
	case report.AttrNotMemory:
		return "notmem"
	case report.AttrMissingEvidence:
		return "missing"
	case report.AttrNone:
		return "none"
	}
	return "other"
}

// attrSummary says an attribution in words.
func attrSummary(a report.Attribution) string {
	switch a {
	case report.AttrAllocation:
		return "an allocation problem"
	case report.AttrMapping:
		return "a mapping problem"
	case report.AttrNotMemory:
		return "not a memory problem"
	case report.AttrMissingEvidence:
		return "the evidence is missing"
	case report.AttrNone:
		return "no call failed"
	}
	return "attribution " + string(a)
}

func newVerdict(rep *report.Report, c clock) verdictView {
	v := verdictView{Judgement: newJudgement("Verdict", rep.Attribution, rep.Capacity, rep.Verdict), NextSteps: rep.NextSteps,
		Glance: rep.Glance()}
	if u := rep.FirstUnrecovered; u != nil {
		c := c
		title := "The failed call"
		if m := rep.MultiRun; m != nil && u.RunPath != rep.Run.Path {
			if r := m.RunOf(u.RunPath); r != nil {
				// Another run of the job: its times count from its start.
				c = clock{start: r.StartNS, wall: time.Unix(0, r.WallStartNS).UTC()}
				title = "The failed call, in " + r.Path + " (times from that run's start)"
			}
		}
		fv := newFailureView(title, &u.Failure, rep.Processes, c)
		v.Unrecovered = &unrecoveredView{Judgement: newJudgement("First unrecovered failure", u.Attribution, u.Capacity, u.Verdict), Failure: fv,
			Evidence: newEvidence(u.Evidence, c), Missing: newMissing(u.Missing)}
	}
	if f := rep.FirstFailure; f != nil {
		t := "First failure"
		if f.Recovered {
			t = "First failure (recovered)"
		}
		fv := newFailureView(t, f, rep.Processes, c)
		if rep.Cause != nil {
			fv.Cause = rep.Cause.Text
		}
		v.First = &fv
		v.Lead = newLead(rep, c)
	}
	return v
}

// failureView is one failed call in detail.
type failureView struct {
	Title                       string
	Symbol, Operation           string
	ResultName, Meaning         string
	Result                      int32
	Size, SizeBytes, SizeSource string
	Grants                      []string
	GrantsCut                   bool
	PID, TID                    uint32
	Thread                      string // the thread's name, "" when not recorded
	Process                     string
	CUDADevice                  int32
	GPU, Mapping, Aperture      string
	Time, Wall, Phase           string
	Recovered, Frozen           bool
	Consequence                 bool
	Cause                       string
	Stack                       stackView
}

func newFailureView(title string, f *report.Failure, ps []report.ProcessInfo, c clock) failureView {
	v := failureView{Title: title, Symbol: f.Symbol, Operation: f.Operation, ResultName: f.ResultName, Meaning: f.Meaning,
		Result: f.Result, SizeSource: f.SizeSource, GrantsCut: f.GrantsCut, PID: f.PID, TID: f.TID,
		Process: procName(ps, f.PID), CUDADevice: f.CUDADevice, GPU: gpuText(f.GPUIndex), Mapping: mapping(f.GPUMapping),
		Time: c.rel(f.TimeNS), Wall: c.at(f.TimeNS, wallLong), Phase: f.Phase, Recovered: f.Recovered,
		Frozen: f.Frozen, Consequence: f.PossibleConsequence, Stack: newStack(f.Stack)}
	if f.Size != nil {
		v.Size, v.SizeBytes = report.HumanBytes(*f.Size), fmt.Sprintf("%d bytes", *f.Size)
	}
	if f.ThreadName != nil {
		v.Thread = *f.ThreadName
	}
	if f.GPUIndex != nil {
		if f.GPU != nil {
			v.GPU += " " + *f.GPU
		}
		if f.MIGIndex != nil {
			v.GPU += fmt.Sprintf(", MIG instance %d", *f.MIGIndex)
		}
	}
	if f.ApertureGPU != nil {
		whose := "the exporter's GPU, not the caller's"
		if f.ApertureOf == "peer" {
			whose = "the peer's GPU, not the caller's: peer access maps the peer's memory through it"
		}
		v.Aperture = fmt.Sprintf("GPU %d's BAR1 aperture (%s)", *f.ApertureGPU, whose)
	}
	for _, g := range f.Grants {
		v.Grants = append(v.Grants, grantText(g))
	}
	return v
}

// mapping says how a CUDA device was matched to a GPU.
func mapping(m string) string { return report.MappingWords(m) }

// grantText says what one access grant gives to which device.
func grantText(g report.Grant) string {
	where := fmt.Sprintf("CUDA device %d", g.CUDADevice)
	if g.GPU != nil {
		where += fmt.Sprintf(" (GPU %d)", *g.GPU)
	}
	s := where + ", " + g.Access + " access"
	if g.Location != "" && g.Location != "device" {
		s += ", location " + g.Location
	}
	if g.Peer {
		return s + ": a peer of the memory's owner, through the owner's BAR1 aperture"
	}
	return s + ": the memory's owner"
}

// stackView is a symbolized user stack, shortened to its first frames:
// for a Python process its Python frames (listed first), then the native
// ones.
type stackView struct {
	Recorded bool
	Note     string
	Python   []frameRow
	Frames   []frameRow
	More     int // native frames left out
	MorePy   int // Python frames left out
	// Interpreter is a Python process's CPython version and build.
	Interpreter string
}

// frameRow is one stack frame: a native function+offset and its library,
// or a Python function and its file:line.
// frameRow is one stack frame; User marks the innermost frame of the
// user's own code.
type frameRow struct {
	Name, Library string
	User          bool
}

// maxFrames is how many frames of a stack the page lists (of each kind).
const maxFrames = 32

func newStack(st *report.Stack) stackView {
	if st == nil || len(st.Frames) == 0 {
		return stackView{}
	}
	var notes []string
	if st.Partial {
		notes = append(notes, "partial")
	}
	if st.Note != "" {
		notes = append(notes, st.Note)
	}
	v := stackView{Recorded: true, Note: strings.Join(notes, ": "), Interpreter: st.PythonText()}
	for i, fr := range st.Frames {
		user := st.UserFrame != nil && *st.UserFrame == i
		if fr.Language == report.LangPython {
			if len(v.Python) == maxFrames {
				v.MorePy++
				continue
			}
			where := fr.File
			if fr.Line > 0 {
				where += fmt.Sprintf(":%d", fr.Line)
			}
			name := fr.Function
			if name == "" {
				name = "?"
			}
			v.Python = append(v.Python, frameRow{Name: name, Library: where, User: user})
			continue
		}
		if len(v.Frames) == maxFrames {
			v.More++
			continue
		}
		name := fmt.Sprintf("0x%x", fr.Address)
		if fr.Function != "" {
			name = fmt.Sprintf("%s+0x%x", fr.Function, fr.Offset)
		}
		v.Frames = append(v.Frames, frameRow{Name: name, Library: fr.Library, User: user})
	}
	return v
}

// leadView lists the last calls of the failing process up to the failure.
type leadView struct {
	PID  uint32
	GPU  string
	Rows []leadRow
}

// leadRow is one call leading up to the first failure.
type leadRow struct {
	Before, Symbol, Size, Result, Live string
	TID                                uint32
	Failed, First                      bool
}

func newLead(rep *report.Report, c clock) *leadView {
	f := rep.FirstFailure
	if rep.Timeline == nil || len(rep.Timeline.Lead) < 2 || f == nil {
		return nil
	}
	lead := append([]report.CallMark(nil), rep.Timeline.Lead...)
	sort.SliceStable(lead, func(i, j int) bool { return lead[i].EndNS < lead[j].EndNS })
	// The column is of each call's own GPU: the header names it when all
	// the calls ran on one, else each cell does.
	v := &leadView{PID: f.PID, GPU: "the call's GPU"}
	one := oneGPU(lead)
	if one != nil {
		v.GPU = fmt.Sprintf("GPU %d", *one)
	}
	for _, m := range lead {
		r := leadRow{Before: "−" + leadDuration(f.TimeNS-m.EndNS), Symbol: m.Symbol, Size: bytesText(m.Size),
			Result: resultName(&m), Live: bytesText(m.Live), TID: m.TID, Failed: m.Result != 0, First: m.First}
		if one == nil && m.GPU != nil && m.Live != nil {
			r.Live = fmt.Sprintf("GPU %d: %s", *m.GPU, r.Live)
		}
		if m.First {
			r.Before = "failure"
		}
		v.Rows = append(v.Rows, r)
	}
	return v
}

// oneGPU is the GPU every call with a traced live value ran on, or nil
// when they ran on several or none is known.
func oneGPU(lead []report.CallMark) *int {
	var one *int
	for _, m := range lead {
		if m.Live == nil {
			continue
		}
		if m.GPU == nil || (one != nil && *one != *m.GPU) {
			return nil
		}
		one = m.GPU
	}
	return one
}

// leadDuration writes how long before the failure a call ended, at the
// same precision down the column (µs, ms or s).
func leadDuration(ns int64) string {
	switch {
	case ns < 1_000_000:
		return fmt.Sprintf("%.1f µs", float64(ns)/1e3)
	case ns < 1_000_000_000:
		return fmt.Sprintf("%.3f ms", float64(ns)/1e6)
	}
	return fmt.Sprintf("%.3f s", float64(ns)/1e9)
}

// resultName is a call's result code by name (CUDA_SUCCESS for 0).
func resultName(m *report.CallMark) string {
	switch {
	case m.ResultName != "":
		return m.ResultName
	case m.Result == 0:
		return "CUDA_SUCCESS"
	}
	return fmt.Sprintf("CUresult %d", m.Result)
}

// evidenceView is the findings a verdict used; the decisive one (the
// value the verdict compared the request with) first.
type evidenceView struct {
	Rows     []evidenceRow
	Decisive bool
	// Rules are the rules of evidence the rows name, each with its one
	// line, for the legend under the table.
	Rules []rule
}

// evidenceRow is one finding.
type evidenceRow struct {
	Field, Value, Detail  string
	Code                  bool
	Source, Scope         string
	Status, StatusClass   string
	Time, GPU, Note, Rule string
	// Full is the note's full account when Note is its short tag: the
	// page folds it under the tag.
	Full string
	// RuleLine says what the rule says (the name's tooltip).
	RuleLine string
	Decisive bool
}

func newEvidence(ev []report.Evidence, c clock) evidenceView {
	var v evidenceView
	rows := append([]report.Evidence(nil), ev...)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Decisive && !rows[j].Decisive })
	for _, e := range rows {
		r := evidenceRow{Field: e.Field, Value: e.Text, Source: e.Source, Scope: e.Scope, Status: e.Status,
			StatusClass: statusClass(e.Status), Note: e.Tag(), Rule: e.Rule, RuleLine: ruleLine(e.Rule), Decisive: e.Decisive}
		if e.Brief != "" {
			r.Full = e.Note
		}
		switch {
		case e.Value != nil && e.Unit == "bytes":
			r.Value, r.Detail = report.HumanBytes(*e.Value), fmt.Sprintf("%d bytes", *e.Value)
			if e.Text != "" {
				r.Detail = e.Text + " (" + r.Detail + ")"
			}
		case e.Value != nil:
			r.Value, r.Detail = fmt.Sprintf("%d %s", *e.Value, e.Unit), e.Text
		default:
			r.Code = e.Text != ""
		}
		if e.GPU != nil {
			r.GPU = fmt.Sprint(*e.GPU)
		}
		if e.TimeNS != 0 {
			r.Time = c.rel(e.TimeNS) // 0: the finding has no time (a table lookup)
		}
		v.Decisive = v.Decisive || e.Decisive
		v.Rows = append(v.Rows, r)
	}
	v.Rules = rulesUsed(v.Rows)
	return v
}

// missingRow is one piece of evidence the verdict lacked.
type missingRow struct {
	What, Fix string
	Decisive  bool
}

func newMissing(ms []report.Missing) []missingRow {
	out := make([]missingRow, 0, len(ms))
	for _, m := range ms {
		out = append(out, missingRow{What: m.What, Fix: m.Fix, Decisive: m.Decisive})
	}
	return out
}

// samplesView is the NVML samples around the first failure on its GPU.
type samplesView struct {
	GPU  string
	Rows []sampleRow
}

// sampleRow is one sample as read.
type sampleRow struct {
	When, Kind, Scope, Time, Status, StatusClass string
	Used, Free, Total, API, Note                 string
}

func newSamples(ns *report.NearestSamples, c clock) *samplesView {
	if ns == nil || len(ns.Before)+len(ns.At)+len(ns.After) == 0 {
		return nil
	}
	v := &samplesView{GPU: "an unknown GPU"}
	if ns.GPU >= 0 {
		v.GPU = fmt.Sprintf("GPU %d", ns.GPU)
	}
	for _, g := range []struct {
		when string
		s    []report.SampleRef
	}{{"before", ns.Before}, {"at the failure", ns.At}, {"after", ns.After}} {
		for _, s := range g.s {
			r := sampleRow{When: g.when, Kind: s.Kind, Scope: s.Scope, Time: c.rel(s.StartNS), Status: s.Status,
				StatusClass: statusClass(s.Status), Used: bytesText(s.Used), Free: bytesText(s.Free),
				Total: bytesText(s.Total), API: s.API, Note: s.Fallback}
			if s.Struct != "" {
				r.API += " / " + s.Struct
			}
			if s.DelayNS != nil {
				r.Note = strings.TrimSpace(r.Note + " taken " + report.Duration(*s.DelayNS) + " after the failure")
				if s.Frozen {
					r.Note += ", with the process held stopped"
				}
			}
			v.Rows = append(v.Rows, r)
		}
	}
	return v
}

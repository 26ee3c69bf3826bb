package html

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/retrivium/forensic/report"
)

// maxFailureRows is how many failures the failures table lists; the rest
// are counted (the JSON and the timeline have them).
const maxFailureRows = 200

// failuresView is the failures table.
type failuresView struct {
	Count int
	Rows  []failureRow
	More  int
}

// failureRow is one failed call in the table.
type failureRow struct {
	Time, Wall               string
	PID, TID                 uint32
	Symbol, Size, SizeSource string
	Grants                   []string
	Result, GPU              string
	Highlight                bool
	Tags                     []tag
}

// tag is a small coloured label.
type tag struct{ Class, Text string }

func newFailures(rep *report.Report, c clock) failuresView {
	v := failuresView{Count: len(rep.Failures) + rep.FailuresTruncated}
	var unrecovered *report.Failure
	if rep.FirstUnrecovered != nil {
		unrecovered = &rep.FirstUnrecovered.Failure
	}
	for i := range rep.Failures[:min(len(rep.Failures), maxFailureRows)] {
		f := &rep.Failures[i]
		r := failureRow{Time: c.rel(f.TimeNS), Wall: c.at(f.TimeNS, wallShort), PID: f.PID, TID: f.TID, Symbol: f.Symbol,
			Size: bytesText(f.Size), SizeSource: f.SizeSource, Result: f.ResultName, GPU: "?"}
		if f.GPUIndex != nil {
			r.GPU = fmt.Sprint(*f.GPUIndex)
		}
		for _, g := range f.Grants {
			r.Grants = append(r.Grants, grantText(g))
		}
		if f.GrantsCut {
			r.Grants = append(r.Grants, "… more devices than the recorder keeps")
		}
		if sameCall(rep.FirstFailure, f.TimeNS, f.PID, f.TID, f.Symbol) {
			r.Highlight = true
			r.Tags = append(r.Tags, tag{"b-alloc", "first"})
		}
		if !r.Highlight && rep.Cause.Names(f) {
			r.Tags = append(r.Tags, tag{"b-notmem", "cause"})
		}
		if sameCall(unrecovered, f.TimeNS, f.PID, f.TID, f.Symbol) {
			r.Highlight = true
			r.Tags = append(r.Tags, tag{"b-alloc", "first unrecovered"})
		}
		if f.Recovered {
			r.Tags = append(r.Tags, tag{"b-none", "recovered"})
		}
		if f.PossibleConsequence {
			r.Tags = append(r.Tags, tag{"b-notmem", "possible consequence"})
		}
		v.Rows = append(v.Rows, r)
	}
	v.More = v.Count - len(v.Rows)
	return v
}

// viewsView is the memory-view table, its phases, the traced bytes live
// at the first failure, and the notes that keep the table from seeming
// to contradict the verdict.
type viewsView struct {
	Rows       []viewRow
	PhasesFrom string
	Phases     []phaseHead
	PhaseRows  []phaseRow
	Live       []liveRow
	Notes      []string
}

// viewRow is one field of one view, GPU and scope.
type viewRow struct {
	GPU                    string
	View, ViewLabel, Field string
	Meaning, Scope         string
	Cells                  []cell
	Change                 cell
	Source, Struct         string
	Support, SupportCls    string
	GroupStart             bool
}

// cell is a value in MiB; Bytes is its exact value for the tooltip, ""
// when there is none (Text is then a dash, never a zero).
type cell struct{ Text, Bytes string }

func mibCell(v *uint64) cell {
	if v == nil {
		return cell{Text: "—"}
	}
	return cell{Text: fmt.Sprintf("%.1f", float64(*v)/(1<<20)), Bytes: fmt.Sprintf("%d bytes", *v)}
}

// phaseHead is one phase column.
type phaseHead struct{ Label, Span string }

// phaseRow is one field's last value in each phase.
type phaseRow struct {
	GPU         string
	View, Field string
	Scope       string
	Cells       []cell
}

// liveRow is what one process held through traced calls at the failure.
type liveRow struct {
	PID                      uint32
	GPU, View, Bytes, Detail string
}

func newViews(rep *report.Report, c clock) viewsView {
	v := viewsView{PhasesFrom: rep.PhasesFrom}
	prev := ""
	for _, r := range rep.MemoryViews {
		group := fmt.Sprintf("%d/%s", r.GPU, r.View)
		row := viewRow{GPU: gpuIndex(r.GPU), View: r.View, ViewLabel: viewLabel(r.View), Field: r.Field,
			Meaning: r.Meaning + " — examines " + r.Examines, Scope: scopeText(&r),
			Cells:  []cell{mibCell(r.Start), mibCell(r.Before), mibCell(r.At), mibCell(r.End), mibCell(r.Peak), mibCell(r.Low)},
			Change: cell{Text: "—"}, Source: r.API, Struct: r.Struct, Support: r.Support, SupportCls: statusClass(r.Support),
			GroupStart: prev != "" && group != prev}
		if r.Change != nil {
			row.Change = cell{Text: fmt.Sprintf("%+.1f", float64(*r.Change)/(1<<20)), Bytes: fmt.Sprintf("%d bytes", *r.Change)}
		}
		prev = group
		v.Rows = append(v.Rows, row)
	}
	v.Phases, v.PhaseRows = newPhases(rep, c)
	v.Live = newLive(rep.LiveAtFailure)
	v.Notes = append(reconciledNotes(rep.Evidence), rep.MemoryViewNotes...)
	return v
}

// gpuIndex writes an NVML index; a negative one (traced calls whose GPU
// is unknown) is "?".
func gpuIndex(i int) string {
	if i < 0 {
		return "?"
	}
	return fmt.Sprint(i)
}

// viewLabel names a view as the page writes it.
func viewLabel(view string) string {
	switch view {
	case "bar1":
		return "BAR1"
	case "":
		return "—"
	}
	return view
}

// scopeText is a row's scope with its process and MIG instance, each
// named once: the analysis usually writes them into the scope already
// ("pid 42", "traced MIG 1").
func scopeText(r *report.ViewRow) string {
	s := r.Scope
	add := func(part string) {
		if !namesPart(s, part) {
			s += ", " + part
		}
	}
	if r.PID != 0 {
		add(fmt.Sprintf("pid %d", r.PID))
	}
	if r.MIGIndex != nil {
		add(fmt.Sprintf("MIG %d", *r.MIGIndex))
	}
	return strings.TrimPrefix(s, ", ")
}

// namesPart reports whether s contains part as a whole: "pid 42" is in
// "pid 42" and "traced, pid 42", not in "pid 421".
func namesPart(s, part string) bool {
	for i := strings.Index(s, part); i >= 0; {
		end := i + len(part)
		if end == len(s) || s[end] < '0' || s[end] > '9' {
			return true
		}
		next := strings.Index(s[end:], part)
		if next < 0 {
			return false
		}
		i = end + next
	}
	return false
}

func newPhases(rep *report.Report, c clock) ([]phaseHead, []phaseRow) {
	if len(rep.Phases) == 0 {
		return nil, nil
	}
	heads := make([]phaseHead, 0, len(rep.Phases))
	for _, p := range rep.Phases {
		heads = append(heads, phaseHead{Label: p.Label, Span: c.rel(p.StartNS) + " .. " + c.rel(p.EndNS)})
	}
	var rows []phaseRow
	for i := range rep.MemoryViews {
		r := &rep.MemoryViews[i]
		if len(r.Phases) == 0 {
			continue
		}
		byLabel := map[string]report.PhaseValue{}
		for _, pv := range r.Phases {
			byLabel[pv.Phase] = pv
		}
		row := phaseRow{GPU: gpuIndex(r.GPU), View: r.View, Field: r.Field, Scope: scopeText(r)}
		for _, p := range rep.Phases {
			pv, ok := byLabel[p.Label]
			if !ok {
				row.Cells = append(row.Cells, cell{Text: "—"})
				continue
			}
			row.Cells = append(row.Cells, mibCell(pv.Last))
		}
		rows = append(rows, row)
	}
	return heads, rows
}

func newLive(ls []report.LiveBytes) []liveRow {
	var out []liveRow
	for _, l := range ls {
		d := l.Describe()
		if l.Unsized > 0 {
			d += fmt.Sprintf(", %d of unknown size", l.Unsized)
		}
		gpu := gpuText(l.GPU)
		if l.MIG != nil {
			gpu += fmt.Sprintf(", MIG %d", *l.MIG)
		}
		out = append(out, liveRow{PID: l.PID, GPU: gpu, View: viewLabel(l.View), Bytes: report.HumanBytes(l.Bytes), Detail: d})
	}
	return out
}

// reconciledNotes: the table's "at failure" column is the sample as read.
// When the verdict used a value reconciled with traced calls instead, the
// page says so, or the table would seem to contradict the verdict.
func reconciledNotes(ev []report.Evidence) []string {
	var out []string
	for _, e := range ev {
		if !e.Decisive || e.GPU == nil || e.Value == nil || !strings.Contains(e.Source, "corrected by traced calls") {
			continue
		}
		v := e.Text
		if v == "" {
			v = report.HumanBytes(*e.Value)
		}
		out = append(out, fmt.Sprintf("GPU %d's “at failure” is the sample as read; the verdict used %s: %s (see Evidence).",
			*e.GPU, e.Field, v))
	}
	return out
}

// processRow is one recorded process.
type processRow struct {
	PID, PPID     uint32
	Exe, Name     string
	Args, Exit    string
	Calls, Failed uint64
	Devices       []string
}

func newProcesses(ps []report.ProcessInfo, c clock) []processRow {
	out := make([]processRow, 0, len(ps))
	for _, p := range ps {
		exit := "running at end"
		if x := p.Exit; x != nil {
			switch {
			case x.Code != nil:
				exit = fmt.Sprintf("exit %d at %s", *x.Code, c.rel(x.TimeNS))
			case x.Signal != nil:
				exit = fmt.Sprintf("killed by %s at %s", x.Name, c.rel(x.TimeNS))
			}
			if x.Core {
				exit += " (core dumped)"
			}
		}
		if p.AttachedLate {
			exit += "; attached late"
		}
		r := processRow{PID: p.PID, PPID: p.PPID, Exe: p.Exe, Name: filepath.Base(p.Exe), Args: clip(strings.Join(p.Args, " "), 120),
			Exit: exit, Calls: p.Calls, Failed: p.Failed}
		if p.Exe == "" {
			r.Name = "?"
		}
		for _, d := range p.Devices {
			s := fmt.Sprintf("CUDA %d → %s (%s)", d.Ordinal, gpuText(d.GPU), mapping(d.Method))
			if d.Why != "" {
				s += ": " + d.Why
			}
			r.Devices = append(r.Devices, s)
		}
		out = append(out, r)
	}
	return out
}

// kernelRow is one kernel log line or marker.
type kernelRow struct {
	t                                 int64
	Time, Wall, Kind, Class, Position string
	Text                              string
}

func newKernel(rep *report.Report, c clock) []kernelRow {
	var out []kernelRow
	for _, k := range rep.KernelLog {
		kind := "kernel"
		if k.Xid != nil {
			kind = fmt.Sprintf("Xid %d", *k.Xid)
		}
		out = append(out, kernelRow{t: k.TimeNS, Kind: kind, Class: "k-kernel", Position: k.Position, Text: k.Text})
	}
	for _, m := range rep.Markers {
		out = append(out, kernelRow{t: m.TimeNS, Kind: "marker", Class: "k-marker", Text: m.Label})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].t < out[j].t })
	for i := range out {
		out[i].Time, out[i].Wall = c.rel(out[i].t), c.at(out[i].t, wallShort)
	}
	return out
}

// lossView is what was lost and how NVML sampled.
type lossView struct {
	Known, Lost, BeforeFailure bool
	Calls                      string
	NVMLInit, NVMLClass        string
	NVMLLibrary, NVML          string
	Delay, Unsupported         string
	Interval                   string
}

func newLoss(rep *report.Report) lossView {
	l, sm := rep.Loss, rep.Sampling
	v := lossView{Known: l.Known, BeforeFailure: l.BeforeFailure,
		Lost:     l.LostCalls+l.LostInflight+l.TooDeep+l.LostProc+l.Untracked+l.LostHolds > 0,
		Calls:    l.Summary(),
		NVMLInit: sm.NVMLInit, NVMLClass: statusClass(sm.NVMLInit), NVMLLibrary: sm.NVMLLibrary,
		NVML: fmt.Sprintf("%s, %d thinned out, %s triggered by failures", report.Plural(sm.Samples, "sample"), sm.Thinned,
			report.Plural(sm.Triggered, "round")),
		Unsupported: strings.Join(sm.Unsupported, ", "), Interval: report.Duration(rep.Run.Interval)}
	if l.CountersFrom == report.CountersReading {
		// A reading counts nothing after it: its zeros are not "none lost".
		v.Calls = fmt.Sprintf("as of the recorder's last reading of its counters, at %s (calls after it are not counted): %s",
			report.Rel(l.CountersAtNS, rep.Run.StartNS), v.Calls)
		v.Lost = true
	}
	if l.StackSkipped+l.StackLost > 0 {
		v.Calls += fmt.Sprintf("; stack captures: %d skipped by their rate limit, %d lost (those calls have the frame-pointer walk only)",
			l.StackSkipped, l.StackLost)
	}
	if sm.DelayMedian != nil && sm.DelayMax != nil {
		v.Delay = fmt.Sprintf("median %s, max %s", report.Duration(*sm.DelayMedian), report.Duration(*sm.DelayMax))
	}
	return v
}

// libraryRow is the coverage of one attached libcuda.
type libraryRow struct {
	Path, BuildID   string
	Hooked          int
	Absent, Unknown []string
	Error           string
}

func newCoverage(ls []report.Library) []libraryRow {
	out := make([]libraryRow, 0, len(ls))
	for _, l := range ls {
		out = append(out, libraryRow{Path: l.Path, BuildID: orDash(l.BuildID), Hooked: len(l.Hooked), Absent: l.Absent,
			Unknown: l.Unknown, Error: l.Error})
	}
	return out
}

// callRow is the calls of one symbol.
type callRow struct {
	Symbol, Operation string
	Calls, Failed     uint64
}

// newCalls lists the calls per symbol with each symbol's operation class
// (a dash for a report that names none).
func newCalls(rep *report.Report) []callRow {
	out := make([]callRow, 0, len(rep.Calls))
	for _, c := range rep.Calls {
		out = append(out, callRow{Symbol: c.Symbol, Operation: c.Operation, Calls: c.Calls, Failed: c.Failed})
	}
	return out
}

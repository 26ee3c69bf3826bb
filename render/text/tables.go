package text

import (
	"fmt"
	"strings"

	"github.com/retrivium/forensic/report"
)

// wide reports whether tables fit on one line per row.
func (t *writer) wide() bool { return t.o.Width >= 100 }

// isFirstFailure reports whether f is the first failure ff (nil: there is
// none). A thread makes one call at a time, so these name one call.
func isFirstFailure(ff, f *report.Failure) bool {
	return ff != nil && f.TimeNS == ff.TimeNS && f.PID == ff.PID && f.TID == ff.TID && f.Symbol == ff.Symbol
}

func (t *writer) failures(rep *report.Report) {
	t.heading("FAILURES (" + report.Plural(len(rep.Failures)+rep.FailuresTruncated, "failed call") + ")")
	if len(rep.Failures) == 0 {
		t.printf("  none\n")
		return
	}
	shown := rep.Failures[:min(len(rep.Failures), 50)]
	t.failureLegend(rep, shown)
	cols := failureColumns(rep, shown)
	oneLine := 2+10+1+8+1+cols[0]+1+10+2+cols[1]+1+cols[2] <= t.o.Width
	if oneLine {
		t.printf("  %-10s %-8s %-*s %10s  %-*s %s\n", "time", "pid", cols[0], "call", "size", cols[1], "result", "notes")
	}
	for _, f := range shown {
		t.failureRow(rep, &f, oneLine, cols)
	}
	if n := len(rep.Failures) - len(shown) + rep.FailuresTruncated; n > 0 {
		t.printf("  ... %d more (see --json)\n", n)
	}
}

// failureLegends say what each note of the failures table means, in
// the order failureNotes writes them: briefly, and in full for --explain.
var failureLegends = []struct{ note, brief, full string }{
	{"FIRST", "the first failure", "the first failure (the first failed allocation, mapping or context call, when one failed)"},
	{"cause", "the earlier failure named as the cause", "the earlier failure the verdict names as the cause"},
	{"UNRECOVERED", "the first the process did not recover from", "the first one the process did not recover from"},
	{"recovered", "a later, at least as large call succeeded",
		"a later call of the same operation on the same device, at least as large (a release: of the same handle), succeeded"},
	{"consequence", "after it, in its process and context",
		"after the failure that matters, in its process and context, so possibly caused by it"},
}

// failureLegend says once what the notes in the table mean, only those
// that appear in it.
func (t *writer) failureLegend(rep *report.Report, shown []report.Failure) {
	seen := map[string]bool{}
	for i := range shown {
		for _, n := range strings.Split(failureNotes(rep, &shown[i]), ", ") {
			seen[n] = true
		}
	}
	var parts []string
	for _, l := range failureLegends {
		if !seen[l.note] {
			continue
		}
		if t.o.Explain {
			parts = append(parts, l.note+": "+l.full)
		} else {
			parts = append(parts, l.note+": "+l.brief)
		}
	}
	parts = append(parts, "results drop CUDA_ERROR_")
	t.wrap("  ", strings.Join(parts, "; ")+".")
}

// failureColumns measures the call, result and notes columns.
func failureColumns(rep *report.Report, fs []report.Failure) [3]int {
	cols := [3]int{4, 6, 5}
	for _, f := range fs {
		cols[0] = max(cols[0], len(f.Symbol))
		cols[1] = max(cols[1], len(strings.TrimPrefix(f.ResultName, "CUDA_ERROR_")))
		cols[2] = max(cols[2], len(failureNotes(rep, &f)))
	}
	return cols
}

// failureNotes are a failure's notes in the table.
func failureNotes(rep *report.Report, f *report.Failure) string {
	var notes []string
	if isFirstFailure(rep.FirstFailure, f) {
		notes = append(notes, "FIRST")
	} else if rep.Cause.Names(f) {
		notes = append(notes, "cause")
	}
	if u := rep.FirstUnrecovered; u != nil && isFirstFailure(&u.Failure, f) {
		notes = append(notes, "UNRECOVERED")
	}
	if f.Recovered {
		notes = append(notes, "recovered")
	}
	if f.PossibleConsequence {
		notes = append(notes, "consequence")
	}
	return strings.Join(notes, ", ")
}

func (t *writer) failureRow(rep *report.Report, f *report.Failure, oneLine bool, cols [3]int) {
	size := ""
	if f.Size != nil {
		size = report.HumanBytes(*f.Size)
	}
	notes := failureNotes(rep, f)
	res := strings.TrimPrefix(f.ResultName, "CUDA_ERROR_")
	if oneLine {
		t.printf("  %-10s %-8d %-*s %10s  %-*s %s\n", t.rel(f.TimeNS), f.PID, cols[0], f.Symbol, size, cols[1], res, notes)
		return
	}
	t.wrap("  ", fmt.Sprintf("%s pid %d %s %s", t.rel(f.TimeNS), f.PID, f.Symbol, size))
	t.wrap("      ", strings.TrimSpace(res+"  "+notes))
}

// memoryViews prints the memory-view table: one row per field, GPU and
// scope, in MiB. Wide terminals get one line per row; narrow ones the
// field's full label, then its values.
func (t *writer) memoryViews(rep *report.Report) {
	t.heading("MEMORY VIEWS")
	t.wrap("  ", "MiB = 2^20 bytes. Framebuffer and BAR1 are separate views, never added.")
	if t.o.Explain {
		t.wrap("  ", "Values at the run's start, just before the first failure, at the failure (the sample as read), "+
			"at the end, the peak (for a free row its low: the least it read), and the change from start to end; "+
			"n/a where NVML could not read the field. A field that never changed is one line.")
	}
	if t.wide() {
		t.line("  %-3s %-27s %-11s %8s %8s %8s %8s %8s %9s", "GPU", "field", "scope", "start", "before", "at fail", "end", "peak/low", "change")
	}
	var notes []string
	steadyRows := map[string][]string{} // "GPU 0 framebuffer" -> "total 16384.0", ...
	var steadyOrder []string
	for _, v := range rep.MemoryViews {
		cell := mib
		label := v.Field
		if v.Support != "supported" {
			notes = append(notes, fmt.Sprintf("GPU %d %s: %s", v.GPU, v.Field, v.Support))
			label += " *"
			if v.Start == nil && v.End == nil {
				// Never a zero in place of a value that could not be read.
				cell = func(*uint64) string { return "n/a" }
			}
		}
		if still := steady(&v); still != "" && v.Support == "supported" {
			view, field, ok := strings.Cut(v.Field, " ")
			key := fmt.Sprintf("GPU %d %s", v.GPU, view)
			if !ok || v.PID != 0 || v.MIGIndex != nil {
				key, field = rowName(&v), "value"
			}
			if steadyRows[key] == nil {
				steadyOrder = append(steadyOrder, key)
			}
			steadyRows[key] = append(steadyRows[key], field+" "+still)
			continue
		}
		// Free memory's extreme that matters is its least, not its most.
		extreme, extremeName := v.Peak, "peak"
		if strings.HasSuffix(v.Field, " free") {
			extreme, extremeName = v.Low, "low"
		}
		if t.wide() {
			t.line("  %-3d %-27s %-11s %8s %8s %8s %8s %8s %9s", v.GPU, label, v.Scope,
				cell(v.Start), cell(v.Before), cell(v.At), cell(v.End), cell(extreme), mibSigned(v.Change))
			continue
		}
		t.wrap("  ", fmt.Sprintf("GPU %d %s (%s)", v.GPU, label, v.Scope))
		t.wrap("      ", fmt.Sprintf("start %s  before %s  at failure %s  end %s  %s %s%s",
			cell(v.Start), cell(v.Before), cell(v.At), cell(v.End), extremeName, cell(extreme), changeCell(v.Change)))
	}
	for _, k := range steadyOrder {
		t.wrap("  ", k+", unchanged throughout: "+strings.Join(steadyRows[k], ", "))
	}
	for _, n := range notes {
		t.wrap("  * ", n)
	}
	t.reconciledNote(rep)
	for _, n := range rep.MemoryViewNotes {
		t.wrap("  note: ", n)
	}
	t.phases(rep)
}

// steady is a row's one value when every value it has is the same (a
// field that never changed: its columns say nothing more), else "".
func steady(v *report.ViewRow) string {
	var seen *uint64
	for _, x := range []*uint64{v.Start, v.Before, v.At, v.End, v.Peak, v.Low} {
		switch {
		case x == nil:
		case seen == nil:
			seen = x
		case *x != *seen:
			return ""
		}
	}
	for _, p := range v.Phases {
		for _, x := range []*uint64{p.Last, p.Peak} {
			if x != nil && seen != nil && *x != *seen {
				return ""
			}
		}
	}
	if seen == nil {
		return ""
	}
	return mib(seen)
}

// changeCell is the change from start to end for a narrow row, left out
// when it is 0: a row's start and end already show no change.
func changeCell(v *int64) string {
	if v == nil || *v == 0 {
		return ""
	}
	return "  change " + mibSigned(v)
}

// reconciledNote: the "at failure" column is the sample as read. When the
// verdict used a value reconciled with traced calls instead, say so here,
// or the table seems to contradict the verdict.
func (t *writer) reconciledNote(rep *report.Report) {
	for _, e := range rep.Evidence {
		if !e.Decisive || e.GPU == nil || e.Value == nil || !strings.Contains(e.Source, "corrected by traced calls") {
			continue
		}
		v := e.Text
		if v == "" {
			v = report.HumanBytes(*e.Value)
		}
		t.wrap("  note: ", fmt.Sprintf("GPU %d's \"at failure\" is the sample as read; the verdict used %s: %s (see EVIDENCE).",
			*e.GPU, e.Field, v))
	}
}

func (t *writer) phases(rep *report.Report) {
	if len(rep.Phases) == 0 {
		return
	}
	from := "split at the run's landmarks (no markers were recorded)"
	if rep.PhasesFrom == "markers" {
		from = "split at the markers"
	}
	t.wrap("  ", "phases, "+from+":")
	labels := make([]string, len(rep.Phases))
	for i, p := range rep.Phases {
		labels[i] = p.Label
		t.wrap("    ", p.Label+": "+t.span(p.StartNS, p.EndNS))
	}
	var rows []string
	for _, v := range rep.MemoryViews {
		if growth := phaseGrowth(&v); growth != nil {
			rows = append(rows, fmt.Sprintf("%s: %s", rowName(&v), strings.Join(growth, "  ")))
		}
	}
	if len(rows) == 0 {
		t.wrap("  ", "no view grew or shrank within a phase")
		return
	}
	t.wrap("  ", "growth within each phase ("+strings.Join(labels, " | ")+"), MiB; - where the phase has no value:")
	for _, r := range rows {
		t.wrap("    ", r)
	}
}

// phaseGrowth is how much a row grew within each phase: its last value
// in the phase less its value when the phase began (the last value of the
// phase before, the run's start for the first, nothing for a process
// with no value at the start). Nil for a row that never
// grew nor shrank: it says nothing.
func phaseGrowth(v *report.ViewRow) []string {
	prev, moved := v.Start, false
	if prev == nil && v.PID != 0 {
		prev = new(uint64) // a process's use begins at nothing
	}
	var out []string
	for _, pv := range v.Phases {
		switch {
		case pv.Last == nil:
			out = append(out, "-")
			continue
		case prev == nil:
			out = append(out, "?")
		default:
			d := int64(*pv.Last) - int64(*prev)
			moved = moved || d != 0
			out = append(out, mibSigned(&d))
		}
		prev = pv.Last
	}
	if !moved {
		return nil
	}
	return out
}

// rowName names a memory-view row: its GPU and field, and the process or
// MIG instance it is about.
func rowName(v *report.ViewRow) string {
	s := fmt.Sprintf("GPU %d %s", v.GPU, v.Field)
	if v.PID != 0 || v.MIGIndex != nil {
		s += " (" + v.Scope + ")"
	}
	return s
}

// span says when a stretch of the run was: "+0.171 s to +0.227 s", or,
// when both ends read the same, once: "at +0.171 s, for 78 µs".
func (t *writer) span(from, to int64) string {
	a, b := t.rel(from), t.rel(to)
	switch {
	case a != b:
		return a + " to " + b
	case to > from:
		return "at " + a + ", for " + report.Duration(to-from)
	}
	return "at " + a
}

func (t *writer) live(rep *report.Report) {
	if len(rep.LiveAtFailure) == 0 {
		return
	}
	t.heading("LIVE AT THE FIRST FAILURE (traced calls, per process)")
	for _, l := range rep.LiveAtFailure {
		gpu := "?"
		if l.GPU != nil {
			gpu = fmt.Sprint(*l.GPU)
		}
		un := ""
		if l.Unsized > 0 {
			un = fmt.Sprintf(" (+%d of unknown size)", l.Unsized)
		}
		t.wrap("  ", fmt.Sprintf("pid %d, GPU %s, %s: %s in %s%s", l.PID, gpu, l.View, report.HumanBytes(l.Bytes),
			l.Describe(), un))
	}
}

func (t *writer) processes(rep *report.Report) {
	t.heading("PROCESSES")
	listed, counted := report.SplitBystanders(rep.Processes)
	for _, p := range listed {
		exit := "running at the end"
		if x := p.Exit; x != nil {
			switch {
			case x.Code != nil:
				exit = fmt.Sprintf("exit %d", *x.Code)
			case x.Signal != nil:
				exit = "killed by " + x.Name
			}
		}
		late := ""
		if p.AttachedLate {
			late = ", already running when recording started"
		}
		t.wrap("  ", fmt.Sprintf("pid %d (parent %d): %s, %s, %d failed%s", p.PID, p.PPID, exit,
			report.Plural(int(p.Calls), "call"), p.Failed, late))
		// "$ " marks the command line as a command, not prose; its wrapped
		// lines hang deeper than the device lines that follow it.
		t.wrap("      $ ", report.ClipMiddle(p.CommandLine(), 2*(t.o.Width-10)))
		for _, d := range p.Devices {
			g := "unknown"
			if d.GPU != nil {
				g = fmt.Sprintf("GPU %d", *d.GPU)
			}
			t.wrap("      ", fmt.Sprintf("CUDA device %d is %s (%s)%s", d.Ordinal, g, matchMethod(d.Method), noteOf(d.Why)))
		}
	}
	if len(counted) > 0 {
		// The five commonest names; a sentence of a hundred names says
		// less than --json.
		n, names := 0, []string{}
		for i, c := range counted {
			n += c.Count
			if i == 5 {
				names = append(names, report.Plural(len(counted)-5, "other program"))
			} else if i < 5 {
				names = append(names, fmt.Sprintf("%s (%d)", c.Name, c.Count))
			}
		}
		t.wrap("  ", fmt.Sprintf("and %d more that made no CUDA call and exited 0 (--json lists each): %s",
			n, strings.Join(names, ", ")))
	}
}

func (t *writer) coverage(rep *report.Report) {
	t.heading("COVERAGE (libcuda files the probes were attached to)")
	if len(rep.Coverage) == 0 {
		t.printf("  none\n")
	}
	for _, l := range rep.Coverage {
		counts := report.Plural(len(l.Hooked), "symbol") + " attached"
		if n := len(l.Absent); n > 0 {
			counts += fmt.Sprintf(", %d absent", n)
		}
		if n := len(l.Unknown); n > 0 {
			counts += fmt.Sprintf(", %d exported but not attached", n)
		}
		t.wrap("  ", fmt.Sprintf("%s (build id %s): %s", l.Path, l.BuildID, counts))
		if len(l.Absent) > 0 {
			t.wrap("    absent: ", strings.Join(l.Absent, " "))
		}
		if len(l.Unknown) > 0 {
			t.wrap("    not attached: ", strings.Join(l.Unknown, " "))
		}
	}
}

func (t *writer) kernelAndMarkers(rep *report.Report) {
	if len(rep.KernelLog) > 0 {
		t.heading("KERNEL LOG (NVRM and Xid lines)")
		for _, k := range rep.KernelLog {
			pos := ""
			if k.Position != "" {
				pos = " (" + k.Position + " the first failure)"
			}
			t.wrap("  ", t.rel(k.TimeNS)+pos+": "+k.Text)
		}
	}
	if len(rep.Markers) > 0 {
		t.heading("MARKERS")
		for _, m := range rep.Markers {
			t.wrap("  ", t.rel(m.TimeNS)+"  "+m.Label)
		}
	}
}

func (t *writer) loss(rep *report.Report) {
	l := rep.Loss
	t.heading("LOSS AND SAMPLING")
	switch {
	case !l.Known:
		t.wrap("  ", "the recorder's loss counters were never read: calls seen and lost are unknown")
	case l.CountersFrom == report.CountersReading:
		// A reading counts nothing after it: never "none lost" beyond it.
		t.wrap("  ", fmt.Sprintf("as of the recorder's last reading of its counters, at %s (the record ends at %s): %s; calls after it are not counted",
			t.rel(l.CountersAtNS), t.rel(rep.Run.EndNS), l.Summary()))
	default:
		t.wrap("  ", l.Summary())
	}
	if l.StackSkipped+l.StackLost > 0 {
		t.wrap("  ", fmt.Sprintf("stack captures: %d skipped by their rate limit, %d lost; those calls have the frame-pointer walk only",
			l.StackSkipped, l.StackLost))
	}
	t.wrap("  ", samplingText(&rep.Sampling))
}

// samplingText says how NVML was read: its library and status, the
// samples, and the delay of those failures triggered.
func samplingText(sm *report.Sampling) string {
	lib := ""
	if sm.NVMLLibrary != "" {
		lib = " (" + sm.NVMLLibrary + ")"
	}
	var s string
	switch sm.NVMLInit {
	case "NVML_SUCCESS":
		s = "NVML" + lib + ": "
	case "", "no inventory recorded":
		s = "NVML: no inventory recorded; "
	default:
		s = "NVML" + lib + " did not initialize (" + sm.NVMLInit + "); "
	}
	s += report.Plural(sm.Samples, "sample")
	if sm.Thinned > 0 {
		s += fmt.Sprintf(", %d thinned out", sm.Thinned)
	}
	if sm.Triggered == 0 {
		return s + ", none triggered by a failure"
	}
	s += ", " + report.Plural(sm.Triggered, "round") + " triggered by failures"
	if sm.DelayMedian != nil && sm.DelayMax != nil {
		s += fmt.Sprintf("; delay from a failure to its sample: median %s, max %s", report.Duration(*sm.DelayMedian), report.Duration(*sm.DelayMax))
	}
	return s
}

// mib formats bytes for the memory-view table (MiB = 2^20 bytes).
func mib(v *uint64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(*v)/(1<<20))
}

func mibSigned(v *int64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%+.1f", float64(*v)/(1<<20))
}

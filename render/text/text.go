// Package text renders a report for people, in a terminal: the verdict
// first, then what to do next, the first failure, the evidence, and the
// tables. Every line fits the width it is given (80 columns included):
// prose, labels and stack frames wrap, they are never cut; only table
// cells are shortened, and never a value the verdict used.
package text

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/retrivium/forensic/report"
)

// Options adjust the human report.
type Options struct {
	// Color emphasizes the verdict with ANSI escapes (only for a TTY).
	Color bool
	// Width is the terminal's width in columns (default 100; at least 60).
	Width int
	// Explain adds the full accounts behind the short tags: how a value
	// was reconciled with the traced calls, the full legends, every run
	// of a job on its own line.
	Explain bool
	// Input names what was analyzed as the user named it (a directory, a
	// glob, several files), for the header; empty: the run's own path.
	Input string
}

// writer writes the report; the first write error sticks.
type writer struct {
	w     io.Writer
	o     Options
	rep   *report.Report
	start int64
	err   error
}

func (t *writer) printf(format string, a ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format, a...)
	}
}

func (t *writer) heading(s string) {
	if t.o.Color {
		t.printf("\n\x1b[1m%s\x1b[0m\n", s)
	} else {
		t.printf("\n%s\n", s)
	}
}

// wrap prints prose after a first-line prefix, wrapped at the width, with
// continuation lines indented to the prefix's width. A word longer than a
// line is broken, so no line is ever wider than the width.
func (t *writer) wrap(prefix, s string) {
	for _, line := range wrapLines(prefix, s, t.o.Width) {
		t.printf("%s\n", line)
	}
}

// wrapLines wraps s after prefix into lines of at most width columns.
func wrapLines(prefix, s string, width int) []string {
	return hangLines(prefix, strings.Repeat(" ", utf8.RuneCountInString(prefix)), s, width)
}

// hangLines wraps s after prefix into lines of at most width columns, the
// continuation lines after indent. A word longer than a line is broken,
// so no line is ever wider than the width, and nothing is cut.
func hangLines(prefix, indent, s string, width int) []string {
	var out []string
	line, lead := "", prefix
	room := func() int { return max(width-utf8.RuneCountInString(lead), 10) }
	flush := func() {
		out = append(out, lead+line)
		line, lead = "", indent
	}
	for _, word := range strings.Fields(s) {
		for utf8.RuneCountInString(word) > room() {
			if line != "" {
				flush()
			}
			r := []rune(word)
			line, word = string(r[:room()]), string(r[room():])
			flush()
		}
		if line != "" && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) > room() {
			flush()
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" || len(out) == 0 {
		flush()
	}
	return out
}

// line prints one table line, shortened to the width if it must be (only
// tables whose cells are not verdict values use it).
func (t *writer) line(format string, a ...any) {
	s := fmt.Sprintf(format, a...)
	t.printf("%s\n", clip(s, t.o.Width))
}

func (t *writer) rel(ns int64) string { return report.Rel(ns, t.start) }

// clipMiddle shortens s to n runes by eliding its middle (for paths).
func clipMiddle(s string, n int) string {
	r := []rune(s)
	if len(r) <= n || n < 5 {
		return s
	}
	half := (n - 1) / 2
	return string(r[:half]) + "…" + string(r[len(r)-(n-1-half):])
}

// clip shortens s to n runes, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// Write writes the human report.
func Write(w io.Writer, rep *report.Report, o Options) error {
	if o.Width == 0 {
		o.Width = 100
	}
	o.Width = max(o.Width, 60)
	t := &writer{w: w, o: o, start: rep.Run.StartNS, rep: rep}
	t.header(rep)
	t.verdict(rep)
	t.glance(rep)
	t.jobs(rep)
	t.nextSteps(rep)
	if rep.FirstFailure == nil {
		t.headroom(rep) // how close a run that did not fail came
	}
	t.runs(rep)
	if rep.FirstFailure == nil {
		t.budget(rep) // where the memory went when it came closest
	}
	if f := rep.FirstFailure; f != nil {
		t.failure("FIRST FAILURE", f, rep.Cause, "")
	}
	if u := rep.FirstUnrecovered; u != nil {
		t.unrecovered(rep, u)
	}
	if rep.FirstFailure != nil {
		t.headroom(rep)
		t.budget(rep)
	}
	t.evidence("EVIDENCE", rep.Evidence)
	t.samples(rep.NearestSamples)
	t.missing(rep)
	t.failures(rep)
	t.memoryViews(rep)
	t.live(rep)
	t.processes(rep)
	t.coverage(rep)
	t.kernelAndMarkers(rep)
	t.loss(rep)
	return t.err
}

func (t *writer) header(rep *report.Report) {
	r := rep.Run
	what := r.Mode
	if r.TargetPID != 0 {
		what += fmt.Sprintf(" %d", r.TargetPID)
	} else if len(r.Scope) > 0 {
		what += " in " + strings.Join(r.Scope, ", ")
	}
	end := r.Ended
	if r.StopReason != "" {
		end += ", " + stopReasons[r.StopReason]
	}
	if x := r.WorkloadExit; x != nil {
		switch {
		case x.Code != nil:
			end += fmt.Sprintf(", workload exit %d", *x.Code)
		case x.Signal != nil:
			end += ", workload killed by " + x.Name
		}
	}
	if r.Interrupted != "" {
		end += " (interrupted)"
	}
	in := t.o.Input
	if in == "" {
		in = r.Path
	}
	t.printf("forensic analyze %s\n", clipMiddle(in, t.o.Width-len("forensic analyze ")))
	t.wrap("  ", fmt.Sprintf("run %s (%s), %s, %s, %s, host %s", r.ID, what, report.Duration(r.DurationNS), end,
		report.Plural(int(r.Events), "event"), r.Host))
	if len(r.Command) > 0 {
		// The command on a line of its own: a command is no sentence.
		t.wrap("  command ", report.ClipMiddle(strings.Join(r.Command, " "), t.o.Width-10)) // whole under PROCESSES
	}
	if f := r.Flight; f != nil {
		t.wrap("  ", flightLine(f))
	}
}

// flightLine says how a flight recording was read.
func flightLine(f *report.FlightRead) string {
	s := "flight recording: " + report.Plural(f.SegmentsRead, "segment") + " read"
	switch f.Live {
	case "copy":
		s += ", the live one from a copy its recorder made at " + f.LiveTaken
	case "snapshot":
		s += ", the live one from its snapshot of " + f.LiveTaken
	case "not-read":
		s += ", the live one not read"
	}
	if n := len(f.NotRead) - len(f.SegmentsLost); n > 0 {
		s += fmt.Sprintf(", %d not read", n)
	}
	if n := len(f.SegmentsLost); n > 0 {
		s += fmt.Sprintf("; %s missing (%s lost)", report.Plural(n, "segment"), report.Plural(int(f.LostCalls), "call event"))
	}
	if f.DroppedRanges > 0 {
		why := "by retention"
		switch {
		case f.DroppedWindowCut == f.DroppedRanges:
			why = "from failure windows (the windows alone exceeded the size bound)"
		case f.DroppedWindowCut > 0:
			why = fmt.Sprintf("by retention, %d of them from failure windows", f.DroppedWindowCut)
		}
		s += fmt.Sprintf("; %s (%s) deleted %s", report.Plural(f.DroppedRanges, "stretch"), report.Plural(int(f.DroppedCalls), "call event"), why)
	}
	return s + fmt.Sprintf("; the recorder counted %s", report.Plural(int(f.EventsRecorded), "call event"))
}

// stopReasons says in words why the recorder stopped.
var stopReasons = map[string]string{
	"workload-exited": "the workload exited", "target-exited": "the target exited", "signal": "stopped by a signal",
	"stopped": "stopped", "disk-full": "the disk filled up", "write-error": "a write failed", "error": "an error",
}

func (t *writer) verdict(rep *report.Report) {
	capacity := "none (no failure)"
	if rep.Capacity != nil {
		capacity = string(*rep.Capacity)
	}
	head := fmt.Sprintf("VERDICT  attribution %s, capacity %s", rep.Attribution, capacity)
	if t.o.Color {
		t.printf("\n\x1b[%sm%s\x1b[0m\n", verdictColor(rep.Attribution), head)
	} else {
		t.printf("\n%s\n", head)
	}
	t.wrap("  ", rep.Verdict)
}

// verdictColors are the ANSI styles of the verdict heading, one per
// attribution, meaning what the HTML report's colours mean: red only for an
// allocation problem, purple a mapping problem, amber a failure that is not
// about memory, orange missing evidence, green no failure.
var verdictColors = map[report.Attribution]string{
	report.AttrAllocation:      "1;31",
	report.AttrMapping:         "1;35",
	report.AttrNotMemory:       "1;33",
	report.AttrMissingEvidence: "1;38;5;166",
	report.AttrNone:            "1;32",
}

// verdictColor is the style of an attribution's heading (bold alone for
// one this renderer does not know).
func verdictColor(a report.Attribution) string {
	if c, ok := verdictColors[a]; ok {
		return c
	}
	return "1"
}

// glanceWidth is the width of the summary's labels.
const glanceWidth = 12

// glance prints the summary under the verdict: what failed, the numbers
// compared, who held the memory, which process, what to do first. A
// command line too long for two lines is shortened in its middle.
func (t *writer) glance(rep *report.Report) {
	lines := rep.Glance()
	if len(lines) == 0 {
		return
	}
	t.printf("\n")
	// One line for the process, most of it the command line's start (the
	// program and its first arguments): the whole command line is under
	// FIRST FAILURE and PROCESSES, and the first screen keeps room for
	// the next step.
	room := t.o.Width - glanceWidth
	for _, l := range lines {
		text := l.Text
		if l.Command != "" {
			n := room - utf8.RuneCountInString(l.Head) - utf8.RuneCountInString(l.Tail)
			text = l.Head + report.ClipHead(l.Command, max(n, 20)) + l.Tail
		}
		t.wrap(fmt.Sprintf("  %-*s", glanceWidth-2, l.Label), text)
	}
}

func (t *writer) nextSteps(rep *report.Report) {
	if len(rep.NextSteps) == 0 {
		return
	}
	t.heading("NEXT STEPS")
	for _, s := range rep.NextSteps {
		t.wrap("  - ", s)
	}
}

func (t *writer) failure(title string, f *report.Failure, cause *report.Cause, run string) {
	t.heading(title)
	if run != "" {
		t.wrap("  run       ", run)
	}
	t.wrap("  call      ", fmt.Sprintf("%s (%s), result %d %s", f.Symbol, f.Operation, f.Result, f.ResultName))
	if f.Size != nil {
		size := fmt.Sprintf("%s (%d bytes)", report.HumanBytes(*f.Size), *f.Size)
		if f.SizeSource != "" {
			size += ", from " + f.SizeSource
		}
		t.wrap("  size      ", size)
	}
	for _, g := range f.Grants {
		t.wrap("  grants    ", grantText(g))
	}
	if f.GrantsCut {
		t.wrap("  grants    ", "(more devices were granted than the recorder keeps)")
	}
	gpu := "an unknown GPU"
	if f.GPUIndex != nil {
		gpu = fmt.Sprintf("GPU %d", *f.GPUIndex)
		if f.MIGIndex != nil {
			gpu += fmt.Sprintf(" MIG instance %d", *f.MIGIndex)
		}
		if f.GPU != nil {
			gpu += " " + *f.GPU
		}
	}
	t.wrap("  process   ", t.procName(f, run != ""))
	where := fmt.Sprintf("CUDA device %d is %s (%s)", f.CUDADevice, gpu, matchMethod(f.GPUMapping))
	if f.GPUMapping == report.MappingNoContext {
		where = "no GPU: " + matchMethod(f.GPUMapping)
	}
	t.wrap("  device    ", where)
	if f.ApertureGPU != nil {
		t.wrap("  aperture  ", fmt.Sprintf("GPU %d's BAR1 (%s)", *f.ApertureGPU, apertureWhose(f.ApertureOf)))
	}
	t.wrap("  time      ", fmt.Sprintf("%s  %s  phase: %s", t.rel(f.TimeNS), f.Wall, f.Phase))
	if f.Recovered {
		how := "yes: the same process later succeeded at the same operation on the same device for at least the same size"
		if f.Operation == "free" {
			how = "yes: the same process later released the same handle"
		}
		t.wrap("  recovered ", how)
	}
	if f.Frozen {
		t.wrap("  frozen    ", "the process was held stopped while its GPUs were sampled")
	}
	t.stack(f.Stack)
	if cause != nil {
		t.wrap("  cause     ", cause.Text)
	}
}

// procName names a failure's process by its command line (shortened in
// the middle to two lines when it must be) and its thread; other is set
// for a failure from another run, whose processes this report lacks.
func (t *writer) procName(f *report.Failure, other bool) string {
	s := fmt.Sprintf("pid %d", f.PID)
	var p *report.ProcessInfo // nil for another run's failure
	if !other {
		p = t.rep.ProcessOf(f.PID)
	}
	if p != nil {
		s = fmt.Sprintf("pid %d: %s", f.PID, report.ClipMiddle(p.CommandLine(), 2*(t.o.Width-14)))
	}
	if th := f.ThreadText(p); th != "" {
		s += " (" + th + ")"
	}
	return s
}

func grantText(g report.Grant) string {
	where := fmt.Sprintf("CUDA device %d", g.CUDADevice)
	if g.GPU != nil {
		where += fmt.Sprintf(" (GPU %d)", *g.GPU)
	}
	s := where + ", " + g.Access + " access"
	if g.Peer {
		s += ", a peer of the memory's owner: through the owner's BAR1 aperture"
	} else {
		s += ", the memory's owner"
	}
	return s
}

// matchMethod says in words how a CUDA device was matched to a GPU.
func matchMethod(m string) string { return report.MappingWords(m) }

// maxFrames is how many frames of each kind a stack lists.
const maxFrames = 12

// stack prints a failure's user stack, innermost first: for a Python
// process its Python frames first (function, file and line), then the
// native frames.
func (t *writer) stack(st *report.Stack) {
	if st == nil {
		return
	}
	// A Python process's interpreter heads the stack, before the note
	// (which may say why its frames are missing).
	head := st.Note
	if v := st.PythonText(); v != "" {
		head = strings.TrimSuffix(v+"; "+st.Note, "; ")
	}
	if head != "" {
		t.wrap("  stack     ", head)
	} else {
		t.printf("  stack\n")
	}
	var py, native []report.Frame
	for _, fr := range st.Frames {
		if fr.Language == report.LangPython {
			py = append(py, fr)
		} else {
			native = append(native, fr)
		}
	}
	user := report.UserFrameOf(st)
	if len(py) == 0 {
		t.frames("            ", native, user)
		return
	}
	t.frames("  python    ", py, user)
	t.frames("  native    ", native, user)
}

// frames prints frames under a label, at most maxFrames. A frame too wide
// for one line wraps, its continuation indented under its text by two
// more columns: a symbol's offset and a file's name are never cut.
func (t *writer) frames(label string, frames []report.Frame, user *report.Frame) {
	more := strings.Repeat(" ", utf8.RuneCountInString(label)+2)
	for i, fr := range frames {
		if i > 0 {
			label = "            "
		}
		if i >= maxFrames {
			t.printf("%s... %d more frames\n", label, len(frames)-i)
			break
		}
		text := frameText(fr)
		if user != nil && fr == *user {
			text += " <- your code"
		}
		for _, l := range hangLines(label, more, text, t.o.Width) {
			t.printf("%s\n", l)
		}
	}
}

// frameText is one frame as the report shows it: a Python function with
// its file and line, a native one with its offset and library.
func frameText(fr report.Frame) string {
	if fr.Language == report.LangPython {
		where := fr.File
		if fr.Line > 0 {
			where += fmt.Sprintf(":%d", fr.Line)
		}
		return cmp.Or(fr.Function, "?") + " (" + where + ")"
	}
	if fr.Function == "" {
		return fmt.Sprintf("0x%x (%s)", fr.Address, fr.Library)
	}
	return fmt.Sprintf("%s+0x%x (%s)", fr.Function, fr.Offset, fr.Library)
}

// evidence lists each value a verdict used: the label in full, the value,
// and where it came from.
func (t *writer) evidence(title string, ev []report.Evidence) {
	if len(ev) == 0 {
		return
	}
	t.heading(title)
	for _, e := range ev {
		val := e.Text
		if e.Value != nil {
			if e.Unit == "bytes" {
				val = report.HumanBytes(*e.Value)
				if e.Text != "" {
					val = e.Text
				}
			} else {
				val = fmt.Sprintf("%d %s", *e.Value, e.Text)
			}
		}
		mark := "  "
		if e.Decisive {
			mark = "> "
		}
		t.wrap(mark, e.Field+": "+val)
		gpu := ""
		if e.GPU != nil {
			gpu = fmt.Sprintf(", GPU %d", *e.GPU)
		}
		at := ""
		if e.TimeNS != 0 {
			at = ", at " + t.rel(e.TimeNS) // 0: the value has no time of its own
		}
		note := e.Tag()
		if t.o.Explain {
			note = e.Note
		}
		t.wrap("      ", fmt.Sprintf("from %s, %s%s%s%s", e.Source, e.Status, at, gpu, noteOf(note)))
	}
	for _, e := range ev {
		if e.Decisive {
			t.wrap("  ", "> marks the value the verdict compared the request with.")
			break
		}
	}
}

func (t *writer) samples(ns *report.NearestSamples) {
	if ns == nil {
		return
	}
	gpu := "an unknown GPU"
	if ns.GPU >= 0 {
		gpu = fmt.Sprintf("GPU %d", ns.GPU)
	}
	t.heading("SAMPLES AROUND THE FIRST FAILURE (" + gpu + ", NVML, as read)")
	for _, grp := range []struct {
		name string
		s    []report.SampleRef
	}{{"before", ns.Before}, {"at", ns.At}, {"after", ns.After}} {
		for _, s := range grp.s {
			if s.Kind == "processes" && s.Status == "NVML_SUCCESS" && !t.o.Explain {
				continue // a process list read well says nothing here: its usage is in EVIDENCE
			}
			extra := ""
			if s.DelayNS != nil {
				extra = fmt.Sprintf(", taken %s after the failure", report.Duration(*s.DelayNS))
				if s.Frozen {
					extra += " with the process held stopped"
				}
			}
			prefix := fmt.Sprintf("  %-6s %-11s ", grp.name, kindName(s.Kind))
			t.wrap(prefix, fmt.Sprintf("%s: %s%s", t.rel(s.StartNS), s.Status, extra))
			if s.Kind != "processes" {
				api := "" // the API is in EVIDENCE's sources
				if t.o.Explain {
					api = " [" + s.API + "]"
				}
				t.wrap(strings.Repeat(" ", len(prefix)), fmt.Sprintf("free %s, used %s, total %s%s", bytesOrDash(s.Free),
					bytesOrDash(s.Used), bytesOrDash(s.Total), api))
			}
		}
	}
	if len(ns.Before)+len(ns.At)+len(ns.After) == 0 {
		t.printf("  none\n")
	}
}

// kindName names a sample kind as the report writes it.
func kindName(kind string) string {
	if kind == "bar1" {
		return "BAR1"
	}
	return kind
}

func (t *writer) missing(rep *report.Report) {
	if len(rep.Missing) == 0 {
		return
	}
	t.heading("MISSING EVIDENCE (! = it changed the verdict)")
	for _, m := range rep.Missing {
		mark := "-"
		if m.Decisive {
			mark = "!"
		}
		t.wrap("  "+mark+" ", sentence(m.What))
		t.wrap("    next time: ", m.Fix)
	}
}

// sentence ends s with a full stop, so the line after it is read apart.
func sentence(s string) string {
	if s == "" || strings.HasSuffix(s, ".") {
		return s
	}
	return s + "."
}

func noteOf(n string) string {
	if n == "" {
		return ""
	}
	return "; " + n
}

func bytesOrDash(v *uint64) string {
	if v == nil {
		return "-"
	}
	return report.HumanBytes(*v)
}

// apertureWhose says whose GPU a failure's aperture is on.
func apertureWhose(of string) string {
	if of == "peer" {
		return "the peer's GPU: peer access maps the peer's memory through it"
	}
	return "the exporter's GPU"
}

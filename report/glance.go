package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// GlanceLine is one labelled line of a report's summary: what failed, the
// numbers the verdict compared, who held the memory, which process, and
// which process. What is uncertain the verdict says; the next steps
// follow the summary in every rendering.
type GlanceLine struct {
	Label string
	Text  string
	// Command is the part of Text that is a command line (Text is
	// Head+Command+Tail): a renderer short of room shortens it alone.
	Head, Command, Tail string
}

// Glance is the summary the text report and the HTML verdict panel show
// under the verdict, so that the first screen answers: each line is
// built here once, from the report's own fields. Empty when nothing
// failed.
func (r *Report) Glance() []GlanceLine {
	f, ev := r.FirstFailure, r.Evidence
	if u := r.FirstUnrecovered; u != nil {
		f, ev = &u.Failure, u.Evidence
	}
	if f == nil {
		return nil
	}
	var out []GlanceLine
	add := func(label, text string) {
		if text != "" {
			out = append(out, GlanceLine{Label: label, Text: text})
		}
	}
	if v := squash(r.Verdict); !strings.Contains(v, f.Symbol) || !strings.Contains(v, f.ResultName) {
		add("failed", r.failedText(f)) // unless the verdict names the call already
	}
	add("compared", comparedText(f, ev, r.NearestSamples))
	add("held by", r.heldText(f, ev))
	if pl := r.processLine(f); pl.Text != "" {
		out = append(out, pl)
	}
	if where := CalledFrom(f.Stack); !strings.Contains(squash(r.Verdict), where) {
		add("code", where) // unless the verdict names it already
	}
	return out
}

// startOf is the run-clock start that f's times count from: its own
// run's, for a failure from another run of the job.
func (r *Report) startOf(f *Failure) int64 {
	if m := r.MultiRun; m != nil && f.RunPath != "" && f.RunPath != r.Run.Path {
		if rr := m.RunOf(f.RunPath); rr != nil {
			return rr.StartNS
		}
	}
	return r.Run.StartNS
}

// failedText is the call, its size, its result and when.
func (r *Report) failedText(f *Failure) string {
	s := f.Symbol
	if f.Size != nil {
		s += " of " + HumanBytes(*f.Size)
	}
	s += " returned " + f.ResultName + " at " + Rel(f.TimeNS, r.startOf(f))
	if f.GPUIndex != nil {
		s += fmt.Sprintf(" on GPU %d", *f.GPUIndex)
	}
	return s
}

// comparedText is what the verdict compared: the request, the free value
// with its short tag, and the view's total when a sample read it.
func comparedText(f *Failure, ev []Evidence, ns *NearestSamples) string {
	d := Decisive(ev)
	if d == nil {
		return ""
	}
	view := strings.SplitN(d.Field, " ", 2)[0]
	parts := []string{}
	if f.Size != nil {
		parts = append(parts, HumanBytes(*f.Size)+" requested")
	}
	free := d.Shown() + " " + view + " free"
	if tag := d.Tag(); tag != "" {
		free += " (" + tag + ")"
	}
	parts = append(parts, free)
	if total := sampledTotal(ns, view); total != nil {
		parts = append(parts, HumanBytes(*total)+" total")
	}
	return strings.Join(parts, "; ")
}

// sampledTotal is a view's total from the samples at or before the
// failure, nil when none read it.
func sampledTotal(ns *NearestSamples, view string) *uint64 {
	if ns == nil {
		return nil
	}
	kind := strings.ToLower(view)
	for _, group := range [][]SampleRef{ns.At, ns.Before, ns.After} {
		for _, s := range group {
			if s.Kind == kind && s.Total != nil {
				return s.Total
			}
		}
	}
	return nil
}

// heldText says who held the view's memory at the failure: the budget's
// largest parts when the report has a budget of that GPU and view that
// shows the failure's state (the free value compared is the sample's own
// and every recorded process is split); else
// each traced process (at most three named), and what the driver
// reserved.
func (r *Report) heldText(f *Failure, ev []Evidence) string {
	d := Decisive(ev)
	if d == nil || f.GPUIndex == nil {
		return ""
	}
	view := strings.ToLower(strings.SplitN(d.Field, " ", 2)[0])
	if f != r.FirstFailure {
		// A later failure: the budget and LIVE AT THE FIRST FAILURE are
		// of another moment; its own evidence says what its process held.
		return laterHeld(f, ev, view)
	}
	if b := r.budgetOf(*f.GPUIndex, view); b != nil && d.Text == "" && !b.unsplit() {
		return budgetHeld(b, f.PID)
	}
	var parts []string
	n, explained := 0, uint64(0)
	for _, l := range r.LiveAtFailure {
		if l.GPU == nil || *l.GPU != *f.GPUIndex || strings.ToLower(l.View) != view {
			continue
		}
		explained += l.Bytes
		if n++; n <= 3 {
			parts = append(parts, fmt.Sprintf("pid %d %s in %s", l.PID, HumanBytes(l.Bytes), l.Describe()))
		}
	}
	if n > 3 {
		parts = append(parts, fmt.Sprintf("%d more processes", n-3))
	}
	if view == "framebuffer" {
		sampled, named := sampledHolders(ev)
		parts = append(parts, sampled...)
		explained += named // NVML names its holder
	}
	if rest := untraced(d, view, explained, ev, r.NearestSamples); rest > 0 {
		parts = append(parts, HumanBytes(rest)+" no traced call explains")
	}
	return strings.Join(parts, "; ")
}

// laterHeld is who held a view at a failure after the first, from its
// own evidence: what its process held from traced calls, then what the
// samples say (sampledHolders). The other traced processes' shares at
// that moment are not in the report, so nothing is called unexplained.
func laterHeld(f *Failure, ev []Evidence, view string) string {
	if view != "framebuffer" {
		return ""
	}
	var parts []string
	for _, e := range ev {
		if e.Value != nil && e.Field == "traced device allocations of this process" {
			parts = append(parts, fmt.Sprintf("pid %d %s in %s", f.PID, HumanBytes(*e.Value), e.Note))
		}
	}
	sampled, _ := sampledHolders(ev)
	return strings.Join(append(parts, sampled...), "; ")
}

// sampledHolders are the framebuffer's holders the failure's samples
// name, in evidence order: each process NVML listed that the recorder
// did not trace, and the driver's reserve; named is what NVML attributed
// to those processes.
func sampledHolders(ev []Evidence) (parts []string, named uint64) {
	for _, e := range ev {
		switch {
		case e.Value == nil:
		case strings.HasPrefix(e.Field, "NVML usage of process"):
			parts = append(parts, strings.TrimPrefix(e.Field, "NVML usage of ")+" "+HumanBytes(*e.Value))
			named += *e.Value
		case e.Field == "framebuffer reserved":
			parts = append(parts, "the driver "+HumanBytes(*e.Value)+" (reserved)")
		}
	}
	return parts, named
}

// budgetOf is the budget of a GPU's view at the first failure, or nil.
func (r *Report) budgetOf(gpu int, view string) *Budget {
	for i := range r.Budget {
		if b := &r.Budget[i]; b.GPU == gpu && b.View == view && b.At == "first-failure" {
			return b
		}
	}
	return nil
}

// unsplit reports whether a budget has a recorded process's use as one
// part: traced calls came between the failure and the sample, so the
// sample shows what the process held then, not at the failure.
func (b *Budget) unsplit() bool {
	for _, p := range b.Parts {
		if p.Kind == "process" {
			return true
		}
	}
	return false
}

// heldParts is how many holders the summary names, the largest first;
// the rest are counted.
const heldParts = 3

// budgetHeld names the largest parts of a budget other than free memory,
// each with its size and bound, as the budget table shows them in full; a
// process's parts go together, and the failing process (pid) is named by
// the summary's own process line.
func budgetHeld(b *Budget, pid uint32) string {
	var held []BudgetPart
	for _, p := range b.Parts {
		if p.Kind != "free" && p.Bytes > 0 {
			held = append(held, p)
		}
	}
	slices.SortStableFunc(held, func(a, b BudgetPart) int { return cmp.Compare(b.Bytes, a.Bytes) })
	var items []string
	at := map[uint32]int{} // pid -> its item
	var rest uint64
	nrest := 0
	for _, p := range held {
		if p.PID != nil {
			if i, ok := at[*p.PID]; ok {
				items[i] += " and " + heldWhat(p)
				continue
			}
		}
		if len(items) == heldParts {
			rest += p.Bytes
			nrest++
			continue
		}
		if p.PID != nil {
			at[*p.PID] = len(items)
		}
		items = append(items, heldWho(p, pid)+heldWhat(p))
	}
	if nrest > 0 {
		items = append(items, Plural(nrest, "other part")+" "+HumanBytes(rest))
	}
	return strings.Join(items, "; ")
}

// heldWho names a part's process ("" for parts of no process): its pid,
// and its command line unless it is the failing process.
func heldWho(p BudgetPart, failing uint32) string {
	switch {
	case p.Kind == "reserved":
		return "the driver "
	case p.PID == nil:
		return ""
	case p.Command != "" && *p.PID != failing:
		return fmt.Sprintf("pid %d (%s) ", *p.PID, ClipMiddle(p.Command, 24))
	}
	return fmt.Sprintf("pid %d ", *p.PID)
}

// heldWhat is a part's size, bound and kind in a few words.
func heldWhat(p BudgetPart) string {
	size := HumanBytes(p.Bytes)
	switch p.Bound {
	case "at-most":
		size = "at most " + size
	case "at-least":
		size = "at least " + size
	}
	switch p.Kind {
	case "reserved":
		return size + " reserved"
	case "traced":
		return size + " traced"
	case "untraced":
		return size + " in contexts"
	case "process-not-recorded":
		return size + ", not recorded"
	case "unattributed":
		return size + " unattributed"
	}
	return size
}

// untraced is the framebuffer in use at the failure that no traced call
// explains: total less reserved, free and the traced bytes. 0 unless the
// free value compared is exact (not a bound) and a sample read the total
// and the reserved memory.
func untraced(d *Evidence, view string, traced uint64, ev []Evidence, ns *NearestSamples) uint64 {
	if view != "framebuffer" || d.Value == nil || d.Text != "" {
		return 0
	}
	total := sampledTotal(ns, view)
	var reserved *uint64
	for _, e := range ev {
		if e.Field == "framebuffer reserved" {
			reserved = e.Value
		}
	}
	if total == nil || reserved == nil || *total < *reserved+*d.Value+traced {
		return 0
	}
	return *total - *reserved - *d.Value - traced
}

// processLine names the failing process by its command line, and its
// thread.
func (r *Report) processLine(f *Failure) GlanceLine {
	l := GlanceLine{Label: "process", Head: fmt.Sprintf("pid %d", f.PID)}
	if f.Rank != nil {
		l.Head = fmt.Sprintf("rank %d, %s", *f.Rank, l.Head)
	}
	var p *ProcessInfo // nil for a failure of another run, whose processes r lacks
	if f.RunPath == "" || f.RunPath == r.Run.Path {
		p = r.ProcessOf(f.PID)
	}
	if p != nil && p.CommandLine() != "" {
		l.Head += ": "
		l.Command = p.CommandLine()
	}
	if t := f.ThreadText(p); t != "" {
		l.Tail = " (" + t + ")"
	}
	l.Text = l.Head + l.Command + l.Tail
	return l
}

// ThreadText names the failing thread: "thread pt_autograd_0, tid 4250",
// "main thread worker" (its name when the record has one), "thread 4250"
// when it has none. A main thread is not mentioned when it has no name of
// its own: none recorded, or its program's name, which the kernel gives
// every thread that does not name itself (p, the failing process, may be
// nil).
func (f *Failure) ThreadText(p *ProcessInfo) string {
	main := f.TID == 0 || f.TID == f.PID
	switch {
	case f.ThreadName != nil && main && !programName(p, *f.ThreadName):
		return "main thread " + *f.ThreadName
	case f.ThreadName != nil && !main:
		return fmt.Sprintf("thread %s, tid %d", *f.ThreadName, f.TID)
	case main:
		return ""
	}
	return fmt.Sprintf("thread %d", f.TID)
}

// commLen is the most bytes of a thread's name the kernel keeps.
const commLen = 15

// programName reports whether name is p's program's name as the kernel
// makes a thread name of it: the executable's, or its first or second
// argument's (a script run through its interpreter) last path element,
// cut to commLen bytes.
func programName(p *ProcessInfo, name string) bool {
	if p == nil {
		return false
	}
	cands := []string{p.Exe}
	cands = append(cands, p.Args[:min(2, len(p.Args))]...)
	for _, c := range cands {
		base := c[strings.LastIndexByte(c, '/')+1:]
		if base != "" && base[:min(commLen, len(base))] == name {
			return true
		}
	}
	return false
}

// UserFrameOf returns the innermost frame of the user's own code in st,
// or nil.
func UserFrameOf(st *Stack) *Frame {
	if st == nil || st.UserFrame == nil || *st.UserFrame < 0 || *st.UserFrame >= len(st.Frames) {
		return nil
	}
	return &st.Frames[*st.UserFrame]
}

// CalledFrom names where in the user's code the call was made: "called
// from grow_kv_cache, kv.py:10"; "" when the stack has no such frame.
func CalledFrom(st *Stack) string {
	fr := UserFrameOf(st)
	switch {
	case fr == nil || fr.Function == "":
		return ""
	case fr.Language == LangPython && fr.Line > 0:
		return fmt.Sprintf("called from %s, %s:%d", fr.Function, baseOf(fr.File), fr.Line)
	case fr.Language == LangPython:
		return fmt.Sprintf("called from %s, %s", fr.Function, baseOf(fr.File))
	}
	return fmt.Sprintf("called from %s, in %s", fr.Function, fr.Library)
}

// baseOf is a path's last element.
func baseOf(p string) string { return p[strings.LastIndex(p, "/")+1:] }

// squash collapses runs of white space.
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

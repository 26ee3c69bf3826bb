package analyze

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteJSON writes the report as the --json contract.
func WriteJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// TextOptions adjust the human report.
type TextOptions struct {
	// Color emphasizes the verdict with ANSI escapes (only for a TTY).
	Color bool
	// Width wraps prose (default 100 columns).
	Width int
}

type textWriter struct {
	w     io.Writer
	o     TextOptions
	start int64
	err   error
}

func (t *textWriter) printf(format string, a ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format, a...)
	}
}

func (t *textWriter) heading(s string) {
	if t.o.Color {
		t.printf("\n\x1b[1m%s\x1b[0m\n", s)
	} else {
		t.printf("\n%s\n", s)
	}
}

// wrap prints prose after a first-line prefix, wrapped at the width, with
// continuation lines indented to the prefix's width.
func (t *textWriter) wrap(prefix, s string) {
	indent := strings.Repeat(" ", len(prefix))
	width := t.o.Width - len(prefix)
	line, lead := "", prefix
	for _, word := range strings.Fields(s) {
		if line != "" && len(line)+1+len(word) > width {
			t.printf("%s%s\n", lead, line)
			line, lead = "", indent
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" {
		t.printf("%s%s\n", lead, line)
	}
}

func (t *textWriter) rel(ns int64) string {
	return fmt.Sprintf("+%.3fs", float64(ns-t.start)/1e9)
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

func optBytes(v *uint64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%s (%d bytes)", HumanBytes(*v), *v)
}

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

// isFirstFailure reports whether the failed call of symbol by thread tid
// of pid, returning at end, is the first failure ff (nil: there is none).
// A thread makes one call at a time, so these name one call.
func isFirstFailure(ff *Failure, end int64, pid, tid uint32, symbol string) bool {
	return ff != nil && end == ff.TimeNS && pid == ff.PID && tid == ff.TID && symbol == ff.Symbol
}

// WriteText writes the human report: the verdict first, then the evidence,
// the failures and the memory-view table. It fits 100 columns.
func WriteText(w io.Writer, rep *Report, o TextOptions) error {
	if o.Width == 0 {
		o.Width = 100
	}
	t := &textWriter{w: w, o: o, start: rep.Run.StartNS}
	r := rep.Run
	what := r.Mode
	if len(r.Command) > 0 {
		what += ": " + strings.Join(r.Command, " ")
	} else if r.TargetPID != 0 {
		what += fmt.Sprintf(" %d", r.TargetPID)
	}
	end := r.Ended
	if r.StopReason != "" {
		end += ", " + r.StopReason
	}
	if r.WorkloadExit != nil {
		switch {
		case r.WorkloadExit.Code != nil:
			end += fmt.Sprintf(", workload exit %d", *r.WorkloadExit.Code)
		case r.WorkloadExit.Signal != nil:
			end += ", workload killed by " + r.WorkloadExit.Name
		}
	}
	t.printf("forensic analyze %s\n", clipMiddle(r.Path, t.o.Width-len("forensic analyze ")))
	t.wrap("  ", fmt.Sprintf("run %s (%s), %.2fs, %s, %d events, host %s", r.ID, what,
		float64(r.DurationNS)/1e9, end, r.Events, r.Host))

	cap := "null"
	if rep.Capacity != nil {
		cap = *rep.Capacity
	}
	head := fmt.Sprintf("VERDICT  attribution %s, capacity %s", rep.Attribution, cap)
	if o.Color {
		t.printf("\n\x1b[1;31m%s\x1b[0m\n", head)
	} else {
		t.printf("\n%s\n", head)
	}
	t.wrap("  ", rep.Verdict)

	if f := rep.FirstFailure; f != nil {
		t.heading("FIRST FAILURE")
		t.wrap("  call      ", fmt.Sprintf("%s (%s)  result %d %s", f.Symbol, f.Operation, f.Result, f.ResultName))
		if f.Size != nil {
			t.printf("  size      %s\n", optBytes(f.Size))
		}
		gpu := "unknown"
		if f.GPUIndex != nil {
			gpu = fmt.Sprintf("%d", *f.GPUIndex)
			if f.GPU != nil {
				gpu += " " + *f.GPU
			}
		}
		t.wrap("  process   ", fmt.Sprintf("pid %d tid %d, CUDA device %d -> GPU %s (matched by %s)", f.PID, f.TID, f.CUDADevice, gpu, f.GPUMapping))
		t.wrap("  time      ", fmt.Sprintf("%s  %s  phase: %s", t.rel(f.TimeNS), f.Wall, f.Phase))
		if f.Frozen {
			t.printf("  frozen    the process was held stopped while its GPUs were sampled\n")
		}
		if f.Stack != nil {
			if f.Stack.Note != "" {
				t.wrap("  stack     ", f.Stack.Note)
			} else {
				t.printf("  stack\n")
			}
			for i, fr := range f.Stack.Frames {
				if i >= 12 {
					t.printf("            ... %d more frames\n", len(f.Stack.Frames)-i)
					break
				}
				name := fr.Function
				if name == "" {
					name = fmt.Sprintf("0x%x", fr.Address)
				} else {
					name = fmt.Sprintf("%s+0x%x", name, fr.Offset)
				}
				t.printf("            %s (%s)\n", clip(name, 60), fr.Library)
			}
		}
		if rep.Cause != nil {
			t.wrap("  cause     ", rep.Cause.Text)
		}
	}

	if len(rep.Evidence) > 0 {
		t.heading("EVIDENCE")
		for _, e := range rep.Evidence {
			val := e.Text
			if e.Value != nil {
				if e.Unit == "bytes" {
					val = HumanBytes(*e.Value)
				} else {
					val = fmt.Sprintf("%d %s", *e.Value, e.Text)
				}
			}
			gpu := ""
			if e.GPU != nil {
				gpu = fmt.Sprintf(" GPU %d", *e.GPU)
			}
			t.printf("  %-34s %s\n", clip(e.Field, 34), clip(val, 62))
			t.wrap("      ", fmt.Sprintf("from %s, %s, %s%s%s", e.Source, e.Status, t.rel(e.TimeNS), gpu, noteOf(e.Note)))
		}
	}

	if ns := rep.NearestSamples; ns != nil {
		gpu := "unknown GPU"
		if ns.GPU >= 0 {
			gpu = fmt.Sprintf("GPU %d", ns.GPU)
		}
		t.heading("SAMPLES AROUND THE FAILURE (" + gpu + ")")
		for _, grp := range []struct {
			name string
			s    []SampleRef
		}{{"before", ns.Before}, {"at", ns.At}, {"after", ns.After}} {
			for _, s := range grp.s {
				vals := "free " + bytesOrDash(s.Free) + ", used " + bytesOrDash(s.Used) + ", total " + bytesOrDash(s.Total)
				if s.Kind == "processes" {
					vals = ""
				}
				extra := ""
				if s.DelayNS != nil {
					extra = fmt.Sprintf(" (%v after the failure", time.Duration(*s.DelayNS))
					if s.Frozen {
						extra += ", process frozen"
					}
					extra += ")"
				}
				t.printf("  %-6s %-11s %s %s%s\n", grp.name, s.Kind, t.rel(s.StartNS), s.Status, extra)
				if vals != "" {
					t.printf("         %s  [%s]\n", vals, s.API)
				}
			}
		}
		if len(ns.Before)+len(ns.At)+len(ns.After) == 0 {
			t.printf("  none\n")
		}
	}

	if len(rep.Missing) > 0 {
		t.heading("MISSING EVIDENCE")
		for _, m := range rep.Missing {
			mark := "-"
			if m.Decisive {
				mark = "!"
			}
			t.wrap("  "+mark+" ", m.What)
			t.wrap("    fix: ", m.Fix)
		}
	}

	t.heading(fmt.Sprintf("FAILURES (%d)", len(rep.Failures)+rep.FailuresTruncated))
	if len(rep.Failures) > 0 {
		t.printf("  %-9s %-7s %-24s %9s  %-28s %s\n", "time", "pid", "call", "size", "result (CUDA_ERROR_...)", "notes")
		t.wrap("  ", "notes: FIRST the first failure; recov recovered (a later call of the same operation and size "+
			"succeeded); ctx after the first failure in its process and context, possibly its consequence")
	}
	if len(rep.Failures) == 0 {
		t.printf("  none\n")
	}
	for i, f := range rep.Failures {
		if i >= 50 {
			t.printf("  ... %d more (see --json)\n", len(rep.Failures)-i+rep.FailuresTruncated)
			break
		}
		size := ""
		if f.Size != nil {
			size = HumanBytes(*f.Size)
		}
		tags := []string{}
		if isFirstFailure(rep.FirstFailure, f.TimeNS, f.PID, f.TID, f.Symbol) {
			tags = append(tags, "FIRST")
		}
		if f.Recovered {
			tags = append(tags, "recov")
		}
		if f.PossibleConsequence {
			tags = append(tags, "ctx")
		}
		t.printf("  %-9s %-7d %-24s %9s  %-28s %s\n", t.rel(f.TimeNS), f.PID, clip(f.Symbol, 24), size,
			clip(strings.TrimPrefix(f.ResultName, "CUDA_ERROR_"), 28), strings.Join(tags, ","))
	}

	t.heading("MEMORY VIEWS (MiB = 2^20 bytes; framebuffer and BAR1 are separate views, never added)")
	t.printf("  %-3s %-27s %-11s %8s %8s %8s %8s %8s %9s\n", "GPU", "field", "scope", "start", "before", "at fail", "end", "peak", "change")
	var notes []string
	for _, v := range rep.MemoryViews {
		field := v.Field
		cell := func(x *uint64) string { return mib(x) }
		if v.Support != "supported" {
			notes = append(notes, fmt.Sprintf("GPU %d %s: %s", v.GPU, v.Field, v.Support))
			field += " *"
			if v.Start == nil && v.End == nil {
				// Never a zero in place of a value that could not be read.
				cell = func(*uint64) string { return "n/a" }
			}
		}
		t.printf("  %-3d %-27s %-11s %8s %8s %8s %8s %8s %9s\n", v.GPU, clip(field, 27), clip(v.Scope, 11),
			cell(v.Start), cell(v.Before), cell(v.At), cell(v.End), cell(v.Peak), mibSigned(v.Change))
	}
	for _, n := range notes {
		t.wrap("  * ", n)
	}
	// The "at fail" column is the sample as read. When it was taken after
	// the traced processes had already released memory, the verdict used a
	// reconciled value instead; say so here, or the table seems to
	// contradict the verdict.
	for _, e := range rep.Evidence {
		if !strings.HasSuffix(e.Field, "(reconciled)") || e.GPU == nil {
			continue
		}
		v := e.Text
		if v == "" {
			v = HumanBytes(*e.Value)
		}
		t.wrap("  note: ", fmt.Sprintf("GPU %d \"at fail\" is the sample as read; %s was %s (see EVIDENCE).",
			*e.GPU, strings.TrimSuffix(e.Field, " (reconciled)"), v))
	}
	if len(rep.Phases) > 0 {
		t.printf("  phases (%s):\n", rep.PhasesFrom)
		for _, p := range rep.Phases {
			t.printf("    %-32s %s .. %s\n", clip(p.Label, 32), t.rel(p.StartNS), t.rel(p.EndNS))
		}
		t.printf("  %-3s %-27s %s\n", "GPU", "field", "last value in each phase (MiB)")
		for _, v := range rep.MemoryViews {
			var parts []string
			for _, pv := range v.Phases {
				parts = append(parts, mib(pv.Last))
			}
			if len(parts) > 0 {
				t.printf("  %-3d %-27s %s\n", v.GPU, clip(v.Field, 27), clip(strings.Join(parts, "  "), 65))
			}
		}
	}

	if len(rep.LiveAtFailure) > 0 {
		t.heading("LIVE AT THE FIRST FAILURE (traced calls, per process)")
		for _, l := range rep.LiveAtFailure {
			gpu := "?"
			if l.GPU != nil {
				gpu = fmt.Sprintf("%d", *l.GPU)
			}
			un := ""
			if l.Unsized > 0 {
				un = fmt.Sprintf(" (+%d of unknown size)", l.Unsized)
			}
			t.printf("  pid %-7d GPU %-2s %-12s %12s in %d%s\n", l.PID, gpu, l.View, HumanBytes(l.Bytes), l.Count, un)
		}
	}

	t.heading("PROCESSES")
	for _, p := range rep.Processes {
		exit := "running at end"
		if p.Exit != nil {
			if p.Exit.Code != nil {
				exit = fmt.Sprintf("exit %d", *p.Exit.Code)
			} else if p.Exit.Signal != nil {
				exit = "killed by " + p.Exit.Name
			}
		}
		late := ""
		if p.AttachedLate {
			late = ", attached late"
		}
		t.printf("  pid %-7d ppid %-7d %-24s %s, %d calls, %d failed%s\n", p.PID, p.PPID, clip(baseName(p.Exe), 24), exit, p.Calls, p.Failed, late)
		for _, d := range p.Devices {
			g := "unknown"
			if d.GPU != nil {
				g = fmt.Sprintf("GPU %d", *d.GPU)
			}
			t.wrap("      ", fmt.Sprintf("CUDA device %d -> %s (%s)%s", d.Ordinal, g, d.Method, noteOf(d.Why)))
		}
	}

	t.heading("COVERAGE")
	for _, l := range rep.Coverage {
		t.wrap("  ", fmt.Sprintf("%s (build id %s): %d symbols hooked, %d absent, %d exported but not hooked",
			l.Path, l.BuildID, len(l.Hooked), len(l.Absent), len(l.Unknown)))
		if len(l.Absent) > 0 {
			t.wrap("    absent: ", strings.Join(l.Absent, " "))
		}
		if len(l.Unknown) > 0 {
			t.wrap("    not hooked: ", strings.Join(l.Unknown, " "))
		}
	}

	if len(rep.KernelLog) > 0 {
		t.heading("KERNEL LOG (NVRM / Xid)")
		for _, k := range rep.KernelLog {
			t.printf("  %-9s %-6s %s\n", t.rel(k.TimeNS), k.Position, clip(k.Text, 78))
		}
	}
	if len(rep.Markers) > 0 {
		t.heading("MARKERS")
		for _, m := range rep.Markers {
			t.printf("  %-9s %s\n", t.rel(m.TimeNS), m.Label)
		}
	}

	l := rep.Loss
	t.heading("LOSS AND SAMPLING")
	if l.Known {
		t.printf("  calls seen %d, events stored %d, lost %d (in-flight table %d, too deep %d), unmatched returns %d\n",
			l.Calls, l.Events, l.LostCalls, l.LostInflight, l.TooDeep, l.Unmatched)
	} else {
		t.printf("  loss counters were not recorded (the recorder did not stop cleanly)\n")
	}
	sm := rep.Sampling
	delay := "no failure-triggered samples"
	if sm.DelayMedian != nil {
		delay = fmt.Sprintf("failure-to-sample delay median %v, max %v", time.Duration(*sm.DelayMedian), time.Duration(*sm.DelayMax))
	}
	t.wrap("  ", fmt.Sprintf("NVML %s (%s): %d samples, %d thinned out, %d rounds triggered by failures; %s",
		sm.NVMLInit, sm.NVMLLibrary, sm.Samples, sm.Thinned, sm.Triggered, delay))
	return t.err
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
	return HumanBytes(*v)
}

package report

import (
	"fmt"
	"strings"
)

// CommandLine is a process's command line as its user typed it: its
// arguments (argv[0] first), or its executable when none were recorded;
// "…" ends a list the recorder cut.
func (p *ProcessInfo) CommandLine() string {
	if len(p.Args) == 0 {
		return p.Exe
	}
	s := strings.Join(p.Args, " ")
	if p.ArgsCut {
		s += " …"
	}
	return s
}

// ProcessOf returns the recorded process pid, or nil.
func (r *Report) ProcessOf(pid uint32) *ProcessInfo {
	for i := range r.Processes {
		if r.Processes[i].PID == pid {
			return &r.Processes[i]
		}
	}
	return nil
}

// ProcessName names pid for a reader: "pid 41 (python3 train.py --bs 8)",
// or "pid 41" when the record has no such process.
func (r *Report) ProcessName(pid uint32) string {
	if p := r.ProcessOf(pid); p != nil && p.CommandLine() != "" {
		return fmt.Sprintf("pid %d (%s)", pid, p.CommandLine())
	}
	return fmt.Sprintf("pid %d", pid)
}

// ClipMiddle shortens s to n runes by eliding its middle, so that both a
// command's program and its last arguments stay readable.
func ClipMiddle(s string, n int) string {
	return clipAt(s, n, (n-1)/2)
}

// ClipHead is ClipMiddle keeping two thirds of the room for the start:
// for a command line, whose program and first arguments say most.
func ClipHead(s string, n int) string {
	return clipAt(s, n, 2*(n-1)/3)
}

// clipAt shortens s to n runes with "…" after its first head runes.
func clipAt(s string, n, head int) string {
	r := []rune(s)
	if len(r) <= n || n < 5 {
		return s
	}
	return string(r[:head]) + "…" + string(r[len(r)-(n-1-head):])
}

// Decisive returns the evidence the verdict compared the request with, or
// nil.
func Decisive(ev []Evidence) *Evidence {
	for i := range ev {
		if ev[i].Decisive {
			return &ev[i]
		}
	}
	return nil
}

// Shown is an evidence value as a reader sees it: its text when it has
// one (a bound, "at most 512.0 MiB"), else the value in its unit.
func (e *Evidence) Shown() string {
	switch {
	case e.Value == nil || (e.Unit == "bytes" && e.Text != ""):
		return e.Text
	case e.Unit == "bytes":
		return HumanBytes(*e.Value)
	}
	return strings.TrimSpace(fmt.Sprintf("%d %s", *e.Value, e.Text))
}

// Tag is what the default text report says about where a value came
// from: Brief when the analysis wrote one, else the full Note.
func (e *Evidence) Tag() string {
	if e.Brief != "" {
		return e.Brief
	}
	return e.Note
}

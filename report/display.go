package report

import (
	"fmt"
	"path"
	"sort"
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

// Bystander reports whether a process took no part in the GPU work: it
// made no CUDA call, mapped no CUDA device, was not the workload itself,
// was followed from its start and exited 0. Launchers' shells and a pyenv
// shim's helpers are bystanders; a process that held GPU memory through
// an untraced libcuda may be one too, and MISSING EVIDENCE names it.
func (p *ProcessInfo) Bystander() bool {
	return p.Calls == 0 && p.Failed == 0 && len(p.Devices) == 0 && !p.Root && !p.AttachedLate &&
		p.Exit != nil && p.Exit.Code != nil && *p.Exit.Code == 0
}

// MinBystanders is the fewest bystanders a text report counts in one line
// instead of listing each: a launcher's shell or two stay listed, a shim's
// dozens of helpers do not push the rest off the page.
const MinBystanders = 4

// ExeCount is how many processes ran one executable (by its base name).
type ExeCount struct {
	Name  string
	Count int
}

// SplitBystanders returns the processes a reader needs one by one, and
// the bystanders counted by executable (most first, then by name) when
// there are at least MinBystanders of them; with fewer, every process is
// listed.
func SplitBystanders(ps []ProcessInfo) (listed []ProcessInfo, counted []ExeCount) {
	n := 0
	for i := range ps {
		if ps[i].Bystander() {
			n++
		}
	}
	if n < MinBystanders {
		return ps, nil
	}
	byName := map[string]int{}
	for i := range ps {
		if !ps[i].Bystander() {
			listed = append(listed, ps[i])
			continue
		}
		name := path.Base(ps[i].Exe)
		if ps[i].Exe == "" {
			name = "unnamed"
		}
		byName[name]++
	}
	for name, c := range byName {
		counted = append(counted, ExeCount{name, c})
	}
	sort.Slice(counted, func(i, j int) bool {
		if counted[i].Count != counted[j].Count {
			return counted[i].Count > counted[j].Count
		}
		return counted[i].Name < counted[j].Name
	})
	return listed, counted
}

// Package readcheck checks that a default text report reads at 3 a.m.:
// no sentence longer than MaxWords, and a first screen (the first
// FirstScreen lines at 80 columns) that says what failed, the numbers the
// verdict compared, a next step and the failing process's command line.
// Tests of the renderer and of the end-to-end scenarios share it.
package readcheck

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/retrivium/forensic/report"
)

// MaxWords is the longest sentence the default text report may hold, and
// FirstScreen the lines a reader sees without scrolling.
const (
	MaxWords    = 35
	FirstScreen = 25
)

// Problems lists what makes text, the default text report of rep rendered
// at width columns, hard to read; empty when nothing does.
func Problems(text string, rep *report.Report, width int) []string {
	var out []string
	for _, s := range Sentences(text, width) {
		if strings.HasPrefix(s, "$ ") {
			continue // a command line, quoted as it ran
		}
		if n := len(strings.Fields(s)); n > MaxWords {
			out = append(out, fmt.Sprintf("a sentence of %d words: %q", n, s))
		}
	}
	return append(out, firstScreen(text, rep)...)
}

// firstScreen checks what the first screen must say.
func firstScreen(text string, rep *report.Report) []string {
	lines := strings.Split(text, "\n")
	screen := normalize(strings.Join(lines[:min(len(lines), FirstScreen)], " "))
	var out []string
	need := func(what, s string) {
		if s != "" && !strings.Contains(screen, normalize(s)) {
			out = append(out, fmt.Sprintf("the first %d lines lack %s (%q)", FirstScreen, what, s))
		}
	}
	need("the verdict", "VERDICT")
	if len(rep.NextSteps) > 0 {
		need("the first next step", prefix(rep.NextSteps[0], 40))
	}
	f, ev := rep.FirstFailure, rep.Evidence
	if u := rep.FirstUnrecovered; u != nil {
		f, ev = &u.Failure, u.Evidence
	}
	if f == nil {
		return out
	}
	need("the failed call", f.Symbol)
	if f.Size != nil {
		need("the requested size", report.HumanBytes(*f.Size))
	}
	if d := report.Decisive(ev); d != nil {
		need("the free value compared", d.Shown())
	}
	if p := rep.ProcessOf(f.PID); p != nil && (f.RunPath == "" || f.RunPath == rep.Run.Path) {
		need("the process's command line", prefix(p.CommandLine(), 30))
	}
	return out
}

// Sentences splits the prose of a text report rendered at width columns
// into sentences. A line continues the one before when the renderer
// wrapped it: its first word would not have fitted on that line. Any
// other line break ends a sentence, as does a full stop before a space.
// A line that begins with "$ " (a command line) never continues another.
func Sentences(text string, width int) []string {
	var out []string
	cur := ""
	flush := func() {
		if s := strings.TrimSpace(cur); s != "" {
			out = append(out, s)
		}
		cur = ""
	}
	prev := ""
	for _, line := range strings.Split(text, "\n") {
		body := strings.TrimSpace(line)
		if !wrapped(prev, line, width) {
			flush()
		}
		for _, part := range splitStops(body) {
			if cur != "" && strings.HasSuffix(cur, ".") {
				flush()
			}
			cur += " " + part
		}
		prev = line
	}
	flush()
	return out
}

// wrapped reports whether line continues prev: prev ends where the
// first word of line would not have fitted, and line is indented as a
// continuation is (deeper, or as deep without a label's wide gap).
func wrapped(prev, line string, width int) bool {
	body := strings.TrimSpace(line)
	if strings.TrimSpace(prev) == "" || body == "" || strings.HasPrefix(body, "$ ") {
		return false
	}
	first, _, _ := strings.Cut(body, " ")
	if utf8.RuneCountInString(prev)+1+utf8.RuneCountInString(first) <= width {
		return false
	}
	in, was := indent(line), indent(prev)
	return in > was || (in == was && !strings.Contains(body, "   "))
}

// indent is the number of spaces a line begins with.
func indent(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }

// splitStops splits a line after each full stop that a space follows,
// keeping the stops.
func splitStops(s string) []string {
	var out []string
	for {
		i := strings.Index(s, ". ")
		if i < 0 {
			return append(out, s)
		}
		out = append(out, s[:i+1])
		s = s[i+2:]
	}
}

// normalize collapses runs of white space, so that wrapped text compares
// with the text it came from.
func normalize(s string) string { return strings.Join(strings.Fields(s), " ") }

// prefix is s's first n runes, cut back to a word boundary.
func prefix(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	p := string(r[:n])
	if i := strings.LastIndex(p, " "); i > 0 {
		p = p[:i]
	}
	return p
}

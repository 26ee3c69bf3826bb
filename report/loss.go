package report

import (
	"fmt"
	"strings"
)

// Lost names each kind of evidence the recorder lost, one phrase per kind
// that happened ("3 calls lost (ring buffer full)"). Every output says
// losses in these words: the text and HTML reports and record's own
// summary.
func (l *Loss) Lost() []string {
	var lost []string
	for _, c := range []struct {
		n          uint64
		noun, what string
	}{
		{l.LostCalls, "call", "lost (ring buffer full)"},
		{l.LostInflight, "call", "not followed (too many calls in progress at once)"},
		{l.TooDeep, "call", "nested too deeply in the library"},
		{l.Unmatched, "call", "already in progress when the probes attached"},
		{l.LostProc, "process lifecycle record", "lost (ring buffer full)"},
		{l.Untracked, "process", "not followed (the table of tracked processes was full)"},
		{l.LostHolds, "libcuda mapping", "not held until the probes were in"},
		{l.DecodeErrors, "event", "not decoded"},
	} {
		if c.n > 0 {
			lost = append(lost, Plural(int(c.n), c.noun)+" "+c.what)
		}
	}
	return lost
}

// Summary says what the recorder saw and stored, and names only the
// losses that happened.
func (l *Loss) Summary() string {
	s := fmt.Sprintf("%s seen, %s stored", Plural(int(l.Calls), "call"), Plural(int(l.Events), "event"))
	lost := l.Lost()
	if len(lost) == 0 {
		return s + ", none lost"
	}
	return s + "; " + strings.Join(lost, ", ")
}

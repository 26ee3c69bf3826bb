package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
)

func TestPythonGapNamesMissingPythonFrames(t *testing.T) {
	for _, c := range []struct {
		python string
		want   string // in What; "" when no gap
	}{
		{"", ""},
		{"ok", ""},
		{"not-captured", "the interpreter was not located yet"},
		{"truncated", "outermost Python frames were not read"},
		{"no-thread", "no thread state"},
		{"no-capture", "stack was not captured"},
		{"not read: the interpreter (libpython3.13.so.1.0) was not located before the call returned", "libpython3.13.so.1.0"},
		{"not read: /usr/bin/python3.14: CPython 3.14.0: unsupported", "CPython 3.14.0"},
	} {
		ff := &report.Failure{PID: 7, Stack: &report.Stack{Python: c.python}}
		m := pythonGap(ff)
		switch {
		case c.want == "" && m != nil:
			t.Errorf("%q: gap %+v, want none", c.python, m)
		case c.want != "" && (m == nil || !strings.Contains(m.What, c.want) || !strings.Contains(m.What, "pid 7") || m.Fix == "" || m.Decisive):
			t.Errorf("%q: gap %+v, want a non-decisive one naming pid 7 and %q", c.python, m, c.want)
		}
	}
	if pythonGap(&report.Failure{}) != nil {
		t.Error("a failure without a stack has a Python gap")
	}
}

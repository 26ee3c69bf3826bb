package analyze

import (
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

func TestPythonGapNamesMissingPythonFrames(t *testing.T) {
	for _, c := range []struct {
		python    string
		status    store.PyStatus
		want      string // in What; "" when no gap
		fix       string // in Fix
		fromStart bool   // the process was recorded from its start
	}{
		{"", "", "", "", false},
		{"ok", store.PyOK, "", "", false},
		{"not-captured", store.PyNotCaptured, "the interpreter was not located yet", "record the program from its start", false},
		{"not-captured", store.PyNotCaptured, "the interpreter was not located yet", "the recorder fell behind", true},
		{"truncated", store.PyTruncated, "outermost Python frames were not read", "the innermost frames are shown", false},
		{"no-thread", store.PyNoThread, "no thread state", "the Python line that asked is not known", false},
		{"no-capture", noCapture, "stack was not captured", "the Python line that asked is not known", false},
		{"not read: the interpreter (libpython3.13.so.1.0) was not located before the call returned", store.PyNotLocated,
			"libpython3.13.so.1.0", "record the program from its start", false},
		{"not read: the interpreter (python3.13) was not located before the call returned", store.PyNotLocated,
			"python3.13", "record again on a less busy machine", true},
		{"not read: /usr/bin/python3.14: CPython 3.14.0: unsupported", store.PyNotRead, "CPython 3.14.0", "supported: 3.10 to 3.13", false},
		// The status decides, not the words: a reason that happens to say
		// "was not located" of an unsupported build gets that build's advice.
		{"not read: a layout that was not located in the debug offsets", store.PyNotRead, "debug offsets", "supported: 3.10 to 3.13", false},
	} {
		ff := &report.Failure{PID: 7, Stack: &report.Stack{Python: c.python, PythonStatus: string(c.status)}}
		m := pythonGap(ff, c.fromStart)
		switch {
		case c.want == "" && m != nil:
			t.Errorf("%q: gap %+v, want none", c.python, m)
		case c.want != "" && (m == nil || !strings.Contains(m.What, c.want) || !strings.Contains(m.What, "pid 7") ||
			!strings.Contains(m.Fix, c.fix) || m.Decisive):
			t.Errorf("%q: gap %+v, want a non-decisive one naming pid 7 and %q, advising %q", c.python, m, c.want, c.fix)
		case c.fromStart && m != nil && strings.Contains(m.Fix, "from its start"):
			t.Errorf("%q: advice %q for a process recorded from its start", c.python, m.Fix)
		}
	}
	if pythonGap(&report.Failure{}, true) != nil {
		t.Error("a failure without a stack has a Python gap")
	}
}

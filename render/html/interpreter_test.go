package html

import (
	"testing"

	"github.com/retrivium/forensic/report"
)

func TestStackViewNamesPythonInterpreter(t *testing.T) {
	py := report.Frame{Function: "main", File: "/app/x.py", Line: 3, Language: report.LangPython}
	for _, c := range []struct {
		name string
		st   *report.Stack
		want string
	}{
		{"python process", &report.Stack{Frames: []report.Frame{py}, Python: "ok", PythonVersion: "3.13.5", PythonBuild: "static", PythonFile: "/usr/bin/python3.13"}, "CPython 3.13.5, static in python3.13"},
		{"frames missing", &report.Stack{Frames: []report.Frame{{Address: 1}}, Python: "not-captured", PythonVersion: "3.11.7", PythonBuild: "shared", PythonFile: "/p/libpython3.11.so.1.0"}, "CPython 3.11.7, shared libpython3.11.so.1.0"},
		{"native process", &report.Stack{Frames: []report.Frame{{Address: 1}}}, ""},
	} {
		if got := newStack(c.st).Interpreter; got != c.want {
			t.Errorf("%s: interpreter %q, want %q", c.name, got, c.want)
		}
	}
}

package report

import "testing"

func TestStackPythonTextNamesVersionAndBuild(t *testing.T) {
	for _, c := range []struct {
		name string
		st   *Stack
		want string
	}{
		{"no stack", nil, ""},
		{"no interpreter", &Stack{}, ""},
		{"static", &Stack{PythonVersion: "3.11.2", PythonBuild: "static", PythonFile: "/usr/bin/python3.11"}, "CPython 3.11.2, static in python3.11"},
		{"shared", &Stack{PythonVersion: "3.13.0", PythonBuild: "shared", PythonFile: "/opt/py/lib/libpython3.13.so.1.0"}, "CPython 3.13.0, shared libpython3.13.so.1.0"},
		{"build unknown", &Stack{PythonVersion: "3.12.1"}, "CPython 3.12.1"},
	} {
		if got := c.st.PythonText(); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

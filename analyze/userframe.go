package analyze

import (
	"regexp"
	"strings"

	"github.com/retrivium/forensic/report"
)

// stdlibPython matches a file of a Python's standard library
// (/usr/lib/python3.11/threading.py).
var stdlibPython = regexp.MustCompile(`/lib/python3(\.\d+)?/`)

// userFrame is the index in frames (innermost first) of the innermost
// frame of the user's own code, or nil when every frame is a framework's.
// In a stack with Python frames only those count: the native frames under
// them are the interpreter's.
func userFrame(frames []report.Frame) *int {
	py := false
	for _, fr := range frames {
		py = py || fr.Language == report.LangPython
	}
	for i, fr := range frames {
		if py == (fr.Language == report.LangPython) && !frameworkFrame(fr) {
			return &i
		}
	}
	return nil
}

// frameworkFrame reports whether a frame is a framework's, not the
// user's: a Python file of site-packages, dist-packages or the standard
// library (or frozen); a native frame of libcuda, the dynamic loader, a
// Python interpreter or a system library (lib*.so*), or one the record
// cannot place.
func frameworkFrame(fr report.Frame) bool {
	if fr.Language == report.LangPython {
		f := fr.File
		return f == "" || strings.HasPrefix(f, "<") || strings.Contains(f, "/site-packages/") ||
			strings.Contains(f, "/dist-packages/") || stdlibPython.MatchString(f)
	}
	lib := fr.Library
	return lib == "" || fr.Function == "" || strings.HasPrefix(lib, "[") || strings.HasPrefix(lib, "ld-linux") ||
		strings.HasPrefix(lib, "python") || (strings.HasPrefix(lib, "lib") && strings.Contains(lib, ".so"))
}

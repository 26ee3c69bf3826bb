package stackname

import (
	"testing"

	"github.com/retrivium/forensic/store"
)

// A frame is named by the copy of its code object that stood at the
// capture: the latest one copied at or before it; one never copied is
// named as unknown.
func TestCodeAt(t *testing.T) {
	codes := []store.PyCode{
		{Code: 0x10, Time: 5, Name: store.PyString{Data: []byte("old")}},
		{Code: 0x10, Time: 9, Name: store.PyString{Data: []byte("new")}},
		{Code: 0x10, Time: 20, Name: store.PyString{Data: []byte("later")}},
		{Code: 0x20, Time: 1, Name: store.PyString{Data: []byte("other")}},
	}
	for _, tt := range []struct {
		addr uint64
		t    int64
		want string
	}{{0x10, 9, "new"}, {0x10, 19, "new"}, {0x10, 5, "old"}, {0x20, 100, "other"}, {0x10, 4, ""}, {0x30, 100, ""}} {
		c := CodeAt(codes, tt.addr, tt.t, 0xc0de)
		if string(c.Name.Data) != tt.want || c.Addr != tt.addr {
			t.Errorf("code %#x at %d: %q, want %q", tt.addr, tt.t, c.Name.Data, tt.want)
		}
		if tt.want == "" && c.Type != 0xc0de {
			t.Errorf("a code object never copied must pass the type check, to be shown as unknown")
		}
	}
}

// What became of a capture's Python frames is said twice: in words for
// the report, and as a status analyze decides from. The status follows
// the interpreter's typed error, never its words.
func TestPythonFramesStatus(t *testing.T) {
	for _, tt := range []struct {
		name   string
		py     Python
		words  string // the beginning of the words
		status store.PyStatus
	}{
		{"no CPython", Python{}, "", ""},
		{"never located", Python{Interp: &store.Python{Error: "the interpreter (python3.12) was not located before the call returned",
			ErrorKind: store.PyUnlocated}}, "not read: the interpreter", store.PyNotLocated},
		{"unsupported, whatever its words", Python{Interp: &store.Python{Error: "was not located in this build's layout table",
			ErrorKind: store.PyUnsupported}}, "not read: was not located", store.PyNotRead},
		{"probes not told", Python{Interp: &store.Python{Error: "map full", ErrorKind: store.PyProbe}}, "not read: map full", store.PyNotRead},
		{"no frames captured", Python{Interp: &store.Python{Version: "3.12.1"}}, "not-captured", store.PyNotCaptured},
		{"an unknown version", Python{Interp: &store.Python{Version: "2.7"}, Stack: &store.PyStack{Status: "ok"}}, "not read: ", store.PyNotRead},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, words, status := pythonFrames(&store.Capture{}, tt.py)
			if status != tt.status || len(words) < len(tt.words) || words[:len(tt.words)] != tt.words {
				t.Errorf("python frames %q (%q), want %q... (%q)", words, status, tt.words, tt.status)
			}
		})
	}
}

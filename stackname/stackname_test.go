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

package unwind

import (
	"io/fs"
	"os"
	"testing"
)

// flakyFiles fails the first open of each path, then opens it.
type flakyFiles struct{ tried map[string]bool }

func (f *flakyFiles) Open(m Mapping) (File, error) {
	if !f.tried[m.Path] {
		f.tried[m.Path] = true
		return nil, fs.ErrNotExist
	}
	return os.Open(m.Path)
}

func (f *flakyFiles) OpenDebug(string) (File, error) { return nil, fs.ErrNotExist }

// An analysis keeps a file it could not open as such; with Retain (the
// recorder), a later walk tries it again, and the files kept are bounded.
func TestUnwinderRetain(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name      string
		retain    int
		openLater bool
	}{{"analysis: an error is kept", 0, false}, {"recorder: an error is tried again", 4, true}} {
		u := New(&flakyFiles{tried: map[string]bool{}}, 0)
		u.Retain(tt.retain)
		m := Mapping{Start: 0x1000, End: 0x2000, Path: exe}
		if mod := u.module(m); mod.err == nil {
			t.Fatalf("%s: the first open did not fail", tt.name)
		}
		if mod := u.module(m); (mod.err == nil) != tt.openLater {
			t.Errorf("%s: second try error %v, want opened %v", tt.name, mod.err, tt.openLater)
		}
	}
	u := New(&flakyFiles{tried: map[string]bool{}}, 0)
	u.Retain(2)
	for _, p := range []string{exe, "/bin/true", "/bin/false", "/bin/ls"} {
		u.module(Mapping{Path: p}) // fails: not kept
		u.module(Mapping{Path: p})
		if len(u.modules) > 2 {
			t.Fatalf("%d files kept, want at most 2", len(u.modules))
		}
	}
}

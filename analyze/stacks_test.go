package analyze

import (
	"reflect"
	"strings"
	"testing"

	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// The i-th run of Python frames (ending at an entry frame) replaces the
// i-th evaluation loop frame; runs the native walk did not reach follow
// it.
func TestMergePython(t *testing.T) {
	n := func(fn string) report.Frame { return report.Frame{Function: fn, Language: report.LangNative} }
	p := func(fn string, entry bool) store.NamedPyFrame { return store.NamedPyFrame{Function: fn, Entry: entry} }
	names := func(fs []report.Frame) string {
		var out []string
		for _, f := range fs {
			s := f.Function
			if f.Language == report.LangPython {
				s = "py:" + s
			}
			out = append(out, s)
		}
		return strings.Join(out, " ")
	}
	tests := []struct {
		name   string
		native []report.Frame
		py     []store.NamedPyFrame
		want   string
	}{
		{"no Python", []report.Frame{n("a"), n("main")}, nil, "a main"},
		{"one run", []report.Frame{n("ffi"), n(evalLoop), n("Py_RunMain")},
			[]store.NamedPyFrame{p("alloc", false), p("main", false), p("<module>", true)},
			"ffi py:alloc py:main py:<module> Py_RunMain"},
		{"two runs, two loops", []report.Frame{n("ffi"), n(evalLoop), n("call"), n(evalLoop), n("main")},
			[]store.NamedPyFrame{p("cb", true), p("run", false), p("<module>", true)},
			"ffi py:cb call py:run py:<module> main"},
		{"the walk stopped before the second loop", []report.Frame{n("ffi"), n(evalLoop), n("call")},
			[]store.NamedPyFrame{p("cb", true), p("run", false), p("<module>", true)},
			"ffi py:cb call py:run py:<module>"},
		{"the outermost run cut short (no entry frame)", []report.Frame{n("ffi"), n(evalLoop), n(evalLoop)},
			[]store.NamedPyFrame{p("a", true), p("b", false)},
			"ffi py:a py:b"},
		{"more loops than runs read", []report.Frame{n("ffi"), n(evalLoop), n(evalLoop)},
			[]store.NamedPyFrame{p("a", true)},
			"ffi py:a " + evalLoop},
	}
	for _, tt := range tests {
		if got := names(mergePython(tt.native, tt.py)); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}

// fakeCaptures serves named stacks from memory.
type fakeCaptures struct {
	named map[callKey]*store.NamedStack
}

func (f fakeCaptures) NamedStack(pid, tid uint32, t int64) (*store.NamedStack, error) {
	return f.named[callKey{pid, tid, t}], nil
}
func (f fakeCaptures) Capture(uint32, uint32, int64) (*store.Capture, error) { return nil, nil }
func (f fakeCaptures) PyStack(uint32, uint32, int64) (*store.PyStack, error) { return nil, nil }
func (f fakeCaptures) PyCodes(uint32) ([]store.PyCode, error)                { return nil, nil }
func (f fakeCaptures) StackRefs(func(*store.StackRef) error) error           { return nil }

// A failure without a capture of its own has its call site's, through a
// reference, unless the pid was reused in between.
func TestCaptureOfReference(t *testing.T) {
	cap := &store.NamedStack{PID: 7, TID: 8, Time: 100}
	s := &state{procs: map[uint32]*store.Process{},
		procList: []store.Process{{PID: 7, Start: 10}, {PID: 7, Start: 500}}}
	s.caps = &captures{src: fakeCaptures{named: map[callKey]*store.NamedStack{{7, 8, 100}: cap}},
		refs: map[callKey]store.StackRef{
			{7, 9, 200}: {PID: 7, TID: 9, Time: 200, RefTID: 8, RefTime: 100},
			{7, 9, 600}: {PID: 7, TID: 9, Time: 600, RefTID: 8, RefTime: 100},
		}}
	for _, tt := range []struct {
		tid    uint32
		t      int64
		want   *store.NamedStack
		shared bool
	}{{8, 100, cap, false}, {9, 200, cap, true}, {9, 600, nil, false}, {9, 300, nil, false}} {
		f := &failed{e: store.Event{PID: 7, TID: tt.tid, End: tt.t}}
		got, shared, err := s.namedOf(f)
		if err != nil || got != tt.want || shared != tt.shared {
			t.Errorf("tid %d at %d: capture %v shared %v (%v); want %v %v", tt.tid, tt.t, got, shared, err, tt.want, tt.shared)
		}
	}
	if p := s.processAt(7, 550); p == nil || p.Start != 500 {
		t.Errorf("process at 550: %+v", p)
	}
	if !reflect.DeepEqual(keyOf(&failed{e: store.Event{PID: 1, TID: 2, End: 3}}), callKey{1, 2, 3}) {
		t.Error("keyOf")
	}
}

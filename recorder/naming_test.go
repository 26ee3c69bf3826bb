package recorder

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/store"
)

// secretStack is a stack copy holding text a program had on its stack.
var secretStack = append([]byte("TOKEN=hunter2-secret-on-the-stack"), make([]byte, 64)...)

// pyStackRecord is a Python frames record of one frame.
func pyStackRecord(pid, tid uint32, at uint64, code uint64) []byte {
	var p bpf.PyStack
	p.Kind, p.Status, p.Minor, p.Nframes, p.Pid, p.Tid, p.TsExit = bpf.KindPyStack, bpf.PyOK, 11, 1, pid, tid, at
	p.Frames[0].Code = code
	return recordOf(&p)
}

// namerJobs runs the handler over records with a namer queue and returns
// what it handed to the namer.
func namerJobs(t *testing.T, keep bool, recs [][]byte) (*handler, *queue, []nameJob) {
	t.Helper()
	h, q, _, _ := testHandler(t, nil)
	h.keepBytes = keep
	ch := make(chan nameJob, 64)
	h.namer = ch
	h.run(&ring{recs: recs})
	close(ch)
	var jobs []nameJob
	for j := range ch {
		jobs = append(jobs, j)
	}
	return h, q, jobs
}

// By default a capture goes to the namer with the Python frames read with
// it and its process's interpreter, and none of its raw parts (stack
// bytes, registers, Python frames, code objects) is queued for run.db;
// under --keep-stack-bytes they are, beside it.
func TestHandlerHandsCapturesToTheNamer(t *testing.T) {
	recs := func() [][]byte {
		return [][]byte{
			allocCall(t, 100, 1<<40, 2, -1, 1000),
			pyStackRecord(100, 100, 2000, 0x7f10),
			ustackRecord(100, 100, 2000, 0x7ffd0000, secretStack),
			pyStackRecord(100, 100, 2500, 0x7f20), // no stack follows for this one
			ustackRecord(100, 100, 3000, 0x7ffd0000, secretStack),
			procRecord(bpf.ProcExit, 100, 1, 4000, 0),
		}
	}
	for _, tt := range []struct {
		name                   string
		keep                   bool
		captures, pyst, stored int
	}{{"default", false, 0, 0, 0}, {"keep stack bytes", true, 2, 2, 1}} {
		_, q, jobs := namerJobs(t, tt.keep, recs())
		b := q.take(nil, 0)
		if len(b.Captures) != tt.captures || len(b.PyStacks) != tt.pyst {
			t.Errorf("%s: %d captures, %d Python stacks queued for run.db; want %d, %d", tt.name, len(b.Captures),
				len(b.PyStacks), tt.captures, tt.pyst)
		}
		var caps []nameJob
		forgot := uint32(0)
		for _, j := range jobs {
			if j.capture != nil {
				caps = append(caps, j)
			}
			if j.forget != 0 {
				forgot = j.forget
			}
		}
		if len(caps) != 2 || forgot != 100 {
			t.Fatalf("%s: %d captures handed to the namer, forgot pid %d; want 2 and 100", tt.name, len(caps), forgot)
		}
		if ps := caps[0].pyStack; ps == nil || ps.Time != 2000 || ps.Frames[0].Code != 0x7f10 {
			t.Errorf("%s: first capture's Python frames %+v, want those read at 2000", tt.name, ps)
		}
		if caps[1].pyStack != nil {
			t.Errorf("%s: a capture got the Python frames of another return: %+v", tt.name, caps[1].pyStack)
		}
	}
}

// The namer names a capture into a stack that holds addresses, files,
// names and why the walk stopped, and no byte of the stack copy; a
// process's code objects name its Python frames and are let go at its
// exit.
func TestNamerKeepsNoStackBytes(t *testing.T) {
	q := newQueue()
	n := newNamer(q, newFileIndex(newBuildIDCache()))
	code := store.PyCode{PID: 100, Code: 0x7f10, Time: 1500, Type: 0xc0de, FirstLine: 3,
		Name:     store.PyString{State: 0x64, Length: 5, Data: []byte("alloc")},
		QualName: store.PyString{State: 0x64, Length: 5, Data: []byte("alloc")},
		Filename: store.PyString{State: 0x64, Length: 7, Data: []byte("/job.py")}}
	c := &store.Capture{PID: 100, TID: 100, Time: 2000, Regs: store.Regs{IP: 0x400100, SP: 0x7ffd0000},
		Stack: secretStack, Maps: []store.Mapping{{Start: 0x400000, End: 0x402000, Path: "/nonexistent/train"}}}
	ps := &store.PyStack{PID: 100, TID: 100, Time: 2000, Status: "ok", Minor: 11,
		Frames: []store.PyFrame{{Code: 0x7f10, Instr: 0x7f10 + 0x1000, Entry: true}}}
	n.handle(nameJob{code: &code})
	n.handle(nameJob{capture: c, pyStack: ps, interp: &store.Python{Version: "3.11.2", Path: "/usr/bin/python3.11",
		Runtime: 0x1000, CodeType: 0xc0de}})
	n.handle(nameJob{capture: &store.Capture{PID: 200, TID: 200, Time: 2100, Regs: store.Regs{IP: 0x400100},
		Stack: secretStack}})
	n.handle(nameJob{forget: 100})
	b := q.take(nil, 0)
	if len(b.Named) != 2 {
		t.Fatalf("%d named stacks, want 2", len(b.Named))
	}
	got := b.Named[0]
	if got.PID != 100 || got.Time != 2000 || len(got.Frames) == 0 || got.Frames[0].Addr != 0x400100 ||
		got.Frames[0].Path != "/nonexistent/train" || got.Stop != "no-file" {
		t.Errorf("named stack %+v: want the first frame at 0x400100 in /nonexistent/train, stopped no-file", got)
	}
	if got.Python != "ok" || len(got.PyFrames) != 1 || got.PyFrames[0].Function != "alloc" || got.PyFrames[0].File != "/job.py" {
		t.Errorf("Python %q frames %+v: want alloc in /job.py", got.Python, got.PyFrames)
	}
	if b.Named[1].Python != "" {
		t.Errorf("a process that is no CPython got Python status %q", b.Named[1].Python)
	}
	for _, ns := range b.Named {
		js, _ := json.Marshal(ns)
		if bytes.Contains(js, []byte("hunter2")) {
			t.Errorf("named stack holds the stack's bytes: %s", js)
		}
	}
	if _, ok := n.codes[100]; ok {
		t.Error("the code objects of an exited process are kept")
	}
}

// A process's code objects are bounded: past the limit the oldest half is
// let go.
func TestNamerBoundsCodeObjects(t *testing.T) {
	n := newNamer(newQueue(), nil)
	for i := range maxCodesPerProcess + 1 {
		n.handle(nameJob{code: &store.PyCode{PID: 7, Code: uint64(i)}})
	}
	cs := n.codes[7]
	if len(cs) > maxCodesPerProcess || cs[len(cs)-1].Code != maxCodesPerProcess {
		t.Errorf("%d code objects kept, last %#x", len(cs), cs[len(cs)-1].Code)
	}
}

package recorder

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

// ring is a recordSource of synthetic records: it hands them out, then
// one deadline (as an idle ring does), then says it was flushed.
type ring struct {
	recs  [][]byte
	idled bool
}

func (r *ring) SetDeadline(time.Time) {}

func (r *ring) ReadInto(rec *ringbuf.Record) error {
	if len(r.recs) > 0 {
		rec.RawSample = append(rec.RawSample[:0], r.recs[0]...)
		r.recs = r.recs[1:]
		return nil
	}
	if !r.idled {
		r.idled = true
		return os.ErrDeadlineExceeded
	}
	return ringbuf.ErrFlushed
}

func recordOf[T any](v *T) []byte {
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))...)
}

type stackMap map[int32][]bpf.StackFrame

func (m stackMap) Stack(id int32) ([]bpf.StackFrame, error) {
	if fs, ok := m[id]; ok {
		return fs, nil
	}
	return nil, os.ErrNotExist
}

func symID(t *testing.T, name string) uint16 {
	t.Helper()
	_, id, ok := cuda.Lookup(name)
	if !ok {
		t.Fatalf("%s is not in the symbol table", name)
	}
	return uint16(id)
}

func allocCall(t *testing.T, pid uint32, size uint64, result int32, stack int32, at uint64) []byte {
	var c bpf.Call
	c.Kind, c.Symbol, c.Pid, c.Tid, c.Result = bpf.KindCall, symID(t, "cuMemAlloc_v2"), pid, pid, result
	c.StackId, c.TsEntry, c.TsExit = stack, at, at+1000
	c.Args[0], c.Args[1] = 0x1000, size
	return recordOf(&c)
}

func procRecord(what uint8, pid, ppid uint32, at uint64, exit int32) []byte {
	p := bpf.Proc{Kind: bpf.KindProc, What: what, Pid: pid, Tid: pid, Ppid: ppid, Ts: at, ExitCode: exit}
	return recordOf(&p)
}

// testHandler is a handler on a queue, with a /proc that has nothing in
// it and no loader cache.
func testHandler(t *testing.T, stacks stackMap) (*handler, *queue, chan triggerReq, *[]uint32) {
	q := newQueue()
	trig := make(chan triggerReq, 16)
	var continued []uint32
	fz := newFreezer(time.Hour)
	fz.cont = func(pid uint32) error { continued = append(continued, pid); return nil }
	ids := newBuildIDCache()
	files := newFileIndex(ids)
	files.loader = func() []string { return nil }
	h := newHandler(q, stacks, []gpuID{{Index: 0, UUID: "GPU-0"}}, trig, fz, files, ids)
	h.proc = t.TempDir()
	return h, q, trig, &continued
}

// Calls, failures, stacks and the lifecycle of the spawned workload and
// its child, from synthetic ring records, without a kernel.
func TestHandlerRecordsCallsAndLifecycle(t *testing.T) {
	frames := []bpf.StackFrame{{Status: bpf.StackBuildID, BuildID: [20]byte{0xab}, Value: 0x42}, {Status: bpf.StackIP, Value: 0x7f00}}
	h, q, trig, _ := testHandler(t, stackMap{5: frames})
	h.addRoot(store.Process{PID: 100, Args: []string{"train"}, Env: map[string]string{"CUDA_VISIBLE_DEVICES": "0"}})
	src := &ring{recs: [][]byte{
		allocCall(t, 100, 1<<20, 0, -1, 1000),
		procRecord(bpf.ProcFork, 101, 100, 2000, 0),
		allocCall(t, 101, 2<<30, 2, 5, 3000),
		allocCall(t, 101, 2<<30, 2, 5, 4000), // same stack: stored once
		{0xff, 1, 2},                         // not a record
		procRecord(bpf.ProcExit, 101, 100, 5000, 0),
		procRecord(bpf.ProcExit, 100, 1, 6000, 1<<8),
	}}
	h.run(src)

	b := q.take(nil, 0)
	if len(b.Events) != 3 || q.stats.Events != 3 || q.stats.DecodeErrors != 1 {
		t.Fatalf("%d events (stats %d), %d decode errors; want 3 and 1", len(b.Events), q.stats.Events, q.stats.DecodeErrors)
	}
	ok, fail := b.Events[0], b.Events[1]
	if ok.PID != 100 || ok.Size != 1<<20 || ok.Stack != -1 || ok.Result != 0 {
		t.Errorf("first event %+v", ok)
	}
	if fail.PID != 101 || fail.Result != 2 || fail.Stack != 5 || fail.End != 4000 {
		t.Errorf("failed event %+v", fail)
	}
	if got := b.Stacks[5]; len(got) != 2 || got[0].BuildID != "ab00000000000000000000000000000000000000" || got[0].Offset != 0x42 || got[1].IP != 0x7f00 {
		t.Errorf("stack 5 = %+v", got)
	}
	if len(trig) != 2 {
		t.Fatalf("%d sample requests, want one per failed call", len(trig))
	}
	if req := <-trig; req.t.PID != 101 || req.t.Symbol != "cuMemAlloc_v2" || req.t.End != 4000 {
		t.Errorf("trigger %+v", req.t)
	}
	byPID := map[uint32]store.Process{}
	for _, p := range b.Processes {
		byPID[p.PID] = p
	}
	root, child := byPID[100], byPID[101]
	if !root.Root || root.Exit == nil || root.Exit.Code == nil || *root.Exit.Code != 1 {
		t.Errorf("root %+v: want root, exit code 1", root)
	}
	if child.PPID != 100 || child.Env["CUDA_VISIBLE_DEVICES"] != "0" || child.Exit == nil {
		t.Errorf("child %+v: want parent 100, the parent's environment, an exit", child)
	}
	select {
	case <-h.rootExited:
	default:
		t.Error("the root's exit was not signalled")
	}
}

// A process the session found attached late has every event flagged and
// its record marked, whether its first record is a call or --all's
// first-call record; another process has neither.
func TestHandlerLateProcesses(t *testing.T) {
	h, q, _, _ := testHandler(t, nil)
	h.late = map[uint32]bool{200: true, 300: true}
	h.run(&ring{recs: [][]byte{
		procRecord(bpf.ProcFirstCall, 200, 1, 1000, 0),
		allocCall(t, 200, 4096, 0, -1, 1100),
		allocCall(t, 300, 4096, 0, -1, 1200),
		procRecord(bpf.ProcFirstCall, 400, 1, 1300, 0),
		allocCall(t, 400, 4096, 0, -1, 1400),
	}})
	b := q.take(nil, 0)
	for _, e := range b.Events {
		if late := e.Flags&store.EventLateAttach != 0; late != (e.PID != 400) {
			t.Errorf("pid %d: late flag %v", e.PID, late)
		}
	}
	for _, p := range b.Processes {
		if p.AttachedLate != (p.PID != 400) {
			t.Errorf("pid %d: attached_late %v", p.PID, p.AttachedLate)
		}
	}
	if len(b.Processes) != 3 {
		t.Errorf("%d processes published, want 3", len(b.Processes))
	}
}

// A process frozen at a failed call is continued when it exits (the
// sampler normally does it sooner), once.
func TestHandlerFrozenProcessContinued(t *testing.T) {
	h, _, trig, continued := testHandler(t, nil)
	var c bpf.Call
	c.Kind, c.Symbol, c.Pid, c.Tid, c.Result = bpf.KindCall, symID(t, "cuMemAlloc_v2"), 500, 500, 2
	c.StackId, c.TsEntry, c.TsExit, c.Flags = -1, uint64(now()), uint64(now()), bpf.CallFrozen
	h.run(&ring{recs: [][]byte{recordOf(&c), procRecord(bpf.ProcExit, 500, 1, uint64(now()), 9)}})
	if req := <-trig; !req.t.Frozen {
		t.Errorf("trigger %+v: want frozen", req.t)
	}
	h.freeze.resumeAll()
	if len(*continued) != 1 || (*continued)[0] != 500 {
		t.Errorf("continued %v, want pid 500 once", *continued)
	}
}

// Build ids resolve from files seen earlier first, then the process's
// current mappings, then the loader cache; each is stored once, and one
// found nowhere is tried again later.
func TestFileIndexResolves(t *testing.T) {
	x := newFileIndex(newBuildIDCache())
	loaderReads := 0
	x.loader = func() []string { loaderReads++; return nil }
	x.addMaps([]store.Mapping{{Path: "/app/train", BuildID: "aa"}}, "seen", rootOpener{})
	frames := []store.Frame{{BuildID: "aa"}, {BuildID: "bb"}, {BuildID: "cc"}, {IP: 7}, {BuildID: "aa"}}
	maps := func() []store.Mapping {
		return []store.Mapping{{Path: "/usr/lib/libfoo.so", Host: "/proc/9/root/usr/lib/libfoo.so", BuildID: "bb"}}
	}
	got := x.resolve(frames, maps)
	if len(got) != 2 || got[0].Path != "/app/train" || got[0].Source != "seen" ||
		got[1].Path != "/usr/lib/libfoo.so" || got[1].Open == "" || got[1].Source != "maps" {
		t.Fatalf("resolve = %+v", got)
	}
	if loaderReads != 1 {
		t.Errorf("loader cache read %d times, want once (cc is nowhere)", loaderReads)
	}
	x.add(store.File{BuildID: "cc", Path: "/opt/libcc.so", Source: "seen"})
	if again := x.resolve(frames, nil); len(again) != 1 || again[0].BuildID != "cc" {
		t.Errorf("second resolve = %+v, want only cc (aa and bb are stored)", again)
	}
	if loaderReads != 1 {
		t.Errorf("loader cache read %d times, want once per run", loaderReads)
	}
}

func TestParseLdconfig(t *testing.T) {
	out := "1234 libs found in cache `/etc/ld.so.cache'\n" +
		"\tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6\n" +
		"\tlibc.so.6 (libc6) => /lib/i386-linux-gnu/libc.so.6\n" +
		"\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
	if got := parseLdconfig(out, ""); len(got) != 2 || got[0] != "/lib/x86_64-linux-gnu/libc.so.6" {
		t.Errorf("parseLdconfig = %v", got)
	}
	if got := parseLdconfig(out, "libcuda.so.1"); len(got) != 1 || got[0] != "/usr/lib/x86_64-linux-gnu/libcuda.so.1" {
		t.Errorf("parseLdconfig(libcuda.so.1) = %v", got)
	}
}

// execRecord is an exec record as the probe fills it: the argv bytes it
// copied followed by bytes an earlier record left in the ring, and the
// program's path at the end of the file name buffer.
func execRecord(pid uint32, comm, path string, key fileKey, args string, flags uint8) []byte {
	p := bpf.Proc{Kind: bpf.KindProc, What: bpf.ProcExec, Flags: flags, Pid: pid, Tid: pid, Ts: 2000,
		ExeIno: key.Ino, ExeDev: key.Dev, ArgsLen: uint16(len(args)), FilenameLen: uint16(len(path))}
	junk := "\x01\x00\xff\x02\x00x"
	for i := range p.Args {
		if i < len(args) {
			p.Args[i] = int8(args[i])
		} else {
			p.Args[i] = int8(junk[i%len(junk)])
		}
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&p.Comm[0])), len(p.Comm)), comm+"\x00")
	name := unsafe.Slice((*byte)(unsafe.Pointer(&p.Filename[0])), len(p.Filename))
	copy(name, junk)
	copy(name[len(name)-len(path):], path)
	return recordOf(&p)
}

// A shell's child that execs a program and exits before its exec record
// is read is named after the program the probe saw, not the shell it was
// forked from, with exactly the argv the probe copied; /proc completes a
// cut record only while it still shows that program.
func TestHandlerExecNamesTheProgram(t *testing.T) {
	bin := t.TempDir()
	prog, shell := filepath.Join(bin, "simwork"), filepath.Join(bin, "bash")
	for _, f := range []string{prog, shell} {
		if err := os.WriteFile(f, []byte(f), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	key, _ := statKey(prog)
	const argv = "sw\x00init; exit 0\x00\x00x\x00"
	exact := []string{"sw", "init; exit 0", "", "x"}
	cutPath := prog[len(prog)-12:]
	tests := []struct {
		name     string
		procExe  string // what /proc/101/exe links to ("": the process is gone)
		cmdline  string
		path     string
		args     string
		flags    uint8
		wantExe  string
		wantArgs []string
		wantCut  bool
	}{
		{"gone", "", "", prog, argv, 0, prog, exact, false},
		{"execed again", shell, "bash\x00-c\x00true\x00", prog, argv, 0, prog, exact, false},
		{"alive, argv cut", prog, argv + "more\x00", prog, argv[:10], bpf.ProcArgsCut, prog,
			[]string{"sw", "init; exit 0", "", "x", "more"}, false},
		{"gone, argv cut", "", "", prog, argv[:10], bpf.ProcArgsCut, prog, []string{"sw", "init; e"}, true},
		{"gone, argv unreadable", "", "", prog, "", bpf.ProcArgsFault, prog, nil, false},
		{"gone, path cut", "", "", cutPath, argv, bpf.ProcFilenameCut, "..." + cutPath, exact, false},
		{"alive, path cut", prog, argv, cutPath, argv, bpf.ProcFilenameCut, prog, exact, false},
		{"execed again, path cut", shell, "bash\x00", cutPath, argv, bpf.ProcFilenameCut, "..." + cutPath, exact, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, q, _, _ := testHandler(t, nil)
			if tt.procExe != "" {
				dir := filepath.Join(h.proc, "101")
				os.MkdirAll(dir, 0o755)
				os.WriteFile(filepath.Join(dir, "stat"), []byte("101 (x) S 100 1"), 0o644)
				os.WriteFile(filepath.Join(dir, "cmdline"), []byte(tt.cmdline), 0o644)
				if err := os.Symlink(tt.procExe, filepath.Join(dir, "exe")); err != nil {
					t.Fatal(err)
				}
			}
			h.addRoot(store.Process{PID: 100, Exe: shell, Args: []string{"bash", "-c", "exec sw"}})
			h.run(&ring{recs: [][]byte{
				procRecord(bpf.ProcFork, 101, 100, 1000, 0),
				execRecord(101, "simwork", tt.path, key, tt.args, tt.flags),
				procRecord(bpf.ProcExit, 101, 100, 3000, 0),
			}})
			var got *store.Process
			for _, p := range q.take(nil, 0).Processes {
				if p.PID == 101 {
					got = &p
				}
			}
			if got == nil {
				t.Fatal("no record of pid 101")
			}
			if got.Exe != tt.wantExe || got.Comm != "simwork" {
				t.Errorf("exe %q, comm %q; want %q, simwork", got.Exe, got.Comm, tt.wantExe)
			}
			if !reflect.DeepEqual(got.Args, tt.wantArgs) || got.ArgsCut != tt.wantCut {
				t.Errorf("args %q (cut %v), want %q (cut %v)", got.Args, got.ArgsCut, tt.wantArgs, tt.wantCut)
			}
		})
	}
}

// A process gone before its exec (or first-call) record is read keeps
// the parent the probe saw: /proc has nothing left to say (the spawned
// workload with --libcuda, which nothing holds at mapping time).
func TestHandlerParentOfAGoneProcess(t *testing.T) {
	for _, what := range []uint8{bpf.ProcExec, bpf.ProcFirstCall} {
		h, q, _, _ := testHandler(t, nil)
		h.addRoot(store.Process{PID: 100})
		p := bpf.Proc{Kind: bpf.KindProc, What: what, Pid: 100, Tid: 100, Ppid: 42, Ts: 2000}
		h.run(&ring{recs: [][]byte{recordOf(&p), procRecord(bpf.ProcExit, 100, 42, 3000, 0)}})
		procs := q.take(nil, 0).Processes
		if len(procs) != 1 || procs[0].PPID != 42 {
			t.Errorf("record %d: processes %+v, want pid 100 with parent 42", what, procs)
		}
	}
}

// watchedStacks is a stackSource that notes, at each stack read, how many
// sample requests were already sent.
type watchedStacks struct {
	stackMap
	trig   chan triggerReq
	atRead []int
}

func (w *watchedStacks) Stack(id int32) ([]bpf.StackFrame, error) {
	w.atRead = append(w.atRead, len(w.trig))
	return w.stackMap.Stack(id)
}

// A failure asks for its NVML sample before the reader resolves the
// failure's stack (reading /proc, ELF files, the loader cache), which can
// take milliseconds that would put the sample further from the failure.
func TestFailureSampledBeforeItsStack(t *testing.T) {
	frames := []bpf.StackFrame{{Status: bpf.StackBuildID, BuildID: [20]byte{0xab}, Value: 0x42}}
	w := &watchedStacks{stackMap: stackMap{5: frames}}
	h, _, trig, _ := testHandler(t, nil)
	h.stacks, w.trig = w, trig
	h.addRoot(store.Process{PID: 100})
	h.run(&ring{recs: [][]byte{allocCall(t, 100, 2<<30, 2, 5, 1000)}})
	if len(w.atRead) != 1 || w.atRead[0] != 1 {
		t.Errorf("sample requests sent when the stack was read: %v, want [1]", w.atRead)
	}
}

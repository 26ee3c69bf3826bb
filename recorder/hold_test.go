package recorder

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/logging"
	"github.com/retrivium/forensic/store"
)

// probes is a probeTarget that records what it is asked, and in which
// order (order: "attach PATH", "mark DEV:INO").
type probes struct {
	attached []string
	marked   []fileKey
	unmarked []fileKey
	order    []string
}

func (p *probes) Attach(path string, ids []int, offsets []uint64) ([]link.Link, error) {
	p.attached = append(p.attached, path)
	p.order = append(p.order, "attach "+path)
	return nil, nil
}

func (p *probes) MarkAttached(dev uint32, ino uint64) error {
	p.marked = append(p.marked, fileKey{dev, ino})
	p.order = append(p.order, fmt.Sprintf("mark %d:%d", dev, ino))
	return nil
}

func (p *probes) UnmarkAttached(dev uint32, ino uint64) error {
	p.unmarked = append(p.unmarked, fileKey{dev, ino})
	return nil
}

// A file is attached once, however many processes map it, and the hook
// learns every name the kernel gives it; a file that cannot be attached
// is recorded once with why; after the stop nothing is attached.
func TestAttacherOncePerFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "libcuda.so.1")
	os.WriteFile(bad, []byte("not ELF"), 0o755)
	lf, err := newLibFile(bad, bad)
	if err != nil {
		t.Fatal(err)
	}
	p := &probes{}
	a := newAttacher(p)
	a.hooked = true
	lib, isNew := a.attach(lf)
	if !isNew || lib.Error == "" || !strings.Contains(lib.Error, "ELF") {
		t.Errorf("first attach = %+v, %v: want a new record saying why", lib, isNew)
	}
	other := lf
	other.Key = fileKey{Dev: 1, Ino: 2} // the same file under another name
	if _, isNew := a.attach(other); isNew {
		t.Error("the same file attached twice")
	}
	if len(p.marked) != 2 || p.marked[0] != lf.Key || p.marked[1] != other.Key {
		t.Errorf("marked %v, want both keys", p.marked)
	}
	a.detach()
	f2 := filepath.Join(dir, "libcuda.so.2")
	os.WriteFile(f2, []byte("x"), 0o755)
	lf2, _ := newLibFile(f2, f2)
	if lib, isNew := a.attach(lf2); isNew || !strings.Contains(lib.Error, "stopped") {
		t.Errorf("attach after the stop = %+v, %v", lib, isNew)
	}
	if len(p.attached) != 0 {
		t.Errorf("probes attached to %v", p.attached)
	}
}

// setState writes pid 42's /proc stat with a state ("T": stopped; "":
// the process is gone).
func setState(proc, state string) {
	stat := filepath.Join(proc, "42", "stat")
	if state == "" {
		os.Remove(stat)
		return
	}
	os.WriteFile(stat, []byte("42 (simwork) "+state+" 1 42 42 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1234 0 0\n"), 0o644)
}

// holdWorld is a /proc with one process (pid 42), stopped, that maps a
// libcuda file.
func holdWorld(t *testing.T) (proc string, lib string, hd bpf.Hold) {
	t.Helper()
	proc = t.TempDir()
	lib = filepath.Join(t.TempDir(), "libcuda.so.1")
	os.WriteFile(lib, []byte("not ELF"), 0o755)
	var st syscall.Stat_t
	syscall.Stat(lib, &st)
	os.MkdirAll(filepath.Join(proc, "42"), 0o755)
	maps := fmt.Sprintf("7f0000001000-7f0000002000 r-xp 00001000 %02x:%02x %d %s\n",
		unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino, lib)
	os.WriteFile(filepath.Join(proc, "42", "maps"), []byte(maps), 0o644)
	setState(proc, "T")
	hd = bpf.Hold{Kind: bpf.KindHold, Flags: bpf.HoldStopped, Pid: 42, Tid: 43, Dev: kernelDev(st.Dev), Ino: st.Ino,
		Addr: 0x7f0000001800, Ts: uint64(now())}
	return proc, lib, hd
}

// A held process is continued exactly once whatever happens: its file
// attached, its mapping gone, or the recording stopped.
func TestHolderAlwaysContinues(t *testing.T) {
	for _, tc := range []struct {
		name    string
		addr    uint64 // 0: the mapping's
		stopped bool
		library bool // a library record is queued
	}{{"attached", 0, false, true}, {"mapping gone", 0x1000, false, false}, {"recording stopped", 0, true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			proc, lib, hd := holdWorld(t)
			if tc.addr != 0 {
				hd.Addr = tc.addr
			}
			var continued []uint32
			var log bytes.Buffer
			saidBefore := "" // the log when the process was continued
			q := newQueue()
			att := newAttacher(&probes{})
			if tc.stopped {
				att.detach()
			}
			ids := newBuildIDCache()
			h := &holder{att: att, q: q, files: newFileIndex(ids), ids: ids, proc: proc, log: logging.New(&log, logging.Options{Format: logging.Text}),
				cont: func(pid uint32) error { continued, saidBefore = append(continued, pid), log.String(); return nil }}
			h.handle(&hd)
			if len(continued) != 1 || continued[0] != 42 {
				t.Fatalf("continued %v, want pid 42 once", continued)
			}
			// Said while the process is still held: the line comes before
			// anything the process prints once it runs on.
			if log.Len() > 0 && saidBefore != log.String() {
				t.Errorf("said %q only after the process was continued (before: %q)", log.String(), saidBefore)
			}
			b := q.take(nil, 0)
			if got := len(b.Libraries) == 1; got != tc.library {
				t.Fatalf("libraries %+v; log %q", b.Libraries, log.String())
			}
			if tc.library {
				l := b.Libraries[0]
				if l.Path != lib || l.MappedBy != 42 || l.Held <= 0 {
					t.Errorf("library %+v: want its path, mapped by 42, a hold time", l)
				}
				if !strings.Contains(log.String(), "mapped by pid 42") {
					t.Errorf("log %q does not name the process", log.String())
				}
			}
			if _, _, h := q.final(nil, 0); h.Count != 1 {
				t.Errorf("hold stats %+v, want one hold", h)
			}
		})
	}
}

// Attached late: a process whose libcuda mapping is not one it was held
// at (it mapped it before the hook was in); a held process is not late,
// unless it also maps another libcuda it was not held at.
func TestMarkLate(t *testing.T) {
	line := func(path string, start uint64) mapLine {
		return mapLine{Start: start, End: start + 0x1000, Path: path}
	}
	scan := map[uint32][]mapLine{
		10: {line("/lib/libcuda.so.1", 0x1000), line("/lib/libcuda.so.1", 0x2000)}, // before the hook
		20: {line("/lib/libcuda.so.1", 0x1000), line("/lib/libcuda.so.1", 0x2000)}, // held
		30: {line("/lib/libcuda.so.1", 0x1000), line("/opt/libcuda.so.1", 0x8000)}, // held at /opt only
	}
	holds := []bpf.Hold{{Pid: 20, Addr: 0x2100}, {Pid: 30, Addr: 0x8100}}
	h, _, _, _ := testHandler(t, nil)
	h.addRoot(store.Process{PID: 10})
	s := &Session{h: h}
	s.markLate(scan, holds)
	want := map[uint32]bool{10: true, 30: true}
	if len(h.late) != len(want) || !h.late[10] || !h.late[30] {
		t.Errorf("late = %v, want %v", h.late, want)
	}
	if !h.procs[10].rec.AttachedLate {
		t.Error("the root's record is not marked")
	}
}

// The map hook learns that a file needs no hold only after its probes are
// in: a process that maps the file while it is being attached must be held
// until then, or its first calls go unrecorded with no loss counted.
func TestAttacherMarksAfterProbes(t *testing.T) {
	exe, err := os.Executable() // an ELF with dynamic symbols, none hooked
	if err != nil {
		t.Fatal(err)
	}
	lf, err := newLibFile(exe, exe)
	if err != nil {
		t.Fatal(err)
	}
	other := lf
	other.Key = fileKey{Dev: 1, Ino: 2} // the same file under another name
	p := &probes{}
	a := newAttacher(p)
	a.hooked = true
	if lib, isNew := a.attach(lf); !isNew || lib.Error != "" {
		t.Fatalf("attach = %+v, %v", lib, isNew)
	}
	a.attach(other)
	want := []string{"attach " + exe, fmt.Sprintf("mark %d:%d", lf.Key.Dev, lf.Key.Ino), "mark 1:2"}
	if strings.Join(p.order, "\n") != strings.Join(want, "\n") {
		t.Errorf("order:\n%s\nwant:\n%s", strings.Join(p.order, "\n"), strings.Join(want, "\n"))
	}
}

// A mapping the hook could not hold its process at (the stop signal was
// refused) is counted as a lost hold: the process ran on, and calls it
// made before the probes were in are missing. It is not continued: it was
// never stopped.
func TestHolderCountsUnheldMapping(t *testing.T) {
	proc, _, hd := holdWorld(t)
	hd.Flags = 0
	var continued []uint32
	q := newQueue()
	ids := newBuildIDCache()
	h := &holder{att: newAttacher(&probes{}), q: q, files: newFileIndex(ids), ids: ids, proc: proc, log: logging.Discard(),
		cont: func(pid uint32) error { continued = append(continued, pid); return nil }}
	h.handle(&hd)
	if len(continued) != 0 {
		t.Errorf("continued %v, a process that was not stopped", continued)
	}
	var ctr bpf.Stats // the probes count no lost hold of their own
	st, _, holds := q.final(&ctr, 0)
	if st.LostHolds != 1 || holds.Count != 0 {
		t.Errorf("lost holds %d, holds %d; want 1 lost, none held", st.LostHolds, holds.Count)
	}
}

// A process running when recording starts that maps a libcuda gets its
// record at once, attached late, even if it never calls while recording:
// it may hold GPU memory the report must name. One already known keeps its
// record; one gone since the scan gets none.
func TestAddRunningRecordsIdleProcesses(t *testing.T) {
	h, q, _, _ := testHandler(t, nil)
	for pid, comm := range map[string]string{"10": "server", "20": "train"} {
		dir := filepath.Join(h.proc, pid)
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "stat"), []byte(pid+" ("+comm+") S 1 0 0"), 0o644)
		os.WriteFile(filepath.Join(dir, "comm"), []byte(comm+"\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "cmdline"), []byte(comm+"\x00--port\x00"), 0o644)
	}
	h.addRoot(store.Process{PID: 20, Args: []string{"train", "--root"}})
	h.late[10], h.late[20] = true, true
	h.addRunning([]uint32{10, 20, 30}, 1234) // 30 exited since the scan
	h.publish()
	got := map[uint32]store.Process{}
	for _, p := range q.take(nil, 0).Processes {
		got[p.PID] = p
	}
	p, ok := got[10]
	if !ok || !p.AttachedLate || p.Comm != "server" || p.PPID != 1 || p.Start != 1234 || len(p.Args) != 2 || p.Args[1] != "--port" {
		t.Errorf("record of the running process: %+v (found %v); want it attached late, from /proc", p, ok)
	}
	if r := got[20]; !r.Root || len(r.Args) != 2 || r.Args[1] != "--root" {
		t.Errorf("the known process's record was replaced: %+v", r)
	}
	if _, ok := got[30]; ok {
		t.Error("a record for a process gone since the scan")
	}
}

// A hold the map hook could not inspect (the process's address space was
// locked) names no file: the mapping at its address decides. At a libcuda
// it is attached under the name /proc gives and the hook is told; at any
// other file nothing is attached, said or counted lost. A stopped process
// is continued either way; one the hook could not stop at a libcuda is a
// lost hold.
func TestHolderUninspectedHold(t *testing.T) {
	for _, tc := range []struct {
		name      string
		addr      uint64 // 0: the libcuda mapping's
		stopped   bool
		library   bool // a library record is queued and the hook told
		lostHolds uint64
	}{
		{"at a libcuda", 0, true, true, 0},
		{"at another file", 0x1000, true, false, 0},
		{"not stopped, at another file", 0x1000, false, false, 0},
		{"not stopped, at a libcuda", 0, false, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc, lib, hd := holdWorld(t)
			want := fileKey{hd.Dev, hd.Ino}
			hd.Dev, hd.Ino, hd.Flags = 0, 0, bpf.HoldUninspected
			if tc.stopped {
				hd.Flags |= bpf.HoldStopped
			}
			if tc.addr != 0 {
				hd.Addr = tc.addr
			}
			var continued []uint32
			var log bytes.Buffer
			p := &probes{}
			att := newAttacher(p)
			att.hooked = true
			q := newQueue()
			ids := newBuildIDCache()
			h := &holder{att: att, q: q, files: newFileIndex(ids), ids: ids, proc: proc, log: logging.New(&log, logging.Options{Format: logging.Text}),
				cont: func(pid uint32) error { continued = append(continued, pid); return nil }}
			h.handle(&hd)
			if wantCont := tc.stopped; (len(continued) == 1 && continued[0] == 42) != wantCont {
				t.Errorf("continued %v; stopped %v", continued, tc.stopped)
			}
			b := q.take(nil, 0)
			if got := len(b.Libraries) == 1; got != tc.library {
				t.Fatalf("libraries %+v, want one: %v; log %q", b.Libraries, tc.library, log.String())
			}
			if tc.library && (b.Libraries[0].Path != lib || b.Libraries[0].MappedBy != 42) {
				t.Errorf("library %+v: want %s mapped by 42", b.Libraries[0], lib)
			}
			if tc.library != (len(p.marked) == 1 && p.marked[0] == want) {
				t.Errorf("hook told %v, want %v: %v", p.marked, want, tc.library)
			}
			if !tc.library && log.Len() > 0 {
				t.Errorf("said %q of a mapping of another file", log.String())
			}
			var ctr bpf.Stats
			st, _, holds := q.final(&ctr, 0)
			if st.LostHolds != tc.lostHolds || (holds.Count == 1) != tc.stopped {
				t.Errorf("lost holds %d, holds %d; want %d lost, held: %v", st.LostHolds, holds.Count, tc.lostHolds, tc.stopped)
			}
		})
	}
}

// A process held at a libcuda that runs on before the probes are in
// (another recorder's holder continued it, or it was killed) is a lost
// hold, said once, and not continued again; one still stopped, or with
// its SIGSTOP still pending, is held.
func TestHolderCountsProcessThatRanOn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		state   string // "": gone
		pending string // ShdPnd
		ranOn   bool
	}{
		{"stopped", "T", "0000000000000000", false},
		{"stopped by its tracer", "t", "0000000000000000", false},
		{"stop pending", "R", "0000000000040000", false},
		{"running", "S", "0000000000000000", true},
		{"gone", "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc, _, hd := holdWorld(t)
			setState(proc, tc.state)
			if tc.pending != "" {
				os.WriteFile(filepath.Join(proc, "42", "status"), []byte("Name:\tsimwork\nSigPnd:\t0000000000000000\nShdPnd:\t"+tc.pending+"\n"), 0o644)
			}
			var continued []uint32
			var log bytes.Buffer
			q := newQueue()
			ids := newBuildIDCache()
			h := &holder{att: newAttacher(&probes{}), q: q, files: newFileIndex(ids), ids: ids, proc: proc, log: logging.New(&log, logging.Options{Format: logging.Text}),
				cont: func(pid uint32) error { continued = append(continued, pid); return nil }}
			h.handle(&hd)
			if (len(continued) == 0) != tc.ranOn {
				t.Errorf("continued %v; ran on: %v", continued, tc.ranOn)
			}
			var ctr bpf.Stats
			st, _, holds := q.final(&ctr, 0)
			if (st.LostHolds == 1) != tc.ranOn || (holds.Count == 1) == tc.ranOn {
				t.Errorf("lost holds %d, holds %d; ran on: %v", st.LostHolds, holds.Count, tc.ranOn)
			}
			if said := strings.Contains(log.String(), "ran on before the probes were in"); said != tc.ranOn {
				t.Errorf("log %q; ran on: %v", log.String(), tc.ranOn)
			}
		})
	}
}

// Whether a held process ran on is judged as soon as the probes are in:
// one held when its hold is taken up, at a file attached before, is held
// even if another recorder continues it during the hold's handling; at a
// file this hold attaches, it must still be held after the attach.
func TestHolderJudgesRanOnOnceProbesAreIn(t *testing.T) {
	for _, tc := range []struct {
		name             string
		attachedBefore   bool
		heldAtStart      bool
		heldAfterAttach  bool
		wantLost, wantIn uint64 // lost holds, holds counted
	}{
		{"attached before, held at start, continued by another later", true, true, false, 0, 1},
		{"attached before, running at start", true, false, false, 1, 0},
		{"attached by this hold, continued by another during it", false, true, false, 1, 0},
		{"attached by this hold, held throughout", false, true, true, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc, lib, hd := holdWorld(t)
			att := newAttacher(&probes{})
			if tc.attachedBefore {
				lf, err := newLibFile(lib, lib)
				if err != nil {
					t.Fatal(err)
				}
				lf.Key = fileKey{hd.Dev, hd.Ino}
				att.attach(lf)
			}
			asked := 0
			q := newQueue()
			ids := newBuildIDCache()
			h := &holder{att: att, q: q, files: newFileIndex(ids), ids: ids, proc: proc, log: logging.Discard(),
				cont: func(uint32) error { return nil },
				isHeld: func(uint32) bool {
					asked++
					if asked == 1 {
						return tc.heldAtStart
					}
					return tc.heldAfterAttach
				}}
			h.handle(&hd)
			var ctr bpf.Stats
			st, _, holds := q.final(&ctr, 0)
			if st.LostHolds != tc.wantLost || uint64(holds.Count) != tc.wantIn {
				t.Errorf("lost holds %d, holds %d; want %d lost, %d held", st.LostHolds, holds.Count, tc.wantLost, tc.wantIn)
			}
		})
	}
}

// execMarksAfter reports an exec unread for its first n lookups.
type execMarksAfter struct{ n, lookups int }

func (m *execMarksAfter) UnreadExec(uint32) (uint64, bool) {
	m.lookups++
	return 1, m.lookups <= m.n
}

func (m *execMarksAfter) MarkExecRead(uint32, uint64) {}

// A process held at its libcuda mapping before the event reader read its
// exec is continued once the reader has, not before; when the reader is
// too far behind it is continued at the limit all the same, and that is
// said.
func TestHolderWaitsForTheExecToBeRead(t *testing.T) {
	for _, tc := range []struct {
		name   string
		unread int           // lookups that find the exec unread
		age    time.Duration // how long before the holder the hold was made
		warn   bool
	}{
		{"read meanwhile", 5, 0, false},
		{"reader too far behind", 1 << 30, unreadHoldLimit, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc, _, hd := holdWorld(t)
			hd.Flags |= bpf.HoldUnread
			hd.Ts -= uint64(tc.age)
			marks := &execMarksAfter{n: tc.unread}
			lookupsAtCont := -1
			var log bytes.Buffer
			ids := newBuildIDCache()
			h := &holder{att: newAttacher(&probes{}), q: newQueue(), files: newFileIndex(ids), ids: ids, proc: proc,
				log: logging.New(&log, logging.Options{Format: logging.Text}), execs: marks,
				cont: func(uint32) error { lookupsAtCont = marks.lookups; return nil }}
			h.handle(&hd)
			if lookupsAtCont < 0 {
				t.Fatal("the held process was not continued")
			}
			if !tc.warn && lookupsAtCont <= tc.unread {
				t.Errorf("continued after %d lookups, while the exec was still unread (%d)", lookupsAtCont, tc.unread)
			}
			if said := strings.Contains(log.String(), "without it"); said != tc.warn {
				t.Errorf("log %q; want a line about continuing without the read: %v", log.String(), tc.warn)
			}
		})
	}
}

package recorder

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/store"
)

// holder attaches to the libcuda files recorded processes map while
// recording. The map hook stops a process at its executable mapping of a
// file whose probes are not in, or of any libcuda before the event reader
// has read the process's last exec; the holder finds the file, attaches
// (once per file), waits for the reader if need be (awaitRead), and
// continues the process, on every path: a process is never left stopped
// by the recorder while it runs. It owns the holds ring.
type holder struct {
	att   *attacher
	q     *queue
	files *fileIndex
	ids   *buildIDCache
	proc  string
	log   *slog.Logger
	// cont continues a held process (SIGCONT; a test records instead).
	cont func(pid uint32) error
	// held reports whether a process sent SIGSTOP is still held (nil:
	// stillHeld on proc; a test changes its answer over time).
	isHeld func(pid uint32) bool
	// held is the held-process file, which outlives a recorder killed
	// while it holds a process (nil: none kept).
	held *heldFile
	// delay lengthens every hold (FORENSIC_TEST_HOLD_DELAY: tests kill
	// the recorder while it holds a process).
	delay time.Duration
	// failed counts the holds whose process could not be continued.
	failed atomic.Uint64
	// onCont, when set, is told of each process held and whether it could
	// be continued (the metrics).
	onCont func(released bool)
	// execs says which held processes' exec records the event reader has
	// read (nil: holds never wait for it).
	execs execMarks
	// namedOnly: only the --libcuda files are attached, and every hold is
	// one made until the process's exec is read (readHold).
	namedOnly bool
}

// execMarks are the probes' marks of exec records not read yet: the
// reader clears a process's mark once it has read its exec, and a hold
// at a libcuda mapping made before then waits for it (*bpf.Objects).
type execMarks interface {
	UnreadExec(pid uint32) (ts uint64, ok bool)
	MarkExecRead(pid uint32, ts uint64)
}

func sigcont(pid uint32) error { return syscall.Kill(int(pid), syscall.SIGCONT) }

// run handles holds until the ring is flushed after the hook is detached:
// every hold reported before that is handled, so every held process is
// continued. The holds waiting in the ring are put on record together
// before the first is handled: attaching takes time, and a recorder
// killed meanwhile must not leave the others stopped with no record.
func (h *holder) run(src recordSource) {
	var rec ringbuf.Record
	for {
		src.SetDeadline(time.Time{}) // block until a hold or the flush
		if err := src.ReadInto(&rec); err != nil {
			return // ringbuf.ErrFlushed: drained; or the reader closed
		}
		var hd bpf.Hold
		if bpf.DecodeHold(rec.RawSample, &hd) != nil {
			continue
		}
		more, flushed := pendingHolds(src)
		batch := append([]bpf.Hold{hd}, more...)
		for i := range batch {
			h.onRecord(&batch[i])
		}
		for i := range batch {
			h.act(&batch[i])
		}
		if flushed {
			return
		}
	}
}

// pendingHolds returns the holds already in the ring, without waiting,
// and whether the ring said it was flushed (the last of them).
func pendingHolds(src recordSource) ([]bpf.Hold, bool) {
	var rec ringbuf.Record
	var out []bpf.Hold
	src.SetDeadline(time.Now())
	for {
		err := src.ReadInto(&rec)
		if err != nil {
			return out, errors.Is(err, ringbuf.ErrFlushed)
		}
		var hd bpf.Hold
		if bpf.DecodeHold(rec.RawSample, &hd) == nil {
			out = append(out, hd)
		}
	}
}

// drain returns the holds already in the ring, without waiting.
func drainHolds(src recordSource) []bpf.Hold {
	var rec ringbuf.Record
	var out []bpf.Hold
	src.SetDeadline(time.Now())
	for src.ReadInto(&rec) == nil {
		var hd bpf.Hold
		if bpf.DecodeHold(rec.RawSample, &hd) == nil {
			out = append(out, hd)
		}
	}
	return out
}

// handle attaches to the file of one hold and continues the process. The
// mapping exists when the hold is reported (the hook runs at the system
// call's exit), and the process cannot run code in it before it is
// continued. What happened is said before the process continues, so the
// line comes before anything the process prints afterwards.
func (h *holder) handle(hd *bpf.Hold) {
	h.onRecord(hd)
	h.act(hd)
}

// onRecord writes a hold to the held-process file.
func (h *holder) onRecord(hd *bpf.Hold) {
	if hd.Flags&bpf.HoldStopped == 0 {
		return
	}
	err := h.held.hold(hd.Pid)
	if errors.Is(err, fs.ErrNotExist) {
		return // gone already: it ran on, which act says
	}
	if err != nil {
		h.log.Error(fmt.Sprintf("the hold of pid %d is not on record (%v): a recorder killed before it continues the process leaves it stopped", hd.Pid, err))
	}
}

// act attaches to the file of a hold on record and continues the process.
//
// A stopped process can be continued by another before the probes are in:
// another recorder's map hook holds the same process at the same mapping
// and its holder sends SIGCONT once its own probes are in. Such a process
// runs on, maybe through its first calls, before this recorder's probes
// are in; it is counted as a lost hold, never taken for held. It is looked
// at as soon as the probes are in: at once when the file was attached
// before (by an earlier hold), else after this attach. One found running
// then may have run only after the probes were in; it is counted all the
// same, since when it started running is unknown.
func (h *holder) act(hd *bpf.Hold) {
	if h.namedOnly {
		h.readHold(hd)
		return
	}
	pid := hd.Pid
	stopped := hd.Flags&bpf.HoldStopped != 0
	heldAtStart := stopped && h.stillHeld(pid)
	if stopped {
		time.Sleep(h.delay)
	}
	lib, isNew, err := h.attachHeld(hd)
	ranOn := false
	switch {
	case !stopped:
	case err == nil && !isNew:
		ranOn = !heldAtStart // the probes were in when act began
	default:
		ranOn = !h.stillHeld(pid)
	}
	if errors.Is(err, errNotLibCUDA) {
		// An uninspected hold at another file: nothing to attach, and
		// nothing missed if it ran on.
		if stopped && !ranOn {
			h.q.addHold(now() - int64(hd.Ts))
		}
		h.release(hd, ranOn)
		return
	}
	if stopped && !ranOn && hd.Flags&bpf.HoldUnread != 0 {
		h.awaitRead(hd)
	}
	if stopped && !ranOn {
		lib.Held = now() - int64(hd.Ts)
		h.q.addHold(lib.Held)
	} else {
		// It ran on from the mapping: calls it made before the probes
		// were in are not in the record. Counted, never silent.
		h.q.notHeld()
	}
	switch {
	case ranOn:
		h.log.Warn(fmt.Sprintf("pid %d, held at its mapping of %s, ran on before the probes were in (another process, such as another recorder, continued it): its first calls may be missing",
			pid, holdName(hd)), "pid", pid)
	case err != nil:
		h.log.Warn(fmt.Sprintf("pid %d mapped %s, which could not be attached: %v", pid, holdName(hd), err), "pid", pid)
	}
	if err == nil && isNew {
		lib.MappedBy = pid
		h.q.addLibrary(lib)
		logAttach(h.log, &lib)
	}
	h.release(hd, ranOn)
}

// awaitRead waits, for a process held before the event reader read its
// last exec (bpf.HoldUnread), until the reader has: its mappings read,
// its interpreter located and told to the probes, its root held open.
// The wait ends early when the process is no longer held, and at the
// latest unreadHoldLimit after the hold; a process continued then is
// said, since a failure right after may lack its Python frames.
func (h *holder) awaitRead(hd *bpf.Hold) {
	if h.execs == nil {
		return
	}
	limit := int64(hd.Ts) + int64(unreadHoldLimit)
	for {
		if _, unread := h.execs.UnreadExec(hd.Pid); !unread || !h.stillHeld(hd.Pid) {
			return
		}
		if now() >= limit {
			// Its files at least are known before it runs on: a failure
			// right after, and an exit, leave its native frames named.
			h.files.addMaps(readMappings(h.proc, hd.Pid, h.ids, ""), "seen", rootOpener{})
			h.log.Warn(fmt.Sprintf("pid %d, held at its mapping of %s until the recorder read its exec, is continued after %v without it (the event reader is behind): a failure right after may lack its Python frames",
				hd.Pid, holdName(hd), unreadHoldLimit), "pid", hd.Pid)
			return
		}
		time.Sleep(unreadHoldPoll)
	}
}

// readHold ends a hold made only for the event reader (--libcuda: no
// other file is attached): the process is continued once its exec is
// read. One continued meanwhile by another process is only taken off the
// held-process file; nothing was missed, the probes being in.
func (h *holder) readHold(hd *bpf.Hold) {
	held := hd.Flags&bpf.HoldStopped != 0 && h.stillHeld(hd.Pid)
	if held {
		h.awaitRead(hd)
		h.q.addHold(now() - int64(hd.Ts))
	}
	h.release(hd, !held)
}

// unreadHoldLimit bounds how long a process is held waiting for the event
// reader to read its exec (awaitRead): a reader seconds behind is a
// recorder that cannot keep up, and the workload must not wait on it.
const (
	unreadHoldLimit = 2 * time.Second
	unreadHoldPoll  = time.Millisecond
)

// release ends a hold: a stopped process is continued, unless it ran on
// already (then it is only taken off the held-process file).
func (h *holder) release(hd *bpf.Hold, ranOn bool) {
	switch {
	case hd.Flags&bpf.HoldStopped == 0:
	case ranOn:
		if err := h.held.release(hd.Pid); err != nil {
			h.log.Warn(fmt.Sprintf("%s: %v", h.held.path, err))
		}
	default:
		h.resume(hd.Pid, holdName(hd))
	}
}

// stillHeld reports whether a process sent SIGSTOP is still held.
func (h *holder) stillHeld(pid uint32) bool {
	if h.isHeld != nil {
		return h.isHeld(pid)
	}
	return stillHeld(h.proc, pid)
}

// holdName names the file of a hold in the recorder's lines.
func holdName(hd *bpf.Hold) string {
	if name := bpf.CString(hd.Name[:]); name != "" {
		return name
	}
	return "an uninspected mapping"
}

// errNotLibCUDA: an uninspected hold's mapping is not of a libcuda file.
var errNotLibCUDA = errors.New("not a libcuda mapping")

// resume continues a held process; one that cannot be continued is an
// error, said at once, and stays on record for the next recorder to try.
func (h *holder) resume(pid uint32, name string) {
	err := h.cont(pid)
	if h.onCont != nil {
		h.onCont(continued(err))
	}
	if !continued(err) {
		h.failed.Add(1)
		h.log.Error(fmt.Sprintf("pid %d, held at its first mapping of %s, could not be continued: %v: it stays stopped (kill -CONT %d)",
			pid, name, err, pid), "pid", pid)
		return
	}
	if err := h.held.release(pid); err != nil {
		h.log.Warn(fmt.Sprintf("%s: %v", h.held.path, err))
	}
}

// attachHeld finds the file a held process mapped and attaches to it. It
// also learns the process's mappings for resolving stack frames later:
// held, the process cannot exit before they are read. An uninspected hold
// (the hook could not look at the mapping) may be at any file: one whose
// mapping at the address is not a libcuda's gives errNotLibCUDA.
func (h *holder) attachHeld(hd *bpf.Hold) (store.Library, bool, error) {
	uninspected := hd.Flags&bpf.HoldUninspected != 0
	pid := hd.Pid
	var line mapLine
	found := false
	for _, m := range libCUDAMaps(h.proc, pid) {
		if m.Start <= hd.Addr && hd.Addr < m.End {
			line, found = m, true
			break
		}
	}
	if !found && uninspected {
		return store.Library{}, false, errNotLibCUDA
	}
	if !found {
		return store.Library{}, false, errors.New("its mapping is gone (the process exited or unmapped it)")
	}
	h.files.addMaps(readMappings(h.proc, pid, h.ids, ""), "seen", rootOpener{})
	lf, err := openMapped(h.proc, pid, line)
	if err != nil {
		return store.Library{}, false, err
	}
	// The hook's own name for the file, which is what it looks up; an
	// uninspected hold has none, and /proc's (the same but under an
	// overlay) is the best there is.
	lf.Key = fileKey{hd.Dev, hd.Ino}
	if uninspected {
		lf.Key = line.Key
	}
	lib, isNew := h.att.attach(lf)
	h.att.addKey(lf.Dev, lf.Ino, line.Key) // as /proc names it, for the sweep
	h.files.add(store.File{BuildID: lib.BuildID, Path: lib.Path, Open: openPath(lib), Source: "seen"})
	return lib, isNew, nil
}

// openPath is a library's host path when it differs from its own.
func openPath(lib store.Library) string {
	if lib.HostPath == lib.Path {
		return ""
	}
	return lib.HostPath
}

package recorder

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/retrivium/forensic/logging"
)

// freezer continues the processes --freeze-on-failure stopped: as soon as
// their GPUs are sampled, when the limit passes, when they exit, and at
// the stop, each exactly once. The event reader notes each freeze, the
// sampler and timers resume; mu guards the table.
type freezer struct {
	mu     sync.Mutex
	frozen map[uint32]*frozenProc
	limit  time.Duration
	// cont continues a process (syscall.Kill with SIGCONT; a test records).
	cont func(pid uint32) error
	// held is the held-process file (nil: none kept); log says a process
	// that could not be continued.
	held *heldFile
	log  *slog.Logger
	// onCont, when set, is told of each process continued and whether it
	// could be (the metrics).
	onCont func(released bool)
}

type frozenProc struct {
	callEnd  int64
	resumed  bool
	resumeAt int64
}

// continued reports whether a SIGCONT's error leaves the process running:
// none, or a process that is gone (nothing is left stopped).
func continued(err error) bool {
	return err == nil || errors.Is(err, syscall.ESRCH)
}

func newFreezer(limit time.Duration) *freezer {
	return &freezer{frozen: map[uint32]*frozenProc{}, limit: limit,
		cont: sigcont, log: logging.Discard()}
}

// froze notes a process stopped at a failed call that returned at
// callEnd, and continues it at the latest when the limit has passed.
func (f *freezer) froze(pid uint32, callEnd int64) {
	if err := f.held.hold(pid); err != nil {
		f.log.Error(fmt.Sprintf("the freeze of pid %d is not on record (%v): a recorder killed before it continues the process leaves it stopped", pid, err))
	}
	f.mu.Lock()
	f.frozen[pid] = &frozenProc{callEnd: callEnd}
	f.mu.Unlock()
	time.AfterFunc(f.limit-time.Duration(now()-callEnd), func() { f.resume(pid) })
}

// resume continues a frozen process, once.
func (f *freezer) resume(pid uint32) {
	f.mu.Lock()
	p := f.frozen[pid]
	if p == nil || p.resumed {
		f.mu.Unlock()
		return
	}
	p.resumed = true
	p.resumeAt = now()
	onCont := f.onCont
	f.mu.Unlock()
	err := f.cont(pid)
	if onCont != nil {
		onCont(continued(err))
	}
	if !continued(err) {
		f.log.Error(fmt.Sprintf("pid %d, frozen at a failed call, could not be continued: %v: it stays stopped (kill -CONT %d)", pid, err, pid))
		return
	}
	f.held.release(pid)
}

// span reports when a process's freeze began (its call's return) and
// ended; ok is false if it is not frozen or not yet resumed.
func (f *freezer) span(pid uint32) (callEnd, resumeAt int64, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.frozen[pid]
	if p == nil || !p.resumed {
		return 0, 0, false
	}
	return p.callEnd, p.resumeAt, true
}

// resumeAll continues every process still frozen.
func (f *freezer) resumeAll() {
	f.mu.Lock()
	var pids []uint32
	for pid, p := range f.frozen {
		if !p.resumed {
			pids = append(pids, pid)
		}
	}
	f.mu.Unlock()
	for _, pid := range pids {
		f.resume(pid)
	}
}

// forget drops a process that exited (there is nothing to continue); a
// later process with its pid starts afresh.
func (f *freezer) forget(pid uint32) {
	f.mu.Lock()
	delete(f.frozen, pid)
	f.mu.Unlock()
}

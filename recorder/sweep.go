package recorder

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/retrivium/forensic/bpf"
)

// sweeper takes the probes off libcuda files that no process maps any
// more (flight mode). Over days, containers bring their own libcuda files
// and go, and an upgrade replaces libcuda under running processes: probes
// left on the old files would pin them (a deleted file's space is not
// freed while a probe holds it) and fill the map hook's table of attached
// files. A file mapped again later is held and attached again, like a new
// one.
type sweeper struct {
	att  *attacher
	q    *queue
	proc string
	self uint32 // the recorder's pid: its own mappings do not count
	log  *slog.Logger
	// every is how often, at most, it looks for files no process maps,
	// and only after the event reader forgot a process (exited): while
	// nothing exits, it reads nothing. The segment age.
	every  time.Duration
	exited atomic.Bool
}

// run sweeps every interval after an exit until stop is closed.
func (w *sweeper) run(stop <-chan struct{}) {
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if w.exited.Swap(false) {
				w.sweep()
			}
		}
	}
}

// mapped reads every process's libcuda mappings: the files, as the
// kernel names them, that some process maps.
func (w *sweeper) mapped() map[fileKey]bool {
	out := map[fileKey]bool{}
	for pid, ms := range scanLibCUDA(w.proc, nil, true) {
		if pid == w.self {
			continue
		}
		for _, m := range ms {
			out[m.Key] = true
		}
	}
	return out
}

// sweep detaches the files no process maps. The map hook is told first
// (so that a process mapping one from then on is held), the mappings are
// read again, and a file mapped meanwhile keeps its probes; the holder
// waits meanwhile, so a held process is attached to afresh.
func (w *sweeper) sweep() {
	idle := w.att.unmapped(w.mapped())
	if len(idle) == 0 {
		return
	}
	a := w.att
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, af := range idle {
		for _, k := range af.keys {
			a.objs.UnmarkAttached(k.Dev, k.Ino)
		}
	}
	again := w.mapped()
	for k, af := range a.byFile {
		if !slices.Contains(idle, af) {
			continue
		}
		if mappedAny(again, af.keys) {
			for _, key := range af.keys {
				a.objs.MarkAttached(key.Dev, key.Ino)
			}
			continue
		}
		bpf.CloseLinks(af.links)
		delete(a.byFile, k)
		w.q.dropLibrary(af.lib.Device, af.lib.Inode)
		w.log.Info(fmt.Sprintf("detached %s (build id %s): no process maps it any more", af.lib.Path, shortID(af.lib.BuildID)), "library", af.lib.Path)
	}
}

// unmapped lists the files attached through the map hook that none of
// mapped names.
func (a *attacher) unmapped(mapped map[fileKey]bool) []*attachedFile {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*attachedFile
	for _, af := range a.byFile {
		if len(af.keys) > 0 && !mappedAny(mapped, af.keys) {
			out = append(out, af)
		}
	}
	return out
}

// addKey gives an attached file another name the kernel knows it by.
func (a *attacher) addKey(dev, ino uint64, k fileKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if af := a.byFile[[2]uint64{dev, ino}]; af != nil && k != (fileKey{}) && !slices.Contains(af.keys, k) {
		af.keys = append(af.keys, k)
	}
}

func mappedAny(mapped map[fileKey]bool, keys []fileKey) bool {
	for _, k := range keys {
		if mapped[k] {
			return true
		}
	}
	return false
}

// shortID is a build id as the recorder's lines print it.
func shortID(id string) string {
	switch {
	case id == "":
		return "none"
	case len(id) > 12:
		return id[:12]
	}
	return id
}

// startSweeper starts detaching unmapped files, in flight mode when the
// recorder attaches what processes map (not with --libcuda).
func (s *Session) startSweeper() {
	if s.cfg.Flight == nil || !s.att.hooked {
		return
	}
	every := s.cfg.Flight.Policy.SegmentAge
	if every <= 0 {
		every = time.Minute
	}
	s.sw = &sweeper{att: s.att, q: s.q, proc: "/proc", self: uint32(os.Getpid()), log: s.cfg.Log, every: every}
	s.h.exited = &s.sw.exited
	s.sweepCh, s.sweepDone = make(chan struct{}), make(chan struct{})
	go func() { defer close(s.sweepDone); s.sw.run(s.sweepCh) }()
}

// stopSweeper stops it, waiting for a sweep in progress.
func (s *Session) stopSweeper() {
	if s.sweepCh != nil {
		close(s.sweepCh)
		<-s.sweepDone
		s.sweepCh = nil
	}
}

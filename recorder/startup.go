package recorder

import (
	"fmt"
	"os"
	"sort"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/store"
)

// attachStart puts the probes on the libcuda files to record from the
// start. With --libcuda, those files and nothing else. Otherwise the map
// hook goes in first (from then on, a recorded process that maps a libcuda
// not yet attached is held until it is), then the processes already
// running are read: the libcuda files they map are attached, and those
// that mapped one before the hook are marked as attached late. All of this
// is settled before any event is read, so the same input always gives the
// same record.
func (s *Session) attachStart() error {
	if s.namedFilesOnly() {
		return s.attachExplicit()
	}
	var pids []uint32
	if s.cfg.PID != 0 {
		pids = s.trackExisting(uint32(s.cfg.PID))
	}
	if err := s.attachHook(); err != nil {
		return err
	}
	s.att.hooked = true
	if len(s.cfg.Command) > 0 {
		s.cfg.Log.Info("no libcuda attached yet: each is attached when the workload maps it")
		return nil
	}
	scan := scanLibCUDA("/proc", pids, s.cfg.All)
	delete(scan, uint32(os.Getpid()))
	if err := s.scope.filter(scan); err != nil {
		return err
	}
	// Every process that mapped a libcuda after the hook went in is held,
	// and its hold is in the ring already: the hook runs as the mapping
	// system call returns, before the mapping can be seen in /proc.
	holds := drainHolds(s.holdRing)
	s.markLate(scan, holds)
	s.recordRunning(scan)
	for i := range holds {
		s.hl.handle(&holds[i])
	}
	s.attachScanned(scan)
	if s.att.symbols() == 0 {
		s.cfg.Log.Info("no libcuda attached yet: each is attached when a recorded process maps it")
	}
	return nil
}

// attachHook attaches the map hook.
func (s *Session) attachHook() error {
	hook, err := s.objs.AttachMapHook()
	if err != nil {
		return err
	}
	s.hook = hook
	s.onRelease(func() { hook.Close() })
	return nil
}

// attachExplicit attaches the --libcuda files. The map hook goes in too,
// but holds a process only until its exec is read (bpf.HoldUnread); no
// other file is attached.
func (s *Session) attachExplicit() error {
	libs, err := explicitLibCUDA(s.cfg.LibCUDA)
	if err != nil {
		return err
	}
	if err := s.attachHook(); err != nil {
		return err
	}
	if s.cfg.PID != 0 {
		pids := s.trackExisting(uint32(s.cfg.PID))
		s.markLate(scanLibCUDA("/proc", pids, false), nil)
	}
	if s.cfg.All {
		scan := scanLibCUDA("/proc", nil, true)
		delete(scan, uint32(os.Getpid()))
		if err := s.scope.filter(scan); err != nil {
			return err
		}
		s.markLate(scan, nil)
		s.recordRunning(scan)
	}
	for _, lf := range libs {
		lib, _ := s.att.attach(lf)
		s.q.addLibrary(lib)
		logAttach(s.cfg.Log, &lib)
	}
	if s.att.symbols() == 0 {
		return fmt.Errorf("no symbol of the table could be attached in %s", libs[0].HostPath)
	}
	return nil
}

// trackExisting starts recording a running process and its descendants
// (--pid), before any probe: a thread decides at its first call whether
// it is recorded, and keeps that answer.
func (s *Session) trackExisting(pid uint32) []uint32 {
	var pids []uint32
	for i, st := range runningTree("/proc", pid, now(), readProc) {
		if i == 0 {
			s.h.addRoot(st)
		} else {
			s.h.procs[st.PID] = newProcState(st)
		}
		if err := s.objs.Track(st.PID); err != nil {
			s.q.trackFailed() // its calls are not recorded: counted, never silent
		}
		pids = append(pids, st.PID)
	}
	return pids
}

// runningTree is the records of a running process and its descendants,
// read from /proc (with read) as of t, the process first. A descendant
// gone between the scan and its read gets none: it holds nothing, its
// parent would be unknown (a job of its own in the report), and tracking
// its pid would only follow whoever is given it next.
func runningTree(procRoot string, pid uint32, t int64, read func(string, uint32) procInfo) []store.Process {
	var out []store.Process
	for i, p := range append([]uint32{pid}, descendants(procRoot, pid)...) {
		pi := read(procRoot, p)
		if i > 0 && !pi.Readable {
			continue
		}
		out = append(out, store.Process{PID: p, PPID: pi.PPID, Start: t, Exe: pi.Exe, Args: pi.Args, Cgroup: pi.Cgroup, Env: pi.Env, Pod: pi.Pod})
	}
	return out
}

// markLate decides which processes were attached late: those that map a
// libcuda file they mapped before the map hook went in, that is, a file
// none of their holds is in. Calls they made through it before its probes
// were attached are not in the record.
func (s *Session) markLate(scan map[uint32][]mapLine, holds []bpf.Hold) {
	held := map[uint32]map[string]bool{}
	for _, hd := range holds {
		for _, m := range scan[hd.Pid] {
			if m.Start <= hd.Addr && hd.Addr < m.End {
				if held[hd.Pid] == nil {
					held[hd.Pid] = map[string]bool{}
				}
				held[hd.Pid][m.Path] = true
			}
		}
	}
	for pid, ms := range scan {
		for _, m := range ms {
			if !held[pid][m.Path] {
				s.h.late[pid] = true
				if p := s.h.procs[pid]; p != nil {
					p.rec.AttachedLate = true
				}
			}
		}
	}
}

// recordRunning gives every running process that maps a libcuda and has
// no record yet (with --all, all of them) its process record, attached
// late, and follows it from now on (its exit, its children). A process
// that makes no call while recording may still hold GPU memory: the
// report must name it, and say whether it ended. Called before the files
// are attached, so none of these processes has a call recorded yet.
func (s *Session) recordRunning(scan map[uint32][]mapLine) {
	pids := make([]uint32, 0, len(scan))
	for pid := range scan {
		if _, ok := s.h.procs[pid]; !ok {
			pids = append(pids, pid)
		}
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	for _, pid := range pids {
		if err := s.objs.Track(pid); err != nil {
			s.q.trackFailed() // its exit is not followed: counted, never silent
		}
	}
	s.h.addRunning(pids, now())
}

// attachScanned attaches the libcuda files running processes map, each
// once, naming the first process (lowest pid) that maps it.
func (s *Session) attachScanned(scan map[uint32][]mapLine) {
	pids := make([]uint32, 0, len(scan))
	for pid := range scan {
		pids = append(pids, pid)
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	done := map[fileKey]bool{}
	for _, pid := range pids {
		for _, m := range scan[pid] {
			if done[m.Key] {
				continue
			}
			done[m.Key] = true
			lf, err := openMapped("/proc", pid, m)
			if err != nil {
				s.cfg.Log.Warn(err.Error())
				continue
			}
			s.files.addMaps(readMappings("/proc", pid, s.ids, ""), "seen", rootOpener{})
			if lib, isNew := s.att.attach(lf); isNew {
				lib.MappedBy = pid
				s.q.addLibrary(lib)
				logAttach(s.cfg.Log, &lib)
				s.files.add(store.File{BuildID: lib.BuildID, Path: lib.Path, Open: openPath(lib), Source: "seen"})
			}
		}
	}
}

// namedFilesOnly says the recording attaches the --libcuda files and no
// other: the map hook then holds a process only until its exec is read.
func (s *Session) namedFilesOnly() bool { return len(s.cfg.LibCUDA) > 0 }

package recorder

import (
	"time"
)

// rescanInterval is how often the recorder looks for libcuda files it has
// not attached to yet.
const rescanInterval = time.Second

// watchLibraries attaches to libcuda files that appear after recording
// started: a process that dlopens a libcuda of its own (a container image,
// a bundled driver) maps a file the probes are not on. Each rescan reads
// the maps of the tracked processes (with --all, of every process) and
// attaches once per new file. Calls a process makes through a new file
// before the next rescan are not recorded; the library record's time says
// from when its calls are.
func (r *rec) watchLibraries(stop chan struct{}) {
	t := time.NewTicker(rescanInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		var found []LibFile
		if r.cfg.All {
			files, _ := mappedLibCUDA("/proc")
			for _, lf := range files {
				found = append(found, lf)
			}
		} else {
			// Exited processes have no maps left; they drop out by themselves.
			r.mu.Lock()
			pids := make([]uint32, 0, len(r.procs))
			for pid := range r.procs {
				pids = append(pids, pid)
			}
			r.mu.Unlock()
			for _, pid := range pids {
				lfs, _ := libCUDAOf("/proc", pid)
				found = append(found, lfs...)
			}
		}
		for _, lf := range found {
			key := [2]uint64{lf.Dev, lf.Ino}
			r.linkMu.Lock()
			seen := r.attached[key]
			r.attached[key] = true
			r.linkMu.Unlock()
			if seen {
				continue
			}
			lib := r.attach(lf)
			r.mu.Lock()
			r.pending.Libraries = append(r.pending.Libraries, lib)
			r.mu.Unlock()
		}
	}
}

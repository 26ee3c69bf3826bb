package recorder

import (
	"path/filepath"
	"time"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/eventlog"
	"github.com/retrivium/forensic/store"
)

// watchFailures tells the metrics and the event stream, when either is
// on, of each failed call the event reader handles.
func (s *Session) watchFailures() {
	m, ev := s.metrics, s.cfg.Events
	if m == nil && ev == nil {
		return
	}
	start, wall, run := s.run.ClockStart, s.run.WallStart, s.run.ID
	gpus := s.h.gpus
	s.h.failedCall = func(e *store.Event, sym *cuda.Symbol, gpu int, p *store.Process) {
		f := failureOf(e, sym, gpu, p, gpus)
		f.Run, f.Time = run, wall.Add(time.Duration(e.End-start))
		if m != nil {
			m.CallFailed(metricsFailure(&f))
		}
		if ev != nil {
			if err := ev.Failed(f); err != nil && !s.eventsFailed {
				s.eventsFailed = true
				s.cfg.Log.Error(err.Error() + ": no more event lines are written")
			}
		}
	}
}

// failureOf describes a failed call of a process on a GPU (NVML index,
// -1 unknown), as its event line and the metrics say it.
func failureOf(e *store.Event, sym *cuda.Symbol, gpu int, p *store.Process, gpus []gpuID) eventlog.Failure {
	f := eventlog.Failure{Class: sym.Op.String(), Symbol: sym.Name, Result: cuda.LookupResult(e.Result).Name,
		ResultCode: e.Result, PID: e.PID, TID: e.TID, GPU: gpu}
	if e.Has&cuda.FieldSize != 0 {
		size := e.Size
		f.Size = &size
	}
	if p != nil {
		f.Command = p.Comm
		if f.Command == "" && p.Exe != "" {
			f.Command = filepath.Base(p.Exe)
		}
		if p.Pod != nil {
			f.Namespace, f.Pod = p.Pod.Namespace, p.Pod.Name
			if f.Pod == "" {
				f.Pod = p.Pod.UID
			}
		}
	}
	for _, g := range gpus {
		if g.Index == gpu {
			f.GPUUUID = g.UUID
		}
	}
	return f
}

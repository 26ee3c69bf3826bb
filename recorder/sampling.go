package recorder

import (
	"time"

	"github.com/retrivium/forensic/store"
)

// triggerReq asks for a sample round at once, for a failed call; gpu is
// the NVML index to read first (-1: unknown).
type triggerReq struct {
	t   store.Trigger
	gpu int
}

// sampleLoop takes a round of NVML samples every Interval, and one at once
// for each failed call (coalescing failures that arrive while a round is
// being taken). Long runs thin the periodic rounds (see thinner) but keep
// the first, the last, and those around every failure.
func (r *rec) sampleLoop(stop chan struct{}) {
	if !r.smp.OK() {
		<-stop
		return
	}
	th := &thinner{budget: r.cfg.SampleBudget}
	th.keep(true)           // the first round, taken by firstRound
	var held []store.Sample // latest periodic round not kept
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	periodic := func() {
		r.round++
		s := r.smp.Round(r.round, -1, nil)
		if ok, why := th.keep(false); ok {
			for i := range s {
				s[i].Kept = why
			}
			r.addSamples(s)
			held = nil
		} else {
			held = s
			r.mu.Lock()
			r.stats.SamplesThinned += uint64(len(s))
			r.mu.Unlock()
		}
	}
	triggered := func(req triggerReq) {
		trs, gpu := []store.Trigger{req.t}, req.gpu
	drain:
		for {
			select {
			case more := <-r.triggers:
				trs = append(trs, more.t)
			default:
				break drain
			}
		}
		if held != nil {
			for i := range held {
				held[i].Kept = "before-failure"
			}
			r.addSamples(held)
			r.mu.Lock()
			r.stats.SamplesThinned -= uint64(len(held))
			r.mu.Unlock()
			held = nil
		}
		r.round++
		s := r.smp.Round(r.round, gpu, trs)
		for i := range s {
			s[i].Kept = "failure"
		}
		// Continue frozen processes as soon as their GPUs are read.
		for i, tr := range trs {
			if tr.Frozen {
				r.resume(tr.PID)
				r.mu.Lock()
				if f := r.frozen[tr.PID]; f != nil {
					trs[i].Freeze = f.resumeAt - f.callEnd
					trs[i].Frozen = len(s) > 0 && s[len(s)-1].End <= f.resumeAt
				}
				r.mu.Unlock()
			}
		}
		r.addSamples(s)
		r.mu.Lock()
		if len(s) > 0 {
			for _, tr := range trs {
				r.delays = append(r.delays, s[0].Start-tr.End)
			}
		}
		r.mu.Unlock()
		th.failure()
	}
	for {
		select {
		case <-stop:
			// Failures read in the final drain still get their round
			// (triggered takes every request queued).
			select {
			case req := <-r.triggers:
				triggered(req)
			default:
			}
			r.round++
			s := r.smp.Round(r.round, -1, nil)
			for i := range s {
				s[i].Kept = "last"
			}
			r.addSamples(s)
			return
		case <-t.C:
			periodic()
		case req := <-r.triggers:
			triggered(req)
		}
	}
}

// firstRound takes the run's first sample round, before the workload
// starts.
func (r *rec) firstRound() {
	if !r.smp.OK() {
		return
	}
	r.round++
	s := r.smp.Round(r.round, -1, nil)
	for i := range s {
		s[i].Kept = "first"
	}
	r.addSamples(s)
}

func (r *rec) addSamples(s []store.Sample) {
	r.mu.Lock()
	r.pending.Samples = append(r.pending.Samples, s...)
	r.stats.Samples += uint64(len(s))
	r.mu.Unlock()
}

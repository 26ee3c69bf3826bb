package recorder

import (
	"time"

	"github.com/retrivium/forensic/store"
)

// sampleLoop takes a round of NVML samples every Interval, and one at once
// for each failed call (coalescing failures that arrive while a round is
// being taken). Long runs thin the periodic rounds (see thinner) but keep
// the first, the last, and those around every failure.
func (r *rec) sampleLoop(stop chan struct{}) {
	if !r.smp.OK() {
		<-stop
		return
	}
	var round uint64
	th := &thinner{budget: r.cfg.SampleBudget}
	var held []store.Sample // latest periodic round not kept
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	periodic := func(first bool) {
		round++
		s := r.smp.Round(round, -1, nil)
		if ok, why := th.keep(first); ok {
			for i := range s {
				s[i].Kept = why
			}
			r.addSamples(s, 0)
			held = nil
		} else {
			held = s
			r.mu.Lock()
			r.stats.SamplesDropped += uint64(len(s))
			r.mu.Unlock()
		}
	}
	periodic(true)
	for {
		select {
		case <-stop:
			round++
			s := r.smp.Round(round, -1, nil)
			for i := range s {
				s[i].Kept = "last"
			}
			r.addSamples(s, 0)
			return
		case <-t.C:
			periodic(false)
		case tr := <-r.triggers:
			gpu := <-r.triggerGPU
			trs := []store.Trigger{tr}
		drain:
			for {
				select {
				case more := <-r.triggers:
					<-r.triggerGPU
					trs = append(trs, more)
				default:
					break drain
				}
			}
			if held != nil {
				for i := range held {
					held[i].Kept = "before-failure"
				}
				r.addSamples(held, 0)
				r.mu.Lock()
				r.stats.SamplesDropped -= uint64(len(held))
				r.mu.Unlock()
				held = nil
			}
			round++
			s := r.smp.Round(round, gpu, trs)
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
			r.addSamples(s, 0)
			r.mu.Lock()
			if len(s) > 0 {
				for _, tr := range trs {
					r.delays = append(r.delays, s[0].Start-tr.End)
				}
			}
			r.mu.Unlock()
			th.failure()
		}
	}
}

func (r *rec) addSamples(s []store.Sample, _ int) {
	r.mu.Lock()
	r.pending.Samples = append(r.pending.Samples, s...)
	r.stats.Samples += uint64(len(s))
	r.mu.Unlock()
}

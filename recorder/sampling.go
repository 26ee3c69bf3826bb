package recorder

import (
	"time"

	"github.com/retrivium/forensic/recorder/sampler"
	"github.com/retrivium/forensic/store"
)

// triggerReq asks for a sample round at once, for a failed call; gpu is
// the NVML index to read first (-1: unknown).
type triggerReq struct {
	t   store.Trigger
	gpu int
}

// sampling owns NVML while recording: it takes a round of samples every
// interval, and one at once for each failed call (coalescing failures that
// arrive while a round is being taken). Long runs thin the periodic rounds
// (see thinner) but keep the first, the last, and those around every
// failure. Only the sampler goroutine uses it after the first round.
type sampling struct {
	smp      *sampler.Sampler
	q        *queue
	freeze   *freezer
	triggers chan triggerReq
	interval time.Duration
	th       thinner
	round    uint64
	held     []store.Sample // the latest periodic round not kept
	epoch    uint64         // the queue's segment of the last round kept
	// onRound, when set, is told of every round read, kept or not (the
	// metrics' memory gauges).
	onRound func([]store.Sample)
	// names, when set, names the processes a stored round lists that the
	// recording does not follow.
	names *neighbourNamer
}

// queueRound queues a round kept, then names the neighbours it lists first
// (after the queueing, and after any frozen process was let go: no call
// waits for /proc).
func (s *sampling) queueRound(round []store.Sample) {
	s.q.addSamples(round)
	if s.names == nil || len(round) == 0 {
		return
	}
	if ns := s.names.name(s.q.unnamed(round), now()); len(ns) > 0 {
		s.q.addNeighbours(ns)
	}
}

// first takes the run's first round, before the workload starts, so every
// run has a sample of the state it started from.
func (s *sampling) first() {
	if !s.smp.OK() {
		return
	}
	s.th.keep(true)
	s.queueRound(s.take(-1, nil, "first"))
}

// take reads a round and queues it, marked with why it is kept.
func (s *sampling) take(gpu int, trs []store.Trigger, why string) []store.Sample {
	s.round++
	smp := s.smp.Round(s.round, gpu, trs)
	for i := range smp {
		smp[i].Kept = why
	}
	if s.onRound != nil {
		s.onRound(smp)
	}
	return smp
}

// run samples until stop; then it serves the failures still queued and
// takes the last round.
func (s *sampling) run(stop <-chan struct{}) {
	if !s.smp.OK() {
		<-stop
		return
	}
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			// Failures read in the final drain still get their round
			// (triggered takes every request queued).
			select {
			case req := <-s.triggers:
				s.triggered(req)
			default:
			}
			s.queueRound(s.take(-1, nil, "last"))
			return
		case <-t.C:
			s.periodic()
		case req := <-s.triggers:
			s.triggered(req)
		}
	}
}

func (s *sampling) periodic() {
	round := s.take(-1, nil, "")
	ok, why := s.th.keep(false)
	if ep := s.q.segment(); ep != s.epoch {
		// A new segment of a flight recording starts with a round of its
		// own, whatever the thinning, so that it stands alone.
		s.epoch, ok, why = ep, true, "first"
	}
	if ok {
		for i := range round {
			round[i].Kept = why
		}
		s.queueRound(round)
		s.held = nil
		return
	}
	s.held = round
	s.q.thinned(len(round))
}

// triggered takes the round for one or more failed calls.
func (s *sampling) triggered(req triggerReq) {
	trs, gpu := []store.Trigger{req.t}, req.gpu
drain:
	for {
		select {
		case more := <-s.triggers:
			trs = append(trs, more.t)
		default:
			break drain
		}
	}
	if s.held != nil {
		for i := range s.held {
			s.held[i].Kept = "before-failure"
		}
		s.queueRound(s.held)
		s.q.thinned(-len(s.held))
		s.held = nil
	}
	round := s.take(gpu, trs, "failure")
	// Continue frozen processes as soon as their GPUs are read.
	for i, tr := range trs {
		if tr.Frozen {
			s.freeze.resume(tr.PID)
			if callEnd, resumeAt, ok := s.freeze.span(tr.PID); ok {
				trs[i].Freeze = resumeAt - callEnd
				trs[i].Frozen = len(round) > 0 && round[len(round)-1].End <= resumeAt
			}
		}
	}
	s.queueRound(round)
	if len(round) > 0 {
		delays := make([]int64, len(trs))
		for i, tr := range trs {
			delays[i] = round[0].Start - tr.End
		}
		s.q.addDelays(delays...)
	}
	s.th.failure()
}

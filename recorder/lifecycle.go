package recorder

import (
	"golang.org/x/sys/unix"

	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/retrivium/forensic/bpf"
	"github.com/retrivium/forensic/store"
)

// Start starts the goroutines (writer, sampler, holder, kernel log,
// control socket, event reader) and, in spawn mode, the workload, whose
// pid is tracked before it passes its gate. An error means the workload
// could not be started; Stop still ends the recording (reason "error").
func (s *Session) Start() error {
	s.writerCh, s.writerDone = make(chan struct{}), make(chan struct{})
	go func() { defer close(s.writerDone); s.wr.run(s.writerCh) }()
	s.samplerCh, s.smpDone = make(chan struct{}), make(chan struct{})
	go func() { defer close(s.smpDone); s.smp.run(s.samplerCh) }()
	s.holdsDone = make(chan struct{})
	go func() { defer close(s.holdsDone); s.hl.run(s.holdRing) }()
	if s.namerCh != nil {
		s.namerDone = make(chan struct{})
		nm := newNamer(s.q, s.files)
		go func() { defer close(s.namerDone); nm.run(s.namerCh) }()
	}
	s.startSweeper()
	if s.kmsg != nil {
		go readKmsg(s.kmsg, s.kmsgOffset, s.kmsgLine)
	}
	if s.ctl != nil {
		go control{start: s.run.ClockStart, allow: s.cfg.Invoker.MayControl, mark: s.mark,
			snapshot: s.snapshot, live: s.sendLive}.serve(s.ctl)
	}
	s.watchFailures()
	s.serveMetrics()
	if s.cfg.Ready != nil {
		s.cfg.Ready()
	}
	if len(s.cfg.Command) > 0 {
		s.startErr = s.spawn()
		return s.startErr
	}
	s.startEvents()
	return nil
}

// startEvents hands the event handler to its goroutine.
func (s *Session) startEvents() {
	s.eventsDone = make(chan struct{})
	go func() { defer close(s.eventsDone); s.h.run(s.events) }()
}

// spawn starts the workload behind its gate, registers and tracks it,
// starts the event reader, and opens the gate.
func (s *Session) spawn() error {
	g, err := startGated(&s.cfg)
	if err != nil {
		return err
	}
	pid := uint32(g.cmd.Process.Pid)
	// The recorder forked the gate, which execs the workload in place:
	// its parent is this process, whether or not /proc can still be read
	// when its exec record arrives.
	s.h.addRoot(store.Process{PID: pid, PPID: uint32(os.Getpid()), Start: now(), Args: s.cfg.Command,
		Exe: s.cfg.Command[0], Env: FilterEnv(os.Environ())})
	// The file the gate will exec, as the recorder finds it on the same
	// PATH: a short-lived workload may be gone before its mappings can be
	// read, and its own frames are in every stack.
	if exe, err := exec.LookPath(s.cfg.Command[0]); err == nil {
		if abs, err := filepath.Abs(exe); err == nil {
			s.files.add(store.File{BuildID: s.ids.get(abs), Path: abs, Source: "seen"})
		}
	}
	s.startEvents()
	if err := s.objs.Track(pid); err != nil {
		g.abort()
		return fmt.Errorf("track workload: %w", err)
	}
	if err := g.release(); err != nil {
		g.abort()
		return err
	}
	s.workload = g.cmd
	s.waitErr = make(chan error, 1)
	go func() { s.waitErr <- g.cmd.Wait() }()
	return nil
}

// Wait returns when the recording should stop: the workload exited
// (spawn mode), the target exited (--pid), Duration passed, ctx was
// cancelled, a signal arrived, or the writer failed with nothing to wait
// for. A write failure while a workload runs detaches the probes (the
// workload continues unslowed) and goes on waiting for it.
func (s *Session) Wait(ctx context.Context) {
	if s.startErr != nil || s.reason != "" {
		return
	}
	s.ctx = ctx
	var timeout <-chan time.Time
	if s.cfg.Duration > 0 {
		t := time.NewTimer(s.cfg.Duration)
		defer t.Stop()
		timeout = t.C
	}
	pidPoll := time.NewTicker(250 * time.Millisecond)
	defer pidPoll.Stop()
	failed := s.wr.failed
	var rootExited <-chan struct{}
	if s.cfg.PID != 0 {
		rootExited = s.h.rootExited // read-only: made before the reader started
	}
	for s.reason == "" {
		select {
		case <-s.waitErr:
			s.exit, s.exitCode = exitOf(s.workload)
			s.reason = "workload-exited"
		case <-rootExited:
			s.reason = "target-exited"
		case <-pidPoll.C:
			if s.cfg.PID != 0 && syscall.Kill(s.cfg.PID, 0) == syscall.ESRCH {
				s.reason = "target-exited"
			}
		case <-timeout:
			s.reason = "duration"
		case <-ctx.Done():
			s.reason = "cancelled"
		case s.sig = <-s.cfg.Signals:
			s.reason = "signal"
		case <-s.cfg.Snapshots:
			s.snapshotOnSignal()
		case <-failed:
			// The writer said so; stop costing the workload anything.
			s.att.detach()
			failed = nil
			if s.waitErr == nil {
				s.reason = "write-error"
			}
		}
	}
}

// Stop ends the recording in order: no new holds and no new calls, the
// rings drained (every held process continued), the last sample round,
// the kernel log and control socket closed, frozen processes continued,
// the last commit and the stop record. The stop record says every reason
// the recording ended for (a write error is reported even when the
// workload's exit was seen first). Then, if the workload still runs, it
// is told about a termination signal or a cancellation and waited for,
// unless a second signal arrives. Stop returns Start's error, if any.
func (s *Session) Stop() (*Result, error) {
	if s.result != nil {
		return s.result, s.startErr
	}
	stats, delays, holds := s.shutdown()
	info := s.stopInfo(stats, delays, holds)
	if s.metrics != nil {
		s.metrics.SetRecording(false, info.Reason)
	}
	if err := s.wr.stop(info); err != nil {
		if s.wr.err != nil {
			s.cfg.Log.Error(fmt.Sprintf("%s: the stop record could not be written either; the run reads as ended abruptly", s.cfg.Output))
		} else {
			s.cfg.Log.Error(fmt.Sprintf("%s: could not write the stop record: %v", s.cfg.Output, err))
		}
	}
	s.release()
	s.warnNoCalls(info)
	s.result = &Result{Path: s.cfg.Output, ExitCode: s.exitCode, Stop: info}
	s.finishWorkload()
	s.result.ExitCode = s.exitCode
	return s.result, s.startErr
}

// shutdown stops every goroutine in order and returns the final counters.
func (s *Session) shutdown() (store.Stats, store.DelayStats, store.DelayStats) {
	s.stopSweeper()
	if s.hook != nil {
		s.hook.Close()
	}
	s.att.detach()
	bpf.CloseLinks(s.lifeLinks)
	s.lifeLinks = nil
	s.events.Flush()
	s.holdRing.Flush()
	if s.eventsDone != nil {
		<-s.eventsDone
	}
	if s.namerDone != nil {
		// Every capture the reader handed over is named before the last
		// commit.
		close(s.namerCh)
		<-s.namerDone
	}
	if s.holdsDone != nil {
		<-s.holdsDone
	}
	if s.files != nil {
		s.files.close() // nothing names a capture any more
	}
	if s.smpDone != nil {
		close(s.samplerCh)
		<-s.smpDone
	}
	if s.kmsg != nil {
		s.kmsg.Close()
	}
	if s.ctl != nil {
		s.ctl.Close()
	}
	s.fz.resumeAll()
	// A hook run still in flight when its link was closed may report a
	// hold after the flush: that process is continued too.
	for _, hd := range drainHolds(s.holdRing) {
		s.hl.handle(&hd)
	}
	var counters *bpf.Stats
	t := now()
	if st, err := s.objs.Stats(); err == nil {
		counters = &st
	}
	stats, delays, holds := s.q.final(counters, t)
	if s.writerDone != nil {
		close(s.writerCh)
		<-s.writerDone
	} else {
		s.wr.flush(true)
	}
	return stats, delays, holds
}

// stopInfo composes the stop record.
func (s *Session) stopInfo(stats store.Stats, delays, holds store.DelayStats) store.StopInfo {
	if s.exit == nil && s.waitErr != nil {
		// The workload may have ended while another reason won.
		select {
		case <-s.waitErr:
			s.exit, s.exitCode = exitOf(s.workload)
			s.waitErr = nil
		default:
		}
	}
	info := store.StopInfo{Time: now(), Wall: time.Now().UTC(), Reason: s.reason, Workload: s.exit,
		Stats: stats, TriggerDelay: delays, Hold: holds, KmsgOffset: s.kmsgOffset, KmsgOffsetError: s.kmsgError}
	if sig, ok := s.sig.(syscall.Signal); ok {
		info.Signal = unix.SignalName(sig)
	}
	info.Identity = stopIdentity(context.Background(), s.cfg, s.run.Identity, s.processRecords())
	switch info.Reason {
	case "cancelled", "duration", "":
		info.Reason = "stopped"
	}
	var errs []string
	if s.startErr != nil {
		info.Reason = "error"
		errs = append(errs, s.startErr.Error())
	}
	if err := s.wr.err; err != nil {
		info.Reason = "write-error"
		if errors.Is(err, store.ErrDiskFull) {
			info.Reason = "disk-full"
		}
		errs = append(errs, err.Error())
	}
	info.Error = strings.Join(errs, "; ")
	return info
}

// warnNoCalls says, in spawn mode, when not one hooked call was seen.
func (s *Session) warnNoCalls(info store.StopInfo) {
	if len(s.cfg.Command) == 0 || s.startErr != nil || info.Stats.Calls > 0 || info.Stats.Events > 0 {
		return
	}
	what := "no libcuda was attached"
	if n := s.att.files(); len(n) > 0 {
		what = "attached: " + strings.Join(n, ", ")
	}
	s.cfg.Log.Warn(fmt.Sprintf("no libcuda call was seen from the workload (%s): it may use a libcuda forensic did not attach to, or have failed before calling the driver (a framework that could not start)", what))
}

// finishWorkload waits for a workload that outlives the recording: a
// termination signal or a cancellation is passed on to it; a second
// signal stops waiting (exit status 130).
func (s *Session) finishWorkload() {
	if s.workload == nil || s.exit != nil || s.waitErr == nil {
		return
	}
	if s.sig != nil && s.sig != os.Interrupt {
		s.workload.Process.Signal(s.sig)
	}
	if s.ctx.Err() != nil {
		s.workload.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-s.waitErr:
		_, s.exitCode = exitOf(s.workload)
	case <-s.cfg.Signals:
		s.exitCode = 130
	}
}

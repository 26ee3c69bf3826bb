package analyze

import (
	"fmt"

	"github.com/retrivium/forensic/report"
)

// libcudaGiven reports whether a libcuda was given with --libcuda: a
// library the recorder attached to without a process's mapping of it
// (files older than that record say so of every library they list).
func (s *state) libcudaGiven() bool {
	for _, l := range s.libs {
		if l.MappedBy == 0 {
			return true
		}
	}
	return false
}

// libcudaNeverLoaded reports whether the record shows that the workload
// never loaded libcuda: the recorder stopped cleanly after attaching to
// each libcuda a recorded process mapped (none was given with --libcuda),
// attached to none, and recorded no call. A lost hold is a libcuda some
// process mapped, maybe one that ran on and exited before the recorder
// could attach: then nothing is said to be never loaded.
func (s *state) libcudaNeverLoaded() bool {
	return s.stop != nil && s.stop.Stats.LostHolds == 0 && len(s.libs) == 0 && s.replay != nil && len(s.replay.procCalls) == 0
}

// noCallsGap is the missing evidence of a workload from which no traced
// call was recorded: that it never loaded libcuda, when the record shows
// it, else that the calls may have gone through a libcuda forensic did
// not attach to.
func (s *state) noCallsGap() report.Missing {
	if s.libcudaNeverLoaded() {
		what := "the workload never loaded libcuda, so it made no CUDA driver call. No process of it mapped one while it was recorded"
		if x := s.rep.Run.WorkloadExit; x != nil && x.Code != nil && *x.Code != 0 {
			what += fmt.Sprintf(". It exited with status %d for a reason the record cannot show", *x.Code)
		}
		return report.Missing{Decisive: true, What: what,
			Fix: "read the workload's own error output; if it should have used the GPU, check that it finds the driver's libcuda.so.1 (LD_DEBUG=libs; in a container, that the NVIDIA driver's files are mounted in)"}
	}
	fix := "check the attached libraries under COVERAGE against the libcuda the workload loads (LD_DEBUG=libs)"
	if s.libcudaGiven() {
		fix += "; record again without --libcuda"
	} else {
		fix = "read the workload's own error output (it may have failed before its first driver call); " + fix
	}
	return report.Missing{Decisive: true, Fix: fix,
		What: "no traced call was recorded from the workload or its descendants. It may use a libcuda forensic did not attach to, or it failed before calling the driver"}
}

// againWithoutLibcuda is the advice to let the recorder find the libcuda
// a process maps, for a run that was given one with --libcuda ("" for a
// run that already found its libraries itself).
func (s *state) againWithoutLibcuda(advice string) string {
	if s.libcudaGiven() {
		return advice
	}
	return ""
}

// untracedFix is the advice for a process NVML saw holding memory with no
// traced call of its own.
func (s *state) untracedFix() string {
	if s.libcudaGiven() {
		return "record again without --libcuda (forensic attaches to the libcuda each process maps), or start the recorder before the workload"
	}
	return "start the recorder before the workload; if it was, check which library the process reaches the driver through (LD_DEBUG=libs): forensic attaches to each libcuda a process maps"
}

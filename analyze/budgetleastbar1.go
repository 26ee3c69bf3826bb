package analyze

import (
	"fmt"
	"sort"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// The budget of a GPU's BAR1 aperture at its least free: each recorded
// process's traced mappings by kind as the traced calls left them then,
// the rest of what NVML counts used, and free. The exactness rules are
// the framebuffer's (budgetleast.go): at the moment when the least free is
// exact and the traced shares are known, else at the sample with its own
// figures, and none when the least free lay between samples and is a
// bound. NVML reads no process's BAR1, so what the traced mappings do not
// cover is one part; BAR1 figures are never mixed with the framebuffer's.

// leastBAR1Budget is the budget of one BAR1 track at its least free.
func (s *state) leastBAR1Budget(lb *leastBase) (report.Budget, bool) {
	smp, c := lb.fb, lb.track.best
	if smp == nil || smp.Total == nil || smp.Free == nil || *smp.Free > *smp.Total {
		return report.Budget{}, false
	}
	moment := c.exact && c.free >= 0 && c.pids != nil && c.base.pids != nil
	b := report.Budget{GPU: lb.track.key.gpu, GPUUUID: s.gpuUUID[lb.track.key.gpu], View: cuda.ViewBAR1.String(),
		At: "least-headroom", TimeNS: smp.Start, Total: *smp.Total}
	free, at, shares := *smp.Free, "the sample", c.base.pids
	switch {
	case moment:
		b.TimeNS, free, at, shares = c.at, uint64(c.free), "the least free", c.pids
	case c.source != "sample":
		return report.Budget{}, false // a bound between samples: see leastBudget
	}
	src := apiOf(smp.API, smp.Struct)
	rest := int64(*smp.Total) - int64(free)
	restSrc := src + " used, less the traced mappings: the driver's own, those of processes not recorded, and those no call sized (NVML has no per-process BAR1 reading)"
	if shares == nil {
		restSrc = src + " used (a traced call overlapped the sample's query, so what was mapped then is not known per process; NVML has no per-process BAR1 reading)"
	}
	parts := s.leastMappingParts(shares, at, b.TimeNS, moment && c.source != "sample")
	for _, p := range parts {
		rest -= int64(p.Bytes)
	}
	b.Parts = append(b.Parts, parts...)
	restBound, note := restOfMappings(parts)
	b.Note = note
	if rest < 0 {
		b.Note = "the traced mappings are more than NVML's BAR1 used: the driver counts some of them in other units or not at all"
		rest = 0
	}
	freeSrc := src + " free"
	if moment && c.source != "sample" {
		freeSrc = "the least free: " + src + " free, less what the traced calls mapped since the sample"
	}
	b.Parts = append(b.Parts, report.BudgetPart{Kind: "unattributed", Bytes: uint64(rest), Bound: restBound, Source: restSrc},
		report.BudgetPart{Kind: "free", Bytes: free, Bound: boundExact, Source: freeSrc})
	return b, true
}

// leastMappingParts are the recorded processes' traced BAR1 mappings in
// shares (a BAR1 track's, by process and kind), one part per process and
// kind that holds bytes, in pid and kind order. A process that mapped
// something of no known size, or a grant that may cost one mapping per
// peer, has its parts at least their sized bytes.
//
// The tracks keep an exited process's share (the driver's release at the
// exit is no traced change), so a process that had exited by t has no
// part. At a sample, one that may have (t lies between its last call and
// its exit, when the driver may release its mappings) has its parts at
// most. At an exact least free between samples (agreed), the samples
// around it agree with the traced calls, so no exit released anything
// between them: a process that exited after t held its mappings then.
func (s *state) leastMappingParts(shares []pidTraced, at string, t int64, agreed bool) []report.BudgetPart {
	unsure := map[uint32]bool{}
	for _, sh := range shares {
		unsure[sh.pid] = unsure[sh.pid] || sh.unsized || sh.ranged
	}
	var out []report.BudgetPart
	for _, sh := range shares {
		if sh.res == cuda.ResNone || sh.bytes <= 0 {
			continue // a process's marks, or nothing mapped of this kind
		}
		pid, kind := sh.pid, sh.res.String()
		p := report.BudgetPart{Kind: "mapping", PID: &pid, Mapping: kind, Bytes: uint64(sh.bytes), Bound: boundExact,
			Source: fmt.Sprintf("traced mappings of kind %s live at %s", kind, at)}
		proc := s.processAt(pid, t)
		gone := s.exitedBy(proc, t)
		if gone == exitDone {
			continue
		}
		if agreed {
			gone = exitNot
		}
		if proc != nil {
			p.Command = commandOf(proc)
		}
		switch {
		case gone == exitMaybe:
			p.Bound = boundAtMost
			p.Source += "; the process was exiting (after its last call, before its exit), and the driver may have released them already"
		case unsure[pid]:
			p.Bound = boundAtLeast
			p.Source += "; the process mapped some of no known size, or with a grant that may cost one mapping per peer"
		}
		out = append(out, p)
	}
	sort.SliceStable(out, func(a, b int) bool {
		if *out[a].PID != *out[b].PID {
			return *out[a].PID < *out[b].PID
		}
		return out[a].Mapping < out[b].Mapping
	})
	return out
}

// Whether a process had exited by a moment.
const (
	exitNot   = iota // alive, or no exit recorded
	exitMaybe        // between its last call and its exit
	exitDone         // exited before it
)

// exitedBy says whether proc had exited by t: its exit recorded before
// t, or t after its last call (from which the driver may release what it
// held, as the replay's exit release assumes) and not after its exit.
func (s *state) exitedBy(proc *store.Process, t int64) int {
	if proc == nil || proc.Exit == nil || t < proc.Start {
		return exitNot
	}
	if proc.Exit.Time < t {
		return exitDone
	}
	if s.replay != nil {
		if l, ok := s.replay.lastCallEnd(proc.PID); ok && l < t {
			return exitMaybe
		}
	}
	return exitNot
}

// restOfMappings bounds what BAR1 mapping parts leave of NVML's used: a
// part that is at least its bytes makes the rest at most, and one that is
// at most (an exit may have freed it already) makes it at least; with
// both, the rest is no bound, which the note says.
func restOfMappings(parts []report.BudgetPart) (bound, note string) {
	bounds := map[string]bool{}
	for _, p := range parts {
		bounds[p.Bound] = true
	}
	switch {
	case bounds[boundAtLeast] && bounds[boundAtMost]:
		return boundExact, "the part no traced mapping covers is no bound: some mappings are at least their sized bytes, others at most"
	case bounds[boundAtLeast]:
		return boundAtMost, ""
	case bounds[boundAtMost]:
		return boundAtLeast, ""
	}
	return boundExact, ""
}

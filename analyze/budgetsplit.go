package analyze

import (
	"fmt"
	"sort"
	"strings"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// A traced part of the budget at the failure, split: by phase (what was
// allocated before the first marker or landmark, a model's weights
// typically, against what grew later: a cache, activations) and by call
// site, so that "12 GiB traced" says which allocations to look at.

// pidGPU names one process's share of one GPU.
type pidGPU struct {
	pid uint32
	gpu int
}

// splitAlloc is what the split keeps of an allocation live at the
// first failure: when and by which thread and stack it was made, its
// size.
type splitAlloc struct {
	at    int64
	size  uint64
	tid   uint32
	stack int32
}

// maxSites is how many call sites a traced part names; the rest are one
// share.
const maxSites = 5

// snapshotSplit keeps a device allocation live at the first failure,
// outside memory pools, for its traced part's split.
func (p *replayer) snapshotSplit(k resKey, l liveRes) {
	if l.view != cuda.ViewFramebuffer || !l.sized || l.size == 0 {
		return
	}
	key := pidGPU{k.pid(), int(l.gpu)}
	p.splits[key] = append(p.splits[key], splitAlloc{at: l.at, size: l.size, tid: l.tid, stack: l.stack})
}

// splitTraced fills a traced part's shares by phase and call site, when
// they add up to it.
func (s *state) splitTraced(t *report.BudgetPart, gpu int) {
	ls := s.replay.splits[pidGPU{*t.PID, gpu}]
	var sum uint64
	for _, l := range ls {
		sum += l.size
	}
	if len(ls) == 0 || sum != t.Bytes {
		return // not the same allocations: say nothing rather than a wrong split
	}
	if ph := s.byPhase(ls, *t.PID); len(ph) > 1 {
		t.ByPhase = ph
	}
	t.BySite = s.bySite(ls, *t.PID)
}

// byPhase sums allocations by the phase they were made in: the marker
// phases, else before and since the process's first free of device
// memory (without markers the run's own landmarks, first allocation and
// first failure, put everything live at the failure in one phase).
func (s *state) byPhase(ls []splitAlloc, pid uint32) []report.BudgetShare {
	var names []string
	idx := map[string]int{}
	var out []report.BudgetShare
	add := func(name string, n uint64) {
		i, ok := idx[name]
		if !ok {
			i = len(out)
			idx[name] = i
			names = append(names, name)
			out = append(out, report.BudgetShare{Name: name})
		}
		out[i].Bytes += n
	}
	markers := s.rep.PhasesFrom == "markers" && s.phaseSet != nil
	ff, freed := s.replay.firstFree[pid]
	sorted := append([]splitAlloc(nil), ls...)
	sort.Slice(sorted, func(a, b int) bool { return sorted[a].at < sorted[b].at })
	for _, l := range sorted {
		switch {
		case markers:
			add(s.phaseOf(l.at), l.size)
		case freed && l.at > ff:
			add("since its first free", l.size)
		default:
			add("before its first free", l.size)
		}
	}
	return out
}

// bySite sums allocations by the call site their stacks name, largest
// first; nil when none has a stack.
func (s *state) bySite(ls []splitAlloc, pid uint32) []report.BudgetShare {
	names := map[callKey]string{}
	sums := map[string]uint64{}
	any := false
	for _, l := range ls {
		name := s.siteOf(pid, l, names)
		if name != "" {
			any = true
		} else {
			name = "no stack recorded"
		}
		sums[name] += l.size
	}
	if !any {
		return nil
	}
	out := make([]report.BudgetShare, 0, len(sums))
	for n, b := range sums {
		out = append(out, report.BudgetShare{Name: n, Bytes: b})
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Bytes != out[b].Bytes {
			return out[a].Bytes > out[b].Bytes
		}
		return out[a].Name < out[b].Name
	})
	if len(out) > maxSites {
		rest := report.BudgetShare{Name: fmt.Sprintf("%d other call sites", len(out)-maxSites+1)}
		for _, sh := range out[maxSites-1:] {
			rest.Bytes += sh.Bytes
		}
		out = append(out[:maxSites-1], rest)
	}
	return out
}

// siteOf names the call site of the call that made l: the innermost
// frame of the program's own code in its stack ("grow_kv_cache,
// kv.py:10"), "" when it has no stack. Names are cached by the stack
// they come from: a stored stack's id, else the capture (a call site
// captured before is a reference to that capture).
func (s *state) siteOf(pid uint32, l splitAlloc, names map[callKey]string) string {
	e := store.Event{PID: pid, TID: l.tid, End: l.at, Stack: l.stack}
	k := callKey{pid, l.tid, l.at}
	switch {
	case l.stack >= 0:
		k = callKey{pid, ^uint32(0), int64(l.stack)}
	case s.caps == nil:
		return ""
	default:
		if r, ok := s.caps.refs[k]; ok {
			k = callKey{pid, r.RefTID, r.RefTime}
			e.TID, e.End = r.RefTID, r.RefTime
		}
	}
	if n, ok := names[k]; ok {
		return n
	}
	name := ""
	if st := s.stack(&failed{e: e}); st != nil && len(st.Frames) > 0 {
		name = strings.TrimPrefix(report.CalledFrom(st), "called from ")
		if name == "" {
			name = "no frame of the program's own"
		}
	}
	names[k] = name
	return name
}

// splitsOrNil are the allocations kept for the split, nil when there was
// no replay (a caller that only reads stacks).
func (s *state) splitsOrNil() map[pidGPU][]splitAlloc {
	if s.replay == nil {
		return nil
	}
	return s.replay.splits
}

package analyze

import (
	"fmt"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// Memory pools: a stream-ordered pool created with a maximum size
// (CUmemPoolProps.maxSize, recorded at cuMemPoolCreate) refuses an
// allocation that would take it past that size, however much of the
// framebuffer is free. Such a failure is judged against the pool.

// poolKey names a memory pool: its process and handle.
type poolKey struct {
	pid    uint32
	handle uint64
}

// poolState is what the replay knows of one pool created in the record.
type poolState struct {
	handle  uint64
	pid     uint32
	maxSize uint64 // 0: no limit but the device's memory
	// limitRead: the properties were read, so maxSize is known.
	limitRead bool
	inUse     uint64 // live traced allocations drawn from it
	created   int64
	dev       int32
}

// pools follows the pools the record saw created, the allocations drawn
// from them, and each pool as it stood when an allocation from it failed.
type pools struct {
	byKey  map[poolKey]*poolState
	allocs map[resKey]poolKey // live allocations drawn from a pool
	atFail map[callKey]poolState
	// atFirst is what each pool's traced allocations held per view at
	// the first failure (the budget's pool parts), by process.
	atFirst map[uint32][]poolShare
}

// poolShare is what one pool's live traced allocations held on one view
// at the first failure.
type poolShare struct {
	pool  poolState
	view  viewKey
	bytes uint64
}

func newPools() *pools {
	return &pools{byKey: map[poolKey]*poolState{}, allocs: map[resKey]poolKey{}, atFail: map[callKey]poolState{},
		atFirst: map[uint32][]poolShare{}}
}

// snapshot counts a resource live at the first failure in its pool's
// share, when it was drawn from a pool the record saw created; it
// reports whether it did.
func (ps *pools) snapshot(k resKey, l liveRes) bool {
	pk, ok := ps.allocs[k]
	p := ps.byKey[pk]
	if !ok || p == nil || !l.sized {
		return false
	}
	shares := ps.atFirst[pk.pid]
	for i := range shares {
		if shares[i].pool.handle == pk.handle && shares[i].view == l.key() {
			shares[i].bytes += l.size
			return true
		}
	}
	ps.atFirst[pk.pid] = append(shares, poolShare{pool: *p, view: l.key(), bytes: l.size})
	return true
}

// created takes a successful call: a pool made, or an allocation drawn
// from one.
func (ps *pools) created(e *store.Event, sym *cuda.Symbol) {
	switch {
	case sym.Creates == cuda.ResPool && e.Has&cuda.FieldPtr != 0:
		p := &poolState{handle: e.Ptr, pid: e.PID, created: e.End, dev: e.Dev}
		if e.Has&cuda.FieldSize != 0 {
			p.maxSize, p.limitRead = e.Size, true
		}
		ps.byKey[poolKey{e.PID, e.Ptr}] = p
	case sym.DrawsFrom == cuda.ResPool && e.Has&cuda.FieldTarget != 0 && e.Has&cuda.FieldPtr != 0 && e.Has&cuda.FieldSize != 0:
		k := poolKey{e.PID, e.Target}
		if p := ps.byKey[k]; p != nil {
			p.inUse += e.Size
			ps.allocs[newResKey(e.PID, sym.Creates, e.Ptr)] = k
		}
	}
}

// released takes a live resource a call or an exit released, of size
// bytes: an allocation back to its pool, or a pool destroyed.
func (ps *pools) released(k resKey, size uint64) {
	if k.res() == cuda.ResPool {
		delete(ps.byKey, poolKey{k.pid(), k.key})
		return
	}
	pk, ok := ps.allocs[k]
	if !ok {
		return
	}
	delete(ps.allocs, k)
	if p := ps.byKey[pk]; p != nil {
		p.inUse -= min(size, p.inUse)
	}
}

// failed keeps, for a failed allocation drawn from a pool the record saw
// created, the pool as it stood then.
func (ps *pools) failed(e *store.Event, sym *cuda.Symbol) {
	if sym.DrawsFrom != cuda.ResPool || e.Has&cuda.FieldTarget == 0 {
		return
	}
	if p := ps.byKey[poolKey{e.PID, e.Target}]; p != nil {
		ps.atFail[callKey{e.PID, e.TID, e.End}] = *p
	}
}

// poolAt returns the pool a failed allocation drew from, as it stood at
// the failure, when the record saw the pool created with a known limit.
func (s *state) poolAt(f *failed) *poolState {
	if s.replay == nil || s.replay.pools == nil {
		return nil
	}
	p, ok := s.replay.pools.atFail[keyOf(f)]
	if !ok || !p.limitRead {
		return nil
	}
	return &p
}

// judgePool judges an allocation from a pool with a maximum size against
// that limit: when what the pool's traced allocations held plus the
// request exceeds it, the pool was exhausted, whatever the framebuffer
// had free. It reports whether it decided.
func (s *state) judgePool(f *failed, fd *finding) bool {
	p := s.poolAt(f)
	if p == nil || p.maxSize == 0 || !fd.sized {
		return false
	}
	fd.pool = p
	if p.inUse+fd.size <= p.maxSize {
		return false // under its limit by what it held: the framebuffer decides
	}
	fd.capacity = report.CapPoolExhausted
	return true
}

// poolName names a pool for people.
func (p *poolState) name(s *state) string {
	return fmt.Sprintf("memory pool %#x (created by pid %d at %s)", p.handle, p.pid, s.rel(p.created))
}

// poolEvidence is the pool's limit and use at the failure, as evidence.
func (fd *finding) poolEvidence(s *state) []report.Evidence {
	p := fd.pool
	if p == nil {
		return nil
	}
	decisive := fd.capacity == report.CapPoolExhausted
	free := p.maxSize - min(p.inUse, p.maxSize)
	return []report.Evidence{
		{Field: "memory pool room at the failure", Value: ptr(free), Unit: "bytes", Source: "cuMemPoolCreate maxSize minus the traced allocations from the pool",
			Status: "recorded", TimeNS: fd.failAt, Decisive: decisive, Rule: rulePoolLimit,
			Note: fmt.Sprintf("%s: maxSize %s, %s in use", p.name(s), report.HumanBytes(p.maxSize), report.HumanBytes(p.inUse))},
		{Field: "memory pool maxSize", Value: ptr(p.maxSize), Unit: "bytes", Source: "cuMemPoolCreate pool properties (uprobe)",
			Status: "recorded", TimeNS: p.created, Rule: rulePoolLimit},
	}
}

package analyze

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// liveRes is one live resource created by a traced call. An access grant
// to several peers through the owner's aperture costs between one mapping
// of the range (size) and one per peer (most): the driver's per-peer cost
// is not something the record shows. Totals count size; reconciling a
// sample with the traced calls uses the whole range.
type liveRes struct {
	size uint64
	most uint64 // the most it may cost; == size for all but multi-peer grants
	at   int64  // when the call that created it returned
	// gpu and mig (the MIG instance, -1 for the whole GPU) are int32 so
	// that the call's tid and stack fit in the size the struct had
	// without them: one is kept per live resource.
	gpu   int32
	mig   int32
	sized bool
	view  cuda.View
	// tid and stack name the call that created it, for the budget's
	// split by call site (stack: the stored stack's id, -1 for none).
	tid   uint32
	stack int32
}

// key is the traced total the resource counts in.
func (l liveRes) key() viewKey { return viewKey{int(l.gpu), int(l.mig), l.view} }

// counted reports whether the resource adds bytes to a GPU view's total.
func (l liveRes) counted() bool { return l.sized && l.view != cuda.ViewNone }

// resKey names a live resource: its process, its kind and its handle.
// Two words with no padding, so the map hashes it as plain memory (the
// replay looks one up per call; a padded struct hashed field by field
// cost a tenth of a 10M-call analysis).
type resKey struct {
	who uint64 // pid << 8 | resource
	key uint64
}

func newResKey(pid uint32, res cuda.Resource, key uint64) resKey {
	return resKey{uint64(pid)<<8 | uint64(res), key}
}

func (k resKey) pid() uint32        { return uint32(k.who >> 8) }
func (k resKey) res() cuda.Resource { return cuda.Resource(k.who) }

// viewKey names a traced total: one GPU (one MIG instance of it, or -1 for
// the whole GPU) and one view. BAR1 is whole-GPU.
type viewKey struct {
	gpu  int
	mig  int
	view cuda.View
}

// change is one traced change of a total: between lo and hi bytes (equal
// unless it is a grant to several peers), taking effect at some moment
// between start and end (the call's entry and return). Four words: a
// 10M-call run keeps hundreds of thousands near its failures.
type change struct {
	start, end int64
	lo, hi     int64
}

// exitChange is what a process still held when it exited, released by
// the driver: start is its last call, as the driver may free it anywhere
// from there to the exit itself (a library's teardown runs in the
// process before the kernel sees it end); pid names the process, whose
// listing in a sample may narrow when it took effect (settleChanges).
type exitChange struct {
	change
	pid uint32
}

// reconcileHorizon bounds how far from a failure traced changes are kept
// for reconciling samples (a failure-triggered sample under load can lag),
// unless the window for a sample before a failure is longer: a sample up to
// three sampling intervals old may be reconciled, and every change since
// it must be there (a long --interval).
const reconcileHorizon = int64(5 * time.Second)

// maxChanges bounds the changes kept per total.
const maxChanges = 1 << 20

// exportRef is where an exported allocation lies.
type exportRef struct {
	pid uint32
	dev int32
}

// recovKey groups failures that a later success can recover: the same
// process and operation class.
type recovKey struct {
	pid uint32
	op  uint32 // a cuda.Op, widened: no padding to hash (one lookup per call)
}

// replayer replays the run's calls in time order. It owns what the replay
// learns: what each process holds live per GPU and view (and the totals'
// changes near failures, to reconcile samples), which failures were
// recovered, call counts, the exports an import is sized by, the timeline,
// and the calls it hands to an observer.
type replayer struct {
	s           *state // read-only here: symbols, devices, landmarks
	live        map[resKey]liveRes
	slots       []*viewSlot
	changes     map[viewKey][]change
	exitChanges map[viewKey][]exitChange // releases at exits, apart: few, and they carry a pid
	opaque      []opaqueRel              // releases of unknown size near failures
	failTimes   []int64                  // sorted: changes near these are kept
	horizon     int64                    // how near: max(reconcileHorizon, the sample window)
	perProc     map[uint32]map[viewKey]*report.LiveBytes
	atFailure   bool // perProc taken
	exits       exitQueue
	ctxs        map[uint32]map[uint64]*heldCtx // contexts held, by pid and handle
	pending     map[recovKey][]*failed
	counts      []report.CallCount // by file symbol id
	procCalls   map[uint32]*procTally
	// tally is the last call's process's entry of procCalls (calls come
	// in runs of one process: one map lookup a run, not a call).
	tally      *procTally
	exportKeys map[string]exportRef
	exportSize map[string]uint64
	exportAt   map[string]int64 // when the exported allocation was made
	dev        devCache
	tl         *timelineBuilder
	obs        report.Observer
	call       report.Call // scratch for the observer
	args       argValues
	// head follows each sampled view's free memory (headroom.go); cur is
	// the call being applied, which the changes it makes name.
	head *headroom
	cur  *store.Event
	// pools follows memory pools and what is drawn from them (pools.go).
	pools *pools
	// kinds is what each process held per view and kind of resource at
	// the first failure (the BAR1 budget's mapping parts).
	kinds map[heldKindKey]*kindShare
	// firstFree is when each process first released device memory of a
	// known size (the landmark of the budget's split by phase without
	// markers); splits are the traced parts' allocations at the first
	// failure (budgetsplit.go).
	firstFree map[uint32]int64
	splits    map[pidGPU][]splitAlloc
	// procHeld is what each process holds per GPU view, sized, kept as
	// the calls go; failAt finds a failure's record by its call, so that
	// each failure keeps what its process held then (a later failure is
	// not described by what the process held at the first).
	procHeld map[uint32]map[viewKey]*heldTotal
	failAt   map[failKey]*failed
}

// heldTotal is the sized memory one process holds in one GPU view.
type heldTotal struct {
	bytes uint64
	count int
}

// failKey names a failed call: its thread and when it returned.
type failKey struct {
	tid uint32
	end int64
}

// hold changes what pid holds in a view by one resource of size n (a
// release when sign < 0).
func (p *replayer) hold(pid uint32, vk viewKey, n uint64, sign int) {
	m := p.procHeld[pid]
	if m == nil {
		m = map[viewKey]*heldTotal{}
		p.procHeld[pid] = m
	}
	h := m[vk]
	if h == nil {
		h = &heldTotal{}
		m[vk] = h
	}
	if sign < 0 {
		h.bytes -= min(n, h.bytes)
		h.count = max(h.count-1, 0)
		return
	}
	h.bytes += n
	h.count++
}

// noteHeld gives a failed call's record what its process held then, per
// GPU view.
func (p *replayer) noteHeld(e *store.Event) {
	f := p.failAt[failKey{e.TID, e.End}]
	if f == nil || f.e.PID != e.PID {
		return
	}
	m := p.procHeld[e.PID]
	vks := make([]viewKey, 0, len(m))
	for vk, h := range m {
		if h.count > 0 {
			vks = append(vks, vk)
		}
	}
	sort.Slice(vks, func(i, j int) bool { return viewKeyLess(vks[i], vks[j]) })
	f.held = f.held[:0]
	for _, vk := range vks {
		h := m[vk]
		f.held = append(f.held, report.LiveBytes{PID: e.PID, View: vk.view.String(), GPU: optInt(vk.gpu),
			MIG: optInt(vk.mig), Bytes: h.bytes, Count: h.count})
	}
}

func newReplayer(s *state) *replayer {
	p := &replayer{s: s, live: map[resKey]liveRes{}, changes: map[viewKey][]change{}, exitChanges: map[viewKey][]exitChange{},
		perProc: map[uint32]map[viewKey]*report.LiveBytes{}, pending: map[recovKey][]*failed{},
		procCalls: map[uint32]*procTally{}, exportKeys: map[string]exportRef{}, exportSize: map[string]uint64{},
		exportAt: map[string]int64{}, ctxs: map[uint32]map[uint64]*heldCtx{},
		obs: s.opts.Observer, dev: devCache{s: s, lastDev: -2}, horizon: max(reconcileHorizon, s.window), pools: newPools(),
		kinds: map[heldKindKey]*kindShare{}, firstFree: map[uint32]int64{}, splits: map[pidGPU][]splitAlloc{},
		procHeld: map[uint32]map[viewKey]*heldTotal{}, failAt: map[failKey]*failed{}}
	for _, f := range s.failures {
		p.failAt[failKey{f.e.TID, f.e.End}] = f
		p.failTimes = append(p.failTimes, f.e.End)
		k := recovKey{f.e.PID, uint32(f.sym.Op)}
		p.pending[k] = append(p.pending[k], f)
	}
	sort.Slice(p.failTimes, func(i, j int) bool { return p.failTimes[i] < p.failTimes[j] })
	var exits []procExit
	for _, pr := range s.procList {
		if pr.Exit != nil {
			exits = append(exits, procExit{pr.PID, pr.Exit.Time, pr.AttachedLate})
		}
	}
	p.exits = newExitQueue(exits)
	p.counts = make([]report.CallCount, len(s.syms.names))
	for i, name := range s.syms.names {
		p.counts[i] = report.CallCount{Symbol: name, Operation: s.syms.row(uint16(i)).Op.String()}
	}
	p.tl = s.tl
	return p
}

// passEvents is the one streaming pass over the events.
func (s *state) passEvents() error {
	if !s.opts.NoTimeline {
		s.tl = newTimelineBuilder(s)
	}
	p := newReplayer(s)
	s.replay = p
	var err error
	if p.head, err = s.headroomTracks(); err != nil {
		return err
	}
	if p.obs != nil {
		if err := p.obs.Begin(s.rep); err != nil {
			return err
		}
	}
	if err := eventsInOrder(s.r, p.replay); err != nil {
		return err
	}
	p.finish()
	s.fillCounts()
	return nil
}

// fillCounts puts the call counts the replay made into the report.
func (s *state) fillCounts() {
	p := s.replay
	for i := range s.rep.Processes {
		if pc := p.procCalls[s.rep.Processes[i].PID]; pc != nil {
			s.rep.Processes[i].Calls, s.rep.Processes[i].Failed = pc.calls, pc.failed
		}
	}
	for _, c := range p.counts {
		if c.Calls > 0 {
			s.rep.Calls = append(s.rep.Calls, c)
		}
	}
	sort.Slice(s.rep.Calls, func(i, j int) bool { return s.rep.Calls[i].Symbol < s.rep.Calls[j].Symbol })
	if _, segs := s.r.(segmented); s.stop == nil || segs {
		// A flight recording's stop record counts the events of deleted
		// segments too: its events are those read (flightRead compares).
		s.rep.Run.Events = 0
		for _, c := range p.counts {
			s.rep.Run.Events += c.Calls
		}
	}
	s.flightRead()
}

// firstEnd is the first failure's return time, or -1.
func (p *replayer) firstEnd() int64 {
	if p.s.first == nil {
		return -1
	}
	return p.s.first.e.End
}

// replay takes one call, in time order.
func (p *replayer) replay(e *store.Event) error {
	sym := p.s.syms.row(e.Symbol)
	p.count(e)
	if err := p.observe(e, sym); err != nil {
		return err
	}
	if e.Depth > 0 {
		return nil // a library's call to itself, not the application's
	}
	if fe := p.firstEnd(); fe >= 0 && !p.atFailure && e.End > fe {
		p.releaseUpTo(fe)
		p.snapshotAtFailure()
	}
	p.releaseUpTo(e.End - 1)
	p.tally.lastEnd = max(p.tally.lastEnd, e.End)
	if e.Result == 0 {
		p.recover(e, sym)
		if sym.Ctx != cuda.CtxNone {
			p.contexts(e, sym)
		}
		p.cur = e
		p.apply(e, sym)
		p.cur = nil
	} else {
		p.noteHeld(e)
		if sym.DrawsFrom != cuda.ResNone {
			p.pools.failed(e, sym)
		}
	}
	if p.tl != nil {
		gpu, _ := p.dev.gpu(e.PID, e.Dev)
		p.tl.call(e, sym, p.s.syms.name(e.Symbol), gpu, func() *uint64 { return p.liveOn(e) })
	}
	return nil
}

// count tallies one call per symbol and per process (application calls).
func (p *replayer) count(e *store.Event) {
	if e.Depth > 0 {
		return
	}
	for int(e.Symbol) >= len(p.counts) {
		p.counts = append(p.counts, report.CallCount{Symbol: p.s.syms.name(uint16(len(p.counts))), Operation: unlisted.Op.String()})
	}
	c := &p.counts[e.Symbol]
	c.Calls++
	pc := p.tally
	if pc == nil || pc.pid != e.PID {
		if pc = p.procCalls[e.PID]; pc == nil {
			pc = &procTally{pid: e.PID}
			p.procCalls[e.PID] = pc
		}
		p.tally = pc
	}
	pc.calls++
	if e.Result != 0 {
		c.Failed++
		pc.failed++
	}
}

// procTally counts one process's application calls and failures, and
// when its last one returned.
type procTally struct {
	pid           uint32
	calls, failed uint64
	lastEnd       int64
}

// lastCallEnd is when pid's last application call returned, if it made
// one.
func (p *replayer) lastCallEnd(pid uint32) (int64, bool) {
	if pc := p.procCalls[pid]; pc != nil {
		return pc.lastEnd, true
	}
	return 0, false
}

// recover marks failures of the same process and operation as recovered
// by this success: on the same device, for at least the same size (the
// same family when the failed call has no size).
func (p *replayer) recover(e *store.Event, sym *cuda.Symbol) {
	if len(p.pending) == 0 {
		return
	}
	k := recovKey{e.PID, uint32(sym.Op)}
	waiting := p.pending[k]
	if len(waiting) == 0 {
		return
	}
	kept := waiting[:0]
	for _, f := range waiting {
		if f.e.End < e.End && recoveredBy(f, e, sym) {
			f.recovered = true
			continue
		}
		kept = append(kept, f)
	}
	if len(kept) == 0 {
		delete(p.pending, k) // an empty map costs no hashing per event
	} else {
		p.pending[k] = kept
	}
}

// handleCall reports whether a failed call is a call on a handle: a
// release, or a call with no size that names its target.
func handleCall(f *failed) bool {
	return f.sym.Op == cuda.OpFree || (f.e.Has&cuda.FieldSize == 0 && f.e.Has&cuda.FieldTarget != 0)
}

// recoveredBy reports whether success e (of sym) recovers failure f. It
// must run against the same CUDA device (an allocation on another GPU does
// not satisfy a request its GPU could not). A call on a handle (a release:
// free, unmap, destroy; or an unsized call naming its target) is recovered
// only by a success on the same handle: freeing one pointer does not undo a
// failed free of another.
func recoveredBy(f *failed, e *store.Event, sym *cuda.Symbol) bool {
	if e.Dev != f.e.Dev {
		return false
	}
	if handleCall(f) {
		same := f.e.Has&e.Has&cuda.FieldTarget != 0 && e.Target == f.e.Target
		return same && (f.sym.Op == cuda.OpFree || f.sym.Family == sym.Family)
	}
	if f.e.Has&cuda.FieldSize != 0 {
		return e.Has&cuda.FieldSize != 0 && e.Size >= f.e.Size
	}
	return f.sym.Family == sym.Family
}

// apply replays what a successful call creates, releases and exports.
func (p *replayer) apply(e *store.Event, sym *cuda.Symbol) {
	if sym.Creates == cuda.ResNone && len(sym.Releases) == 0 && len(e.Key) == 0 {
		return // creates, releases and exports nothing
	}
	if isExport(sym, e) {
		p.exportKeys[string(e.Key)] = exportRef{pid: e.PID, dev: e.Dev}
	}
	if sym.Creates != cuda.ResNone && e.Has&cuda.FieldPtr != 0 {
		p.create(e, sym)
		if sym.Creates == cuda.ResPool || sym.DrawsFrom != cuda.ResNone {
			p.pools.created(e, sym)
		}
	}
	p.release(e, sym)
	// An export names a live allocation: remember its size for the
	// processes that import it.
	if isExport(sym, e) {
		for _, res := range sym.Exports {
			if l, ok := p.live[newResKey(e.PID, res, e.Target)]; ok && l.sized {
				p.exportSize[string(e.Key)] = l.size
				p.exportAt[string(e.Key)] = l.at
			}
		}
	}
}

// release replays what a successful call released. A release the replay
// cannot size (of a resource it never saw created, or created with no
// size) is kept as such: a sample on its far side cannot be reconciled
// exactly.
func (p *replayer) release(e *store.Event, sym *cuda.Symbol) {
	if len(sym.Releases) == 0 || e.Has&cuda.FieldTarget == 0 || e.Target == 0 {
		return
	}
	view, known := sym.Releases[0].View(), false
	for _, res := range sym.Releases {
		if res.View() != view {
			view = viewMixed // either GPU view
		}
		k := newResKey(e.PID, res, e.Target)
		l, ok := p.live[k]
		if !ok {
			continue
		}
		known = true
		delete(p.live, k)
		if l.counted() && l.view == cuda.ViewFramebuffer {
			if _, ok := p.firstFree[e.PID]; !ok {
				p.firstFree[e.PID] = e.End
			}
		}
		if len(p.pools.byKey) > 0 {
			p.pools.released(k, l.size)
		}
		if l.counted() {
			p.hold(e.PID, l.key(), l.size, -1)
			p.addRange(l.key(), res, e.Start, e.End, -int64(l.size), -int64(l.most))
		} else if l.view != cuda.ViewNone {
			p.logOpaque(opaqueRel{at: e.End, gpu: int(l.gpu), view: l.view, pid: e.PID, why: "released memory of unknown size"})
		}
	}
	if !known && view != cuda.ViewHost && view != cuda.ViewNone {
		p.logOpaque(opaqueRel{at: e.End, gpu: -1, view: view, pid: e.PID, why: "released memory allocated before the record (or outside it)"})
	}
}

// viewMixed stands for "any GPU view": a release whose resource may lie
// in either.
const viewMixed = cuda.View(255)

// opaqueRel is a release the replay cannot size, near a failure: by pid,
// at a time, on a GPU (-1: any) and view (viewMixed: either).
type opaqueRel struct {
	at   int64
	from int64 // the earliest it may have taken effect (at, unless an exit's)
	gpu  int
	view cuda.View
	pid  uint32
	why  string
	ctx  bool // it frees (or, acquire, takes) a CUDA context's own memory
	// acquire: it took memory rather than freed it.
	acquire bool
	// exit: the process exited, and the driver freed what it held.
	exit bool
}

// event names the release in two or three words ("exit", "context
// release"), for the short tags of the default text report.
func (o *opaqueRel) event() string {
	switch {
	case o.exit:
		return "exit"
	case o.ctx && o.acquire:
		return "context creation"
	case o.ctx:
		return "context release"
	}
	return "release of unknown size"
}

// logOpaque keeps a release of unknown size that lies near a failure.
func (p *replayer) logOpaque(o opaqueRel) {
	if o.from == 0 || o.from > o.at {
		o.from = o.at
	}
	if p.head != nil {
		p.head.opaque(o)
	}
	i := sort.Search(len(p.failTimes), func(i int) bool { return p.failTimes[i] >= o.at-p.horizon })
	if i == len(p.failTimes) || p.failTimes[i] > o.at+p.horizon || len(p.opaque) >= maxChanges {
		return
	}
	p.opaque = append(p.opaque, o)
}

// create replays a resource a call created: on the caller's GPU (the
// exporter's, for an import), in the view its kind occupies.
func (p *replayer) create(e *store.Event, sym *cuda.Symbol) {
	gpu, mig := p.dev.gpu(e.PID, e.Dev)
	l := liveRes{gpu: int32(gpu), mig: -1, view: sym.Creates.View(), at: e.End, tid: e.TID, stack: e.Stack}
	if mig != nil && l.view == cuda.ViewFramebuffer {
		l.mig = int32(*mig)
	}
	if e.Has&cuda.FieldSize != 0 {
		l.size, l.most, l.sized = e.Size, e.Size*uint64(max(grantPeersMost(sym, e), 1)), true
	}
	if sym.Imports {
		if ref, ok := p.exportKeys[string(e.Key)]; ok {
			if sz, ok := p.exportSize[string(e.Key)]; ok {
				l.size, l.most, l.sized = sz, sz, true
			}
			if g, _, _ := p.s.gpuOfDev(ref.pid, ref.dev); g >= 0 {
				l.gpu = int32(g) // the aperture used is the exporting GPU's
			}
		}
	}
	if sym.Creates == cuda.ResPeer {
		// Peer access maps the peer's memory through the peer GPU's
		// aperture (-1, any GPU, when the record does not say which).
		g, _, _ := p.s.gpuOfDev(e.PID, p.s.ctxDevice(e.PID, e.Peer))
		l.gpu = int32(g)
	}
	if sym.BAR1 == cuda.BAR1Peer && !grantsPeer(sym, e) {
		return // a grant to the owning device only maps nothing
	}
	k := newResKey(e.PID, sym.Creates, e.Ptr)
	if old, ok := p.live[k]; ok && old.counted() {
		p.hold(e.PID, old.key(), old.size, -1)
		p.addRange(old.key(), k.res(), e.Start, e.End, -int64(old.size), -int64(old.most))
	}
	p.live[k] = l
	if !l.sized && p.head != nil && (l.view == cuda.ViewFramebuffer || l.view == cuda.ViewBAR1) {
		p.head.opaque(opaqueRel{at: e.End, gpu: int(l.gpu), view: l.view, pid: e.PID, acquire: true, why: "a " + sym.Creates.String() + " of unknown size"})
	}
	if l.counted() {
		p.hold(e.PID, l.key(), l.size, 1)
		p.addRange(l.key(), k.res(), e.Start, e.End, int64(l.size), int64(l.most))
	}
}

// addRange changes a traced total by d bytes of a resource of kind res
// between start and end, where the change may in truth have been as large
// as most (same sign): the total counts d, the reconciliation of samples
// the whole range.
func (p *replayer) addRange(vk viewKey, res cuda.Resource, start, end, d, most int64) {
	sl := p.slot(vk)
	sl.total = uint64(int64(sl.total) + d)
	p.logChange(vk, change{start: start, end: end, lo: min(d, most), hi: max(d, most)})
	if p.head != nil {
		p.head.change(sl, p.cur, res, start, end, d, most)
	}
	sl.acc.observe(sl.total, end, p.s.landmarks())
	if p.tl != nil && vk.view == cuda.ViewFramebuffer {
		p.tl.traced(vk.gpu, end, p.fbTotal(vk.gpu))
	}
}

// fbTotal is the traced device memory on a GPU, over its MIG instances.
func (p *replayer) fbTotal(gpu int) uint64 {
	var n uint64
	for _, sl := range p.slots {
		if sl.key.gpu == gpu && sl.key.view == cuda.ViewFramebuffer {
			n += sl.total
		}
	}
	return n
}

// liveOn is the traced device memory on the GPU of e's device right after
// it, nil when the GPU is unknown.
func (p *replayer) liveOn(e *store.Event) *uint64 {
	gpu, _ := p.dev.gpu(e.PID, e.Dev)
	if gpu < 0 {
		return nil
	}
	v := p.fbTotal(gpu)
	return &v
}

// logChange keeps a change that lies near a failure, for reconciling the
// samples taken around it.
func (p *replayer) logChange(vk viewKey, c change) {
	if p.nearFailure(c) && len(p.changes[vk]) < maxChanges {
		p.changes[vk] = append(p.changes[vk], c)
	}
}

// logExitChange is logChange for a release at a process's exit.
func (p *replayer) logExitChange(vk viewKey, c exitChange) {
	if p.nearFailure(c.change) && len(p.exitChanges[vk]) < maxChanges {
		p.exitChanges[vk] = append(p.exitChanges[vk], c)
	}
}

// nearFailure reports whether a change may have taken effect within the
// horizon of a failure.
func (p *replayer) nearFailure(c change) bool {
	i := sort.Search(len(p.failTimes), func(i int) bool { return p.failTimes[i] >= c.start-p.horizon })
	return i < len(p.failTimes) && p.failTimes[i] <= c.end+p.horizon
}

// releaseUpTo releases what the processes that exited by t still held
// (the driver frees it at exit).
func (p *replayer) releaseUpTo(t int64) {
	p.exits.releaseUpTo(t, p.live, func(vk viewKey, x procExit, n, most uint64) {
		p.exitRelease(vk, x, -int64(n), -int64(most))
	}, func(o opaqueRel) {
		o.from = p.exitFrom(o.pid, o.at)
		p.logOpaque(o)
	}, func(x procExit) {
		delete(p.procHeld, x.pid) // the driver frees what it held
		if !x.late {              // a late process's exit is already of unknown size, on any GPU
			p.exitContexts(x.pid, x.t)
		}
	})
}

// exitRelease takes from a total what an exiting process still held: like
// addRange, but the change may have taken effect at any moment from the
// process's last call to its exit.
func (p *replayer) exitRelease(vk viewKey, x procExit, d, most int64) {
	sl := p.slot(vk)
	sl.total = uint64(int64(sl.total) + d)
	p.logExitChange(vk, exitChange{change{start: p.exitFrom(x.pid, x.t), end: x.t, lo: min(d, most), hi: max(d, most)}, x.pid})
	sl.acc.observe(sl.total, x.t, p.s.landmarks())
	if p.tl != nil && vk.view == cuda.ViewFramebuffer {
		p.tl.traced(vk.gpu, x.t, p.fbTotal(vk.gpu))
	}
}

// exitFrom is the earliest moment the driver may have freed what pid held
// when it exited at t: its last call's return (t when it made none).
func (p *replayer) exitFrom(pid uint32, t int64) int64 {
	if l, ok := p.lastCallEnd(pid); ok && l < t {
		return l
	}
	return t
}

// snapshotAtFailure records what each process held at the first failure,
// and each total's value then.
func (p *replayer) snapshotAtFailure() {
	p.atFailure = true
	for k, l := range p.live {
		m := p.perProc[k.pid()]
		if m == nil {
			m = map[viewKey]*report.LiveBytes{}
			p.perProc[k.pid()] = m
		}
		vk := l.key()
		lb := m[vk]
		if lb == nil {
			lb = &report.LiveBytes{PID: k.pid(), View: l.view.String(), GPU: optInt(int(l.gpu)), MIG: optInt(int(l.mig))}
			m[vk] = lb
		}
		lb.Count++
		addKind(lb, k.res().String())
		if !p.pools.snapshot(k, l) {
			p.snapshotSplit(k, l)
		}
		p.snapshotKind(k, l)
		if l.sized {
			lb.Bytes += l.size
		} else {
			lb.Unsized++
		}
	}
	for _, sl := range p.slots {
		sl.acc.at = some(sl.total)
		sl.acc.before = some(sl.total)
	}
}

// addKind counts one live resource of a kind, keeping the kinds in name
// order.
func addKind(lb *report.LiveBytes, kind string) {
	i := sort.Search(len(lb.Kinds), func(i int) bool { return lb.Kinds[i].Kind >= kind })
	if i < len(lb.Kinds) && lb.Kinds[i].Kind == kind {
		lb.Kinds[i].Count++
		return
	}
	lb.Kinds = slices.Insert(lb.Kinds, i, report.KindCount{Kind: kind, Count: 1})
}

// optInt is v, or nil for a negative (unknown) value.
func optInt(v int) *int {
	if v < 0 {
		return nil
	}
	return &v
}

// finish ends the replay: the snapshot at the failure if no later call
// took it, every exit's release, the totals at the end.
func (p *replayer) finish() {
	if fe := p.firstEnd(); fe >= 0 && !p.atFailure {
		p.releaseUpTo(fe)
		p.snapshotAtFailure()
	}
	p.releaseUpTo(math.MaxInt64)
	if p.head != nil {
		p.head.finish()
	}
	for _, sl := range p.slots {
		sl.acc.end = some(sl.total)
	}
}

// isExport reports whether a successful call exports a live allocation:
// export bytes naming its target.
func isExport(sym *cuda.Symbol, e *store.Event) bool {
	return len(sym.Exports) > 0 && len(e.Key) > 0 && e.Has&cuda.FieldTarget != 0
}

// viewSlot is one GPU and view's traced total.
type viewSlot struct {
	key   viewKey
	total uint64
	acc   fieldAcc
	// tracks are the sampled views this total feeds, unsure those it may
	// feed without the record saying so (headroom.go).
	tracks, unsure []*headTrack
}

// slot returns the slot of vk, making it (from zero) on first use. There
// are a handful: a linear scan is cheaper than hashing a struct per event.
func (p *replayer) slot(vk viewKey) *viewSlot {
	for _, sl := range p.slots {
		if sl.key == vk {
			return sl
		}
	}
	sl := &viewSlot{key: vk, acc: fieldAcc{start: some(0)}}
	if p.head != nil {
		sl.tracks, sl.unsure = p.head.tracksOf(vk), p.head.unsureOf(vk)
	}
	p.slots = append(p.slots, sl)
	return sl
}

// devCache maps (pid, CUDA device) to the NVML GPU, remembering the last
// pair: consecutive calls mostly share it.
type devCache struct {
	s       *state
	lastPID uint32
	lastDev int32
	lastGPU int
	lastMIG *int
}

func (d *devCache) gpu(pid uint32, dev int32) (int, *int) {
	if pid != d.lastPID || dev != d.lastDev {
		d.lastGPU, d.lastMIG, _ = d.s.gpuOfDev(pid, dev)
		d.lastPID, d.lastDev = pid, dev
	}
	return d.lastGPU, d.lastMIG
}

// between bounds X = traced(at failure) - traced(as the sample saw it), for
// a sample whose query ran from s to e: the value at the failure is the
// sample's minus X (for a "used" quantity; plus X for "free"). A change that
// ended before the failure counts at the failure; whether the sample saw a
// change is certain unless the change overlaps the query, and then X is a
// range: lo and hi. A change whose size is itself a range (a grant to
// several peers) widens it too.
func between(changes []change, failure, s, e int64) (lo, hi int64) {
	for _, c := range changes {
		k0, k1 := coefficient(c.start, c.end, failure, s, e)
		// k*d over k in [k0, k1] and d in [c.lo, c.hi]: at a corner.
		a, b, x, y := k0*c.lo, k0*c.hi, k1*c.lo, k1*c.hi
		lo += min(a, b, x, y)
		hi += max(a, b, x, y)
	}
	return lo, hi
}

// coefficient bounds k in "free at the failure = the sample's free - k ×
// a change", for a change that took effect at some moment in [from, to]:
// k = (it took effect by the failure) - (the sample, queried over [s, e],
// saw it), each 0 or 1, or either when the moment is not known to fall on
// one side.
func coefficient(from, to, failure, s, e int64) (k0, k1 int64) {
	b2i := func(b bool) int64 {
		if b {
			return 1
		}
		return 0
	}
	inLo := b2i(to <= failure)
	inHi := max(inLo, b2i(from < failure))
	seenLo, seenHi := b2i(to < s), b2i(from <= e)
	return inLo - seenHi, inHi - seenLo
}

// procExit is when a process ended, and whether it was already running
// when recording started (it may have held memory no traced call made).
type procExit struct {
	pid  uint32
	t    int64
	late bool
}

// exitQueue holds process exits in time order, for a replay that releases
// what each process still held when it ended (the driver frees it).
type exitQueue []procExit

func newExitQueue(exits []procExit) exitQueue {
	sort.Slice(exits, func(i, j int) bool { return exits[i].t < exits[j].t })
	return exits
}

// releaseUpTo removes from live everything held by the processes that
// exited by t, in exit order, and reports each traced total that lost
// sized bytes: freed(total, the exit, bytes, the most they may have been);
// and each release it cannot size: a process that may have held memory
// made before the record (on any GPU), an unsized live resource. exited
// is told of each exit first.
func (q *exitQueue) releaseUpTo(t int64, live map[resKey]liveRes, freed func(vk viewKey, x procExit, n, most uint64), opaque func(opaqueRel), exited func(procExit)) {
	for len(*q) > 0 && (*q)[0].t <= t {
		x := (*q)[0]
		*q = (*q)[1:]
		exited(x)
		if x.late {
			opaque(opaqueRel{at: x.t, gpu: -1, view: viewMixed, pid: x.pid, exit: true,
				why: "exited, and the driver freed what it held, including memory allocated before recording started (it was already running), of a size the record does not have"})
		}
		lost := map[viewKey][2]uint64{}
		for k, l := range live {
			if k.pid() != x.pid {
				continue
			}
			delete(live, k)
			switch {
			case l.counted():
				n := lost[l.key()]
				lost[l.key()] = [2]uint64{n[0] + l.size, n[1] + l.most}
			case l.view != cuda.ViewNone && !x.late:
				opaque(opaqueRel{at: x.t, gpu: int(l.gpu), view: l.view, pid: x.pid, exit: true, why: "exited, and the driver freed memory of unknown size it held"})
			}
		}
		keys := make([]viewKey, 0, len(lost))
		for vk := range lost {
			keys = append(keys, vk)
		}
		sort.Slice(keys, func(i, j int) bool { return viewKeyLess(keys[i], keys[j]) })
		for _, vk := range keys {
			freed(vk, x, lost[vk][0], lost[vk][1])
		}
	}
}

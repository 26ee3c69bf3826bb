// Package analyze turns a recorded run into a report: which operation
// failed first, whether that is an allocation problem, a mapping problem,
// not a memory problem at all, or a question the record cannot answer, and
// the memory evidence around it, view by view.
//
// Analysis is a pure function of what the recorder stored (no eBPF, no
// NVML): [Analyze] reads a store.Reader and streams its events, so memory
// does not grow with the number of calls. Every classification goes
// through the tables of package cuda; no symbol or result code is special
// cased here.
package analyze

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

// Options adjust an analysis.
type Options struct {
	// Symbolizer resolves stack frames; nil reads ELF files on this
	// machine (ELFSymbolizer).
	Symbolizer Symbolizer
	// MaxFailures bounds the failures listed (default 10000).
	MaxFailures int
	// MaxStacks bounds how many failures get a symbolized stack (default 20).
	MaxStacks int
}

// event is the part of a stored event the analysis keeps (with its own
// copy of the key bytes).
type event struct {
	sym  *cuda.Symbol
	name string
	e    store.Event
}

// state is one analysis in progress.
type state struct {
	r       *store.Reader
	opts    Options
	run     store.RunInfo
	stop    *store.StopInfo
	inv     *store.Inventory
	procs   map[uint32]*store.Process // by pid; the latest record of a pid
	libs    []store.Library
	gpuUUID map[int]string
	rep     *Report

	first    *event // first failure
	firstAny *event
	failures []*event
	// syms and counts are indexed by the file's symbol ids: resolved once,
	// not per event.
	syms       []*cuda.Symbol
	counts     []CallCount
	procCalls  map[uint32]*[2]uint64
	firstAlloc int64
	// lastTime is where the record ends (the latest return in the last
	// event chunk): Run.EndNS of an abrupt run, and what it says of it.
	lastTime   int64
	abnormal   []uint32 // processes killed by a signal with no failed call
	failedPIDs map[uint32]bool
	exportKeys map[string]exportRef
	exportSize map[string]uint64
	window     int64
	fileList   []File
}

type exportRef struct {
	pid uint32
	dev int32
}

// Analyze reads a run and produces its report.
func Analyze(r *store.Reader, opts Options) (*Report, error) {
	if opts.MaxFailures == 0 {
		opts.MaxFailures = 10000
	}
	if opts.MaxStacks == 0 {
		opts.MaxStacks = 20
	}
	if opts.Symbolizer == nil {
		opts.Symbolizer = NewELFSymbolizer()
	}
	s := &state{r: r, opts: opts, run: r.Run(), procs: map[uint32]*store.Process{}, gpuUUID: map[int]string{},
		procCalls: map[uint32]*[2]uint64{}, failedPIDs: map[uint32]bool{},
		exportKeys: map[string]exportRef{}, exportSize: map[string]uint64{}}
	s.rep = &Report{Schema: ReportSchema, Missing: []Missing{}, Evidence: []Evidence{}, MemoryViews: []ViewRow{},
		Failures: []Failure{}, LiveAtFailure: []LiveBytes{}, Processes: []ProcessInfo{}, Coverage: []Library{},
		KernelLog: []KernelLine{}, Markers: []Marker{}, Phases: []Phase{}, Calls: []CallCount{}}
	// Sampling windows: a sample older than three intervals (at least
	// 300 ms) no longer reflects the state at a failure.
	s.window = max(3*int64(s.run.Interval), int64(300*time.Millisecond))
	var err error
	if s.stop, err = r.Stop(); err != nil {
		return nil, err
	}
	if s.inv, err = r.Inventory(); err != nil {
		return nil, err
	}
	if s.inv != nil {
		for _, g := range s.inv.GPUs {
			if g.UUID.Value != nil {
				s.gpuUUID[g.Index] = *g.UUID.Value
			}
		}
	}
	procs, err := r.Processes()
	if err != nil {
		return nil, err
	}
	sort.Slice(procs, func(i, j int) bool { return procs[i].Start < procs[j].Start })
	for i := range procs {
		s.procs[procs[i].PID] = &procs[i]
	}
	names := r.SymbolNames()
	s.syms = resolveSymbols(names)
	for _, name := range names {
		s.counts = append(s.counts, CallCount{Symbol: name})
	}
	if err := s.findFailures(); err != nil {
		return nil, err
	}
	s.pickFirst()
	s.runInfo()
	if err := s.context(procs); err != nil {
		return nil, err
	}
	s.phases() // before the passes that fill per-phase values
	tr, err := s.passLive()
	if err != nil {
		return nil, err
	}
	s.fillCounts()
	sp, err := s.passSamples(tr)
	if err != nil {
		return nil, err
	}
	s.verdict(sp, tr)
	s.failureList()
	return s.rep, nil
}

// resolveSymbols looks a file's symbol names up in the symbol table once,
// so that no pass looks a name up per event. The result is indexed by the
// file's symbol ids; a name this forensic no longer has is judged as
// "other".
func resolveSymbols(names []string) []*cuda.Symbol {
	syms := make([]*cuda.Symbol, len(names))
	for i, name := range names {
		sym, _, ok := cuda.Lookup(name)
		if !ok {
			sym = &cuda.Symbol{Name: name, Family: name, Op: cuda.OpOther}
		}
		syms[i] = sym
	}
	return syms
}

// unlisted stands for a symbol id the file's symbol list lacks (a corrupt
// file): judged as "other".
var unlisted = &cuda.Symbol{Name: "unknown", Family: "unknown", Op: cuda.OpOther}

// symbolAt returns the row of a file symbol id from resolveSymbols.
func symbolAt(syms []*cuda.Symbol, id uint16) *cuda.Symbol {
	if int(id) < len(syms) {
		return syms[id]
	}
	return unlisted
}

// symbol returns the table row of a file symbol id.
func (s *state) symbol(id uint16) *cuda.Symbol {
	if int(id) < len(s.syms) {
		return s.syms[id]
	}
	// An id the file's symbol list lacks (a corrupt file): keep counting.
	for len(s.syms) <= int(id) {
		s.syms = append(s.syms, unlisted)
		s.counts = append(s.counts, CallCount{Symbol: fmt.Sprintf("symbol#%d", len(s.counts))})
	}
	return s.syms[id]
}

// findFailures collects every failed call from the failures index (a
// whole pass over the events for files without one), then finds the run's
// landmarks: the first successful allocation (an early scan) and where the
// record ends (the last chunk). Call counts come with the live-bytes pass.
func (s *state) findFailures() error {
	err := s.r.Failures(func(e *store.Event) error {
		s.noteFailure(e)
		return nil
	})
	if errors.Is(err, store.ErrNoFailureIndex) {
		err = s.r.Events(func(e *store.Event) error {
			if e.Result != 0 {
				s.noteFailure(e)
			}
			return nil
		})
	}
	if err != nil {
		return err
	}
	s.firstAlloc = -1
	err = s.r.Events(func(e *store.Event) error {
		if e.Result == 0 && e.Depth == 0 && s.symbol(e.Symbol).Op == cuda.OpAllocation {
			s.firstAlloc = e.End
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return err
	}
	s.lastTime, err = s.r.LastEventEnd()
	return err
}

// errStop ends a scan early.
var errStop = errors.New("stop")

// noteFailure records one failed call.
func (s *state) noteFailure(e *store.Event) {
	if e.Depth > 0 {
		return // a library's call to itself, not the application's
	}
	sym := s.symbol(e.Symbol)
	s.failedPIDs[e.PID] = true
	ev := &event{sym: sym, name: e.Name, e: *e}
	ev.e.Key = append([]byte(nil), e.Key...)
	if len(s.failures) < s.opts.MaxFailures {
		s.failures = append(s.failures, ev)
	} else {
		s.rep.FailuresTruncated++
	}
	if sym.Op.Primary() && (s.first == nil || e.End < s.first.e.End) {
		s.first = ev
	}
	if s.firstAny == nil || e.End < s.firstAny.e.End {
		s.firstAny = ev
	}
}

// count tallies one event: calls and failures per symbol and per process,
// and exports an import can be sized by.
func (s *state) count(e *store.Event) {
	if e.Depth > 0 {
		return
	}
	sym := s.symbol(e.Symbol) // grows counts for an id the file did not list
	c := &s.counts[e.Symbol]
	c.Calls++
	pc := s.procCalls[e.PID]
	if pc == nil {
		pc = new([2]uint64)
		s.procCalls[e.PID] = pc
	}
	pc[0]++
	if e.Result != 0 {
		c.Failed++
		pc[1]++
		return
	}
	if isExport(sym, e) {
		// An export (IPC handle, pool pointer): remember where the
		// allocation its bytes name lies, so an import can be placed.
		s.exportKeys[string(e.Key)] = exportRef{pid: e.PID, dev: e.Dev}
	}
}

// isExport reports whether a successful call exports a live allocation:
// export bytes naming its target.
func isExport(sym *cuda.Symbol, e *store.Event) bool {
	return len(sym.Exports) > 0 && len(e.Key) > 0 && e.Has&cuda.FieldTarget != 0
}

// fillCounts puts the call counts, known after the live-bytes pass, into
// the report.
func (s *state) fillCounts() {
	for i := range s.rep.Processes {
		if pc := s.procCalls[s.rep.Processes[i].PID]; pc != nil {
			s.rep.Processes[i].Calls, s.rep.Processes[i].Failed = pc[0], pc[1]
		}
	}
	for _, c := range s.counts {
		if c.Calls > 0 {
			s.rep.Calls = append(s.rep.Calls, c)
		}
	}
	sort.Slice(s.rep.Calls, func(i, j int) bool { return s.rep.Calls[i].Symbol < s.rep.Calls[j].Symbol })
	if s.stop == nil {
		for _, c := range s.counts {
			s.rep.Run.Events += c.Calls
		}
	}
}

// pickFirst: the first failed operation is the earliest failed allocation,
// mapping, host-allocation or context call; a run whose only failures are
// of other calls (cuInit, a free) still names its earliest failure.
func (s *state) pickFirst() {
	if s.first == nil {
		s.first = s.firstAny
	}
	sort.SliceStable(s.failures, func(i, j int) bool { return s.failures[i].e.End < s.failures[j].e.End })
}

// liveRes is one live resource created by a traced call.
type liveRes struct {
	size  uint64
	gpu   int
	mig   int // MIG instance, -1 for the whole GPU
	sized bool
	view  cuda.View
}

// key is the traced total the resource counts in.
func (l liveRes) key() viewKey { return viewKey{l.gpu, l.mig, l.view} }

type resKey struct {
	pid uint32
	res cuda.Resource
	key uint64
}

// viewKey names a traced total: one GPU (one MIG instance of it, or -1 for
// the whole GPU) and one view. BAR1 is whole-GPU.
type viewKey struct {
	gpu  int
	mig  int
	view cuda.View
}

// traced holds what the traced calls say about live bytes.
type traced struct {
	perProc map[uint32]map[viewKey]*LiveBytes // at the first failure
	// slots hold each GPU and view's traced total and its values at the
	// landmarks and per phase: a handful, found by a linear scan, cheaper
	// than hashing a struct key per event.
	slots []*viewSlot
	// changes are the traced totals' changes near the first failure, to
	// reconcile a sample taken a little before or after it.
	changes map[viewKey][]change
}

// change is one traced change of a total: d bytes, taking effect at some
// moment between start and end (the call's entry and return).
type change struct {
	start, end int64
	d          int64
}

// reconcileHorizon bounds how far from the failure traced changes are kept
// for reconciling samples (a failure-triggered sample under load can lag).
const reconcileHorizon = int64(5 * time.Second)

// between bounds X = traced(at failure) - traced(as the sample saw it), for
// a sample whose query ran from s to e: the value at the failure is the
// sample's minus X (for a "used" quantity; plus X for "free"). A change that
// ended before the failure counts at the failure; whether the sample saw a
// change is certain unless the change overlaps the query, and then X is a
// range: lo and hi.
func (t *traced) between(vk viewKey, failure, s, e int64) (lo, hi int64) {
	for _, c := range t.changes[vk] {
		inF := int64(0)
		if c.end <= failure {
			inF = 1
		}
		switch {
		case c.end < s: // the sample saw it
			lo += c.d * (inF - 1)
			hi += c.d * (inF - 1)
		case c.start > e: // the sample did not
			lo += c.d * inF
			hi += c.d * inF
		default: // it overlaps the query: either
			a, b := c.d*inF, c.d*(inF-1)
			lo += min(a, b)
			hi += max(a, b)
		}
	}
	return lo, hi
}

// gpuOfDev maps a process's CUDA ordinal to an NVML index (-1 unknown).
func (s *state) gpuOfDev(pid uint32, dev int32) (int, *int, string) {
	p := s.procs[pid]
	if p == nil || dev < 0 {
		return -1, nil, "unknown"
	}
	for _, d := range p.Devices {
		if d.Ordinal == dev {
			return d.GPU, d.MIG, d.Method
		}
	}
	return -1, nil, "unknown"
}

// passLive is the second streaming pass: it replays allocations and
// releases to know the bytes live per process, GPU and view, marks
// recovered failures and sizes imports.
func (s *state) passLive() (*traced, error) {
	tr := &traced{perProc: map[uint32]map[viewKey]*LiveBytes{}, changes: map[viewKey][]change{}}
	live := map[resKey]liveRes{}
	var firstEnd int64 = -1
	if s.first != nil {
		firstEnd = s.first.e.End
	}
	logChange := func(vk viewKey, start, end, d int64) {
		if firstEnd >= 0 && end >= firstEnd-reconcileHorizon && start <= firstEnd+reconcileHorizon && len(tr.changes[vk]) < 1<<20 {
			tr.changes[vk] = append(tr.changes[vk], change{start, end, d})
		}
	}
	atFailureTaken := false
	snapshot := func() {
		for k, l := range live {
			vk := l.key()
			m := tr.perProc[k.pid]
			if m == nil {
				m = map[viewKey]*LiveBytes{}
				tr.perProc[k.pid] = m
			}
			lb := m[vk]
			if lb == nil {
				lb = &LiveBytes{PID: k.pid, View: l.view.String()}
				if l.gpu >= 0 {
					g := l.gpu
					lb.GPU = &g
				}
				if l.mig >= 0 {
					m := l.mig
					lb.MIG = &m
				}
				m[vk] = lb
			}
			lb.Count++
			if l.sized {
				lb.Bytes += l.size
			} else {
				lb.Unsized++
			}
		}
		for _, sl := range tr.slots {
			sl.acc.at = some(sl.total)
			sl.acc.before = some(sl.total)
		}
	}
	// A process's exit releases what it still held (the driver frees it),
	// so a sample taken after the failing process exited is reconciled too.
	var exits []procExit
	for _, p := range s.procs {
		if p.Exit != nil {
			exits = append(exits, procExit{p.PID, p.Exit.Time})
		}
	}
	eq := newExitQueue(exits)
	releaseUpTo := func(t int64) {
		eq.releaseUpTo(t, live, func(vk viewKey, at int64, n uint64) {
			sl := tr.slot(vk)
			sl.total -= n
			logChange(vk, at, at, -int64(n))
			sl.acc.observe(sl.total, at, s)
		})
	}
	// Failures waiting for a later success of the same operation.
	pendingRecov := map[[2]uint64][]*event{}
	for _, f := range s.failures {
		k := [2]uint64{uint64(f.e.PID), uint64(f.sym.Op)}
		pendingRecov[k] = append(pendingRecov[k], f)
	}
	// The device mapping of the last (pid, device) seen: consecutive calls
	// mostly share it.
	var (
		lastPID uint32
		lastDev int32 = -2
		lastGPU int
		lastMIG *int
	)
	replay := func(e *store.Event) error {
		if e.Depth > 0 {
			return nil
		}
		if firstEnd >= 0 && !atFailureTaken && e.End > firstEnd {
			releaseUpTo(firstEnd)
			snapshot()
			atFailureTaken = true
		}
		releaseUpTo(e.End - 1)
		sym := s.symbol(e.Symbol)
		if e.Result != 0 {
			return nil
		}
		if rk := [2]uint64{uint64(e.PID), uint64(sym.Op)}; len(pendingRecov) > 0 && len(pendingRecov[rk]) > 0 {
			// Recovered: the same process later succeeded at the same
			// operation for at least the same size (the same family when
			// the failed call has no size).
			var kept []*event
			for _, f := range pendingRecov[rk] {
				sized := f.e.Has&cuda.FieldSize != 0
				if f.e.End < e.End && ((sized && e.Has&cuda.FieldSize != 0 && e.Size >= f.e.Size) ||
					(!sized && f.sym.Family == sym.Family)) {
					f.e.Flags |= flagRecovered
					continue
				}
				kept = append(kept, f)
			}
			if len(kept) == 0 {
				delete(pendingRecov, rk) // an empty map costs no hashing per event
			} else {
				pendingRecov[rk] = kept
			}
		}
		if sym.Creates == cuda.ResNone && len(sym.Releases) == 0 && len(e.Key) == 0 {
			return nil // creates, releases and exports nothing
		}
		gpu, mig := lastGPU, lastMIG
		if e.PID != lastPID || e.Dev != lastDev {
			gpu, mig, _ = s.gpuOfDev(e.PID, e.Dev)
			lastPID, lastDev, lastGPU, lastMIG = e.PID, e.Dev, gpu, mig
		}
		if sym.Creates != cuda.ResNone && e.Has&cuda.FieldPtr != 0 {
			l := liveRes{gpu: gpu, mig: -1, view: sym.Creates.View()}
			if mig != nil && l.view == cuda.ViewFramebuffer {
				l.mig = *mig
			}
			if e.Has&cuda.FieldSize != 0 {
				l.size, l.sized = e.Size, true
			}
			if sym.Imports {
				if ref, ok := s.exportKeys[string(e.Key)]; ok {
					if sz, ok := s.exportSize[string(e.Key)]; ok {
						l.size, l.sized = sz, true
					}
					// The aperture used is the exporting GPU's.
					if g, _, _ := s.gpuOfDev(ref.pid, ref.dev); g >= 0 {
						l.gpu = g
					}
				}
			}
			if sym.BAR1 == cuda.BAR1Peer && !sym.UsesBAR1(e.Dev, peerDevice(sym, e)) {
				return nil // a grant to the owning device maps nothing
			}
			k := resKey{e.PID, sym.Creates, e.Ptr}
			if old, ok := live[k]; ok && old.sized {
				tr.slot(old.key()).total -= old.size
				logChange(old.key(), e.Start, e.End, -int64(old.size))
			}
			live[k] = l
			if l.sized && l.view != cuda.ViewNone {
				vk := l.key()
				sl := tr.slot(vk)
				sl.total += l.size
				logChange(vk, e.Start, e.End, int64(l.size))
				sl.acc.observe(sl.total, e.End, s)
			}
		}
		for _, res := range sym.Releases {
			k := resKey{e.PID, res, e.Target}
			if l, ok := live[k]; ok {
				delete(live, k)
				if l.sized && l.view != cuda.ViewNone {
					vk := l.key()
					sl := tr.slot(vk)
					sl.total -= l.size
					logChange(vk, e.Start, e.End, -int64(l.size))
					sl.acc.observe(sl.total, e.End, s)
				}
			}
		}
		// An export names a live allocation: remember its size for the
		// processes that import it.
		if isExport(sym, e) {
			for _, res := range sym.Exports {
				if l, ok := live[resKey{e.PID, res, e.Target}]; ok && l.sized {
					s.exportSize[string(e.Key)] = l.size
				}
			}
		}
		return nil
	}
	if err := eventsInOrder(s.r, s.count, replay); err != nil {
		return nil, err
	}
	if firstEnd >= 0 && !atFailureTaken {
		releaseUpTo(firstEnd)
		snapshot()
	}
	releaseUpTo(math.MaxInt64)
	for _, sl := range tr.slots {
		sl.acc.end = some(sl.total)
	}
	return tr, nil
}

// eventsInOrder streams the run's events: each first goes to tally, in
// storage order, then to replay, in time order. Stored events are nearly
// ordered already (one ring buffer, committed in arrival order); a bounded
// reorder window repairs what is not, so totals at a moment never count a
// release that happened after it. tally may be nil.
func eventsInOrder(r *store.Reader, tally func(*store.Event), replay func(*store.Event) error) error {
	win := &reorder{}
	err := r.Events(func(e *store.Event) error {
		if tally != nil {
			tally(e)
		}
		if next, ok := win.push(e); ok {
			return replay(next)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for next, ok := win.pop(); ok; next, ok = win.pop() {
		if err := replay(next); err != nil {
			return err
		}
	}
	return nil
}

// procExit is when a process ended.
type procExit struct {
	pid uint32
	t   int64
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
// sized bytes: freed(total, exit time, bytes).
func (q *exitQueue) releaseUpTo(t int64, live map[resKey]liveRes, freed func(vk viewKey, at int64, n uint64)) {
	for len(*q) > 0 && (*q)[0].t <= t {
		x := (*q)[0]
		*q = (*q)[1:]
		lost := map[viewKey]uint64{}
		for k, l := range live {
			if k.pid == x.pid {
				delete(live, k)
				if l.sized && l.view != cuda.ViewNone {
					lost[l.key()] += l.size
				}
			}
		}
		for vk, n := range lost {
			freed(vk, x.t, n)
		}
	}
}

// reorderWindow is how many events the live-bytes replay holds to restore
// time order (about 1.2 MB, cache-sized). Recorded runs are out of order by
// microseconds; an event stored early but stamped late stays in the window
// however small it is, so only an event stamped earlier than the 8192
// stored before it would be replayed late.
const reorderWindow = 1 << 13

// reorder restores time order over a window of events. Input is nearly
// sorted, so an event usually lands at the end and costs one copy.
type reorder struct {
	buf  []store.Event // buf[head:] sorted by End, then Start
	head int
}

func eventBefore(a, b *store.Event) bool {
	if a.End != b.End {
		return a.End < b.End
	}
	return a.Start < b.Start
}

// push adds a copy of e; when the window is full it returns the earliest.
func (w *reorder) push(e *store.Event) (*store.Event, bool) {
	if w.head > 0 && w.head == len(w.buf) {
		w.buf, w.head = w.buf[:0], 0
	} else if w.head >= reorderWindow {
		n := copy(w.buf, w.buf[w.head:])
		w.buf, w.head = w.buf[:n], 0
	}
	c := *e
	if len(e.Key) > 0 {
		c.Key = append([]byte(nil), e.Key...)
	}
	w.buf = append(w.buf, c)
	for i := len(w.buf) - 1; i > w.head && eventBefore(&w.buf[i], &w.buf[i-1]); i-- {
		w.buf[i], w.buf[i-1] = w.buf[i-1], w.buf[i]
	}
	if len(w.buf)-w.head > reorderWindow {
		return w.pop()
	}
	return nil, false
}

// pop returns the earliest event held, valid until the next push.
func (w *reorder) pop() (*store.Event, bool) {
	if w.head == len(w.buf) {
		return nil, false
	}
	w.head++
	return &w.buf[w.head-1], true
}

// flagRecovered marks a failure as recovered in the analysis's copy.
const flagRecovered = 1 << 30

// viewSlot is one GPU and view's traced total.
type viewSlot struct {
	key   viewKey
	total uint64
	acc   fieldAcc
}

// slot returns the slot of vk, making it (from zero) on first use.
func (t *traced) slot(vk viewKey) *viewSlot {
	for _, sl := range t.slots {
		if sl.key == vk {
			return sl
		}
	}
	sl := &viewSlot{key: vk, acc: fieldAcc{start: some(0)}}
	t.slots = append(t.slots, sl)
	return sl
}

func ptr(v uint64) *uint64 { return &v }

// wall converts a run-clock time to wall time.
func (s *state) wall(t int64) string {
	if s.run.WallStart.IsZero() {
		return ""
	}
	return s.run.WallStart.Add(time.Duration(t - s.run.ClockStart)).UTC().Format(time.RFC3339Nano)
}

func (s *state) runInfo() {
	ri := RunInfo{Path: s.r.Path(), ID: s.run.ID, Mode: s.run.Mode, Command: s.run.Command, TargetPID: s.run.TargetPID,
		Host: s.run.Hostname, Kernel: s.run.Kernel, Clock: s.run.Clock, StartNS: s.run.ClockStart,
		WallStart: s.run.WallStart.UTC().Format(time.RFC3339Nano), Interval: int64(s.run.Interval),
		Freeze: s.run.FreezeOnFailure, Schema: s.r.Schema(), Version: s.run.Version}
	ri.EndNS = s.lastTime
	if s.stop != nil {
		ri.EndNS = s.stop.Time
		ri.Ended = "clean"
		ri.StopReason = s.stop.Reason
		ri.StopError = s.stop.Error
		if s.stop.Workload != nil {
			ri.WorkloadExit = exitOf(s.stop.Workload)
		}
		ri.Events = s.stop.Stats.Events
	} else {
		ri.Ended = "abrupt" // Events is counted by the live-bytes pass
	}
	if ri.EndNS > ri.StartNS {
		ri.DurationNS = ri.EndNS - ri.StartNS
	}
	s.rep.Run = ri
}

var signalNames = map[int]string{1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
	7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM"}

func exitOf(e *store.Exit) *Exit {
	if e == nil {
		return nil
	}
	x := &Exit{Code: e.Code, Signal: e.Signal, TimeNS: e.Time}
	if e.Signal != nil {
		x.Name = signalNames[*e.Signal]
		if x.Name == "" {
			x.Name = fmt.Sprintf("signal %d", *e.Signal)
		}
	}
	return x
}

// context fills processes, coverage, kernel log, markers, loss and call
// counts.
func (s *state) context(procs []store.Process) error {
	for _, p := range procs {
		pi := ProcessInfo{PID: p.PID, PPID: p.PPID, Exe: p.Exe, Args: p.Args, Root: p.Root, StartNS: p.Start,
			Exit: exitOf(p.Exit), Cgroup: p.Cgroup, AttachedLate: p.AttachedLate, Env: p.Env, Devices: []DeviceMap{}}
		if pi.Args == nil {
			pi.Args = []string{}
		}
		for _, d := range p.Devices {
			dm := DeviceMap{Ordinal: d.Ordinal, UUID: d.UUID, Method: d.Method, Why: d.Why}
			if d.GPU >= 0 {
				g := d.GPU
				dm.GPU = &g
				if dm.UUID == "" {
					dm.UUID = s.gpuUUID[g]
				}
			}
			pi.Devices = append(pi.Devices, dm)
		}
		s.rep.Processes = append(s.rep.Processes, pi)
		if p.Exit.Abnormal() && !s.failedPIDs[p.PID] {
			s.abnormal = append(s.abnormal, p.PID)
		}
	}
	var err error
	if s.libs, err = s.r.Libraries(); err != nil {
		return err
	}
	for _, l := range s.libs {
		lib := Library{Path: l.Path, BuildID: l.BuildID, Hooked: l.Attached, Absent: l.Absent, Unknown: l.Unknown, Error: l.Error}
		for _, p := range []*[]string{&lib.Hooked, &lib.Absent, &lib.Unknown} {
			if *p == nil {
				*p = []string{}
			}
		}
		s.rep.Coverage = append(s.rep.Coverage, lib)
	}
	kl, err := s.r.KernelLog()
	if err != nil {
		return err
	}
	for _, l := range kl {
		k := KernelLine{TimeNS: l.Time, Text: l.Text, Xid: l.Xid}
		if s.first != nil {
			k.Position = "before"
			if l.Time > s.first.e.End {
				k.Position = "after"
			}
		}
		s.rep.KernelLog = append(s.rep.KernelLog, k)
	}
	ms, err := s.r.Markers()
	if err != nil {
		return err
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Time < ms[j].Time })
	for _, m := range ms {
		s.rep.Markers = append(s.rep.Markers, Marker{TimeNS: m.Time, Label: m.Label})
	}
	var st store.Stats
	known := false
	if s.stop != nil {
		st, known = s.stop.Stats, true
	} else if drops, err := s.r.Drops(); err == nil && len(drops) > 0 {
		st, known = drops[len(drops)-1].Stats, true
	}
	s.rep.Loss = lossOf(st)
	s.rep.Loss.Known = known
	if s.first != nil {
		s.rep.Loss.BeforeFailure = (st.LostCalls > 0 && st.LostFirst != 0 && st.LostFirst <= s.first.e.End) ||
			st.LostInflight > 0 || st.TooDeep > 0
	}
	return nil
}

// lossOf reports the recorder's loss counters; Loss.stats gives them back.
func lossOf(st store.Stats) Loss {
	return Loss{Calls: st.Calls, Events: st.Events, LostCalls: st.LostCalls, LostFirstNS: st.LostFirst,
		LostInflight: st.LostInflight, TooDeep: st.TooDeep, Unmatched: st.Unmatched, LostProc: st.LostProc,
		DecodeErrors: st.DecodeErrors}
}

// stats gives back the recorder's counters a Loss reports, so that what
// counts as lost evidence is store.Stats.Lost's to say.
func (l Loss) stats() store.Stats {
	return store.Stats{Calls: l.Calls, Events: l.Events, LostCalls: l.LostCalls, LostFirst: l.LostFirstNS,
		LostInflight: l.LostInflight, TooDeep: l.TooDeep, Unmatched: l.Unmatched, LostProc: l.LostProc,
		DecodeErrors: l.DecodeErrors}
}

// phases splits the run at the markers; without markers, at its own
// landmarks (first allocation, first failure).
func (s *state) phases() {
	start, end := s.run.ClockStart, s.rep.Run.EndNS
	if end < start {
		end = start
	}
	var cuts []Phase
	if len(s.rep.Markers) > 0 {
		s.rep.PhasesFrom = "markers"
		prev := Phase{Label: "before " + s.rep.Markers[0].Label, StartNS: start}
		for _, m := range s.rep.Markers {
			prev.EndNS = m.TimeNS
			cuts = append(cuts, prev)
			prev = Phase{Label: m.Label, StartNS: m.TimeNS}
		}
		prev.EndNS = end
		cuts = append(cuts, prev)
	} else {
		s.rep.PhasesFrom = "landmarks (no markers were recorded)"
		t := start
		if s.firstAlloc >= 0 {
			cuts = append(cuts, Phase{Label: "before first allocation", StartNS: t, EndNS: s.firstAlloc})
			t = s.firstAlloc
		}
		if s.first != nil && s.first.e.End >= t {
			cuts = append(cuts, Phase{Label: "up to first failure", StartNS: t, EndNS: s.first.e.End})
			t = s.first.e.End
			cuts = append(cuts, Phase{Label: "after first failure", StartNS: t, EndNS: end})
		} else {
			cuts = append(cuts, Phase{Label: "rest of run", StartNS: t, EndNS: end})
		}
	}
	s.rep.Phases = cuts
}

// phaseOf names the phase a time falls in; a time on a boundary belongs to
// the phase it ends (the first failure ends "up to first failure").
func (s *state) phaseOf(t int64) string {
	for _, p := range s.rep.Phases {
		if t <= p.EndNS {
			return p.Label
		}
	}
	if n := len(s.rep.Phases); n > 0 {
		return s.rep.Phases[n-1].Label
	}
	return ""
}

// failure converts an event into a reported failure.
func (s *state) failure(f *event) Failure {
	res := cuda.LookupResult(f.e.Result)
	out := Failure{Symbol: f.name, Operation: f.sym.Op.String(), Result: f.e.Result, ResultName: res.Name,
		Meaning: res.Meaning.String(), PID: f.e.PID, TID: f.e.TID, TimeNS: f.e.End, StartNS: f.e.Start,
		Wall: s.wall(f.e.End), CUDADevice: f.e.Dev, Context: f.e.Ctx, Frozen: f.e.Flags&store.EventFrozen != 0,
		Recovered: f.e.Flags&flagRecovered != 0, Phase: s.phaseOf(f.e.End)}
	if f.e.Has&cuda.FieldSize != 0 {
		out.Size = ptr(f.e.Size)
	}
	if f.e.Has&cuda.FieldFlags != 0 {
		out.Flags = ptr(f.e.Fields.Flags)
	}
	gpu, mig, method := s.gpuOfDev(f.e.PID, f.e.Dev)
	out.GPUMapping = method
	if gpu >= 0 {
		g := gpu
		out.GPUIndex = &g
		out.MIGIndex = mig
		if u, ok := s.gpuUUID[gpu]; ok {
			out.GPU = &u
		}
	}
	if s.first != nil && f != s.first && f.e.PID == s.first.e.PID && f.e.Ctx == s.first.e.Ctx && f.e.End > s.first.e.End {
		out.PossibleConsequence = true
	}
	return out
}

func (s *state) failureList() {
	stacks := 0
	var ff *Failure
	for _, f := range s.failures {
		fl := s.failure(f)
		if f.e.Stack >= 0 && stacks < s.opts.MaxStacks {
			fl.Stack = s.stack(f)
			stacks++
		}
		s.rep.Failures = append(s.rep.Failures, fl)
		if f == s.first {
			c := fl
			ff = &c
		}
	}
	if s.first != nil {
		// The first failure is listed unless the list was truncated; its
		// stack is symbolized even past MaxStacks.
		if ff == nil {
			c := s.failure(s.first)
			ff = &c
		}
		if ff.Stack == nil && s.first.e.Stack >= 0 {
			ff.Stack = s.stack(s.first)
		}
		s.rep.FirstFailure = ff
	}
}

// stack symbolizes a failure's user stack.
func (s *state) stack(f *event) *Stack {
	frames, err := s.r.Stack(f.e.Stack)
	if err != nil || len(frames) == 0 {
		return &Stack{Frames: []Frame{}, Partial: true, Note: "stack not stored"}
	}
	var maps []store.Mapping
	if p := s.procs[f.e.PID]; p != nil {
		maps = p.Maps
	}
	return s.opts.Symbolizer.Symbolize(frames, s.files(), maps)
}

// files lists every file the run saw, for resolving build ids: the files
// processes had mapped, their executables, and the attached libraries.
func (s *state) files() []File {
	if s.fileList != nil {
		return s.fileList
	}
	seen := map[string]bool{}
	add := func(f File) {
		if f.Path != "" && !seen[f.Path+"\x00"+f.Open] {
			seen[f.Path+"\x00"+f.Open] = true
			s.fileList = append(s.fileList, f)
		}
	}
	for _, p := range s.procs {
		for _, m := range p.Maps {
			add(File{Path: m.Path, Open: m.Host, BuildID: m.BuildID})
		}
		add(File{Path: p.Exe})
	}
	for _, l := range s.libs {
		add(File{Path: l.Path, Open: l.HostPath, BuildID: l.BuildID})
	}
	if s.fileList == nil {
		s.fileList = []File{}
	}
	return s.fileList
}

// Package analyze turns a recorded run into a report: which operation
// failed first, whether that is an allocation problem, a mapping problem,
// not a memory problem at all, or a question the record cannot answer, and
// the memory evidence around it, view by view.
//
// Analysis is a pure function of what the recorder stored (no eBPF, no
// NVML). [Analyze] reads the run's metadata, the failures index, then
// streams the events once through a replayer (live bytes per process, GPU
// and view; recovered failures; the timeline the HTML report draws; an
// optional Observer for per-call exports) and the samples once. Every
// classification goes through the tables of package cuda; no symbol or
// result code is special cased here. The rules of evidence the verdict
// applies are named in docs/rules.md.
package analyze

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
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
	// Observer, when set, receives every call (in time order) and every
	// sample value during the analysis pass.
	Observer report.Observer
	// NoTimeline skips building the timeline (the HTML report's pictures).
	NoTimeline bool
	// NearMissPercent is the least free framebuffer, in percent of its
	// total, under which a run with no failure is a near miss (0: the
	// default, DefaultNearMissPercent).
	NearMissPercent float64
	// Open, when set, opens each recording AnalyzeMany reads (a run.db,
	// or a flight recording's directory); default store.Open.
	Open func(path string) (Source, func() error, error)
	// Job, when set, selects the job whose verdict the report gives (see
	// GroupJobs); other jobs' processes are its neighbours.
	Job *JobSelector
}

// failed is one failed call the analysis keeps, with its own copy of the
// key bytes.
type failed struct {
	sym       *cuda.Symbol
	name      string
	e         store.Event
	recovered bool
	// held is what the failing process held from traced calls when the
	// call failed, per GPU view (sized resources only).
	held []report.LiveBytes
}

// state is one analysis in progress: what the run's metadata says, and the
// report being filled.
type state struct {
	r     Source
	opts  Options
	run   store.RunInfo
	stop  *store.StopInfo
	inv   *store.Inventory
	procs map[uint32]*store.Process // by pid; the latest record of a pid
	// procList is every process record, oldest first (a reused pid has
	// several).
	procList []store.Process
	libs     []store.Library
	gpuUUID  map[int]string
	rep      *report.Report
	syms     *symbols

	// neighbours are the processes NVML listed that the recording did not
	// follow, as the recorder named them.
	neighbours []store.Neighbour

	first       *failed // first failure
	firstAny    *failed
	unrecovered *failed // first unrecovered failure, when first recovered
	failures    []*failed
	failedPIDs  map[uint32]bool
	firstAlloc  int64
	// lastTime is the last call recorded (the latest return in the last
	// event chunk); lastRecord the latest time of anything recorded
	// (samples, counter readings, process exits too): Run.EndNS of an
	// abrupt run.
	lastTime, lastRecord int64
	// window: a sample older than this before a failure no longer
	// reflects the state at it.
	window   int64
	fileList []File
	// replay holds what the event pass found (live bytes, counts,
	// exports); samples what the samples pass found.
	replay  *replayer
	samples *samplesPass
	tl      *timelineBuilder // nil with Options.NoTimeline
	marks   *landmarks
	// phaseSet says which phase a time falls in (set with the phases).
	phaseSet *phaseSet
	// gpuProcs follows, per GPU, the processes NVML lists.
	gpuProcs map[int]*gpuProcs
	// peakWatches follow the samples around each traced peak.
	peakWatches map[viewKey]*peakWatch
	caps        *captures // nil: the source has no stack captures
	jobs        *jobState
}

// Analyze reads a run and produces its report.
func Analyze(r Source, opts Options) (*report.Report, error) {
	s, err := newState(r, opts)
	if err != nil {
		return nil, err
	}
	if err := s.groupJobs(); err != nil {
		return nil, err
	}
	if err := s.findFailures(); err != nil {
		return nil, err
	}
	s.pickFirst()
	s.runInfo()
	if err := s.runRecords(); err != nil {
		return nil, err
	}
	s.phases() // before the passes that fill per-phase values
	if err := s.passEvents(); err != nil {
		return nil, err
	}
	s.pickUnrecovered()
	if err := s.loadCaptures(); err != nil {
		return nil, err
	}
	if err := s.passSamples(); err != nil {
		return nil, err
	}
	if s.tl != nil {
		s.tl.markUnrecovered(s.unrecovered)
		s.rep.Timeline = s.tl.finish()
	}
	s.headroomReport()
	s.verdict()
	s.budgetAtLeastHeadroom()
	s.failureList()
	s.jobsReport()
	s.rep.Evidence = append(s.rep.Evidence, s.jobEvidence()...)
	return s.rep, nil
}

func newState(r Source, opts Options) (*state, error) {
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
		failedPIDs: map[uint32]bool{}, syms: newSymbols(r.SymbolNames())}
	s.rep = &report.Report{Schema: report.Schema, Missing: []report.Missing{}, Evidence: []report.Evidence{},
		MemoryViews: []report.ViewRow{}, Failures: []report.Failure{}, LiveAtFailure: []report.LiveBytes{},
		Processes: []report.ProcessInfo{}, Coverage: []report.Library{}, KernelLog: []report.KernelLine{},
		Markers: []report.Marker{}, Phases: []report.Phase{}, Calls: []report.CallCount{}, NextSteps: []string{},
		Budget: []report.Budget{}}
	// A sample older than three intervals (at least 300 ms) no longer
	// reflects the state at a failure.
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
	s.procList = procs
	if s.neighbours, err = r.Neighbours(); err != nil {
		return nil, err
	}
	return s, nil
}

// symbols resolves a file's symbol ids to rows of the symbol table once,
// so that no pass looks a name up per event. A name this forensic no
// longer has, or an id the file does not list (a corrupt file), is judged
// as "other".
type symbols struct {
	rows  []*cuda.Symbol
	names []string
}

func newSymbols(names []string) *symbols {
	s := &symbols{names: names, rows: make([]*cuda.Symbol, len(names))}
	for i, name := range names {
		sym, _, ok := cuda.Lookup(name)
		if !ok {
			sym = &cuda.Symbol{Name: name, Family: name, Op: cuda.OpOther}
		}
		s.rows[i] = sym
	}
	return s
}

// unlisted stands for a symbol id the file's symbol list lacks.
var unlisted = &cuda.Symbol{Name: "unknown", Family: "unknown", Op: cuda.OpOther}

// row returns the table row of a file symbol id.
func (s *symbols) row(id uint16) *cuda.Symbol {
	if int(id) < len(s.rows) {
		return s.rows[id]
	}
	return unlisted
}

// name returns the file's name of a symbol id.
func (s *symbols) name(id uint16) string {
	if int(id) < len(s.names) && s.names[id] != "" {
		return s.names[id]
	}
	return fmt.Sprintf("symbol#%d", id)
}

// findFailures collects every failed call from the failures index (a
// whole pass over the events for files without one), then finds the run's
// landmarks: the first successful allocation (a scan of the first events)
// and where the record ends (the last chunk).
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
		if e.Result == 0 && e.Depth == 0 && s.syms.row(e.Symbol).Op == cuda.OpAllocation {
			s.firstAlloc = e.End
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return err
	}
	if s.lastTime, err = s.r.LastEventEnd(); err != nil {
		return err
	}
	s.lastRecord, err = s.r.LastRecordEnd()
	return err
}

// errStop ends a scan early.
var errStop = errors.New("stop")

// noteFailure records one failed call of the application (a library's
// call to itself is not the application's).
func (s *state) noteFailure(e *store.Event) {
	if e.Depth > 0 {
		return
	}
	sym := s.syms.row(e.Symbol)
	if !s.noteJobFailure(e, sym) {
		return // another job's: a neighbour, never the subject
	}
	s.failedPIDs[e.PID] = true
	f := &failed{sym: sym, name: s.syms.name(e.Symbol), e: *e}
	f.e.Key = append([]byte(nil), e.Key...)
	f.e.Grants = append([]cuda.Grant(nil), e.Grants...)
	if len(s.failures) < s.opts.MaxFailures {
		s.failures = append(s.failures, f)
	} else {
		s.rep.FailuresTruncated++
	}
	if sym.Op.Primary() && (s.first == nil || e.End < s.first.e.End) {
		s.first = f
	}
	if s.firstAny == nil || e.End < s.firstAny.e.End {
		s.firstAny = f
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

// pickUnrecovered finds, when the first failure was recovered, the first
// failure that was not (the one a job usually dies of): the earliest
// unrecovered allocation, mapping or context failure, else the earliest
// unrecovered failure of any call.
func (s *state) pickUnrecovered() {
	if s.first == nil || !s.first.recovered {
		return
	}
	var anyCall *failed
	for _, f := range s.failures {
		if f.recovered || f.e.End < s.first.e.End {
			continue
		}
		if f.sym.Op.Primary() {
			s.unrecovered = f
			return
		}
		if anyCall == nil {
			anyCall = f
		}
	}
	s.unrecovered = anyCall
}

// anchor is the failure that matters for what follows it: the first
// unrecovered failure when the first was recovered, else the first.
func (s *state) anchor() *failed {
	if s.unrecovered != nil {
		return s.unrecovered
	}
	return s.first
}

// wall converts a run-clock time to wall time.
func (s *state) wall(t int64) string {
	if s.run.WallStart.IsZero() {
		return ""
	}
	return s.run.WallStart.Add(time.Duration(t - s.run.ClockStart)).UTC().Format(time.RFC3339Nano)
}

// rel formats a run-clock time as seconds into the run.
func (s *state) rel(t int64) string { return report.Rel(t, s.run.ClockStart) }

// noContext is gpuOfCall's method for a call made with no current
// context.
const noContext = report.MappingNoContext

// cudaErrorInvalidContext is CUDA_ERROR_INVALID_CONTEXT.
const cudaErrorInvalidContext = 201

// gpuOfCall is gpuOfDev for a call. A call that names no device, made on
// a thread with no current context by a process followed from its start
// (every context call of it recorded), and refused by the driver for want
// of a context, ran on no GPU: the recorder's guess of the only GPU's
// ordinal holds only for a call that did run on one.
func (s *state) gpuOfCall(e *store.Event) (int, *int, string) {
	if e.Ctx == 0 && e.Has&cuda.FieldDevice == 0 && e.Result == cudaErrorInvalidContext {
		if p := s.procs[e.PID]; p != nil && !p.AttachedLate {
			return -1, nil, noContext
		}
	}
	return s.gpuOfDev(e.PID, e.Dev)
}

// gpuOfDev maps a process's CUDA ordinal to an NVML index (-1 unknown),
// its MIG instance and how the match was made.
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

// Package rundiff compares a failing run with good runs of the same job
// and ranks the differences that can explain the failure: processes the
// failing run has that the good ones lack, the first call where a
// process's sequence of allocations departs, the least free memory and the
// traced peak per GPU and view, growth per phase, the platform, and phase
// durations.
//
// Each run is read once by the analysis ([Read]: analyze.Analyze with an
// observer that keeps each process's allocation and mapping calls), then
// [Compare] aligns the runs and ranks what differs. Framebuffer and BAR1
// are compared view by view, never added. docs/diff.md describes the
// output and the ranking.
package rundiff

import (
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/retrivium/forensic/analyze"
	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// MaxCalls bounds the calls of one process a Run keeps (Options.MaxCalls
// default): past it, sequences are compared in part, and the diff says so.
const MaxCalls = 2_000_000

// Options adjust how a run is read.
type Options struct {
	// Analyze is passed to the analysis (its Observer is replaced).
	Analyze analyze.Options
	// MaxCalls bounds the calls kept per process (default MaxCalls).
	MaxCalls int
}

// Run is one analyzed run, with what the comparison needs beyond the
// report.
type Run struct {
	Report   *report.Report
	Platform Platform
	// Seqs holds each process's allocation, host-allocation and mapping
	// calls of the application, in time order, by pid.
	Seqs map[uint32]*Sequence
	// Symbols names the Sequence entries' symbol ids; Sites their call
	// sites (Sites[0] is "": unknown).
	Symbols []string
	Sites   []string
	// Stack returns the stack of one of the run's calls, named by its
	// process and return time (nil when none was recorded); nil when
	// stacks cannot be read (unit tests).
	Stack func(pid uint32, endNS int64) *report.Stack
}

// chunkBits sizes the blocks a Sequence grows by (65,536 calls): a
// sequence never holds more than one block it does not use, where a
// slice grown by appending may hold as much again as it uses.
const chunkBits = 16

// Sequence is one process's allocation and mapping calls.
type Sequence struct {
	chunks [][]Call
	n      int
	// Cut counts the calls past the bound that were not kept.
	Cut uint64
}

// Len is the number of calls kept.
func (s *Sequence) Len() int {
	if s == nil {
		return 0
	}
	return s.n
}

// At returns the i-th call.
func (s *Sequence) At(i int) Call { return s.chunks[i>>chunkBits][i&(1<<chunkBits-1)] }

// at returns a pointer to the i-th call.
func (s *Sequence) at(i int) *Call { return &s.chunks[i>>chunkBits][i&(1<<chunkBits-1)] }

// Add appends a call.
func (s *Sequence) Add(c Call) {
	if s.n&(1<<chunkBits-1) == 0 {
		s.chunks = append(s.chunks, make([]Call, 0, 1<<chunkBits))
	}
	last := len(s.chunks) - 1
	s.chunks[last] = append(s.chunks[last], c)
	s.n++
}

// Call is one kept call: 24 bytes, since a long run has millions.
type Call struct {
	EndNS int64
	Size  uint64
	// Site is the call's call site (an index into Run.Sites; 0 unknown),
	// the recording's stack id until Read resolves it.
	Site   int32
	Symbol uint16
	// HasSize says the record has the call's size; Failed that it failed.
	HasSize, Failed bool
}

// Platform is the part of the run's inventory a comparison looks at.
type Platform struct {
	Driver string
	GPUs   []GPUPlatform
}

// GPUPlatform is one GPU's configuration; "" (nil) for a value NVML did
// not give.
type GPUPlatform struct {
	Index         int
	Name, MIG     string
	FBTotal, BAR1 *uint64
}

// Read analyzes a run and keeps what a comparison needs. src must stay
// open while the Run's Stack is used.
func Read(src analyze.Source, opts Options) (*Run, error) {
	if opts.MaxCalls <= 0 {
		opts.MaxCalls = MaxCalls
	}
	obs := &collector{max: opts.MaxCalls, seqs: map[uint32]*Sequence{}, ids: map[string]uint16{}}
	aopts := opts.Analyze
	aopts.Observer, aopts.NoTimeline = obs, true
	rep, err := analyze.Analyze(src, aopts)
	if err != nil {
		return nil, err
	}
	inv, err := src.Inventory()
	if err != nil {
		return nil, err
	}
	run := &Run{Report: rep, Platform: platformOf(inv), Seqs: obs.seqs, Symbols: obs.names}
	if run.Sites, err = resolveSites(src, obs.seqs); err != nil {
		return nil, err
	}
	sopts := opts.Analyze
	sopts.Observer = nil
	run.Stack = func(pid uint32, endNS int64) *report.Stack {
		st, err := analyze.CallStack(src, sopts, pid, endNS)
		if err != nil {
			return &report.Stack{Frames: []report.Frame{}, Partial: true, Note: "stack unreadable: " + err.Error()}
		}
		return st
	}
	return run, nil
}

// collector is the observer that keeps each process's calls.
type collector struct {
	max   int
	seqs  map[uint32]*Sequence
	ids   map[string]uint16
	names []string
}

func (c *collector) Begin(*report.Report) error              { return nil }
func (c *collector) Sample(*report.SampleValue) error        { return nil }
func (c *collector) Call(call *report.Call) error            { c.add(call); return nil }
func (c *collector) symbol(name string) (id uint16, ok bool) { id, ok = c.ids[name]; return }

// add keeps an application call that allocates or maps.
func (c *collector) add(call *report.Call) {
	if call.Depth > 0 || !kept(call.Operation) {
		return
	}
	id, ok := c.symbol(call.Symbol)
	if !ok {
		id = uint16(len(c.names))
		c.ids[call.Symbol] = id
		c.names = append(c.names, call.Symbol)
	}
	seq := c.seqs[call.PID]
	if seq == nil {
		seq = &Sequence{}
		c.seqs[call.PID] = seq
	}
	if seq.Len() >= c.max {
		seq.Cut++
		return
	}
	k := Call{EndNS: call.EndNS, Site: call.Stack, Symbol: id, Failed: call.Result != 0}
	if call.Args.Size != nil {
		k.Size, k.HasSize = *call.Args.Size, true
	}
	seq.Add(k)
}

// kept says whether calls of an operation class are compared: those that
// take memory (device or host allocations, mappings).
func kept(op string) bool {
	return op == cuda.OpAllocation.String() || op == cuda.OpHostAllocation.String() || op == cuda.OpMapping.String()
}

// platformOf reads the inventory's configuration values.
func platformOf(inv *store.Inventory) Platform {
	var p Platform
	if inv == nil {
		return p
	}
	p.Driver = obsText(inv.Driver)
	for _, g := range inv.GPUs {
		gp := GPUPlatform{Index: g.Index, Name: obsText(g.Name), FBTotal: g.FBTotal.Value, BAR1: g.BAR1Total.Value}
		if m := g.MIGMode.Value; m != nil && *m != 0 {
			gp.MIG = "enabled"
		} else if m != nil {
			gp.MIG = "disabled"
		}
		p.GPUs = append(p.GPUs, gp)
	}
	return p
}

// obsText is an inventory text value, "" when NVML did not give it.
func obsText(o store.Obs[string]) string {
	if o.Value == nil {
		return ""
	}
	return *o.Value
}

// resolveSites replaces each kept call's stack id with its call site: the
// stack's frames as (build id, file offset), which name the same code in
// every run of the same binaries wherever they were loaded. Frames stored
// as bare addresses differ from run to run and are left out; a stack with
// none other has an unknown site.
func resolveSites(src analyze.Source, seqs map[uint32]*Sequence) ([]string, error) {
	sites := []string{""}
	index := map[string]int32{"": 0}
	byStack := map[int32]int32{}
	for _, seq := range seqs {
		for i := 0; i < seq.Len(); i++ {
			c := seq.at(i)
			if c.Site < 0 {
				c.Site = 0
				continue
			}
			site, ok := byStack[c.Site]
			if !ok {
				frames, err := src.Stack(c.Site)
				if err != nil {
					return nil, err
				}
				key := siteKey(frames)
				if site, ok = index[key]; !ok {
					site = int32(len(sites))
					index[key] = site
					sites = append(sites, key)
				}
				byStack[c.Site] = site
			}
			c.Site = site
		}
	}
	return sites, nil
}

// siteKey is a stack's frames that name code the same way in every run.
func siteKey(frames []store.Frame) string {
	var b strings.Builder
	for _, f := range frames {
		if f.BuildID != "" {
			fmt.Fprintf(&b, "%s+%x;", f.BuildID, f.Offset)
		}
	}
	return b.String()
}

// ReadAll reads several runs, as many at once as there are CPUs: each
// analysis is independent of the others. The first error (in the order
// of srcs) is returned, naming its recording.
func ReadAll(srcs []analyze.Source, opts Options) ([]*Run, error) {
	runs := make([]*Run, len(srcs))
	errs := make([]error, len(srcs))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, src := range srcs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			runs[i], errs[i] = Read(src, opts)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("%s: %w", srcs[i].Path(), err)
		}
	}
	return runs, nil
}

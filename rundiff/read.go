// Package rundiff compares a failing run with good runs of the same job
// and ranks the differences that can explain the failure: processes the
// failing run has that the good ones lack, the first call where a
// process's sequence of allocations departs, the least free memory and the
// traced peak per GPU and view, growth per phase, the platform, and phase
// durations.
//
// Each run is read by the analysis ([Read]: analyze.Analyze with an
// observer that summarizes each process's allocation and mapping calls
// in hashed blocks), then [Compare] aligns the runs, finds from the
// summaries where aligned processes' calls may depart, reads those few
// calls again, and ranks what differs. Framebuffer and BAR1
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

// Options adjust how a run is read.
type Options struct {
	// Analyze is passed to the analysis (its Observer is replaced).
	Analyze analyze.Options
}

// Run is one analyzed run, with what the comparison needs beyond the
// report.
type Run struct {
	Report   *report.Report
	Platform Platform
	// Procs summarizes each process's allocation, host-allocation and
	// mapping calls of the application, in time order, by pid.
	Procs map[uint32]*Summary
	// Symbols names the symbol ids of the calls read; Sites their call
	// sites (Sites[0] is "": unknown).
	Symbols []string
	Sites   []string
	// Stacks returns the stacks of some of the run's calls, named by
	// their process and return time (nil for one with none recorded), in
	// one pass; nil when stacks cannot be read (unit tests).
	Stacks func(calls []analyze.CallRef) []*report.Stack
	// load reads windows of some processes' calls, a second pass over the
	// run; their calls' Symbol and Site index Symbols and Sites.
	load func(want map[uint32][]window) (map[uint32]*Sequence, error)
}

// Call is one call read: 24 bytes.
type Call struct {
	EndNS int64
	Size  uint64
	// Site is the call's call site (an index into Run.Sites; 0 unknown).
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

// Read analyzes a run and keeps what a comparison needs: each process's
// calls summarized, and a way to read windows of them again. src must
// stay open while the Run is compared and its Stacks are read.
func Read(src analyze.Source, opts Options) (*Run, error) {
	t := &tables{src: src, ids: map[string]uint16{}, byStack: map[int32]int32{}, sites: map[string]int32{"": 0},
		siteKeys: []string{""}, siteHashes: []uint64{0}}
	obs := &collector{t: t, procs: map[uint32]*Summary{}}
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
	run := &Run{Report: rep, Platform: platformOf(inv), Procs: obs.procs}
	run.load = func(want map[uint32][]window) (map[uint32]*Sequence, error) {
		seqs, err := t.read(obs.procs, want)
		run.Symbols, run.Sites = t.names, t.siteKeys
		return seqs, err
	}
	run.Symbols, run.Sites = t.names, t.siteKeys
	sopts := opts.Analyze
	sopts.Observer = nil
	run.Stacks = func(calls []analyze.CallRef) []*report.Stack {
		sts, err := analyze.CallStacks(src, sopts, calls)
		if err != nil {
			sts = make([]*report.Stack, len(calls))
			for i := range sts {
				sts[i] = &report.Stack{Frames: []report.Frame{}, Partial: true, Note: "stack unreadable: " + err.Error()}
			}
		}
		return sts
	}
	return run, nil
}

// tables number a run's symbols and call sites as both passes meet them.
type tables struct {
	src analyze.Source
	// ids and names number symbol names; nameHashes hash them.
	ids        map[string]uint16
	names      []string
	nameHashes []uint64
	// byStack maps the recording's stack ids to call sites, sites the
	// sites' keys to their numbers; siteKeys and siteHashes by number.
	byStack    map[int32]int32
	sites      map[string]int32
	siteKeys   []string
	siteHashes []uint64
}

// symbol numbers a symbol name.
func (t *tables) symbol(name string) uint16 {
	id, ok := t.ids[name]
	if !ok {
		id = uint16(len(t.names))
		t.ids[name] = id
		t.names = append(t.names, name)
		t.nameHashes = append(t.nameHashes, textHash(name))
	}
	return id
}

// site is the call site of a recorded stack (0: unknown, or no stack):
// the stack's frames as (build id, file offset), which name the same code
// in every run of the same binaries wherever they were loaded. Frames
// stored as bare addresses differ from run to run and are left out; a
// stack with none other has an unknown site.
func (t *tables) site(stack int32) (int32, error) {
	if stack < 0 {
		return 0, nil
	}
	if s, ok := t.byStack[stack]; ok {
		return s, nil
	}
	frames, err := t.src.Stack(stack)
	if err != nil {
		return 0, err
	}
	key := siteKey(frames)
	s, ok := t.sites[key]
	if !ok {
		s = int32(len(t.siteKeys))
		t.sites[key] = s
		t.siteKeys = append(t.siteKeys, key)
		t.siteHashes = append(t.siteHashes, textHash(key))
	}
	t.byStack[stack] = s
	return s, nil
}

// summarize adds one call to its process's summary.
func (t *tables) summarize(s *Summary, c Call) {
	s.add(stepHash(t.nameHashes[c.Symbol], c), t.siteHashes[c.Site])
}

// collector is the observer that summarizes each process's calls.
type collector struct {
	t     *tables
	procs map[uint32]*Summary
}

func (c *collector) Begin(*report.Report) error       { return nil }
func (c *collector) Sample(*report.SampleValue) error { return nil }

// Call summarizes an application call that allocates or maps.
func (c *collector) Call(call *report.Call) error {
	if call.Depth > 0 || !kept(call.Operation) {
		return nil
	}
	site, err := c.t.site(call.Stack)
	if err != nil {
		return err
	}
	k := Call{EndNS: call.EndNS, Site: site, Symbol: c.t.symbol(call.Symbol), Failed: call.Result != 0}
	if call.Args.Size != nil {
		k.Size, k.HasSize = *call.Args.Size, true
	}
	s := c.procs[call.PID]
	if s == nil {
		s = &Summary{}
		c.procs[call.PID] = s
	}
	c.t.summarize(s, k)
	return nil
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

package rundiff

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"

	"github.com/retrivium/forensic/analyze"
	"github.com/retrivium/forensic/cuda"
	"github.com/retrivium/forensic/store"
)

// errEnough stops the second pass once every window is read.
var errEnough = errors.New("every window read")

// reading is one process's windows in the second pass.
type reading struct {
	seq  *Sequence
	next int // index of the process's next call
	w    int // the span being filled, or the next one
}

// read is the second pass: it reads the run's events in the order the
// analysis replayed them, numbers each process's calls as the collector
// did, and keeps those in the wanted windows. It stops once the last
// window is read, so a departure early in the run costs little.
func (t *tables) read(procs map[uint32]*Summary, want map[uint32][]window) (map[uint32]*Sequence, error) {
	out := map[uint32]*Sequence{}
	active := map[uint32]*reading{}
	for pid, ws := range want {
		seq := &Sequence{n: procs[pid].Len()}
		for _, w := range merge(ws) {
			seq.spans = append(seq.spans, span{from: w.from, calls: make([]Call, 0, w.to-w.from)})
		}
		out[pid] = seq
		if len(seq.spans) > 0 {
			active[pid] = &reading{seq: seq}
		}
	}
	if len(active) == 0 {
		return out, nil
	}
	names := t.src.SymbolNames()
	keep := keptSymbols(names)
	err := analyze.EventsInOrder(t.src, func(e *store.Event) error {
		if e.Depth > 0 || int(e.Symbol) >= len(keep) || !keep[e.Symbol] {
			return nil
		}
		r := active[e.PID]
		if r == nil {
			return nil
		}
		i := r.next
		r.next++
		sp := &r.seq.spans[r.w]
		if i < sp.from {
			return nil
		}
		c, err := t.call(e, names[e.Symbol])
		if err != nil {
			return err
		}
		sp.calls = append(sp.calls, c)
		if len(sp.calls) == cap(sp.calls) {
			if r.w++; r.w == len(r.seq.spans) {
				delete(active, e.PID)
				if len(active) == 0 {
					return errEnough
				}
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return nil, err
	}
	return out, nil
}

// call is a kept event (of symbol name) as the collector saw it.
func (t *tables) call(e *store.Event, name string) (Call, error) {
	site, err := t.site(e.Stack)
	if err != nil {
		return Call{}, err
	}
	c := Call{EndNS: e.End, Site: site, Symbol: t.symbol(name), Failed: e.Result != 0}
	if e.Has&cuda.FieldSize != 0 {
		c.Size, c.HasSize = e.Size, true
	}
	return c, nil
}

// keptSymbols says, by symbol id, which calls a comparison keeps (kept).
func keptSymbols(names []string) []bool {
	out := make([]bool, len(names))
	for i, name := range names {
		if sym, _, ok := cuda.Lookup(name); ok {
			out[i] = kept(sym.Op.String())
		}
	}
	return out
}

// merge sorts windows and joins those that overlap or touch.
func merge(ws []window) []window {
	ws = append([]window(nil), ws...)
	sort.Slice(ws, func(i, j int) bool { return ws[i].from < ws[j].from })
	var out []window
	for _, w := range ws {
		if w.to <= w.from {
			continue
		}
		if n := len(out); n > 0 && w.from <= out[n-1].to {
			out[n-1].to = max(out[n-1].to, w.to)
			continue
		}
		out = append(out, w)
	}
	return out
}

// pidPair names an aligned pair of processes: the failing run's pid and
// the good run's.
type pidPair struct{ bad, good uint32 }

// pairCalls are the calls read for comparing the failing run with one
// good run: each side's windows by pid, and each pair's plan.
type pairCalls struct {
	bad, good map[uint32]*Sequence
	plans     map[pidPair]plan
}

// callsRead are the calls the comparison read from every run.
type callsRead struct {
	bad   map[uint32]*Sequence
	good  []map[uint32]*Sequence
	plans []map[pidPair]plan
}

// of is what comparing with the i-th good run needs.
func (c *callsRead) of(i int) pairCalls {
	return pairCalls{bad: c.bad, good: c.good[i], plans: c.plans[i]}
}

// readCalls plans the comparison of every aligned pair of recorded
// processes from their summaries, then reads the windows those plans
// need: one pass over each run (none over a run whose processes agree
// with the failing run's throughout), the runs side by side.
func readCalls(good []*Run, bad *Run, pairs [][]pair) (*callsRead, error) {
	rd := &callsRead{good: make([]map[uint32]*Sequence, len(good)), plans: make([]map[pidPair]plan, len(good))}
	wantBad := map[uint32][]window{}
	wantGood := make([]map[uint32][]window, len(good))
	for i, g := range good {
		rd.plans[i], wantGood[i] = map[pidPair]plan{}, map[uint32][]window{}
		for _, p := range pairs[i] {
			if p.bad == nil || p.good == nil || !p.bad.recorded {
				continue
			}
			pb, pg := p.bad.info.PID, p.good.info.PID
			sb, sg := bad.Procs[pb], g.Procs[pg]
			pl := planPair(sb, sg)
			rd.plans[i][pidPair{pb, pg}] = pl
			wantBad[pb] = append(wantBad[pb], pl.windows(sb.Len())...)
			wantGood[i][pg] = append(wantGood[i][pg], pl.windows(sg.Len())...)
		}
	}
	runs := append([]*Run{bad}, good...)
	wants := append([]map[uint32][]window{wantBad}, wantGood...)
	seqs := make([]map[uint32]*Sequence, len(runs))
	errs := make([]error, len(runs))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			seqs[i], errs[i] = r.read(wants[i])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("%s: %w", runs[i].Report.Run.Path, err)
		}
	}
	rd.bad = seqs[0]
	copy(rd.good, seqs[1:])
	return rd, nil
}

// read reads windows of the run's calls; a run that cannot (built in a
// test without calls) has none read.
func (r *Run) read(want map[uint32][]window) (map[uint32]*Sequence, error) {
	if r.load != nil {
		return r.load(want)
	}
	out := map[uint32]*Sequence{}
	for pid := range want {
		out[pid] = &Sequence{n: r.Procs[pid].Len()}
	}
	return out, nil
}

package recorder

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/retrivium/forensic/flight"
	"github.com/retrivium/forensic/store"
)

// FlightConfig records in flight mode: Config.Output is a directory that
// holds the recording as segments (package flight), each a complete
// run.db, within Policy's bound, keeping a window around every failure.
// The recorder runs until it is stopped.
type FlightConfig struct {
	Policy flight.Policy
	// KeepPrevious, above 0, moves a recording found in the directory (a
	// restarted recorder's) to its "previous" subdirectory instead of
	// refusing, keeping at most this many earlier recordings.
	KeepPrevious int
}

// Estimates of what a commit adds to a segment's file, so that room is
// made for it before it is written: an event takes about 30 bytes in its
// chunk, a process record up to a few KiB (its mappings), and each commit
// rewrites a few pages of the tree.
const (
	estEventBytes  = 64
	estRecordBytes = 4 << 10
	estCommitBytes = 64 << 10
)

// segments is the writer's side of a flight recording: the directory, the
// live segment and what it holds so far, and when it is closed and the
// next one started. The writer goroutine owns it.
type segments struct {
	dir         *flight.Dir
	pol         flight.Policy
	run         store.RunInfo
	names       []string
	owner       *store.Owner
	diskReserve uint64
	log         *slog.Logger
	// index, when set, is told the index after every change (metrics).
	index func(*flight.Index)

	path  string
	seq   uint64
	start int64 // when the live segment was started (run clock)
	prog  flight.Progress
}

// estimate is an upper bound of what committing events and other records
// adds to the file.
func estimate(events, others int) int64 {
	return int64(events)*estEventBytes + int64(others)*estRecordBytes + estCommitBytes
}

// open starts a segment at run-clock time t: retention makes room for it,
// the index names it, and its file is created with the run record, the
// symbol names and its flight record.
func (g *segments) open(t int64) (*store.Writer, error) {
	path, seq, pl, err := g.dir.Start(t)
	if err != nil {
		return nil, err
	}
	return g.create(path, seq, pl, t)
}

// create makes the file of the segment the index named (path, seq) at t,
// after retention's plan pl, with the run record, the symbol names and its
// flight record.
func (g *segments) create(path string, seq uint64, pl flight.Plan, t int64) (*store.Writer, error) {
	g.logCuts(pl)
	w, err := store.Create(path, store.CreateOptions{Owner: g.owner}, g.run, g.names)
	if err != nil {
		return nil, err
	}
	w.Reserve = g.diskReserve
	p := g.pol
	err = w.SetFlight(store.FlightInfo{Seq: seq, Start: t, MaxBytes: p.MaxBytes, SegmentBytes: p.SegmentBytes,
		SegmentAge: p.SegmentAge, KeepBefore: p.KeepBefore, KeepAfter: p.KeepAfter})
	if err != nil {
		w.Close()
		return nil, err
	}
	g.path, g.seq, g.start = path, seq, t
	g.prog = flight.Progress{End: t}
	g.prog.Bytes, _ = flight.FileBytes(path)
	g.told()
	return w, nil
}

// due reports whether the live segment is to be closed at this flush: it
// is as old as the segment age, or the next two batches like the one
// pending would take it past the segment size (the batch taken now is its
// last).
func (g *segments) due(t int64, q *queue) bool {
	if g.pol.SegmentAge > 0 && time.Duration(t-g.start) >= g.pol.SegmentAge {
		return true
	}
	ev, others := q.pendingLen()
	return g.prog.Calls > 0 && g.prog.Bytes+2*estimate(ev, others) >= g.pol.SegmentBytes
}

// reserve makes room for a batch before it is committed: the live segment
// is counted at what it may grow to, so that the segments never take more
// than the bound, not even between a commit and the retention after it.
func (g *segments) reserve(b *store.Batch) error {
	pr := g.prog
	pr.Bytes += estimate(len(b.Events), b.Len()-len(b.Events))
	if pr.Bytes <= g.pol.SegmentBytes {
		return nil // Start made room for a whole segment
	}
	pl, err := g.dir.Update(pr)
	g.logCuts(pl)
	if len(pl.Drop) > 0 {
		g.told()
	}
	return err
}

// committed records what a commit added to the live segment and applies
// retention to its size on disk.
func (g *segments) committed(b *store.Batch, t int64) error {
	pr := &g.prog
	pr.End = t
	pr.Calls += uint64(len(b.Events))
	for i := range b.Events {
		e := &b.Events[i]
		if e.Result == 0 || e.Depth != 0 {
			continue
		}
		if pr.Failures == 0 || e.End < pr.FirstFailure {
			pr.FirstFailure = e.End
		}
		pr.LastFailure = max(pr.LastFailure, e.End)
		pr.Failures++
	}
	n, err := flight.FileBytes(g.path)
	if err != nil {
		return err
	}
	pr.Bytes = n
	pl, err := g.dir.Update(*pr)
	g.logCuts(pl)
	g.told()
	return err
}

// next closes the live segment in the index (its file has its stop record
// and is closed) and starts the next one at t, in one write of the index.
func (g *segments) next(t int64) (*store.Writer, error) {
	if n, err := flight.FileBytes(g.path); err == nil {
		g.prog.Bytes = n
	}
	path, seq, pl, err := g.dir.Next(g.prog, t)
	if err != nil {
		return nil, err
	}
	return g.create(path, seq, pl, t)
}

// close closes the live segment in the index at the end of the recording:
// its stop record is written; w is its file, still open.
func (g *segments) close(w *store.Writer) error {
	if n, err := flight.FileBytes(g.path); err == nil {
		g.prog.Bytes = n
	}
	g.prog.End = max(g.prog.End, now())
	err := g.dir.Close(g.prog)
	g.told()
	return err
}

// pressure makes room when the filesystem refused a write of need bytes
// into the live segment before the bound was reached, and says at error
// level what it deleted and the bound now in force: the recording goes on
// degraded, never silenced. It fails when nothing but the live segment is
// left to delete.
func (g *segments) pressure(need int64) error {
	var fs unix.Statfs_t
	free := int64(0)
	if err := unix.Statfs(g.dir.Path(), &fs); err == nil {
		free = int64(fs.Bavail) * fs.Bsize
	}
	rl, err := g.dir.Pressure(g.prog, need, free, int64(g.diskReserve))
	x := g.dir.Index()
	g.pol.SegmentBytes = x.SegmentBytes
	g.told()
	if err != nil {
		return err
	}
	g.log.Error(fmt.Sprintf("%s: the filesystem filled before --max-size %s (%s free): %s; recording goes on within %s",
		g.dir.Path(), sizeText(g.pol.MaxBytes), sizeText(free), reliefText(rl), sizeText(x.Bound())))
	return nil
}

// reliefText says what one step of disk pressure deleted.
func reliefText(rl flight.Relief) string {
	switch {
	case rl.Snapshots > 0:
		return fmt.Sprintf("deleted %d snapshots", rl.Snapshots)
	case rl.Previous != "":
		return "deleted the earlier recording " + rl.Previous
	case len(rl.Plan.Drop) == 0:
		return "lowered the bound"
	}
	seqs := make([]string, len(rl.Plan.Drop))
	cut := 0
	for i, d := range rl.Plan.Drop {
		seqs[i] = fmt.Sprint(d.Seq)
		if d.Reason == store.GapWindowCut {
			cut++
		}
	}
	what := "deleted the oldest segments " + strings.Join(seqs, ", ")
	if cut > 0 {
		what += fmt.Sprintf(" (%d inside failure windows: nothing else was left)", cut)
	}
	return what
}

// told passes the index to the metrics.
func (g *segments) told() {
	if g.index != nil {
		g.index(g.dir.Index())
	}
}

// logCuts says in one line each segment retention deleted from a failure
// window: the windows alone exceed the bound.
func (g *segments) logCuts(pl flight.Plan) {
	for _, d := range pl.Drop {
		if d.Reason != store.GapWindowCut {
			continue
		}
		if x := g.dir.Index(); x.Bound() < g.pol.MaxBytes {
			g.log.Error(fmt.Sprintf("%s: deleted segment %d, part of a failure window: the filesystem holds only %s of --max-size %s",
				g.dir.Path(), d.Seq, sizeText(x.Bound()), sizeText(g.pol.MaxBytes)))
			continue
		}
		g.log.Warn(fmt.Sprintf("%s: deleted segment %d, part of a failure window: the windows alone exceed --max-size %s (raise it, or shorten --keep-before/--keep-after)",
			g.dir.Path(), d.Seq, sizeText(g.pol.MaxBytes)))
	}
}

// sizeText writes a byte count in binary units.
func sizeText(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}

// createFlight creates the flight recording's directory and its first
// segment.
func (s *Session) createFlight(names []string) error {
	fc := s.cfg.Flight
	note := func(line string) { s.cfg.Log.Info(line) }
	d, err := flight.Create(s.cfg.Output, s.run.ID, fc.Policy, flight.CreateOptions{KeepPrevious: fc.KeepPrevious, Note: note})
	if errors.Is(err, flight.ErrExists) {
		return fmt.Errorf("%w; --keep-previous keeps it as %s", err, filepath.Join(s.cfg.Output, flight.PreviousDir))
	}
	if err != nil {
		return err
	}
	g := &segments{dir: d, pol: fc.Policy, run: s.run, names: names, owner: s.cfg.Invoker.Owner(),
		diskReserve: s.cfg.DiskReserve, log: s.cfg.Log}
	w, err := g.open(now())
	if err != nil {
		d.Release()
		return err
	}
	s.wr.w, s.wr.seg, s.wr.quietCommits = w, g, true
	s.onRelease(s.wr.close)
	return nil
}

// rotatedStop is the stop record of a segment closed to start the next:
// the counters as of its last batch (cumulative over the recording), and
// the delay summaries so far.
func (s *Session) rotatedStop(t int64, st store.Stats) store.StopInfo {
	s.q.mu.Lock()
	delays, holds := s.q.delays.stats(), s.q.holds.stats()
	s.q.mu.Unlock()
	return store.StopInfo{Time: t, Wall: time.Now().UTC(), Reason: store.StopRotated, Stats: st,
		TriggerDelay: delays, Hold: holds, KmsgOffset: s.kmsgOffset, KmsgOffsetError: s.kmsgError}
}

package parquetexport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/retrivium/forensic/jobenv"
	"github.com/retrivium/forensic/store"
)

// batchRows is how many rows are handed to the Parquet writer at once.
const batchRows = 4096

// runExport is one run being exported: what every table's rows need.
type runExport struct {
	r     *store.Reader
	opt   Options
	run   store.RunInfo
	stop  *store.StopInfo
	clock clockMap
	procs procIndex
	list  []store.Process
	// uuids are the GPUs' UUIDs by NVML index, from the inventory.
	uuids map[int]string
	// rows written per table
	calls, failures, samples int64
}

func newRunExport(r *store.Reader, opt Options) (*runExport, error) {
	stop, err := r.Stop()
	if err != nil {
		return nil, err
	}
	procs, err := r.Processes()
	if err != nil {
		return nil, err
	}
	inv, err := r.Inventory()
	if err != nil {
		return nil, err
	}
	run := r.Run()
	return &runExport{r: r, opt: opt, run: run, stop: stop, clock: clockOf(run, stop),
		procs: newProcIndex(procs, run), list: procs, uuids: gpuUUIDs(inv)}, nil
}

// gpuUUIDs maps the inventory's GPUs, by NVML index, to their UUIDs.
func gpuUUIDs(inv *store.Inventory) map[int]string {
	out := map[int]string{}
	if inv == nil {
		return out
	}
	for _, g := range inv.GPUs {
		if u := g.UUID.Value; u != nil && *u != "" {
			out[g.Index] = *u
		}
	}
	return out
}

// uuidOf is the UUID of the GPU a CUDA device was matched to: NVML's (the
// one the samples carry), else the one the process revealed when it names
// a whole GPU, else "" (unknown). A MIG instance's UUID is not its GPU's.
func (x *runExport) uuidOf(d store.DeviceMap) string {
	if u := x.uuids[d.GPU]; u != "" {
		return u
	}
	if strings.HasPrefix(d.UUID, "GPU-") {
		return d.UUID
	}
	return ""
}

func (x *runExport) write(ctx context.Context, table, path string) error {
	switch table {
	case TableProcesses:
		return x.writeProcesses(ctx, path)
	case TableCalls:
		return x.writeCalls(ctx, path)
	case TableFailures:
		return x.writeFailures(ctx, path)
	case TableSamples:
		return x.writeSamples(ctx, path)
	case TableRuns:
		return x.writeRuns(ctx, path)
	}
	return fmt.Errorf("unknown table %q", table)
}

// batchWriter hands out row slots in a reused batch and writes the batch
// when it is full; the Parquet writer flushes a row group every
// RowGroupRows rows, so neither grows with the table.
type batchWriter[T any] struct {
	ctx  context.Context
	f    *os.File
	w    *parquet.GenericWriter[T]
	rows []T
	n    int
	// count is the rows written so far.
	count int64
}

func newBatchWriter[T any](ctx context.Context, path string, opt Options) (*batchWriter[T], error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	w := parquet.NewGenericWriter[T](f, parquet.Compression(&parquet.Zstd),
		parquet.MaxRowsPerRowGroup(opt.RowGroupRows), parquet.CreatedBy("forensic", opt.Version, ""))
	return &batchWriter[T]{ctx: ctx, f: f, w: w, rows: make([]T, batchRows)}, nil
}

// next returns the next free slot (zeroed) and its index in the batch.
func (b *batchWriter[T]) next() (*T, int, error) {
	if b.n == len(b.rows) {
		if err := b.flush(); err != nil {
			return nil, 0, err
		}
	}
	i := b.n
	b.n++
	var zero T
	b.rows[i] = zero
	return &b.rows[i], i, nil
}

func (b *batchWriter[T]) flush() error {
	if err := b.ctx.Err(); err != nil {
		return err
	}
	if b.n == 0 {
		return nil
	}
	if _, err := b.w.Write(b.rows[:b.n]); err != nil {
		return err
	}
	b.count += int64(b.n)
	b.n = 0
	return nil
}

// close writes what is left and the file's footer; err is the filler's.
func (b *batchWriter[T]) close(err error) error {
	if err == nil {
		err = b.flush()
	}
	if err == nil {
		err = b.w.Close()
	}
	if cerr := b.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// clockMap converts run-clock times to Unix nanoseconds with the run's
// clock pairing, and carries the run's bound on the result's error.
type clockMap struct {
	mono, real int64
	errNS      *int64
	why        string
}

func (c clockMap) unix(t int64) int64 { return c.real + (t - c.mono) }

// clockOf uses the adjacent pairing of the run's identity when it has one
// (else clock_start_ns and wall_start, read separately), and the stop
// record's bound (else the start's).
func clockOf(run store.RunInfo, stop *store.StopInfo) clockMap {
	id := run.Identity
	if id == nil || id.Clock == nil {
		return clockMap{mono: run.ClockStart, real: run.WallStart.UnixNano(),
			why: "recorded before forensic kept a clock error bound"}
	}
	c := clockMap{mono: id.Clock.MonotonicNS, real: id.Clock.RealtimeNS, errNS: id.Clock.ErrorNS, why: id.Clock.ErrorWhy}
	if stop != nil && stop.Identity != nil && stop.Identity.Clock != nil {
		c.errNS, c.why = stop.Identity.Clock.ErrorNS, stop.Identity.Clock.ErrorWhy
	}
	return c
}

// jobOf is the run's job: the stop record's (in --all mode it is the only
// one), else the start's.
func jobOf(run store.RunInfo, stop *store.StopInfo) *store.Job {
	if stop != nil && stop.Identity != nil && stop.Identity.Job != nil {
		return stop.Identity.Job
	}
	if run.Identity != nil {
		return run.Identity.Job
	}
	return nil
}

// procInfo is what a call row needs of its process.
type procInfo struct {
	start int64
	rank  *int32
	devs  map[int32]store.DeviceMap
}

// procIndex finds a call's process by pid and time (a pid may be reused).
type procIndex map[uint32][]procInfo

func newProcIndex(procs []store.Process, run store.RunInfo) procIndex {
	var runRank *int32
	if j := jobOf(run, nil); j != nil {
		runRank = i32p(j.Rank)
	}
	idx := procIndex{}
	for _, p := range procs {
		pi := procInfo{start: p.Start, rank: i32p(jobenv.Parse(p.Env).Rank), devs: map[int32]store.DeviceMap{}}
		if pi.rank == nil {
			pi.rank = runRank
		}
		for _, d := range p.Devices {
			pi.devs[d.Ordinal] = d
		}
		idx[p.PID] = append(idx[p.PID], pi)
	}
	for _, l := range idx {
		sort.Slice(l, func(i, j int) bool { return l[i].start < l[j].start })
	}
	return idx
}

// lookup returns the process pid was at time t: the latest seen by then.
func (x procIndex) lookup(pid uint32, t int64) *procInfo {
	l := x[pid]
	for i := len(l) - 1; i >= 0; i-- {
		if l[i].start <= t || i == 0 {
			return &l[i]
		}
	}
	return nil
}

func i32p(v *int) *int32 {
	if v == nil {
		return nil
	}
	n := int32(*v)
	return &n
}

func jsonString(v any) string {
	if v == nil {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

// readFailures calls fn for each failed call: from the failures index, or
// from every event in a file written before the index existed.
func readFailures(r *store.Reader, fn func(*store.Event) error) error {
	err := r.Failures(fn)
	if errors.Is(err, store.ErrNoFailureIndex) {
		return r.Events(func(e *store.Event) error {
			if e.Result == 0 {
				return nil
			}
			return fn(e)
		})
	}
	return err
}

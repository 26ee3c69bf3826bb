// Package parquetexport writes run.db files as Hive-partitioned Parquet,
// so that the runs of a whole fleet can be queried together with DuckDB,
// Spark, Trino or ClickHouse:
//
//	DIR/<table>/host=<host>/run=<run id>/part-0.parquet
//
// for the tables runs, calls, failures, samples and processes
// (docs/parquet.md describes every column). Writing streams: events are
// read and written in batches and row groups are flushed as they fill, so
// memory does not grow with the number of calls.
package parquetexport

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/retrivium/forensic/store"
)

// Table names, in the order they are written.
const (
	TableProcesses = "processes"
	TableCalls     = "calls"
	TableFailures  = "failures"
	TableSamples   = "samples"
	TableRuns      = "runs"
)

// Tables lists every table Write produces.
func Tables() []string {
	return []string{TableRuns, TableCalls, TableFailures, TableSamples, TableProcesses}
}

// PartFile is the name of each partition's one file.
const PartFile = "part-0.parquet"

// Errors Write returns for input it refuses; each wraps the partition or
// file it is about.
var (
	// ErrExported: a partition of the run already exists.
	ErrExported = errors.New("this run was already exported there (use --force to replace it)")
	// ErrDuplicate: two input files are the same run (same host and run id).
	ErrDuplicate = errors.New("two files hold the same run (same host and run id)")
)

// Options control Write.
type Options struct {
	// Overwrite replaces the partitions of a run exported before.
	Overwrite bool
	// RowGroupRows is the most rows a row group holds (default 1<<20).
	RowGroupRows int64
	// Version is written as the files' creator (forensic's version).
	Version string
}

func (o *Options) defaults() {
	if o.RowGroupRows <= 0 {
		o.RowGroupRows = 1 << 20
	}
	if o.Version == "" {
		o.Version = "dev"
	}
}

// Write exports each run.db in runs (read with store.Open, never changed)
// into dir. Every file is checked before anything is written: a file that
// is not a readable run, two files of one run, or a run whose partition
// exists (unless opt.Overwrite) is refused. A run's files appear together,
// once all of its tables are written.
func Write(ctx context.Context, dir string, runs []string, opt Options) error {
	opt.defaults()
	parts := make([]partition, len(runs))
	seen := map[partition]string{}
	for i, path := range runs {
		p, err := partitionOfFile(path)
		if err != nil {
			return err
		}
		if other, dup := seen[p]; dup {
			return fmt.Errorf("%s and %s: %w", other, path, ErrDuplicate)
		}
		seen[p] = path
		if !opt.Overwrite {
			if err := p.refuseExisting(dir); err != nil {
				return err
			}
		}
		parts[i] = p
	}
	for i, path := range runs {
		if err := exportRun(ctx, dir, path, parts[i], opt); err != nil {
			return err
		}
	}
	return nil
}

// partition is where a run's rows go: host=<host>/run=<id>.
type partition struct{ host, run string }

func partitionOf(run store.RunInfo) partition {
	host := run.Hostname
	if run.Identity != nil && run.Identity.Hostname != "" {
		host = run.Identity.Hostname
	}
	return partition{host: host, run: run.ID}
}

func partitionOfFile(path string) (partition, error) {
	r, err := store.Open(path)
	if err != nil {
		return partition{}, err
	}
	defer r.Close()
	return partitionOf(r.Run()), nil
}

// dir is the partition's directory of a table.
func (p partition) dir(root, table string) string {
	return filepath.Join(root, table, "host="+hiveEscape(p.host), "run="+hiveEscape(p.run))
}

func (p partition) refuseExisting(root string) error {
	for _, t := range Tables() {
		f := filepath.Join(p.dir(root, t), PartFile)
		if _, err := os.Stat(f); err == nil {
			return fmt.Errorf("%s: %w", f, ErrExported)
		}
	}
	return nil
}

// hiveEscape writes a partition value as Hive does: characters that are
// special in paths or partition specs become %XX; an empty value is Hive's
// null partition.
func hiveEscape(v string) string {
	if v == "" {
		return "__HIVE_DEFAULT_PARTITION__"
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x20 || c == 0x7f || strings.IndexByte("\"#%'*/:=?\\{[]^", c) >= 0 {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// exportRun writes one run's tables to temporary files, then renames them
// into place together; on an error nothing of the run is left behind.
func exportRun(ctx context.Context, root, path string, p partition, opt Options) (err error) {
	r, err := store.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	x, err := newRunExport(r, opt)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	tmp := map[string]string{}
	defer func() {
		for _, f := range tmp {
			os.Remove(f)
		}
	}()
	for _, t := range []string{TableProcesses, TableCalls, TableFailures, TableSamples, TableRuns} {
		d := p.dir(root, t)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		tmp[t] = filepath.Join(d, "."+PartFile+".tmp")
		if err := x.write(ctx, t, tmp[t]); err != nil {
			return fmt.Errorf("%s: table %s: %w", path, t, err)
		}
	}
	for _, t := range Tables() {
		if err := os.Rename(tmp[t], filepath.Join(p.dir(root, t), PartFile)); err != nil {
			return err
		}
		delete(tmp, t)
	}
	return nil
}

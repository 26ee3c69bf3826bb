// Command parquetexport times parquetexport.Write on run.db files and
// prints what it wrote, for measuring the export of a large run:
//
//	go run ./bench/genrun -o build/bench/big.db -calls 10000000
//	/usr/bin/time -v go run ./bench/parquetexport -o build/bench/parquet build/bench/big.db
package main

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/retrivium/forensic/parquetexport"
)

func main() {
	out := flag.String("o", "build/bench/parquet", "directory to export into (partitions of the runs are replaced)")
	rows := flag.Int64("row-group", 0, "rows per row group (0: the package default)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: parquetexport [-o DIR] RUN.db...")
		os.Exit(2)
	}
	start := time.Now()
	err := parquetexport.Write(context.Background(), *out, flag.Args(),
		parquetexport.Options{Overwrite: true, RowGroupRows: *rows, Version: "bench"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "parquetexport:", err)
		os.Exit(1)
	}
	elapsed := time.Since(start)
	sizes := map[string]int64{}
	filepath.WalkDir(*out, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".parquet") {
			if info, err := d.Info(); err == nil {
				rel, _ := filepath.Rel(*out, p)
				sizes[strings.SplitN(rel, string(filepath.Separator), 2)[0]] += info.Size()
			}
		}
		return nil
	})
	fmt.Printf("exported %d run(s) in %v\n", flag.NArg(), elapsed.Round(time.Millisecond))
	for _, t := range parquetexport.Tables() {
		fmt.Printf("  %-10s %10.1f MiB\n", t, float64(sizes[t])/(1<<20))
	}
	// Where the peak resident memory was: the heap (RssAnon) or pages of
	// the mapped run.db (RssFile).
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "VmHWM") || strings.HasPrefix(l, "RssAnon") || strings.HasPrefix(l, "RssFile") {
				fmt.Println(" ", strings.Join(strings.Fields(l), " "))
			}
		}
	}
}

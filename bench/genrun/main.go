// Command genrun writes a synthetic run.db of a given size through the
// store's writer (store.Create, Writer.Commit, Writer.Stop), for timing the
// analyzer on a large recording:
//
//	go run ./bench/genrun -o build/bench/big.db -calls 10000000 -samples 100000
//
// The run is bench/internal/runsynth's: a long training job recorded by
// forensic, one of whose workers fails a few large allocations near the
// end (none with -good).
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/retrivium/forensic/bench/internal/runsynth"
)

func main() {
	out := flag.String("o", "build/bench/big.db", "run.db to write (replaced)")
	calls := flag.Int("calls", 10_000_000, "call events")
	samples := flag.Int("samples", 100_000, "NVML samples (3 per GPU per 100 ms round)")
	seed := flag.Uint64("seed", 1, "random seed")
	good := flag.Bool("good", false, "no failed allocations: a good run of the same job (the same calls as -seed's up to its first failure)")
	flag.Parse()
	start := time.Now()
	err := runsynth.Write(*out, runsynth.Options{Calls: *calls, Samples: *samples, Seed: *seed, NoFailures: *good})
	if err != nil {
		fmt.Fprintln(os.Stderr, "genrun:", err)
		os.Exit(1)
	}
	st, _ := os.Stat(*out)
	fmt.Fprintf(os.Stderr, "bench: genrun: %s: %d calls, %d samples, %.1f MiB, written in %v\n",
		*out, *calls, *samples, float64(st.Size())/(1<<20), time.Since(start).Round(time.Millisecond))
}

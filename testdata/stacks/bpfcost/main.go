// Command bpfcost measures what capturing a user stack costs at a
// uretprobe, the capture docs/stacks.md proposes for failed calls. It
// builds ../bpfcost.bpf.c (clang) and ../bpfcost_work.c (gcc) into a
// temporary directory,
// attaches the program to work's target() with each configuration, runs
// work, and prints the program's run time per call (kernel BPF stats),
// the records received and the workload's time per call.
//
//	sudo go run ./testdata/stacks/bpfcost -calls 3000
//
// Run it under the e2e lock (flock /tmp/forensic-e2e.lock ...): it loads
// BPF programs.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

type config struct {
	copyLen uint32
	emit    bool
	flags   uint64 // 1: BPF_RB_NO_WAKEUP
}

func main() {
	calls := flag.Int("calls", 3000, "calls of target() per configuration")
	flag.Parse()
	if err := run(*calls); err != nil {
		fmt.Fprintln(os.Stderr, "bpfcost:", err)
		os.Exit(1)
	}
}

func run(calls int) error {
	dir, err := os.MkdirTemp("", "bpfcost")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	_, self, _, _ := runtime.Caller(0)
	src := filepath.Dir(filepath.Dir(self))
	obj, work := filepath.Join(dir, "cost.bpf.o"), filepath.Join(dir, "work")
	if err := build("clang", "-O2", "-g", "-target", "bpf", "-I/usr/include/x86_64-linux-gnu", "-c", filepath.Join(src, "bpfcost.bpf.c"), "-o", obj); err != nil {
		return err
	}
	if err := build("gcc", "-O2", "-o", work, filepath.Join(src, "bpfcost_work.c")); err != nil {
		return err
	}
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return fmt.Errorf("enabling BPF run-time stats: %w", err)
	}
	defer stats.Close()
	for _, n := range []uint32{0, 4096, 8192, 16384} {
		for _, c := range []config{{n, false, 0}, {n, true, 0}, {n, true, 1}} {
			if err := measure(obj, work, c, calls); err != nil {
				return err
			}
		}
	}
	return nil
}

func build(cmd string, args ...string) error {
	if out, err := exec.Command(cmd, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w\n%s", cmd, err, out)
	}
	return nil
}

// measure loads the program with one configuration, runs the workload and
// prints one line.
func measure(obj, work string, c config, calls int) error {
	spec, err := ebpf.LoadCollectionSpec(obj)
	if err != nil {
		return err
	}
	var emit uint8
	if c.emit {
		emit = 1
	}
	for name, v := range map[string]any{"copy_len": c.copyLen, "emit": emit, "rb_flags": c.flags} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return err
	}
	defer coll.Close()
	ex, err := link.OpenExecutable(work)
	if err != nil {
		return err
	}
	l, err := ex.Uretprobe("target", coll.Programs["ret"], nil)
	if err != nil {
		return err
	}
	defer l.Close()
	rd, err := ringbuf.NewReader(coll.Maps["rb"])
	if err != nil {
		return err
	}
	records, bytes := 0, 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			r, err := rd.Read()
			if errors.Is(err, ringbuf.ErrFlushed) || errors.Is(err, ringbuf.ErrClosed) {
				return // Flush: everything written so far has been read
			}
			if err != nil {
				continue
			}
			records++
			bytes += len(r.RawSample)
		}
	}()
	out, err := exec.Command(work, strconv.Itoa(calls)).Output()
	if err != nil {
		return err
	}
	if err := rd.Flush(); err != nil {
		return err
	}
	<-done
	rd.Close()
	st, err := coll.Programs["ret"].Stats()
	if err != nil {
		return err
	}
	var faults, lost uint64
	coll.Variables["faults"].Get(&faults)
	coll.Variables["lost"].Get(&lost)
	fmt.Printf("copy %5d B, emit %-5v, no-wakeup %v: program %v per run (%d runs); %d records of %d B received, %d lost, %d faults; workload %s\n",
		c.copyLen, c.emit, c.flags == 1, st.Runtime/time.Duration(max(st.RunCount, 1)), st.RunCount,
		records, bytes/max(records, 1), lost, faults, strings.TrimSpace(string(out)))
	return nil
}

// Command probecost measures what the operations forensic's probe programs
// are made of cost on this machine, each alone: a BPF program doing only
// that operation is attached like forensic's entry program (uprobe_multi,
// cookies, the same symbols) while simwork runs `mix N`, and the kernel's
// run-time statistics (BPF_ENABLE_STATS) give its run time per
// invocation. The empty program's run time (the statistics' own clock
// reads) is subtracted. The programs are built with cilium/ebpf asm.
//
// It prints a markdown table on stdout, meant as the breakdown under
// section 1 of BENCHMARKS.md.
//
// With -compare OLD,NEW it instead measures forensic's own programs as two
// forensic binaries load them, interleaved (compare.go): the cost of a
// change to the probes, before and after, as ratios.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/retrivium/forensic/bench/internal/benchutil"
	"github.com/retrivium/forensic/recorder"
)

// variant is one measured program: what it does and, once measured, its
// run time per invocation.
type variant struct {
	name, what string
	insns      func(m maps) asmProg
	perRun     []float64 // ns per round, statistics' own cost included
}

func main() {
	n := flag.Int("n", 0, "mix iterations per variant and round (default 20000; 5000 quick)")
	cmp := flag.String("compare", "", "OLD,NEW: compare two forensic binaries' own programs instead")
	rounds := flag.Int("rounds", 0, "rounds, the variants interleaved (default 3, 1 quick; for -compare 10)")
	flag.Parse()
	var err error
	if *cmp != "" {
		if *rounds == 0 {
			*rounds = 10
		}
		err = runCompare(*cmp, *rounds, *n)
	} else {
		err = run(*n, *rounds)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "probecost:", err)
		os.Exit(1)
	}
}

func runCompare(bins string, rounds, n int) error {
	env, err := benchutil.Setup()
	if err != nil {
		return err
	}
	list := strings.Split(bins, ",")
	if len(list) != 2 || rounds < 1 {
		return errors.New("-compare takes OLD,NEW (two forensic binaries) and -rounds at least 1")
	}
	if n == 0 {
		n = 20000
	}
	closer, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return fmt.Errorf("enable BPF statistics: %w", err)
	}
	defer closer.Close()
	return compare(env, list, rounds, n)
}

func run(n, rounds int) error {
	env, err := benchutil.Setup()
	if err != nil {
		return err
	}
	if n == 0 {
		n = 20000
		if env.Quick {
			n = 5000
		}
	}
	if rounds == 0 {
		rounds = 3
		if env.Quick {
			rounds = 1
		}
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return err
	}
	m, err := newMaps()
	if err != nil {
		return err
	}
	defer m.close()
	closer, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return fmt.Errorf("enable BPF statistics: %w", err)
	}
	defer closer.Close()
	stop, err := drain(m.ring)
	if err != nil {
		return err
	}
	defer stop()
	vs := variants()
	for r := 0; r < rounds; r++ {
		if err := measure(env, m, vs, n); err != nil {
			return err
		}
	}
	printTable(vs, n, rounds)
	return nil
}

// drain reads the ring like forensic's reader, polling every 25 ms, until
// the returned function stops it.
func drain(ring *ebpf.Map) (func(), error) {
	rd, err := ringbuf.NewReader(ring)
	if err != nil {
		return nil, err
	}
	stopRead := make(chan struct{})
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		var rec ringbuf.Record
		for {
			select {
			case <-stopRead:
				return
			default:
			}
			rd.SetDeadline(time.Now().Add(25 * time.Millisecond))
			if err := rd.ReadInto(&rec); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
		}
	}()
	return func() { close(stopRead); rd.Close(); <-readDone }, nil
}

// measure runs the workload under each variant in turn (one round) and
// keeps its run time per invocation.
func measure(env *benchutil.Env, m maps, vs []*variant, n int) error {
	empty, err := prog(ret0())
	if err != nil {
		return err
	}
	defer empty.Close()
	state := filepath.Join(env.Work, "probecost.state")
	os.Remove(state)
	for _, v := range vs {
		p, err := prog(v.insns(m))
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		links, err := attach(env.LibCUDA, p, empty)
		if err != nil {
			p.Close()
			return err
		}
		_, err = env.RunSimwork(state, fmt.Sprintf("init; use 0; mix %d", n))
		for _, l := range links {
			l.Close()
		}
		st, serr := p.Stats()
		p.Close()
		if err := errors.Join(err, serr); err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		per := float64(st.Runtime) / float64(max(st.RunCount, 1))
		v.perRun = append(v.perRun, per)
		benchutil.Logf("probecost: %-12s %d runs, %.0f ns per run", v.name, st.RunCount, per)
	}
	return nil
}

// printTable prints each variant's cost over the empty program: the
// median over the rounds of the difference within each round.
func printTable(vs []*variant, n, rounds int) {
	cost := map[string]float64{}
	for _, v := range vs {
		var d []float64
		for r := range v.perRun {
			d = append(d, v.perRun[r]-vs[0].perRun[r])
		}
		cost[v.name] = benchutil.Median(d)
	}
	w := os.Stdout
	fmt.Fprintf(w, "What the operations cost alone (`bench/probecost`): each row is a BPF program doing only that, attached "+
		"as the entry program like forensic's (uprobe_multi with cookies on the same symbols), over `mix %d`; run time per "+
		"invocation from the kernel's statistics, minus the empty program's (%.0f ns, the statistics' own clock reads) "+
		"in the same round; medians over the rounds (%d), the programs interleaved in each.\n\n", n, benchutil.Median(vs[0].perRun), rounds)
	fmt.Fprintf(w, "| operation | cost per invocation |\n|---|---:|\n")
	for _, v := range vs[1:] {
		c := fmt.Sprintf("%.0f ns", cost[v.name])
		if cost[v.name] < 10 {
			c = "< 10 ns"
		}
		fmt.Fprintf(w, "| %s | %s |\n", v.what, c)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Derived: a hash-map lookup alone is the hash row minus pid_tgid, %.0f ns; the task-storage lookup alone "+
		"is the task row minus bpf_get_current_task_btf, %.0f ns. Inside a program that writes a 96-byte ring record, "+
		"reading 8 bytes of user memory straight into the record adds %.0f ns, reading them into the BPF stack and "+
		"storing them %.0f ns (forensic does the latter). A 160-byte record costs %.0f ns more than a 96-byte one, "+
		"bpf_ringbuf_output from the stack %.0f ns more than reserve and submit (negative: less).\n\n",
		max(cost["hash"]-cost["pid_tgid"], 0), max(cost["task"]-cost["task_btf"], 0),
		cost["ring96_read"]-cost["ring96"], cost["ring96_stack"]-cost["ring96"], cost["ring160"]-cost["ring96"],
		cost["output96"]-cost["ring96"])
}

func prog(insns asmProg) (*ebpf.Program, error) {
	return ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Kprobe, AttachType: ebpf.AttachTraceUprobeMulti,
		License: "GPL", Instructions: insns})
}

func attach(lib string, entry, ret *ebpf.Program) ([]link.Link, error) {
	cov, err := recorder.CoverageOf(lib)
	if err != nil {
		return nil, err
	}
	ids := make([]int, 0, len(cov.Attach))
	for id := range cov.Attach {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	seen := map[uint64]bool{}
	var offs, cookies []uint64
	for _, id := range ids {
		if off := cov.Attach[id]; !seen[off] {
			seen[off] = true
			offs = append(offs, off)
			cookies = append(cookies, uint64(id))
		}
	}
	ex, err := link.OpenExecutable(lib)
	if err != nil {
		return nil, err
	}
	opts := &link.UprobeMultiOptions{Addresses: offs, Cookies: cookies}
	r, err := ex.UretprobeMulti(nil, ret, opts)
	if err != nil {
		return nil, err
	}
	e, err := ex.UprobeMulti(nil, entry, opts)
	if err != nil {
		r.Close()
		return nil, err
	}
	return []link.Link{r, e}, nil
}

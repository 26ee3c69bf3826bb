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
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/retrivium/forensic/bench/internal/benchutil"
	"github.com/retrivium/forensic/recorder"
)

// pt_regs offset of sp on x86-64.
const regsSP = 152

type variant struct {
	name, what string
	insns      func(m maps) asm.Instructions
	perRun     float64 // ns, statistics' own cost included
}

type maps struct {
	hash, percpu, ring, task *ebpf.Map
}

func ret0() asm.Instructions { return asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()} }

func main() {
	n := flag.Int("n", 0, "mix iterations per variant (default 20000; 5000 quick)")
	cmp := flag.String("compare", "", "OLD,NEW: compare two forensic binaries' own programs instead")
	rounds := flag.Int("rounds", 10, "rounds of a -compare")
	flag.Parse()
	var err error
	if *cmp != "" {
		err = runCompare(*cmp, *rounds, *n)
	} else {
		err = run(*n)
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

func run(n int) error {
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
	if err := rlimit.RemoveMemlock(); err != nil {
		return err
	}
	var m maps
	if m.hash, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 392, MaxEntries: 65536}); err != nil {
		return err
	}
	defer m.hash.Close()
	if m.percpu, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 88, MaxEntries: 1}); err != nil {
		return err
	}
	defer m.percpu.Close()
	if m.ring, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: 16 << 20}); err != nil {
		return err
	}
	defer m.ring.Close()
	if m.task, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.TaskStorage, KeySize: 4, ValueSize: 392, Flags: unix.BPF_F_NO_PREALLOC,
		Key:   &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed},
		Value: &btf.Array{Type: &btf.Int{Name: "unsigned char", Size: 1}, Index: &btf.Int{Name: "int", Size: 4}, Nelems: 392}}); err != nil {
		return fmt.Errorf("task storage map: %w", err)
	}
	defer m.task.Close()

	// hashLookup: the calling thread's entry (inserted on the first miss),
	// as forensic looks up `inflight` (and `tracked`).
	hashLookup := func(m maps) asm.Instructions {
		in := asm.Instructions{
			asm.FnGetCurrentPidTgid.Call(),
			asm.StoreMem(asm.RFP, -4, asm.R0, asm.Word),
			asm.LoadMapPtr(asm.R1, m.hash.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JNE.Imm(asm.R0, 0, "out"),
			// First call of this thread: insert a zero value.
			asm.Mov.Imm(asm.R1, 0),
		}
		in = append(in, zeroStack(-400, 392)...)
		return append(in, asm.Instructions{
			asm.LoadMapPtr(asm.R1, m.hash.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, -400),
			asm.Mov.Imm(asm.R4, 0),
			asm.FnMapUpdateElem.Call(),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
			asm.Return(),
		}...)
	}
	readUser := func(size int32) func(m maps) asm.Instructions {
		return func(m maps) asm.Instructions {
			return append(asm.Instructions{
				asm.LoadMem(asm.R3, asm.R1, regsSP, asm.DWord),
				asm.Mov.Reg(asm.R1, asm.RFP),
				asm.Add.Imm(asm.R1, -64),
				asm.Mov.Imm(asm.R2, size),
				asm.FnProbeReadUser.Call(),
			}, ret0()...)
		}
	}
	variants := []*variant{
		{name: "empty", what: "nothing (`r0 = 0; exit`): the statistics' own cost", insns: func(maps) asm.Instructions { return ret0() }},
		{name: "ktime", what: "`bpf_ktime_get_ns`", insns: func(maps) asm.Instructions {
			return append(asm.Instructions{asm.FnKtimeGetNs.Call()}, ret0()...)
		}},
		{name: "pid_tgid", what: "`bpf_get_current_pid_tgid`", insns: func(maps) asm.Instructions {
			return append(asm.Instructions{asm.FnGetCurrentPidTgid.Call()}, ret0()...)
		}},
		{name: "cookie", what: "`bpf_get_attach_cookie`", insns: func(maps) asm.Instructions {
			return append(asm.Instructions{asm.FnGetAttachCookie.Call()}, ret0()...)
		}},
		{name: "hash", what: "`bpf_get_current_pid_tgid` + hash map lookup by thread id, hit (per-thread state in a hash map)", insns: hashLookup},
		{name: "task", what: "`bpf_get_current_task_btf` + `bpf_task_storage_get` (per-thread state in task-local storage)", insns: func(m maps) asm.Instructions {
			return append(asm.Instructions{
				asm.FnGetCurrentTaskBtf.Call(),
				asm.Mov.Reg(asm.R2, asm.R0),
				asm.LoadMapPtr(asm.R1, m.task.FD()),
				asm.Mov.Imm(asm.R3, 0),
				asm.Mov.Imm(asm.R4, 1), // BPF_LOCAL_STORAGE_GET_F_CREATE
				asm.FnTaskStorageGet.Call(),
			}, ret0()...)
		}},
		{name: "percpu", what: "per-CPU array lookup", insns: func(m maps) asm.Instructions {
			return append(asm.Instructions{
				asm.StoreImm(asm.RFP, -4, 0, asm.Word),
				asm.LoadMapPtr(asm.R1, m.percpu.FD()),
				asm.Mov.Reg(asm.R2, asm.RFP),
				asm.Add.Imm(asm.R2, -4),
				asm.FnMapLookupElem.Call(),
			}, ret0()...)
		}},
		{name: "read8", what: "`bpf_probe_read_user` of 8 bytes (an out-parameter)", insns: readUser(8)},
		{name: "read32", what: "`bpf_probe_read_user` of 32 bytes (an input struct)", insns: readUser(32)},
		{name: "ring", what: "`bpf_ringbuf_reserve` of 160 bytes, 20 stores, `bpf_ringbuf_submit(BPF_RB_NO_WAKEUP)`, with a reader draining the ring every 25 ms", insns: func(m maps) asm.Instructions {
			in := asm.Instructions{
				asm.Mov.Imm(asm.R7, 1),
				asm.LoadMapPtr(asm.R1, m.ring.FD()),
				asm.Mov.Imm(asm.R2, 160),
				asm.Mov.Imm(asm.R3, 0),
				asm.FnRingbufReserve.Call(),
				asm.JEq.Imm(asm.R0, 0, "out"),
			}
			for off := int16(0); off < 160; off += 8 {
				in = append(in, asm.StoreMem(asm.R0, off, asm.R7, asm.DWord))
			}
			return append(in, asm.Instructions{
				asm.Mov.Reg(asm.R1, asm.R0),
				asm.Mov.Imm(asm.R2, 1), // BPF_RB_NO_WAKEUP
				asm.FnRingbufSubmit.Call(),
				asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
				asm.Return(),
			}...)
		}},
		{name: "ringquery", what: "`bpf_ringbuf_query(BPF_RB_AVAIL_DATA)`", insns: func(m maps) asm.Instructions {
			return append(asm.Instructions{
				asm.LoadMapPtr(asm.R1, m.ring.FD()),
				asm.Mov.Imm(asm.R2, 0),
				asm.FnRingbufQuery.Call(),
			}, ret0()...)
		}},
	}

	closer, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return fmt.Errorf("enable BPF statistics: %w", err)
	}
	defer closer.Close()
	rd, err := ringbuf.NewReader(m.ring)
	if err != nil {
		return err
	}
	defer rd.Close()
	stopRead := make(chan struct{})
	readDone := make(chan struct{})
	go func() { // drain like forensic's reader: poll every 25 ms
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
	defer func() { close(stopRead); rd.Close(); <-readDone }()

	empty, err := prog(ret0())
	if err != nil {
		return err
	}
	defer empty.Close()
	state := filepath.Join(env.Work, "probecost.state")
	os.Remove(state)
	for _, v := range variants {
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
		v.perRun = float64(st.Runtime) / float64(max(st.RunCount, 1))
		benchutil.Logf("probecost: %-10s %d runs, %.0f ns per run", v.name, st.RunCount, v.perRun)
	}
	base := variants[0].perRun
	w := os.Stdout
	fmt.Fprintf(w, "What the operations cost alone (`bench/probecost`): each row is a BPF program doing only that, attached "+
		"as the entry program like forensic's (uprobe_multi with cookies on the same symbols), over `mix %d`; run time per "+
		"invocation from the kernel's statistics, minus the empty program's (%.0f ns, the statistics' own clock reads).\n\n", n, base)
	fmt.Fprintf(w, "| operation | cost per invocation |\n|---|---:|\n")
	for _, v := range variants[1:] {
		c := fmt.Sprintf("%.0f ns", v.perRun-base)
		if v.perRun-base < 10 {
			c = "≈ 0 (inlined by the verifier)"
		}
		fmt.Fprintf(w, "| %s | %s |\n", v.what, c)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "A hash-map lookup alone is the hash row minus pid_tgid: %.0f ns. Compare with the run time of "+
		"forensic's own programs per run in the statistics pass above; the difference between their sum of helpers and "+
		"the measured run time is the plain work between the helpers (saving six argument registers, copying the frame "+
		"into the 160-byte record, the symbol configuration lookups) and cache misses on the record's lines.\n\n",
		max(variants[4].perRun-variants[2].perRun, 0))
	return nil
}

// zeroStack zeroes size bytes of the stack at off (r1 must hold 0).
func zeroStack(off int16, size int16) asm.Instructions {
	var in asm.Instructions
	for o := off; o < off+size; o += 8 {
		in = append(in, asm.StoreMem(asm.RFP, o, asm.R1, asm.DWord))
	}
	return in
}

func prog(insns asm.Instructions) (*ebpf.Program, error) {
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

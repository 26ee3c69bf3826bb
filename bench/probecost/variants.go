package main

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// asmProg is a program's instructions.
type asmProg = asm.Instructions

// pt_regs offset of sp on x86-64.
const regsSP = 152

// maps are the maps the variants use, shaped like forensic's.
type maps struct {
	hash, percpu, ring, task, scope *ebpf.Map
}

func newMaps() (maps, error) {
	var m maps
	var err error
	if m.hash, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 392, MaxEntries: 65536}); err != nil {
		return m, err
	}
	if m.percpu, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 88, MaxEntries: 1}); err != nil {
		m.close()
		return m, err
	}
	if m.ring, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: 16 << 20}); err != nil {
		m.close()
		return m, err
	}
	if m.task, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.TaskStorage, KeySize: 4, ValueSize: 392, Flags: unix.BPF_F_NO_PREALLOC,
		Key:   &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed},
		Value: &btf.Array{Type: &btf.Int{Name: "unsigned char", Size: 1}, Index: &btf.Int{Name: "int", Size: 4}, Nelems: 392}}); err != nil {
		m.close()
		return m, fmt.Errorf("task storage map: %w", err)
	}
	// forensic's scope_cgroups: cgroup ids, filled with ids no process
	// is in (the lookup misses, as for a process outside the scope).
	if m.scope, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 8, ValueSize: 1, MaxEntries: 256}); err != nil {
		m.close()
		return m, err
	}
	for id := uint64(1 << 40); id < 1<<40+16; id++ {
		if err := m.scope.Put(id, uint8(1)); err != nil {
			m.close()
			return m, err
		}
	}
	return m, nil
}

func (m maps) close() error {
	var errs []error
	for _, mp := range []*ebpf.Map{m.hash, m.percpu, m.ring, m.task, m.scope} {
		if mp != nil {
			errs = append(errs, mp.Close())
		}
	}
	return errors.Join(errs...)
}

func ret0() asmProg { return asmProg{asm.Mov.Imm(asm.R0, 0), asm.Return()} }

// call is a program that calls one helper and returns.
func call(fn asm.BuiltinFunc) func(maps) asmProg {
	return func(maps) asmProg { return append(asmProg{fn.Call()}, ret0()...) }
}

// variants are the measured programs; the first is the empty one, whose
// run time the others' costs are taken from.
func variants() []*variant {
	return []*variant{
		{name: "empty", what: "nothing (`r0 = 0; exit`): the statistics' own cost", insns: func(maps) asmProg { return ret0() }},
		{name: "ktime", what: "`bpf_ktime_get_ns`", insns: call(asm.FnKtimeGetNs)},
		{name: "pid_tgid", what: "`bpf_get_current_pid_tgid`", insns: call(asm.FnGetCurrentPidTgid)},
		{name: "cookie", what: "`bpf_get_attach_cookie`", insns: call(asm.FnGetAttachCookie)},
		{name: "hash", what: "`bpf_get_current_pid_tgid` + hash map lookup by thread id, hit (per-thread state in a hash map)", insns: hashLookup},
		{name: "scope", what: "`bpf_get_current_ancestor_cgroup_id` + hash map lookup by cgroup id, miss (one level of the --cgroup/--pod scope check)", insns: scopeLookup},
		{name: "task_btf", what: "`bpf_get_current_task_btf` alone", insns: call(asm.FnGetCurrentTaskBtf)},
		{name: "task", what: "`bpf_get_current_task_btf` + `bpf_task_storage_get` (per-thread state in task-local storage)", insns: taskStorage},
		{name: "percpu", what: "per-CPU array lookup (the verifier inlines it)", insns: percpuLookup},
		{name: "read8", what: "`bpf_probe_read_user` of 8 bytes (an out-parameter) into the BPF stack", insns: readUser(8)},
		{name: "read32", what: "`bpf_probe_read_user` of 32 bytes (an input struct) into the BPF stack", insns: readUser(32)},
		{name: "read8_map", what: "`bpf_probe_read_user` of 8 bytes into a map value (per-CPU array)", insns: readUserMap},
		{name: "ring160", what: "`bpf_ringbuf_reserve` of 160 bytes, 20 stores, `bpf_ringbuf_submit(BPF_RB_NO_WAKEUP)`, with a reader draining the ring every 25 ms", insns: ring(160, ringPlain)},
		{name: "ring96", what: "the same with a 96-byte record (12 stores)", insns: ring(96, ringPlain)},
		{name: "ring96_read", what: "the 96-byte record with its last 8 bytes read from user memory straight into it", insns: ring(96, ringRead)},
		{name: "ring96_stack", what: "the 96-byte record with its last 8 bytes read into the BPF stack first, then stored", insns: ring(96, ringStack)},
		{name: "output96", what: "`bpf_ringbuf_output` of 96 bytes built in the BPF stack (instead of reserve and submit)", insns: output96},
		{name: "ringquery", what: "`bpf_ringbuf_query(BPF_RB_AVAIL_DATA)`", insns: func(m maps) asmProg {
			return append(asmProg{
				asm.LoadMapPtr(asm.R1, m.ring.FD()),
				asm.Mov.Imm(asm.R2, 0),
				asm.FnRingbufQuery.Call(),
			}, ret0()...)
		}},
	}
}

// hashLookup: the calling thread's entry (inserted on the first miss), as
// a per-thread hash map would be looked up.
func hashLookup(m maps) asmProg {
	in := asmProg{
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
	in = append(in, fillStack(-400, 392)...)
	return append(in, asmProg{
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

// scopeLookup: one level of forensic's scope check (in_scope): the
// current task's ancestor cgroup at level 0 (the root, which every task
// has: the kernel reads the ancestor from an array, the same work at any
// level the task's cgroup reaches), looked up among the scope's cgroup ids.
func scopeLookup(m maps) asmProg {
	return append(asmProg{
		asm.Mov.Imm(asm.R1, 0),
		asm.FnGetCurrentAncestorCgroupId.Call(),
		asm.StoreMem(asm.RFP, -8, asm.R0, asm.DWord),
		asm.LoadMapPtr(asm.R1, m.scope.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.FnMapLookupElem.Call(),
	}, ret0()...)
}

func taskStorage(m maps) asmProg {
	return append(asmProg{
		asm.FnGetCurrentTaskBtf.Call(),
		asm.Mov.Reg(asm.R2, asm.R0),
		asm.LoadMapPtr(asm.R1, m.task.FD()),
		asm.Mov.Imm(asm.R3, 0),
		asm.Mov.Imm(asm.R4, 1), // BPF_LOCAL_STORAGE_GET_F_CREATE
		asm.FnTaskStorageGet.Call(),
	}, ret0()...)
}

func percpuLookup(m maps) asmProg {
	return append(asmProg{
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, m.percpu.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
	}, ret0()...)
}

// readUser reads size bytes at the user stack pointer into the BPF stack.
func readUser(size int32) func(maps) asmProg {
	return func(maps) asmProg {
		return append(asmProg{
			asm.LoadMem(asm.R3, asm.R1, regsSP, asm.DWord),
			asm.Mov.Reg(asm.R1, asm.RFP),
			asm.Add.Imm(asm.R1, -64),
			asm.Mov.Imm(asm.R2, size),
			asm.FnProbeReadUser.Call(),
		}, ret0()...)
	}
}

// readUserMap reads 8 bytes at the user stack pointer into a per-CPU
// array's value.
func readUserMap(m maps) asmProg {
	return asmProg{
		asm.LoadMem(asm.R6, asm.R1, regsSP, asm.DWord),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, m.percpu.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Reg(asm.R1, asm.R0),
		asm.Mov.Imm(asm.R2, 8),
		asm.Mov.Reg(asm.R3, asm.R6),
		asm.FnProbeReadUser.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	}
}

// How a ring variant fills the last 8 bytes of its record.
const (
	ringPlain = iota // a store, like the others
	ringRead         // bpf_probe_read_user straight into the record
	ringStack        // bpf_probe_read_user into the stack, then a store
)

// ring reserves a record of size bytes, stores into every 8 bytes of it
// (the last as fill says) and submits it without a wake-up.
func ring(size int32, fill int) func(maps) asmProg {
	return func(m maps) asmProg {
		in := asmProg{asm.LoadMem(asm.R6, asm.R1, regsSP, asm.DWord), asm.Mov.Imm(asm.R7, 1)}
		if fill == ringStack {
			in = append(in, readInto(asm.RFP, -8)...)
		}
		in = append(in,
			asm.LoadMapPtr(asm.R1, m.ring.FD()),
			asm.Mov.Imm(asm.R2, size),
			asm.Mov.Imm(asm.R3, 0),
			asm.FnRingbufReserve.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.Mov.Reg(asm.R8, asm.R0),
		)
		for off := int16(0); off < int16(size)-8; off += 8 {
			in = append(in, asm.StoreMem(asm.R8, off, asm.R7, asm.DWord))
		}
		last := int16(size) - 8
		switch fill {
		case ringPlain:
			in = append(in, asm.StoreMem(asm.R8, last, asm.R7, asm.DWord))
		case ringRead:
			in = append(in, readInto(asm.R8, int32(last))...)
		case ringStack:
			in = append(in, asm.LoadMem(asm.R1, asm.RFP, -8, asm.DWord), asm.StoreMem(asm.R8, last, asm.R1, asm.DWord))
		}
		return append(in, asmProg{
			asm.Mov.Reg(asm.R1, asm.R8),
			asm.Mov.Imm(asm.R2, 1), // BPF_RB_NO_WAKEUP
			asm.FnRingbufSubmit.Call(),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
			asm.Return(),
		}...)
	}
}

// readInto reads 8 bytes at the user stack pointer (in r6) to base+off.
func readInto(base asm.Register, off int32) asmProg {
	return asmProg{
		asm.Mov.Reg(asm.R1, base),
		asm.Add.Imm(asm.R1, off),
		asm.Mov.Imm(asm.R2, 8),
		asm.Mov.Reg(asm.R3, asm.R6),
		asm.FnProbeReadUser.Call(),
	}
}

// output96 builds 96 bytes in the stack and copies them into the ring.
func output96(m maps) asmProg {
	in := asmProg{asm.Mov.Imm(asm.R1, 1)}
	in = append(in, fillStack(-96, 96)...)
	in = append(in,
		asm.LoadMapPtr(asm.R1, m.ring.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -96),
		asm.Mov.Imm(asm.R3, 96),
		asm.Mov.Imm(asm.R4, 1), // BPF_RB_NO_WAKEUP
		asm.FnRingbufOutput.Call(),
	)
	return append(in, ret0()...)
}

// fillStack stores r1 into every 8 bytes of size bytes of the stack at off.
func fillStack(off int16, size int16) asmProg {
	var in asmProg
	for o := off; o < off+size; o += 8 {
		in = append(in, asm.StoreMem(asm.RFP, o, asm.R1, asm.DWord))
	}
	return in
}

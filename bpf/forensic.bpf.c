//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* forensic: record every call of libcuda's memory API, with its arguments,
 * result, process, thread and time.
 *
 * One generic program pair serves every attached symbol: the attach cookie
 * is the symbol's row in the Go symbol table, and the symcfg map (filled
 * from that table) says which pointers and arrays to read. The entry probe
 * stashes the argument registers per thread; the return probe emits one
 * fx_call (an fx_call_array for symbols with an array argument) with the
 * CUresult, as long as the symbol's row needs. The hot path is one
 * task-local storage lookup per probe (per thread: whether it is recorded,
 * its ids, its calls in progress), two clock reads, the attach cookie at
 * entry, the ring buffer, and for an allocation one read of user memory;
 * hash map lookups cost more than task storage here and are kept off it.
 * bench/probecost measures each of these, and BENCHMARKS.md says what
 * was tried to make the pair cheaper, kept or not.
 * Successful calls are submitted without waking the reader (a wake-up costs
 * more than the rest of the probe); failures wake it at once because the
 * failure-triggered NVML sample depends on it.
 *
 * Process lifecycle tracepoints follow the workload's descendants, so a child
 * is tracked from its fork, before it can make a call. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "forensic.h"

/* libbpf before 1.2 stops at the fifth argument; x86-64 passes the sixth in r9. */
#ifndef PT_REGS_PARM6
#define PT_REGS_PARM6(x) ((x)->r9)
#endif

#define SIGSTOP 19
#define EEXIST 17

/* Set by the loader before the program is loaded. */
const volatile __u8 trace_all = 0;         /* record any process that calls in */
const volatile __u8 freeze_on_failure = 0; /* SIGSTOP a process at a failed return */
const volatile __u64 wakeup_every = 0;     /* successful calls per CPU between forced wake-ups */
const volatile __u32 self_tgid = 0;        /* the recorder: never held at a mapping */
/* --libcuda: only the named files are attached, so the map hook holds a
 * process only until its exec is read (FX_HOLD_UNREAD), never at a file
 * whose probes are not in. */
const volatile __u8 named_files_only = 0;
/* --cgroup/--pod: a bit per cgroup v2 level (the root is level 0) at which
 * scope_cgroups has a cgroup; 0 = no scope, every process may be recorded. */
const volatile __u32 scope_levels = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* resized by the loader */
} events SEC(".maps");

/* Thread group ids being recorded. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u32);
} tracked SEC(".maps");

/* With --all scoped to cgroups (--cgroup, --pod): the cgroup v2 ids whose
 * processes, and their descendants' at any depth, may be recorded. Filled
 * before any program is attached, never changed after. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FX_MAX_SCOPES);
	__type(key, __u64);
	__type(value, __u8);
} scope_cgroups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FX_MAX_SYMBOLS);
	__type(key, __u32);
	__type(value, struct fx_symcfg);
} symcfg SEC(".maps");

struct frame {
	__u64 ts;
	__u64 sp;     /* stack pointer at entry: the return address's slot */
	__u64 args[6];
	__u16 symbol;
	__u16 flags;  /* enum fx_call_flags set at entry (probe bits only) */
	__u8 has_arr; /* the symbol's row captures an array argument */
	__u8 arr_n;   /* elements read into arr */
	__u16 pad;
	__u8 in[FX_IN_LEN];
	__u8 arr[FX_ARRAY_LEN];
};

_Static_assert(FX_CALL_LATE_ATTACH > 0xff && FX_CALL_ARRAY_FAULT <= 0xff,
	       "probe flags are bits 0-7, user-space flags bits 8-15");

enum thread_state {
	THREAD_UNKNOWN = 0, /* first call: look the process up */
	THREAD_TRACKED = 1,
	THREAD_IGNORED = 2, /* not a recorded process */
};

/* Per thread: whether its process is recorded (looked up once), its ids,
 * and its calls in progress. Task-local storage costs one pointer chase per
 * probe and is freed with the thread. */
struct thread {
	__u32 state; /* enum thread_state */
	__u32 depth;
	__u32 pid, tid;
	__u32 named; /* its name was sent, at its first failed call */
	__u32 pad;
	struct frame f[FX_MAX_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct thread);
} threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fx_stats);
} stats SEC(".maps");

/* User stacks of failed calls (and of allocations under --stacks), as
 * build id + file offset per frame: a process that exits right after its
 * failure can still be symbolized from the files it had mapped. */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_STACK_BUILD_ID);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, FX_STACK_DEPTH * sizeof(struct bpf_stack_build_id));
} stacks SEC(".maps");

/* Libcuda mappings that hold a process; their own small ring, so a call
 * storm filling the events ring cannot delay or lose them. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 << 10);
} holds SEC(".maps");

/* Libcuda files whose probes are in (or that user space has dealt with):
 * mapping one of these holds nobody. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct fx_file);
	__type(value, __u32);
} attached_files SEC(".maps");

/* Recorded processes whose last exec user space has not read yet: the
 * exec record's timestamp. User space deletes the entry once it has read
 * that record (and only that one: a later exec's stays); mapping a
 * libcuda meanwhile holds the process (FX_HOLD_UNREAD). A full map holds
 * nobody, as before the map existed. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} unread_execs SEC(".maps");

/* References that make clang emit BTF for the records and the enums, so
 * bpf2go can generate their Go types and constants. */
const struct fx_call *unused_fx_call __attribute__((unused));
const struct fx_call_array *unused_fx_call_array __attribute__((unused));
const struct fx_proc *unused_fx_proc __attribute__((unused));
const enum fx_const *unused_fx_const __attribute__((unused));
const enum fx_kind *unused_fx_kind __attribute__((unused));
const enum fx_call_flags *unused_fx_call_flags __attribute__((unused));
const enum fx_proc_what *unused_fx_proc_what __attribute__((unused));
const enum fx_proc_flags *unused_fx_proc_flags __attribute__((unused));
const enum fx_counter *unused_fx_counter __attribute__((unused));
const struct fx_hold *unused_fx_hold __attribute__((unused));
const struct fx_thread *unused_fx_thread __attribute__((unused));
const enum fx_hold_flags *unused_fx_hold_flags __attribute__((unused));

static __always_inline struct fx_stats *stats_get(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&stats, &zero);
}

/* count adds one to a counter of this CPU. */
static __always_inline void count(enum fx_counter c)
{
	struct fx_stats *s = stats_get();
	if (s)
		s->c[c]++;
}

/* count_first adds one to a counter and keeps the time of its first. */
static __always_inline void count_first(enum fx_counter c, enum fx_counter first, __u64 now)
{
	struct fx_stats *s = stats_get();
	if (!s)
		return;
	if (!s->c[first])
		s->c[first] = now;
	s->c[c]++;
}

#include "stacks.h"

/* read_argv copies the process's argv (current's memory: it runs in the
 * process itself) and says how much of it was copied. */
static __always_inline void read_argv(struct fx_proc *p, struct task_struct *task)
{
	unsigned long start = BPF_CORE_READ(task, mm, arg_start);
	unsigned long end = BPF_CORE_READ(task, mm, arg_end);
	if (!start || end <= start)
		return;
	/* Never read past argv: the environment follows it. */
	unsigned long len = end - start;
	if (len > FX_ARGS_LEN) {
		len = FX_ARGS_LEN;
		p->flags |= FX_PROC_ARGS_CUT;
	}
	if (bpf_probe_read_user(&p->args, len, (void *)start) == 0)
		p->args_len = len;
	else
		p->flags |= FX_PROC_ARGS_FAULT;
}

/* One walk from a file up to its mount namespace's root (exe_path); the
 * bpf_loop callback finds it on the caller's stack. */
struct path_walk {
	struct fx_proc *p;
	struct dentry *d;
	struct mount *m;
	__u32 off;   /* the path so far is p->filename[off:] */
	__u32 whole; /* the walk reached the root */
};

/* path_step goes up one dentry, writing its name before the path so far,
 * or up one mount. The writes are bounded by masks alone: one that reached
 * past filename would land in args, which is read after it. */
static long path_step(__u64 i, void *ctx)
{
	struct path_walk *w = ctx;
	struct fx_proc *p = w->p;
	/* Locals: a CO-RE read of w->d would relocate path_walk too. */
	struct dentry *d = w->d;
	struct mount *m = w->m;
	if (d == BPF_CORE_READ(m, mnt.mnt_root)) {
		struct mount *up = BPF_CORE_READ(m, mnt_parent);
		if (up == m) {
			w->whole = 1; /* the namespace's root */
			return 1;
		}
		w->d = BPF_CORE_READ(m, mnt_mountpoint);
		w->m = up;
		return 0;
	}
	struct dentry *parent = BPF_CORE_READ(d, d_parent);
	if (d == parent) {
		w->whole = 1; /* a file system's root outside any mount */
		return 1;
	}
	__u32 len = BPF_CORE_READ(d, d_name.len);
	__u32 off = w->off;
	if (len == 0 || len + 1 > off || off > FX_FILENAME_LEN)
		return 1;
	off -= len + 1;
	if (bpf_probe_read_kernel(&p->filename[(off + 1) & (FX_FILENAME_LEN - 1)],
				  len & (FX_FILENAME_LEN - 1), BPF_CORE_READ(d, d_name.name)))
		return 1;
	p->filename[off & (FX_FILENAME_LEN - 1)] = '/';
	w->off = off;
	w->d = parent;
	return 0;
}

/* exe_path writes the path of file f as /proc/PID/exe shows it (d_path:
 * its dentries' names up to the root of its mount, then the mount point's,
 * up to the root of the mount namespace) at the end of p->filename, and
 * says how long it is in filename_len. A path with more components or
 * bytes than fit keeps its last ones and is marked cut. */
static __always_inline void exe_path(struct fx_proc *p, struct file *f)
{
	struct vfsmount *vm = BPF_CORE_READ(f, f_path.mnt);
	struct path_walk w = {
		.p = p,
		.d = BPF_CORE_READ(f, f_path.dentry),
		.m = (void *)vm - bpf_core_field_offset(struct mount, mnt),
		.off = FX_FILENAME_LEN,
	};
	bpf_loop(FX_PATH_STEPS, path_step, &w, 0);
	if (w.off > FX_FILENAME_LEN)
		return;
	p->filename_len = FX_FILENAME_LEN - w.off;
	if (!w.whole)
		p->flags |= FX_PROC_FILENAME_CUT;
}

/* read_exe names the file the process runs (mm->exe_file, at exec the
 * file just executed): its inode, and its path, so a process that exits
 * before user space looks at /proc is still named. */
static __always_inline void read_exe(struct fx_proc *p, struct task_struct *task)
{
	struct file *f = BPF_CORE_READ(task, mm, exe_file);
	if (!f)
		return;
	struct inode *inode = BPF_CORE_READ(f, f_inode);
	p->exe_ino = BPF_CORE_READ(inode, i_ino);
	p->exe_dev = BPF_CORE_READ(inode, i_sb, s_dev);
	exe_path(p, f);
}

/* emit_proc sends a lifecycle record; it returns the record's timestamp,
 * 0 when the record was lost. */
static __always_inline __u64 emit_proc(__u8 what, struct task_struct *task, __s32 exit_code)
{
	struct fx_proc *p = bpf_ringbuf_reserve(&events, sizeof(*p), 0);
	if (!p) {
		count_first(FX_CTR_LOST_PROC, FX_CTR_LOST_PROC_FIRST_NS, bpf_ktime_get_ns());
		return 0;
	}
	/* Ring memory is not zeroed: every field is set, and the arrays'
	 * contents end where their lengths and NULs say. */
	p->kind = FX_KIND_PROC;
	p->what = what;
	p->flags = 0;
	p->pad = 0;
	p->pid = BPF_CORE_READ(task, tgid);
	p->tid = BPF_CORE_READ(task, pid);
	p->ppid = BPF_CORE_READ(task, real_parent, tgid);
	p->exit_code = exit_code;
	p->args_len = 0;
	p->filename_len = 0;
	p->ts = bpf_ktime_get_ns();
	p->cgroup_id = bpf_get_current_cgroup_id();
	p->exe_ino = 0;
	p->exe_dev = 0;
	p->pad3 = 0;
	BPF_CORE_READ_STR_INTO(&p->comm, task, comm);
	if (what == FX_PROC_EXEC || what == FX_PROC_FIRST_CALL) {
		/* Runs in the process itself: its argv is readable now, and a
		 * short-lived process may be gone before user space looks. */
		read_argv(p, task);
		read_exe(p, task);
	}
	__u64 ts = p->ts;
	bpf_ringbuf_submit(p, BPF_RB_FORCE_WAKEUP);
	return ts;
}

/* in_scope says whether the current process may be recorded under --all:
 * always without a scope; with one, when its cgroup is a scope cgroup or
 * lies below one. A cgroup's ancestor at level L is the scope cgroup at
 * that level it descends from, so one lookup per level that has a scope
 * cgroup decides, for cgroups created after the start too. Called only
 * where an untracked process would start being recorded (its first call,
 * its first libcuda mapping), never per call of a recorded thread. */
static __always_inline int in_scope(void)
{
	if (!scope_levels)
		return 1;
	for (int l = 0; l < FX_SCOPE_LEVELS; l++) {
		if (!(scope_levels & (1u << l)))
			continue;
		__u64 id = bpf_get_current_ancestor_cgroup_id(l);
		if (id && bpf_map_lookup_elem(&scope_cgroups, &id))
			return 1;
	}
	return 0;
}

static __always_inline int admit(__u32 tgid)
{
	if (bpf_map_lookup_elem(&tracked, &tgid))
		return 1;
	if (!trace_all || !in_scope())
		return 0;
	__u32 one = 1;
	long err = bpf_map_update_elem(&tracked, &tgid, &one, BPF_NOEXIST);
	if (err == 0)
		emit_proc(FX_PROC_FIRST_CALL, (struct task_struct *)bpf_get_current_task(), 0);
	else if (err != -EEXIST)
		/* The map is full: the thread's calls are recorded, but the
		 * process's exit is not followed. Counted once per thread that
		 * tries (its other threads fail the same way). */
		count_first(FX_CTR_UNTRACKED, FX_CTR_UNTRACKED_FIRST_NS, bpf_ktime_get_ns());
	return 1;
}

/* read_array reads the array argument a symbol's row names at entry:
 * min(count, arr_max) elements, in one read. */
static __always_inline void read_array(struct frame *f, struct fx_symcfg *cfg)
{
	__s8 a = cfg->arr_arg, c = cfg->arr_count_arg;
	f->arr_n = 0;
	if (a < 0 || a >= 6 || c < 0 || c >= 6)
		return;
	__u64 n = f->args[c];
	if (cfg->arr_count_width < 8)
		n &= 0xffffffff;
	if (n > cfg->arr_max) {
		n = cfg->arr_max;
		f->flags |= FX_CALL_ARRAY_CUT;
	}
	/* 64-bit: a 32-bit size is zero-extended into another register after
	 * the bound, and the verifier would not see the bound there. */
	__u64 bytes = n * cfg->arr_len;
	if (bytes > FX_ARRAY_LEN)
		bytes = FX_ARRAY_LEN;
	if (!bytes)
		return;
	/* Read into the stack, then copy: see read_out. */
	__u64 buf[FX_ARRAY_LEN / 8] = {};
	__u64 src = f->args[a];
	if (!src || bpf_probe_read_user(buf, bytes, (void *)src)) {
		f->flags |= FX_CALL_ARRAY_FAULT;
		return;
	}
	__builtin_memcpy(f->arr, buf, sizeof(f->arr));
	f->arr_n = n;
}

SEC("uprobe")
int call_entry(struct pt_regs *ctx)
{
	struct thread *th = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0,
						 BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!th) {
		count(FX_CTR_LOST_INFLIGHT);
		return 0;
	}
	if (th->state != THREAD_TRACKED) {
		/* A thread's process is tracked before it can call (at fork, or
		 * by the recorder before attaching), so its first call decides.
		 * With --all every process is admitted at its first call. */
		if (th->state == THREAD_IGNORED)
			return 0;
		__u64 id = bpf_get_current_pid_tgid();
		th->pid = id >> 32;
		th->tid = (__u32)id;
		if (!admit(th->pid)) {
			th->state = THREAD_IGNORED;
			return 0;
		}
		th->state = THREAD_TRACKED;
		th->depth = 0;
	}

	__u32 d = th->depth;
	if (d >= FX_MAX_DEPTH) {
		th->depth = d + 1; /* keep returns balanced */
		count(FX_CTR_TOO_DEEP);
		return 0;
	}
	struct frame *f = &th->f[d & (FX_MAX_DEPTH - 1)];
	__u16 sym = (__u16)bpf_get_attach_cookie(ctx);
	f->symbol = sym;
	f->sp = PT_REGS_SP(ctx);
	f->flags = 0;
	f->args[0] = PT_REGS_PARM1(ctx);
	f->args[1] = PT_REGS_PARM2(ctx);
	f->args[2] = PT_REGS_PARM3(ctx);
	f->args[3] = PT_REGS_PARM4(ctx);
	f->args[4] = PT_REGS_PARM5(ctx);
	f->args[5] = PT_REGS_PARM6(ctx);

	__u32 key = sym;
	struct fx_symcfg *cfg = bpf_map_lookup_elem(&symcfg, &key);
	f->has_arr = 0;
	if (cfg && cfg->in_len) {
		/* Read into the stack, then copy: see read_out. Only the
		 * row's length, so that a struct at the end of a page reads. */
		__u64 in[FX_IN_LEN / 8] = {}, src = 0;
		__u32 len = cfg->in_len;
		__s8 a = cfg->in_arg;
		if (a == FX_IN_STACK)
			src = PT_REGS_SP(ctx) + 8;
		else if (a >= 0 && a < 6)
			src = f->args[a];
		if (len > FX_IN_LEN)
			len = FX_IN_LEN;
		if (!src || bpf_probe_read_user(in, len, (void *)src))
			f->flags |= FX_CALL_IN_FAULT;
		__builtin_memcpy(f->in, in, sizeof(f->in));
	}
	if (cfg && cfg->arr_len) {
		f->has_arr = 1;
		read_array(f, cfg);
	}
	th->depth = d + 1;
	/* Last, so the time excludes the probe's own work. */
	f->ts = bpf_ktime_get_ns();
	return 0;
}

/* read_out reads an out parameter into buf (size bytes, zeroed by the
 * caller) and returns 1 when the read failed. The probes read user memory
 * into the BPF stack, then copy: bpf_probe_read_user costs about 50 ns less
 * here with a stack destination than with a map value or the ring as one
 * (bench/probecost), more than the copy. */
static __always_inline __u32 read_out(void *buf, __u32 size, __u8 len, __s8 arg, struct frame *f)
{
	if (arg < 0 || arg >= 6 || !len)
		return 0;
	__u64 p = f->args[arg];
	if (!p)
		return 1;
	if (len > size)
		len = size;
	return bpf_probe_read_user(buf, len, (void *)p) ? 1 : 0;
}

/* find_frame returns the frame of the call a return ends and its depth,
 * popping the frames of inner calls that never returned (flagged
 * reordered), or 0 for a return without an entry.
 *
 * The frame is the one whose entry had the stack pointer the return
 * leaves (the return popped the return address), as the kernel matches its
 * own return instances: no attach cookie needed (18 ns). */
static __always_inline struct frame *find_frame(struct pt_regs *ctx, struct thread *th, struct fx_stats *s,
						__u32 *depthp, __u32 *flags)
{
	__u32 depth = th->depth;
	if (depth == 0) {
		s->c[FX_CTR_UNMATCHED_RETURNS]++;
		return 0;
	}
	depth--;
	th->depth = depth;
	if (depth >= FX_MAX_DEPTH)
		return 0; /* counted as too deep at entry */
	__u64 sp = PT_REGS_SP(ctx) - 8;
	struct frame *f = &th->f[depth & (FX_MAX_DEPTH - 1)];
	if (f->sp != sp) {
		/* An inner call left without returning (longjmp, exception):
		 * find the frame this return belongs to. */
		int found = 0;
		for (int i = FX_MAX_DEPTH - 1; i >= 0; i--) {
			if (i < (int)depth && th->f[i].sp == sp) {
				depth = i;
				found = 1;
				break;
			}
		}
		if (!found) {
			s->c[FX_CTR_UNMATCHED_RETURNS]++;
			return 0;
		}
		th->depth = depth;
		f = &th->f[depth & (FX_MAX_DEPTH - 1)];
		*flags |= FX_CALL_REORDERED;
	}
	*depthp = depth;
	return f;
}

/* fill_call fills a call record's fixed part but its flags. */
static __always_inline void fill_call(struct fx_call *e, __u8 kind, struct thread *th, struct frame *f, __u32 depth,
				      __s32 result, __u64 now)
{
	e->kind = kind;
	e->depth = depth;
	e->symbol = f->symbol;
	e->pid = th->pid;
	e->tid = th->tid;
	e->result = result;
	e->stack_id = -1;
	e->ts_entry = f->ts;
	e->ts_exit = now;
	__builtin_memcpy(e->args, f->args, sizeof(e->args));
}

/* take_stack takes the user stack of a failed call (and of every call of a
 * row that asks for it under --stacks). */
static __always_inline void take_stack(struct pt_regs *ctx, struct fx_call *e, struct fx_symcfg *cfg, struct fx_stats *s)
{
	if (e->result != 0 || cfg->stack) {
		e->stack_id = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
		if (e->stack_id < 0)
			s->c[FX_CTR_STACK_ERRORS]++;
	}
}

/* capture fills a whole tail with what the symbol's row captures: out
 * parameters of a successful call, the input struct read at entry. */
static __always_inline void capture(struct fx_call *e, struct frame *f, struct fx_symcfg *cfg, __u32 *flags)
{
	__u64 outa[FX_OUTA_LEN / 8] = {}, outb[FX_OUTB_LEN / 8] = {};
	/* Out parameters hold a value only on success. */
	if (e->result == 0) {
		if (read_out(outa, FX_OUTA_LEN, cfg->outa_len, cfg->outa_arg, f))
			*flags |= FX_CALL_OUTA_FAULT;
		if (read_out(outb, FX_OUTB_LEN, cfg->outb_len, cfg->outb_arg, f))
			*flags |= FX_CALL_OUTB_FAULT;
	}
	/* Offsets are multiples of 8 (SymCfg); the bounds keep every write
	 * inside the tail. */
	__u32 outb_at = cfg->tail_outb & ~7, in_at = cfg->tail_in & ~7;
	if (outb_at > FX_OUTA_LEN)
		outb_at = FX_OUTA_LEN;
	if (in_at > FX_OUTA_LEN + FX_OUTB_LEN)
		in_at = FX_OUTA_LEN + FX_OUTB_LEN;
	__builtin_memset(e->tail, 0, sizeof(e->tail));
	__builtin_memcpy(e->tail, outa, sizeof(outa));
	__builtin_memcpy(e->tail + outb_at, outb, sizeof(outb));
	if (cfg->in_len)
		__builtin_memcpy(e->tail + in_at, f->in, sizeof(f->in));
}

/* wake_flags says whether submitting a record wakes the reader: a failure
 * does at once (and under --freeze-on-failure stops the process first);
 * successful calls only every wakeup_every on a CPU. */
static __always_inline __u64 wake_flags(__s32 result, __u32 depth, struct fx_stats *s, __u32 *flags)
{
	if (result != 0) {
		if (freeze_on_failure && depth == 0) {
			/* Hold the process still so the failure sample shows the
			 * state at the failure; user space continues it. */
			if (bpf_send_signal(SIGSTOP) == 0) {
				*flags |= FX_CALL_FROZEN;
				s->c[FX_CTR_FROZEN]++;
			}
		}
		return BPF_RB_FORCE_WAKEUP;
	}
	if (wakeup_every && ++s->unwoken >= wakeup_every) {
		/* The reader also polls; this bounds how much a burst leaves
		 * in the ring between polls. */
		s->unwoken = 0;
		return BPF_RB_FORCE_WAKEUP;
	}
	return BPF_RB_NO_WAKEUP;
}

static __always_inline void lost_call(struct fx_stats *s, __u64 now)
{
	if (!s->c[FX_CTR_LOST_FIRST_NS])
		s->c[FX_CTR_LOST_FIRST_NS] = now;
	s->c[FX_CTR_LOST_LAST_NS] = now;
	s->c[FX_CTR_LOST_CALLS]++;
}

/* What a return needs to send its call's record. */
struct ret {
	struct pt_regs *ctx;
	struct thread *th;
	struct frame *f;
	struct fx_symcfg *cfg;
	struct fx_stats *s;
	__u64 now;
	__u32 depth;
	__u32 flags;
	__s32 result;
};

/* send submits a filled record (or counts it lost when the ring had no
 * room: e is null). */
static __always_inline void send(struct ret *r, struct fx_call *e, void *rec)
{
	take_stack(r->ctx, e, r->cfg, r->s);
	__u64 wake = wake_flags(r->result, r->depth, r->s, &r->flags);
	e->flags = r->flags;
	bpf_ringbuf_submit(rec, wake);
}

/* The record sizes of calls without an array argument: the fixed part
 * alone (nothing to read, most symbols), with one 8-byte out parameter
 * (an allocation's returned pointer), and whole. Each is reserved with
 * its constant size, so the record is written in place and the ring
 * holds 96 or 104 bytes per call instead of 168. */

static __always_inline void emit_fixed(struct ret *r)
{
	struct fx_call *e = bpf_ringbuf_reserve(&events, FX_CALL_FIXED, 0);
	if (!e) {
		lost_call(r->s, r->now);
		return;
	}
	fill_call(e, FX_KIND_CALL, r->th, r->f, r->depth, r->result, r->now);
	send(r, e, e);
}

static __always_inline void emit_out8(struct ret *r)
{
	/* Read before reserving: no ring space is held meanwhile. */
	__u64 out = 0;
	if (r->result == 0 && read_out(&out, 8, r->cfg->outa_len, r->cfg->outa_arg, r->f))
		r->flags |= FX_CALL_OUTA_FAULT;
	struct fx_call *e = bpf_ringbuf_reserve(&events, FX_CALL_FIXED + 8, 0);
	if (!e) {
		lost_call(r->s, r->now);
		return;
	}
	fill_call(e, FX_KIND_CALL, r->th, r->f, r->depth, r->result, r->now);
	*(__u64 *)e->tail = out;
	send(r, e, e);
}

static __always_inline void emit_whole(struct ret *r)
{
	struct fx_call *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		lost_call(r->s, r->now);
		return;
	}
	fill_call(e, FX_KIND_CALL, r->th, r->f, r->depth, r->result, r->now);
	capture(e, r->f, r->cfg, &r->flags);
	send(r, e, e);
}

/* emit_array sends the record of a call whose row captures an array
 * argument: an fx_call_array (only those symbols pay for the larger
 * record). */
static __always_inline void emit_array(struct ret *r)
{
	struct fx_call_array *a = bpf_ringbuf_reserve(&events, sizeof(*a), 0);
	if (!a) {
		lost_call(r->s, r->now);
		return;
	}
	fill_call(&a->call, FX_KIND_CALL_ARRAY, r->th, r->f, r->depth, r->result, r->now);
	capture(&a->call, r->f, r->cfg, &r->flags);
	a->n = r->f->arr_n;
	__builtin_memset(a->pad, 0, sizeof(a->pad));
	__builtin_memcpy(a->data, r->f->arr, sizeof(a->data));
	send(r, &a->call, a);
}

/* emit_thread sends the name of the thread that made a failed call, after
 * the call's record: the name is the kernel's at the call, so a thread
 * that exits or renames itself before user space reads the record is
 * still named as it was. */
static __always_inline int emit_thread(struct ret *r)
{
	struct fx_thread *t = bpf_ringbuf_reserve(&events, sizeof(*t), 0);
	if (!t)
		return 0; /* the failure is then reported without its thread's name */
	t->kind = FX_KIND_THREAD;
	__builtin_memset(t->pad, 0, sizeof(t->pad));
	t->pid = r->th->pid;
	t->tid = r->th->tid;
	t->pad2 = 0;
	t->ts_exit = r->now;
	if (bpf_get_current_comm(t->comm, sizeof(t->comm)))
		t->comm[0] = 0;
	bpf_ringbuf_submit(t, 0);
	return 1;
}

/* The return probe sends one record per call, as long as its row needs. */
SEC("uretprobe")
int call_return(struct pt_regs *ctx)
{
	struct ret r = {.ctx = ctx, .now = bpf_ktime_get_ns()};
	r.th = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0, 0);
	if (!r.th) {
		/* Every thread that called has storage from its entry, unless
		 * the kernel refused it there (counted then) or refuses it now:
		 * task storage is refused while another program using it is
		 * preempted on this CPU. A recorded process's call is then not
		 * sent: counted, never silent (once more when it had none at
		 * entry either). */
		__u32 tgid = bpf_get_current_pid_tgid() >> 32;
		if (bpf_map_lookup_elem(&tracked, &tgid))
			count(FX_CTR_LOST_INFLIGHT);
		return 0;
	}
	if (r.th->state != THREAD_TRACKED)
		return 0; /* not a recorded thread */
	r.s = stats_get();
	if (!r.s)
		return 0;
	r.f = find_frame(ctx, r.th, r.s, &r.depth, &r.flags);
	if (!r.f)
		return 0;
	__u32 key = r.f->symbol;
	r.cfg = bpf_map_lookup_elem(&symcfg, &key);
	if (!r.cfg)
		return 0; /* every symbol the probes are on has a row */
	r.s->c[FX_CTR_CALLS]++;
	r.flags |= r.f->flags;
	r.result = (__s32)PT_REGS_RC(ctx);
	/* Read before the record is sent: the frame may be reused after. */
	__u16 sym = r.f->symbol;
	if (r.f->has_arr)
		emit_array(&r);
	else if (r.cfg->tail_len == 0)
		emit_fixed(&r);
	else if (r.cfg->tail_len <= 8 && !r.cfg->outb_len && !r.cfg->in_len)
		emit_out8(&r);
	else
		emit_whole(&r);
	/* Once per thread: user space keeps the name of its first failed
	 * call, and a failure storm need not pay a record per failure. */
	if (r.result != 0 && !r.th->named)
		r.th->named = emit_thread(&r);
	/* Registers, stack and Python frames for unwinding offline, after the
	 * call record, for the application's own failed calls (and its
	 * allocations under --stacks): stacks.h. */
	if ((r.result != 0 || r.cfg->stack) && r.depth == 0)
		capture_stacks(ctx, (__u64)r.th->pid << 32 | r.th->tid, sym, r.now, r.result != 0);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(proc_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid;
	if (child->pid != child->tgid)
		return 0; /* a new thread, already covered by its group */
	if (!bpf_map_lookup_elem(&tracked, &ptgid))
		return 0;
	__u32 ctgid = child->tgid, one = 1;
	if (bpf_map_update_elem(&tracked, &ctgid, &one, BPF_ANY)) {
		/* The map is full: the child's calls will not be recorded. */
		count_first(FX_CTR_UNTRACKED, FX_CTR_UNTRACKED_FIRST_NS, bpf_ktime_get_ns());
		return 0;
	}
	stacks_fork(ptgid, ctgid);
	emit_proc(FX_PROC_FORK, child, 0);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(proc_exec, struct task_struct *p)
{
	__u32 tgid = p->tgid;
	if (!bpf_map_lookup_elem(&tracked, &tgid))
		return 0;
	stacks_forget(tgid); /* another program now: user space locates it again */
	__u64 ts = emit_proc(FX_PROC_EXEC, p, 0);
	if (ts)
		bpf_map_update_elem(&unread_execs, &tgid, &ts, BPF_ANY);
	else
		bpf_map_delete_elem(&unread_execs, &tgid); /* never read: hold nobody */
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(proc_exit, struct task_struct *p)
{
	__u32 tgid = p->tgid;
	if (!bpf_map_lookup_elem(&tracked, &tgid))
		return 0;
	/* Only the last thread's exit ends the process. */
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	emit_proc(FX_PROC_EXIT, p, p->exit_code);
	bpf_map_delete_elem(&tracked, &tgid);
	bpf_map_delete_elem(&unread_execs, &tgid);
	stacks_forget(tgid);
	return 0;
}

#define PROT_EXEC 0x4
#define MAP_ANONYMOUS 0x20
#define NR_MMAP 9     /* x86-64 */
#define NR_MPROTECT 10
#define ENOENT 2

/* "libcuda.so" or "libcuda.so.*". */
static __always_inline int is_libcuda(const char *n)
{
	const char want[] = "libcuda.so";
	for (int i = 0; i < (int)sizeof(want) - 1; i++)
		if (n[i] != want[i])
			return 0;
	return n[sizeof(want) - 1] == 0 || n[sizeof(want) - 1] == '.';
}

/* What find_file learns about the mapping at an address. */
struct mapped {
	__u64 dev, ino;
	char name[FX_NAME_LEN];
	int file; /* the mapping is of a file */
	int ok;   /* ... and its name was read */
};

static long find_file(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	struct mapped *m = data;
	struct file *f = vma->vm_file;
	if (!f)
		return 0;
	m->file = 1;
	/* vm_file is the file the pages come from (the real file under an
	 * overlay), the inode uprobes attach to. */
	struct inode *inode = f->f_inode;
	m->dev = inode->i_sb->s_dev;
	m->ino = inode->i_ino;
	if (bpf_probe_read_kernel_str(m->name, sizeof(m->name), f->f_path.dentry->d_name.name) > 0)
		m->ok = 1;
	return 0;
}

/* fd_name reads the name of the file the current process has open as fd
 * into name, and says whether it could. It reads the file table alone,
 * without the address space's lock. */
static __always_inline int fd_name(struct task_struct *task, __u64 fd, char *name)
{
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
		return 0;
	struct file **fds = BPF_CORE_READ(fdt, fd);
	struct file *f = 0;
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) || !f)
		return 0;
	const unsigned char *n = BPF_CORE_READ(f, f_path.dentry, d_name.name);
	return bpf_probe_read_kernel_str(name, FX_NAME_LEN, n) > 0;
}

/* A recorded process has just made a file mapping executable (mmap, or
 * mprotect of a mapping): if the file is a libcuda whose probes are not in,
 * stop the process before it returns to user space, so no code in the
 * file runs before user space has attached the probes and continued it. No
 * call through a new libcuda is missed, wherever the file came from. A
 * process that maps any libcuda before user space has read its last exec
 * (a reader behind a burst of records) is stopped too, until it has: its
 * first failure may come milliseconds later, and only a process read
 * while it lives has its interpreter located and its root held. A hold
 * that cannot be reported is not made (a process stopped with nobody to
 * continue it is worse than a missed library), and it is counted.
 *
 * The mapping is looked up with bpf_find_vma, which only tries the address
 * space's lock and fails while another holds it or waits for it: attaching
 * uprobes to a file write-locks every address space that maps it, so a
 * process mapping libcuda while the recorder attaches to it for another
 * finds its own lock taken. Such a mapping is held all the same, marked
 * uninspected, and user space looks at it in /proc; skipping it would let
 * the process run its calls before the probes are in, unseen and
 * uncounted. An mmap of a file whose name (read from the file table, which
 * needs no lock) is not a libcuda's is never held.
 *
 * The system call exit tracepoint, not fentry or a kprobe on the kernel's
 * mmap path: kernels locked down for integrity (Secure Boot) refuse fentry
 * programs, and some kernels have no kprobes. It runs at every system call
 * exit on the host, so everything but the two system calls leaves at the
 * first comparison. */
SEC("tp_btf/sys_exit")
int BPF_PROG(map_file, struct pt_regs *regs, long ret)
{
	long nr = regs->orig_ax;
	if (nr != NR_MMAP && nr != NR_MPROTECT)
		return 0;
	if (!(regs->dx & PROT_EXEC) || (ret < 0 && ret > -4096))
		return 0;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (tgid == self_tgid)
		return 0;
	if (!trace_all) {
		if (!bpf_map_lookup_elem(&tracked, &tgid))
			return 0;
	} else if (scope_levels && !bpf_map_lookup_elem(&tracked, &tgid) && !in_scope()) {
		return 0; /* --all, but outside the scope: never held */
	}
	int unread = bpf_map_lookup_elem(&unread_execs, &tgid) != 0;
	if (named_files_only && !unread)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 addr = nr == NR_MMAP ? (__u64)ret : regs->di;
	struct mapped m = {};
	if (nr == NR_MMAP) {
		/* mmap(addr, len, prot, flags, fd, off): flags in r10, fd in r8. */
		if (regs->r10 & MAP_ANONYMOUS)
			return 0;
		if (fd_name(task, regs->r8, m.name) && !is_libcuda(m.name))
			return 0;
	}
	long err = bpf_find_vma(task, addr, find_file, &m, 0);
	if (err == -ENOENT || (!err && !m.file))
		return 0; /* no mapping there any more, or not of a file */
	__u8 flags = 0;
	if (err || !m.ok) {
		/* Under --all, a process not recorded yet that makes a mapping
		 * executable with mprotect is left alone: JIT compilers do that
		 * all the time, under a busy lock, and libcuda's text is mapped
		 * with mmap. Counted all the same. */
		if (nr == NR_MPROTECT && !bpf_map_lookup_elem(&tracked, &tgid)) {
			count(FX_CTR_UNINSPECTED_MAPS);
			return 0;
		}
		flags = FX_HOLD_UNINSPECTED;
		m.dev = 0;
		m.ino = 0;
		count(FX_CTR_UNINSPECTED_MAPS);
	} else {
		if (!is_libcuda(m.name))
			return 0;
		struct fx_file key = {.dev = m.dev, .ino = m.ino};
		if (!unread && bpf_map_lookup_elem(&attached_files, &key))
			return 0;
	}
	if (unread)
		flags |= FX_HOLD_UNREAD;
	struct fx_hold *h = bpf_ringbuf_reserve(&holds, sizeof(*h), 0);
	if (!h) {
		count(FX_CTR_LOST_HOLDS);
		return 0;
	}
	__u64 id = bpf_get_current_pid_tgid();
	h->kind = FX_KIND_HOLD;
	h->flags = flags;
	h->pad = 0;
	h->pid = id >> 32;
	h->tid = (__u32)id;
	h->dev = m.dev;
	h->ino = m.ino;
	h->addr = addr;
	h->ts = bpf_ktime_get_ns();
	__builtin_memcpy(h->name, m.name, sizeof(h->name));
	if (bpf_send_signal(SIGSTOP) == 0)
		h->flags |= FX_HOLD_STOPPED;
	bpf_ringbuf_submit(h, BPF_RB_FORCE_WAKEUP);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

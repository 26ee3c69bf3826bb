/* stacks.h: the stack capture of a failed call (and, under --stacks, of a
 * device allocation), included by forensic.bpf.c after its maps.
 *
 * At the call's return the user registers are the caller's, at the
 * instruction after its call. capture_stacks copies what an offline
 * unwinder needs (package unwind): the registers and up to FX_USTACK_MAX
 * bytes of the stack from sp up, page by page so that the top of the stack
 * ends the copy without losing what lies below it. For a CPython process
 * (py_procs, filled by user space when it locates the interpreter) it
 * first reads the failing thread's Python frames (package pystack is the
 * reference for every read) and copies each code object not copied before
 * for this process. Records go out in the order pycode..., pystack, ustack,
 * each after the fx_call of the same call.
 *
 * Cost only where failures are, bounded in a failure storm:
 *   - a call site (process, symbol, ip, sp and the Python frames' code and
 *     instruction addresses) already captured costs a lookup and a 32-byte
 *     fx_stack_ref naming the capture;
 *   - the first failure of each process is always captured;
 *   - other captures take a token from a per-CPU bucket (stack_rate per
 *     second, stack_burst at once); without one, the capture is skipped and
 *     counted (FX_CTR_STACK_SKIPPED).
 * The records are submitted without waking the reader: the fx_call they
 * follow does. */

#ifndef FORENSIC_STACKS_H
#define FORENSIC_STACKS_H

/* Set by the loader. */
const volatile __u64 stack_rate_ns = 1000000000ULL / 64; /* one token per this many ns */
const volatile __u64 stack_burst = 256;                   /* tokens a bucket holds */

/* Bounds of the Python thread search (pystack.MaxInterpreters, MaxThreads). */
#define PY_MAX_INTERP 8
#define PY_MAX_THREADS 256
/* pystack's frame owner of 3.12+'s C-stack shim frames. */
#define PY_OWNED_BY_CSTACK 3
/* Bytes of a frame or a code object's header read at once (the largest
 * Layout.FrameSize and CodeSize fit). */
#define PY_TMP 256

/* A call site: a capture at a known one is referred to, not repeated. */
struct stack_site {
	__u32 pid;
	__u16 symbol;
	__u16 pad;
	__u64 ip, sp;
	__u64 pyhash; /* of the Python frames' code and instruction addresses */
};

/* The capture of a site: its call's thread and return time. */
struct stack_capture {
	__u32 tid;
	__u32 pad;
	__u64 ts;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct stack_site);
	__type(value, struct stack_capture);
} stack_sites SEC(".maps");

/* Processes whose first failure was captured. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u32);
} stack_procs SEC(".maps");

/* CPython processes: where their runtime is, which layout. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct fx_pyproc);
} py_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FX_PY_LAYOUTS);
	__type(key, __u32);
	__type(value, struct fx_pylayout);
} py_layouts SEC(".maps");

/* A code object copied for a process, and the fields that must still hold
 * for the copy to stand: a freed code object's address can be reused. */
struct py_code_key {
	__u32 pid;
	__u32 pad;
	__u64 code;
};

struct py_code_print {
	__u64 filename, name, linetable;
	__s64 firstlineno;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct py_code_key);
	__type(value, struct py_code_print);
} py_codes SEC(".maps");

/* Per thread: its PyThreadState when found, checked before each use. */
struct py_thread {
	__u64 runtime; /* of the interpreter it was found in */
	__u64 tstate;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct py_thread);
} py_threads SEC(".maps");

/* The state of a Python walk, kept in the scratch (bpf_loop callbacks
 * find it there). */
struct py_walk {
	struct fx_pylayout lay;
	__u64 key;      /* the thread's native id, or its pthread id (3.10) */
	__u64 interp, ts, frame, hash;
	__u32 ninterp, nthreads;
	__u32 pid;
	__u32 pad;
	__u64 now;
};

/* Per-CPU working memory of a capture. A uprobe program can be preempted
 * (it runs with migration, not preemption, disabled), so busy guards it:
 * a capture that finds it taken on its CPU is counted lost. */
struct stack_scratch {
	__s64 busy;
	__u64 credit, last; /* the token bucket: credit in ns of stack_rate_ns */
	struct py_walk w;
	struct fx_pystack py;
	__u8 tmp[PY_TMP + 8];
	struct fx_ustack us;
	__u8 slack[4096]; /* a page read at the end of us.stack stays inside */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack_scratch);
} stack_scratch SEC(".maps");

/* The code and mappings records are larger than a per-CPU value may be:
 * one entry per CPU (the loader sizes the map), used only under the
 * per-CPU busy guard. */
struct big_scratch {
	struct fx_pycode code;
	struct fx_vmas vmas;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct big_scratch);
} big_scratch SEC(".maps");

/* The task_vma iterator (Linux 6.7+). Weak: on an older kernel the loader
 * resolves them to 0, the mappings are not listed, and the recorder's own
 * reads of /proc/PID/maps stand in. */
extern int bpf_iter_task_vma_new(struct bpf_iter_task_vma *it, struct task_struct *task, __u64 addr) __ksym __weak;
extern struct vm_area_struct *bpf_iter_task_vma_next(struct bpf_iter_task_vma *it) __ksym __weak;
extern void bpf_iter_task_vma_destroy(struct bpf_iter_task_vma *it) __ksym __weak;

#define VM_EXEC 0x4

const struct fx_ustack *unused_fx_ustack __attribute__((unused));
const struct fx_vmas *unused_fx_vmas __attribute__((unused));
const enum fx_vmas_flags *unused_fx_vmas_flags __attribute__((unused));
const struct fx_pystack *unused_fx_pystack __attribute__((unused));
const struct fx_pycode *unused_fx_pycode __attribute__((unused));
const struct fx_stack_ref *unused_fx_stack_ref __attribute__((unused));
const struct fx_pylayout *unused_fx_pylayout __attribute__((unused));
const struct fx_pyproc *unused_fx_pyproc __attribute__((unused));
const enum fx_ustack_flags *unused_fx_ustack_flags __attribute__((unused));
const enum fx_py_status *unused_fx_py_status __attribute__((unused));
const enum fx_pycode_flags *unused_fx_pycode_flags __attribute__((unused));

static __always_inline struct stack_scratch *scratch_get(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&stack_scratch, &zero);
}

static __always_inline struct big_scratch *big_get(void)
{
	__u32 cpu = bpf_get_smp_processor_id();
	return bpf_map_lookup_elem(&big_scratch, &cpu);
}

/* read_ptr reads 8 bytes of user memory; 0 when it cannot. */
static __always_inline int read_ptr(__u64 *v, __u64 addr)
{
	*v = 0;
	if (!addr)
		return -1;
	return bpf_probe_read_user(v, 8, (void *)addr) ? -1 : 0;
}

/* tmp_u64 and tmp_s32 read a field at a layout offset of what tmp holds. */
static __always_inline __u64 tmp_u64(struct stack_scratch *s, __s32 off)
{
	return *(__u64 *)(s->tmp + (off & (PY_TMP - 1)));
}

static __always_inline __s32 tmp_s32(struct stack_scratch *s, __s32 off)
{
	return *(__s32 *)(s->tmp + (off & (PY_TMP - 1)));
}

/* py_find_step is one step of the thread search: the next thread state of
 * the current interpreter, or the next interpreter. */
static long py_find_step(__u64 i, void *unused)
{
	struct stack_scratch *s = scratch_get();
	if (!s)
		return 1;
	struct py_walk *w = &s->w;
	if (w->ts == 0 || w->nthreads >= PY_MAX_THREADS) {
		if (w->interp == 0 || w->ninterp >= PY_MAX_INTERP)
			return 1;
		if (read_ptr(&w->interp, w->interp + w->lay.interp_next)) {
			s->py.status = FX_PY_FAULT;
			return 1;
		}
		w->ninterp++;
		w->nthreads = 0;
		w->ts = 0;
		if (w->interp && read_ptr(&w->ts, w->interp + w->lay.interp_threads_head)) {
			s->py.status = FX_PY_FAULT;
			return 1;
		}
		return 0;
	}
	__s32 idoff = w->lay.thread_native_id >= 0 ? w->lay.thread_native_id : w->lay.thread_id;
	__u64 id;
	if (read_ptr(&id, w->ts + idoff)) {
		s->py.status = FX_PY_FAULT;
		return 1;
	}
	if (id == w->key) {
		s->py.tstate = w->ts;
		return 1;
	}
	w->nthreads++;
	if (read_ptr(&w->ts, w->ts + w->lay.thread_next)) {
		s->py.status = FX_PY_FAULT;
		return 1;
	}
	return 0;
}

/* py_thread_state finds the thread's PyThreadState: the one found before
 * when it still carries the thread's id, else by searching every
 * interpreter's thread list. */
static __always_inline __u64 py_thread_state(struct stack_scratch *s, __u64 runtime)
{
	struct py_walk *w = &s->w;
	__s32 idoff = w->lay.thread_native_id >= 0 ? w->lay.thread_native_id : w->lay.thread_id;
	struct py_thread *pt = bpf_task_storage_get(&py_threads, bpf_get_current_task_btf(), 0,
						    BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (pt && pt->runtime == runtime && pt->tstate) {
		__u64 id;
		if (read_ptr(&id, pt->tstate + idoff) == 0 && id == w->key)
			return pt->tstate;
	}
	w->ninterp = 1;
	w->nthreads = 0;
	w->ts = 0;
	if (read_ptr(&w->interp, runtime + w->lay.runtime_interpreters_head) ||
	    (w->interp && read_ptr(&w->ts, w->interp + w->lay.interp_threads_head))) {
		s->py.status = FX_PY_FAULT;
		return 0;
	}
	s->py.tstate = 0;
	bpf_loop(PY_MAX_INTERP * (PY_MAX_THREADS + 1), py_find_step, 0, 0);
	if (!s->py.tstate) {
		if (s->py.status == FX_PY_OK)
			s->py.status = FX_PY_NO_THREAD;
		return 0;
	}
	if (pt) {
		pt->runtime = runtime;
		pt->tstate = s->py.tstate;
	}
	return s->py.tstate;
}

/* py_frame_step reads one frame: its code object, instruction, owner and
 * the frame before it. */
static long py_frame_step(__u64 i, void *unused)
{
	struct stack_scratch *s = scratch_get();
	if (!s)
		return 1;
	struct py_walk *w = &s->w;
	if (!w->frame)
		return 1;
	if (i >= FX_PY_FRAMES) {
		s->py.status = FX_PY_TRUNCATED;
		return 1;
	}
	__u32 n = w->lay.frame_size;
	if (n > PY_TMP)
		n = PY_TMP;
	if (bpf_probe_read_user(s->tmp, n, (void *)w->frame)) {
		s->py.status = FX_PY_FAULT;
		return 1;
	}
	struct fx_pyframe *f = &s->py.frames[i & (FX_PY_FRAMES - 1)];
	f->code = tmp_u64(s, w->lay.frame_code);
	if (w->lay.instr_int)
		f->instr = (__u64)(__s64)tmp_s32(s, w->lay.frame_instr);
	else
		f->instr = tmp_u64(s, w->lay.frame_instr);
	__u8 owner = 0;
	if (w->lay.frame_owner >= 0)
		owner = s->tmp[w->lay.frame_owner & (PY_TMP - 1)] & 0x7f;
	if (w->lay.frame_is_entry >= 0 && s->tmp[w->lay.frame_is_entry & (PY_TMP - 1)])
		owner |= 0x80;
	s->py.owner[i & (FX_PY_FRAMES - 1)] = owner;
	s->py.nframes = i + 1;
	w->hash = (w->hash ^ f->code) * 0x100000001b3ULL;
	w->hash = (w->hash ^ f->instr) * 0x100000001b3ULL;
	w->frame = tmp_u64(s, w->lay.frame_previous);
	return 0;
}

/* py_walk reads the Python frames of the current thread into s->py and
 * returns their hash (0: none read). */
static __always_inline __u64 py_walk(struct stack_scratch *s, struct fx_pyproc *pp, __u32 pid, __u32 tid)
{
	struct py_walk *w = &s->w;
	s->py.status = FX_PY_OK;
	s->py.nframes = 0;
	s->py.tstate = 0;
	__u32 row = pp->layout;
	struct fx_pylayout *lay = bpf_map_lookup_elem(&py_layouts, &row);
	if (!lay) {
		s->py.status = FX_PY_NO_LAYOUT;
		return 0;
	}
	w->lay = *lay;
	s->py.minor = lay->minor;
	if (lay->thread_native_id >= 0)
		w->key = tid;
	else
		w->key = BPF_CORE_READ((struct task_struct *)bpf_get_current_task(), thread.fsbase);
	__u64 ts = py_thread_state(s, pp->runtime);
	if (!ts)
		return 0;
	if (read_ptr(&w->frame, ts + lay->thread_frame) ||
	    (lay->cframe_current_frame >= 0 && w->frame && read_ptr(&w->frame, w->frame + lay->cframe_current_frame))) {
		s->py.status = FX_PY_FAULT;
		return 0;
	}
	w->hash = 0xcbf29ce484222325ULL;
	bpf_loop(FX_PY_FRAMES + 1, py_frame_step, 0, 0);
	return w->hash;
}

/* py_string copies a compact str object's state, length and data (at
 * most max bytes) into the code record; 0 when read. */
static __always_inline int py_string(struct stack_scratch *s, struct fx_pycode *c, int which, __u64 obj, char *dst, __u32 max)
{
	struct fx_pylayout *l = &s->w.lay;
	c->state[which & 3] = 0;
	c->length[which & 3] = 0;
	if (!obj)
		return 0;
	__u32 hdr = l->ascii_size;
	if (hdr > PY_TMP)
		hdr = PY_TMP;
	if (bpf_probe_read_user(s->tmp, hdr, (void *)obj))
		return -1;
	__u32 state = *(__u32 *)(s->tmp + (l->unicode_state & (PY_TMP - 1)));
	__u64 length = tmp_u64(s, l->unicode_length);
	c->state[which & 3] = state;
	c->length[which & 3] = length > 0xffffffffULL ? 0xffffffffU : (__u32)length;
	if (!(state & (1 << 5))) /* not compact: no data to copy */
		return 0;
	__u64 data = obj + ((state & (1 << 6)) ? l->ascii_size : l->compact_size);
	__u64 n = length * ((state >> 2) & 7);
	if (n > max)
		n = max;
	if (n && bpf_probe_read_user(dst, n, (void *)data))
		return -1;
	return 0;
}

/* py_linetable copies a code object's line table (a bytes object). */
static __always_inline int py_linetable(struct stack_scratch *s, struct fx_pycode *c, __u64 obj)
{
	struct fx_pylayout *l = &s->w.lay;
	c->linetable_len = 0;
	c->linetable_size = 0;
	if (!obj)
		return 0;
	__u64 size;
	if (read_ptr(&size, obj + l->bytes_size))
		return -1;
	c->linetable_size = size > 0xffffffffULL ? 0xffffffffU : (__u32)size;
	if (size > FX_PY_LINETABLE_LEN)
		size = FX_PY_LINETABLE_LEN;
	if (size && bpf_probe_read_user(c->linetable, size, (void *)(obj + l->bytes_data)))
		return -1;
	c->linetable_len = size;
	return 0;
}

/* py_code_step copies the code object of frame i when this process's copy
 * of it is missing or stale, and sends it. */
static long py_code_step(__u64 i, void *unused)
{
	struct stack_scratch *s = scratch_get();
	if (!s || i >= s->py.nframes || i >= FX_PY_FRAMES)
		return 1;
	struct py_walk *w = &s->w;
	struct py_code_key k = {.pid = w->pid, .code = s->py.frames[i & (FX_PY_FRAMES - 1)].code};
	if (!k.code || (w->lay.frame_owner >= 0 && (s->py.owner[i & (FX_PY_FRAMES - 1)] & 0x7f) == PY_OWNED_BY_CSTACK))
		return 0;
	__u32 n = w->lay.code_size;
	if (n > PY_TMP)
		n = PY_TMP;
	if (bpf_probe_read_user(s->tmp, n, (void *)k.code))
		return 0; /* resolving says the code object was not copied */
	struct py_code_print fp = {
		.filename = tmp_u64(s, w->lay.code_filename),
		.name = tmp_u64(s, w->lay.code_qualname >= 0 ? w->lay.code_qualname : w->lay.code_name),
		.linetable = tmp_u64(s, w->lay.code_linetable),
		.firstlineno = tmp_s32(s, w->lay.code_firstlineno),
	};
	struct py_code_print *old = bpf_map_lookup_elem(&py_codes, &k);
	if (old && old->filename == fp.filename && old->name == fp.name && old->linetable == fp.linetable &&
	    old->firstlineno == fp.firstlineno)
		return 0;
	struct big_scratch *big = big_get();
	if (!big)
		return 0;
	struct fx_pycode *c = &big->code;
	c->kind = FX_KIND_PYCODE;
	c->flags = 0;
	c->minor = w->lay.minor;
	c->pad = 0;
	c->pid = w->pid;
	c->code = k.code;
	c->ts = w->now;
	c->type = tmp_u64(s, w->lay.code_type);
	c->firstlineno = fp.firstlineno;
	c->firsttraceable = w->lay.code_firsttraceable >= 0 ? tmp_s32(s, w->lay.code_firsttraceable) : 0;
	__u64 name = tmp_u64(s, w->lay.code_name);
	__u64 qualname = w->lay.code_qualname >= 0 ? tmp_u64(s, w->lay.code_qualname) : 0;
	/* tmp is reused by the string reads: the pointers are taken above. */
	if (py_string(s, c, 0, fp.filename, c->filename, FX_PY_FILENAME_LEN) ||
	    py_string(s, c, 1, name, c->name, FX_PY_NAME_LEN) ||
	    py_string(s, c, 2, qualname, c->qualname, FX_PY_NAME_LEN) ||
	    py_linetable(s, c, fp.linetable))
		c->flags |= FX_PYCODE_FAULT;
	__u64 size = offsetof(struct fx_pycode, linetable) + (c->linetable_len & (FX_PY_LINETABLE_LEN * 2 - 1));
	if (size > sizeof(*c))
		size = sizeof(*c);
	if (bpf_ringbuf_output(&events, c, size, BPF_RB_NO_WAKEUP)) {
		struct fx_stats *st = stats_get();
		if (st)
			st->c[FX_CTR_STACK_LOST]++;
		return 0;
	}
	bpf_map_update_elem(&py_codes, &k, &fp, BPF_ANY);
	return 0;
}

/* copy_stack copies the user stack from sp up, a page at a time, into
 * us->stack, until FX_USTACK_MAX or the first unreadable page: first up to
 * the page boundary above sp, then whole pages (the last may run into the
 * scratch's slack; only FX_USTACK_MAX bytes count). */
static __always_inline void copy_stack(struct fx_ustack *us)
{
	__u64 sp = us->regs.sp;
	__u32 first = 4096 - (sp & 4095); /* 1..4096 */
	us->stack_len = 0;
	if (bpf_probe_read_user(us->stack, first, (void *)sp)) {
		us->flags |= FX_USTACK_FAULT;
		return;
	}
	__u32 off = first;
	for (int i = 1; i < FX_USTACK_MAX / 4096 + 1; i++) {
		if (off >= FX_USTACK_MAX)
			break;
		__u32 at = off;
		barrier_var(at);
		if (at > FX_USTACK_MAX)
			break;
		if (bpf_probe_read_user(us->stack + at, 4096, (void *)(sp + at))) {
			us->flags |= FX_USTACK_FAULT;
			break;
		}
		off += 4096;
	}
	us->stack_len = off < FX_USTACK_MAX ? off : FX_USTACK_MAX;
}

/* send_vmas lists the process's executable file mappings, as they are
 * at the call's return, and sends them; nothing on a kernel without the
 * iterator. */
static __always_inline int send_vmas(__u32 pid, __u32 tid, __u64 now)
{
	if (!bpf_iter_task_vma_new)
		return 0;
	struct big_scratch *big = big_get();
	if (!big)
		return -1;
	struct fx_vmas *vs = &big->vmas;
	vs->kind = FX_KIND_VMAS;
	vs->flags = 0;
	vs->n = 0;
	vs->pid = pid;
	vs->tid = tid;
	vs->pad = 0;
	vs->ts_exit = now;
	struct bpf_iter_task_vma it;
	struct vm_area_struct *vma;
	if (bpf_iter_task_vma_new(&it, bpf_get_current_task_btf(), 0))
		vs->flags |= FX_VMAS_BUSY;
	while ((vma = bpf_iter_task_vma_next(&it))) {
		if (!(vma->vm_flags & VM_EXEC) || !vma->vm_file)
			continue;
		/* The count is kept in the map, so the verifier sees every
		 * iteration alike. */
		__u32 n = vs->n;
		if (n >= FX_MAX_VMAS) {
			vs->flags |= FX_VMAS_CUT;
			break;
		}
		struct fx_vma *v = &vs->vmas[n & (FX_MAX_VMAS - 1)];
		struct file *f = vma->vm_file;
		v->start = vma->vm_start;
		v->end = vma->vm_end;
		v->pgoff = (__u64)vma->vm_pgoff << 12;
		v->ino = BPF_CORE_READ(f, f_inode, i_ino);
		v->dev = BPF_CORE_READ(f, f_inode, i_sb, s_dev);
		v->pad = 0;
		if (bpf_probe_read_kernel_str(v->name, sizeof(v->name), BPF_CORE_READ(f, f_path.dentry, d_name.name)) < 0)
			v->name[0] = 0;
		vs->n = n + 1;
	}
	bpf_iter_task_vma_destroy(&it);
	__u64 size = offsetof(struct fx_vmas, vmas) + (__u64)(vs->n & (FX_MAX_VMAS * 2 - 1)) * sizeof(struct fx_vma);
	if (size > sizeof(*vs))
		size = sizeof(*vs);
	return bpf_ringbuf_output(&events, vs, size, BPF_RB_NO_WAKEUP) ? -1 : 0;
}

/* take_token takes one capture's worth from this CPU's bucket. */
static __always_inline int take_token(struct stack_scratch *s, __u64 now)
{
	__u64 full = stack_burst * stack_rate_ns;
	__u64 credit = s->credit + (now - s->last);
	if (s->last == 0 || credit > full)
		credit = full;
	s->last = now;
	if (credit < stack_rate_ns) {
		s->credit = credit;
		return 0;
	}
	s->credit = credit - stack_rate_ns;
	return 1;
}

/* send_ref says that this call's stack is the capture of its site. */
static __always_inline void send_ref(struct fx_stats *st, __u32 pid, __u32 tid, __u64 now, struct stack_capture *cap)
{
	struct fx_stack_ref *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r) {
		st->c[FX_CTR_STACK_LOST]++;
		return;
	}
	r->kind = FX_KIND_STACK_REF;
	r->pad[0] = r->pad[1] = r->pad[2] = 0;
	r->pid = pid;
	r->tid = tid;
	r->ref_tid = cap->tid;
	r->ts_exit = now;
	r->ref_ts = cap->ts;
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
}

/* admit_capture decides whether a site not captured before is captured:
 * always for a process's first failure, else if the bucket has a token. */
static __always_inline int admit_capture(struct stack_scratch *s, struct fx_stats *st, __u32 pid, int failed, __u64 now)
{
	if (failed && !bpf_map_lookup_elem(&stack_procs, &pid)) {
		__u32 one = 1;
		bpf_map_update_elem(&stack_procs, &pid, &one, BPF_ANY);
		return 1;
	}
	if (take_token(s, now))
		return 1;
	st->c[FX_CTR_STACK_SKIPPED]++;
	return 0;
}

/* capture_body is a capture once the scratch is held. */
static __always_inline void capture_body(struct pt_regs *ctx, struct stack_scratch *s, struct fx_stats *st,
					 __u32 pid, __u32 tid, __u16 sym, __u64 now, int failed)
{
	struct stack_site site = {.pid = pid, .symbol = sym, .ip = PT_REGS_IP(ctx), .sp = PT_REGS_SP(ctx)};
	struct fx_pyproc *pp = bpf_map_lookup_elem(&py_procs, &pid);
	if (pp) {
		s->w.pid = pid;
		s->w.now = now;
		site.pyhash = py_walk(s, pp, pid, tid);
	}
	struct stack_capture *known = bpf_map_lookup_elem(&stack_sites, &site);
	if (known) {
		send_ref(st, pid, tid, now, known);
		return;
	}
	if (!admit_capture(s, st, pid, failed, now))
		return;
	if (pp) {
		bpf_loop(FX_PY_FRAMES, py_code_step, 0, 0);
		s->py.kind = FX_KIND_PYSTACK;
		s->py.pid = pid;
		s->py.tid = tid;
		s->py.pad = 0;
		s->py.ts_exit = now;
		if (bpf_ringbuf_output(&events, &s->py, sizeof(s->py), BPF_RB_NO_WAKEUP)) {
			st->c[FX_CTR_STACK_LOST]++;
			return;
		}
	}
	if (send_vmas(pid, tid, now)) {
		st->c[FX_CTR_STACK_LOST]++;
		return;
	}
	struct fx_ustack *us = &s->us;
	us->kind = FX_KIND_USTACK;
	us->flags = failed ? FX_USTACK_FAILED : 0;
	us->symbol = sym;
	us->pid = pid;
	us->tid = tid;
	us->ts_exit = now;
	us->regs.ip = PT_REGS_IP(ctx);
	us->regs.sp = PT_REGS_SP(ctx);
	us->regs.bp = ctx->bp;
	us->regs.bx = ctx->bx;
	us->regs.r12 = ctx->r12;
	us->regs.r13 = ctx->r13;
	us->regs.r14 = ctx->r14;
	us->regs.r15 = ctx->r15;
	us->regs.fs_base = BPF_CORE_READ((struct task_struct *)bpf_get_current_task(), thread.fsbase);
	copy_stack(us);
	__u64 size = offsetof(struct fx_ustack, stack) + (us->stack_len & (FX_USTACK_MAX * 2 - 1));
	if (size > sizeof(*us))
		size = sizeof(*us);
	if (bpf_ringbuf_output(&events, us, size, BPF_RB_NO_WAKEUP)) {
		st->c[FX_CTR_STACK_LOST]++;
		return;
	}
	struct stack_capture cap = {.tid = tid, .ts = now};
	bpf_map_update_elem(&stack_sites, &site, &cap, BPF_ANY);
}

/* capture_stacks captures the stack of a call at its return (see the top
 * of this file): of thread id (pid << 32 | tid), symbol sym, returned at
 * now; failed: the call failed (else an allocation under --stacks). A BPF
 * function takes at most five arguments. */
static __noinline int capture_stacks(struct pt_regs *ctx, __u64 id, __u32 sym, __u64 now, int failed)
{
	__u32 pid = id >> 32, tid = (__u32)id;
	struct stack_scratch *s = scratch_get();
	struct fx_stats *st = stats_get();
	if (!s || !st)
		return 0;
	/* Take the scratch: an add, then a read (an add that returns its
	 * result needs a newer instruction set): only the taker reads 1. */
	__sync_fetch_and_add(&s->busy, 1);
	if (*(volatile __s64 *)&s->busy != 1) {
		__sync_fetch_and_add(&s->busy, -1);
		st->c[FX_CTR_STACK_LOST]++;
		return 0;
	}
	capture_body(ctx, s, st, pid, tid, (__u16)sym, now, failed);
	__sync_fetch_and_add(&s->busy, -1);
	return 0;
}

/* stacks_forget drops what the captures keep about a process that exited,
 * so a new process given its pid starts afresh. */
static __always_inline void stacks_forget(__u32 tgid)
{
	bpf_map_delete_elem(&py_procs, &tgid);
	bpf_map_delete_elem(&stack_procs, &tgid);
}

/* stacks_fork starts a forked process afresh: no failure captured yet,
 * and the parent's interpreter, if any (a fork runs the same program in a
 * copy of its address space), rather than whatever a dead process that
 * had its pid left behind. */
static __always_inline void stacks_fork(__u32 ptgid, __u32 ctgid)
{
	bpf_map_delete_elem(&stack_procs, &ctgid);
	struct fx_pyproc *pp = bpf_map_lookup_elem(&py_procs, &ptgid);
	if (pp)
		bpf_map_update_elem(&py_procs, &ctgid, pp, BPF_ANY);
	else
		bpf_map_delete_elem(&py_procs, &ctgid);
}

#endif

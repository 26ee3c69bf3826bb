/* The ABI between the BPF program and user space, defined once: bpf2go
 * generates the Go types from these structs and the Go constants from these
 * enums (-type), so kernel and user side cannot disagree on a layout or a
 * number; bpf/abi.go gives them Go names and retypes none. */
#ifndef FORENSIC_H
#define FORENSIC_H

/* Sizes and limits. */
enum fx_const {
	/* Most symbols a probe cookie may name; the Go symbol table is
	 * checked against it. */
	FX_MAX_SYMBOLS = 512,
	/* Nested calls of attached symbols on one thread (a library calling
	 * its own exported entry points) tracked per thread. Deeper calls are
	 * counted, not recorded. */
	FX_MAX_DEPTH = 4,
	FX_IN_LEN = 32,
	FX_OUTA_LEN = 32,
	FX_OUTB_LEN = 8,
	/* A call record's tail holds what its symbol's row captures. */
	FX_TAIL_LEN = FX_OUTA_LEN + FX_OUTB_LEN + FX_IN_LEN,
	/* Bytes of a call record before its tail. */
	FX_CALL_FIXED = 88,
	FX_COMM_LEN = 16,
	FX_FILENAME_LEN = 256,
	/* Dentries and mounts an executable's path walk visits at most. */
	FX_PATH_STEPS = 48,
	FX_ARGS_LEN = 1024,
	/* User stack frames kept per failed call. Frames are stored by the
	 * kernel as (build id, file offset), so they stay resolvable after
	 * the process exits. */
	FX_STACK_DEPTH = 64,
	/* In-argument source that is not a register: a struct passed by value
	 * lies on the stack just above the return address (SysV x86-64,
	 * MEMORY class). */
	FX_IN_STACK = 6,
	/* Array arguments (cuMemSetAccess descriptors, ...): at most
	 * FX_ARRAY_MAX elements and FX_ARRAY_LEN bytes are read at entry. */
	FX_ARRAY_MAX = 8,
	FX_ARRAY_LEN = 96,
	/* Bytes of a mapped file's name kept in a hold record. */
	FX_NAME_LEN = 64,
	/* Bytes of user stack a stack capture copies, from the stack pointer
	 * up (a multiple of 4096): what an unwinder needs besides the
	 * registers (stacks.h). */
	FX_USTACK_MAX = 16384,
	/* Python frames read at a captured call (innermost first). */
	FX_PY_FRAMES = 32,
	/* Bytes kept of a code object's file name, name and qualified name
	 * (raw str data: length x kind bytes), and of its line table. */
	FX_PY_FILENAME_LEN = 256,
	FX_PY_NAME_LEN = 128,
	FX_PY_LINETABLE_LEN = 65536,
	/* Rows of the CPython layout table (one per supported minor version). */
	FX_PY_LAYOUTS = 8,
	/* Executable file mappings a stack capture lists, and the bytes kept
	 * of each file's name. */
	FX_MAX_VMAS = 128,
	FX_VMA_NAME_LEN = 48,
	/* Cgroups --all may be scoped to, and the cgroup v2 levels (the
	 * root is 0) they may lie at. */
	FX_MAX_SCOPES = 256,
	FX_SCOPE_LEVELS = 32,
};

/* The BPF code indexes and bounds with these masks. */
_Static_assert((FX_MAX_DEPTH & (FX_MAX_DEPTH - 1)) == 0, "FX_MAX_DEPTH must be a power of two");
_Static_assert((FX_ARGS_LEN & (FX_ARGS_LEN - 1)) == 0, "FX_ARGS_LEN must be a power of two");
_Static_assert((FX_FILENAME_LEN & (FX_FILENAME_LEN - 1)) == 0, "FX_FILENAME_LEN must be a power of two");
_Static_assert(FX_ARGS_LEN >= FX_FILENAME_LEN, "a path write bounded by masks stays inside fx_proc");
_Static_assert((FX_USTACK_MAX & 4095) == 0, "FX_USTACK_MAX must be a multiple of 4096");
_Static_assert((FX_PY_FRAMES & (FX_PY_FRAMES - 1)) == 0, "FX_PY_FRAMES must be a power of two");
_Static_assert((FX_PY_LINETABLE_LEN & (FX_PY_LINETABLE_LEN - 1)) == 0, "FX_PY_LINETABLE_LEN must be a power of two");
_Static_assert((FX_MAX_VMAS & (FX_MAX_VMAS - 1)) == 0, "FX_MAX_VMAS must be a power of two");

enum fx_kind {
	FX_KIND_CALL = 1,       /* struct fx_call */
	FX_KIND_PROC = 2,       /* struct fx_proc */
	FX_KIND_CALL_ARRAY = 3, /* struct fx_call_array: a call of a symbol with an array argument */
	FX_KIND_HOLD = 4,       /* struct fx_hold, on the holds ring only */
	/* Stack captures (stacks.h), each after the fx_call it belongs to. */
	FX_KIND_USTACK = 5,     /* struct fx_ustack: registers and user stack bytes */
	FX_KIND_PYSTACK = 6,    /* struct fx_pystack: the failing thread's Python frames */
	FX_KIND_PYCODE = 7,     /* struct fx_pycode: a code object, once per process while unchanged */
	FX_KIND_STACK_REF = 8,  /* struct fx_stack_ref: a call at a call site captured before */
	FX_KIND_VMAS = 9,       /* struct fx_vmas: the executable mappings at a capture */
	FX_KIND_THREAD = 10,    /* struct fx_thread: the name of a thread at a failed call */
};

/* Flags of a call. The same bits are stored with each event in run.db
 * (store.Event.Flags), so their numbers never change. Bits 0-7 are set by
 * the probes; bits 8-15 by the recorder in user space, never by the probes;
 * bits 16-31 are never stored (a reader may use them for marks of its own). */
enum fx_call_flags {
	FX_CALL_FROZEN = 1 << 0,      /* SIGSTOP sent at return (--freeze-on-failure) */
	FX_CALL_IN_FAULT = 1 << 1,    /* reading the input struct failed */
	FX_CALL_OUTA_FAULT = 1 << 2,  /* reading the first out pointer failed */
	FX_CALL_OUTB_FAULT = 1 << 3,  /* reading the second out pointer failed */
	FX_CALL_REORDERED = 1 << 4,   /* an inner frame never returned (longjmp) */
	FX_CALL_ARRAY_CUT = 1 << 5,   /* the array argument had more elements than were read */
	FX_CALL_ARRAY_FAULT = 1 << 6, /* reading the array argument failed */
	FX_CALL_LATE_ATTACH = 1 << 8, /* user space: the process was running before the probes were attached */
};

/* One completed call of an attached symbol. The ring record is the fixed
 * part and as much of the tail as the symbol's row captures (fx_symcfg's
 * tail_len: 0 for a call with nothing to read, 8 for an allocation's
 * returned pointer), so a record is FX_CALL_FIXED to sizeof(struct fx_call)
 * bytes long. The tail packs, each at a multiple of 8 bytes: the bytes read
 * through the first out pointer (offset 0), through the second
 * (tail_outb), the input struct read at entry (tail_in). */
struct fx_call {
	__u8 kind;     /* FX_KIND_CALL, or FX_KIND_CALL_ARRAY inside struct fx_call_array */
	__u8 depth;    /* 0 = called by the application */
	__u16 symbol;  /* row of the Go symbol table (attach cookie) */
	__u32 flags;   /* enum fx_call_flags */
	__u32 pid;     /* thread group id */
	__u32 tid;
	__s32 result;  /* CUresult, from eax at return */
	__s32 stack_id; /* user stack in the stacks map, or a negative errno */
	__u64 ts_entry; /* bpf_ktime_get_ns: CLOCK_MONOTONIC */
	__u64 ts_exit;
	__u64 args[6];  /* integer argument registers at entry */
	__u8 tail[FX_TAIL_LEN];
};
_Static_assert(__builtin_offsetof(struct fx_call, tail) == FX_CALL_FIXED, "FX_CALL_FIXED is the offset of the tail");

/* A call of a symbol whose row captures an array argument, always whole.
 * Only those symbols pay for the larger record; every other call is a
 * struct fx_call. */
struct fx_call_array {
	struct fx_call call;
	__u8 n;       /* elements read at entry: min(count, the row's maximum) */
	__u8 pad[7];
	__u8 data[FX_ARRAY_LEN]; /* the n elements, as the caller laid them out */
};

/* The name of the thread that made a failed call (its comm, as
 * pthread_setname_np or prctl(PR_SET_NAME) set it: "pt_autograd_0",
 * "worker-3"), read at the call's return and sent right after its call
 * record. Only failed calls send one, so a successful call's record does
 * not grow; a record the ring had no room for is not sent (the failure
 * then has no thread name). */
struct fx_thread {
	__u8 kind; /* FX_KIND_THREAD */
	__u8 pad[3];
	__u32 pid, tid;
	__u32 pad2;
	__u64 ts_exit; /* the failed call's, as in its fx_call */
	char comm[FX_COMM_LEN]; /* NUL terminated */
};

enum fx_proc_what {
	FX_PROC_FORK = 1,       /* a tracked process forked a new process */
	FX_PROC_EXEC = 2,
	FX_PROC_EXIT = 3,       /* the last thread of a tracked process exited */
	FX_PROC_FIRST_CALL = 4, /* --all: first call of an untracked process */
};

enum fx_proc_flags {
	/* argv was longer than FX_ARGS_LEN: args holds its first bytes, and
	 * its last argument may be cut too. */
	FX_PROC_ARGS_CUT = 1 << 0,
	/* argv could not be read (its pages were not in memory): args_len
	 * is 0. */
	FX_PROC_ARGS_FAULT = 1 << 1,
	/* The executable's path was longer than filename (or deeper than
	 * FX_PATH_STEPS): filename holds its last components. */
	FX_PROC_FILENAME_CUT = 1 << 2,
};

/* A lifecycle change of a tracked process. The record comes from the ring
 * buffer's memory, which is not zeroed: only what the lengths and the
 * terminating NULs say was written is the process's. */
struct fx_proc {
	__u8 kind;
	__u8 what;  /* enum fx_proc_what */
	__u8 flags; /* enum fx_proc_flags */
	__u8 pad;
	__u32 pid;
	__u32 tid;
	__u32 ppid;
	__s32 exit_code; /* wait status: (code << 8) | signal, as task->exit_code */
	__u16 args_len;     /* bytes of argv in args (exec, first call) */
	__u16 filename_len; /* bytes of the path at the end of filename */
	__u64 ts;
	__u64 cgroup_id;
	/* At exec and first call: the inode and device (the kernel's dev_t,
	 * major << 20 | minor) of the file the process runs (mm->exe_file),
	 * what /proc/PID/exe names while it is the same program; 0 if none. */
	__u64 exe_ino;
	__u32 exe_dev;
	__u32 pad3;
	char comm[FX_COMM_LEN]; /* NUL terminated */
	/* At exec and first call: the path of the file the process runs (at
	 * exec: the program, or a script's interpreter), as /proc/PID/exe
	 * names it: its last filename_len bytes, not NUL terminated. */
	char filename[FX_FILENAME_LEN];
	/* argv as it lies in the process's memory: args_len bytes, each
	 * argument NUL terminated (an argument may be empty). */
	char args[FX_ARGS_LEN];
};

enum fx_hold_flags {
	FX_HOLD_STOPPED = 1 << 0, /* SIGSTOP was sent: user space must continue it */
	/* The hook could not look at the mapping (its address space was
	 * locked): dev, ino and maybe name are unknown, and the file may not be
	 * a libcuda. User space finds the mapping at addr in /proc. */
	FX_HOLD_UNINSPECTED = 1 << 1,
	/* The process executed a program whose exec record user space has not
	 * read yet (it is in unread_execs): it maps libcuda before user space
	 * has read its mappings, located its interpreter and opened its root,
	 * so a failure right after would have no Python frames and maybe no
	 * files for its native ones. User space continues it once it has. */
	FX_HOLD_UNREAD = 1 << 2,
};

/* A recorded process has mapped, executable, a libcuda file whose probes
 * are not in yet (not in attached_files), or any libcuda file before user
 * space has read its last exec (FX_HOLD_UNREAD). The process is stopped
 * (SIGSTOP, taking effect as the system call returns) until user space has
 * attached the probes (and read the exec) and continues it. */
struct fx_hold {
	__u8 kind;
	__u8 flags;  /* enum fx_hold_flags */
	__u16 pad;
	__u32 pid;
	__u32 tid;
	__u32 dev;   /* the file's device, the kernel's dev_t (major << 20 | minor) */
	__u64 ino;
	__u64 addr;  /* an address inside the mapping */
	__u64 ts;
	char name[FX_NAME_LEN]; /* the file's name (last path component) */
};

/* Key of attached_files: a file the probes are on (or that user space has
 * dealt with). */
struct fx_file {
	__u64 dev; /* as fx_hold.dev */
	__u64 ino;
};

/* What the probes read for one symbol; index = attach cookie. Filled from the
 * Go symbol table before any probe is attached. Negative arg = none. */
struct fx_symcfg {
	__s8 in_arg;  /* 0..5 register argument holding a pointer, or FX_IN_STACK */
	__u8 in_len;
	__s8 outa_arg;
	__u8 outa_len;
	__s8 outb_arg;
	__u8 outb_len;
	__u8 stack;   /* capture the user stack of successful calls too */
	__u8 pad;
	/* Array argument: arr_arg holds a pointer to elements of arr_len bytes;
	 * register arr_count_arg (arr_count_width bytes wide) holds how many.
	 * At most arr_max elements are read (arr_max * arr_len <= FX_ARRAY_LEN).
	 * arr_len = 0: no array. */
	__s8 arr_arg;
	__u8 arr_len;
	__s8 arr_count_arg;
	__u8 arr_count_width;
	__u8 arr_max;
	/* Where the row's captures lie in a call record's tail (see struct
	 * fx_call): the second out parameter, the input struct, and the
	 * tail's length. */
	__u8 tail_outb;
	__u8 tail_in;
	__u8 tail_len;
};

/* Loss and health counters, one set per CPU, indexed by this enum; user
 * space combines the CPUs' values (sums counts, takes the earliest of
 * "first" times and the latest of "last" times) and maps each to its
 * run.db field through one table (bpf/counters.go). Every count here is
 * evidence the analyzer can report: nothing is dropped silently. */
enum fx_counter {
	FX_CTR_CALLS,              /* returns of tracked calls seen */
	FX_CTR_LOST_CALLS,         /* completed calls not delivered: ring buffer full */
	FX_CTR_LOST_FIRST_NS,      /* exit time of the earliest lost call */
	FX_CTR_LOST_LAST_NS,       /* ... and of the latest */
	FX_CTR_LOST_INFLIGHT,      /* calls not followed: no per-thread storage at entry or return */
	FX_CTR_TOO_DEEP,           /* entries beyond FX_MAX_DEPTH */
	FX_CTR_UNMATCHED_RETURNS,  /* returns without a stashed entry */
	FX_CTR_LOST_PROC,          /* lifecycle records not delivered */
	FX_CTR_LOST_PROC_FIRST_NS,
	FX_CTR_STACK_ERRORS,       /* stack captures that failed */
	FX_CTR_FROZEN,             /* processes stopped by --freeze-on-failure */
	FX_CTR_UNTRACKED,          /* processes the tracked map had no room for */
	FX_CTR_UNTRACKED_FIRST_NS,
	FX_CTR_LOST_HOLDS,         /* libcuda mappings not held: the holds ring was full */
	FX_CTR_STACK_SKIPPED,      /* stack captures not made: the rate limit (stacks.h) */
	FX_CTR_STACK_LOST,         /* stack captures made but not delivered: ring full, or another capture in progress on the CPU */
	FX_CTR_UNINSPECTED_MAPS,   /* executable mappings the map hook could not look at (address space locked): held uninspected */
	FX_COUNTER_MAX,
};

struct fx_stats {
	__u64 c[FX_COUNTER_MAX]; /* enum fx_counter */
	__u64 unwoken;           /* state, not evidence: successful calls since the last forced wake-up */
};

/* Registers a stack capture keeps, from the user registers at the call's
 * return: where an unwinder starts (ip, sp), the frame pointer and the
 * callee-saved registers a CFI rule may name, and the thread's fs base
 * (its pthread id on glibc). */
struct fx_regs {
	__u64 ip, sp, bp, bx, r12, r13, r14, r15;
	__u64 fs_base;
};

enum fx_ustack_flags {
	/* The copy stopped at an unreadable page before FX_USTACK_MAX: the
	 * top of the thread's stack. */
	FX_USTACK_FAULT = 1 << 0,
	/* The capture is of a failed call (else an allocation under --stacks). */
	FX_USTACK_FAILED = 1 << 1,
};

/* The registers and a copy of the user stack at a call's return (the
 * failed call's caller, instruction after its call), for unwinding
 * offline. Sent for 96 + stack_len bytes. Same pid, tid and ts_exit as
 * the fx_call it follows. */
struct fx_ustack {
	__u8 kind;      /* FX_KIND_USTACK */
	__u8 flags;     /* enum fx_ustack_flags */
	__u16 symbol;
	__u32 pid, tid;
	__u32 stack_len; /* bytes in stack[], copied from regs.sp up */
	__u64 ts_exit;
	struct fx_regs regs;
	__u8 stack[FX_USTACK_MAX];
};

/* One executable file mapping of the process at a capture. */
struct fx_vma {
	__u64 start, end; /* [start, end) */
	__u64 pgoff;      /* file offset mapped at start, in bytes */
	__u64 ino;        /* the inode of the file the pages come from */
	__u32 dev;        /* its device, the kernel's dev_t (major << 20 | minor) */
	__u32 pad;
	char name[FX_VMA_NAME_LEN]; /* the file's name (last path component), cut */
};

enum fx_vmas_flags {
	FX_VMAS_CUT = 1 << 0,  /* more executable mappings than FX_MAX_VMAS */
	FX_VMAS_BUSY = 1 << 1, /* the address space was being changed: none listed */
};

/* The process's executable file mappings at the return of a captured
 * call, read in the probe so that a process that exits right after its
 * failure is unwound with the mappings it had. Sent for 24 + n * 88 bytes,
 * before the fx_ustack of the same call. */
struct fx_vmas {
	__u8 kind;  /* FX_KIND_VMAS */
	__u8 flags; /* enum fx_vmas_flags */
	__u16 n;
	__u32 pid, tid;
	__u32 pad;
	__u64 ts_exit;
	struct fx_vma vmas[FX_MAX_VMAS];
};

/* What a Python walk found (fx_pystack.status). */
enum fx_py_status {
	FX_PY_OK = 0,
	FX_PY_NO_THREAD = 1, /* the interpreter has no thread state for this thread */
	FX_PY_FAULT = 2,     /* a read of the interpreter's memory failed */
	FX_PY_TRUNCATED = 3, /* more frames than FX_PY_FRAMES: the outermost are left out */
	FX_PY_NO_LAYOUT = 4, /* the process's layout row is missing */
};

/* One Python frame as read: its code object (3.13: f_executable) and
 * instruction (3.11+: prev_instr/instr_ptr; 3.10: f_lasti, sign-extended). */
struct fx_pyframe {
	__u64 code;
	__u64 instr;
};

/* The Python frames of the failing thread at the call's return,
 * innermost first. Follows the fx_pycode records of code objects not sent
 * before, and precedes the fx_ustack of the same call. */
struct fx_pystack {
	__u8 kind;    /* FX_KIND_PYSTACK */
	__u8 status;  /* enum fx_py_status */
	__u8 minor;   /* CPython 3.minor: the layout the frames were read with */
	__u8 nframes;
	__u32 pid, tid;
	__u32 pad;
	__u64 ts_exit;
	__u64 tstate; /* the thread's PyThreadState */
	struct fx_pyframe frames[FX_PY_FRAMES];
	__u8 owner[FX_PY_FRAMES]; /* the frame's owner (3.11+); bit 7: is_entry (3.11) */
};

enum fx_pycode_flags {
	FX_PYCODE_FAULT = 1 << 0, /* a string or the line table could not be read */
};

/* A code object as copied once per process while its fingerprint (the
 * string and line table pointers, the first line) holds: what names a
 * Python frame and turns its instruction into a line. Sent for 72 + 512
 * + linetable_len bytes. */
struct fx_pycode {
	__u8 kind;   /* FX_KIND_PYCODE */
	__u8 flags;  /* enum fx_pycode_flags */
	__u8 minor;
	__u8 pad;
	__u32 pid;
	__u64 code;  /* the code object's address */
	__u64 ts;    /* the return time of the call whose capture copied it */
	__u64 type;  /* ob_type */
	__s32 firstlineno, firsttraceable;
	__u32 state[3];  /* str state words: filename, name, qualname */
	__u32 length[3]; /* their lengths in code points (at most 2^32-1) */
	__u32 linetable_len;  /* bytes in linetable[] */
	__u32 linetable_size; /* the table's full size (more when cut) */
	char filename[FX_PY_FILENAME_LEN], name[FX_PY_NAME_LEN], qualname[FX_PY_NAME_LEN];
	__u8 linetable[FX_PY_LINETABLE_LEN];
};

/* A call whose call site (process, symbol, ip, sp and Python frames) was
 * captured before: the stack is that capture's, named by its thread and
 * return time. */
struct fx_stack_ref {
	__u8 kind;   /* FX_KIND_STACK_REF */
	__u8 pad[3];
	__u32 pid, tid;
	__u32 ref_tid;
	__u64 ts_exit;
	__u64 ref_ts;
};

/* The structure offsets (bytes) of one CPython minor version a Python walk
 * reads; -1 for a field the version lacks. Filled from pystack's table. */
struct fx_pylayout {
	__u32 minor;
	__s32 runtime_interpreters_head;
	__s32 interp_next, interp_threads_head;
	__s32 thread_next, thread_id, thread_native_id, thread_frame, cframe_current_frame;
	__s32 frame_code, frame_previous, frame_instr, frame_is_entry, frame_owner, frame_size;
	__s32 code_type, code_filename, code_name, code_qualname, code_firstlineno, code_linetable,
	      code_firsttraceable, code_size;
	__s32 unicode_length, unicode_state, ascii_size, compact_size;
	__s32 bytes_size, bytes_data;
	__u32 instr_int; /* 3.10: the instruction is f_lasti, an int */
};

/* A CPython process, set by user space when it locates the interpreter. */
struct fx_pyproc {
	__u64 runtime; /* address of _PyRuntime */
	__u32 layout;  /* row of the layout table */
	__u32 pad;
};

#endif

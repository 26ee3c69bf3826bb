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
	FX_FILENAME_LEN = 128,
	FX_ARGS_LEN = 256,
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
};

/* The BPF code indexes and bounds with these masks. */
_Static_assert((FX_MAX_DEPTH & (FX_MAX_DEPTH - 1)) == 0, "FX_MAX_DEPTH must be a power of two");
_Static_assert((FX_ARGS_LEN & (FX_ARGS_LEN - 1)) == 0, "FX_ARGS_LEN must be a power of two");

enum fx_kind {
	FX_KIND_CALL = 1,       /* struct fx_call */
	FX_KIND_PROC = 2,       /* struct fx_proc */
	FX_KIND_CALL_ARRAY = 3, /* struct fx_call_array: a call of a symbol with an array argument */
	FX_KIND_HOLD = 4,       /* struct fx_hold, on the holds ring only */
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

enum fx_proc_what {
	FX_PROC_FORK = 1,       /* a tracked process forked a new process */
	FX_PROC_EXEC = 2,
	FX_PROC_EXIT = 3,       /* the last thread of a tracked process exited */
	FX_PROC_FIRST_CALL = 4, /* --all: first call of an untracked process */
};

/* A lifecycle change of a tracked process. */
struct fx_proc {
	__u8 kind;
	__u8 what; /* enum fx_proc_what */
	__u16 pad;
	__u32 pid;
	__u32 tid;
	__u32 ppid;
	__s32 exit_code; /* wait status: (code << 8) | signal, as task->exit_code */
	__u32 pad2;
	__u64 ts;
	__u64 cgroup_id;
	char comm[FX_COMM_LEN];
	char filename[FX_FILENAME_LEN];
	char args[FX_ARGS_LEN]; /* argv, NUL separated, possibly truncated */
};

enum fx_hold_flags {
	FX_HOLD_STOPPED = 1 << 0, /* SIGSTOP was sent: user space must continue it */
};

/* A recorded process has mapped, executable, a libcuda file whose probes
 * are not in yet (not in attached_files). The process is stopped (SIGSTOP,
 * taking effect as the system call returns) until user space has attached
 * the probes and continues it. */
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
	FX_CTR_LOST_INFLIGHT,      /* entries not stashed: no per-thread storage */
	FX_CTR_TOO_DEEP,           /* entries beyond FX_MAX_DEPTH */
	FX_CTR_UNMATCHED_RETURNS,  /* returns without a stashed entry */
	FX_CTR_LOST_PROC,          /* lifecycle records not delivered */
	FX_CTR_LOST_PROC_FIRST_NS,
	FX_CTR_STACK_ERRORS,       /* stack captures that failed */
	FX_CTR_FROZEN,             /* processes stopped by --freeze-on-failure */
	FX_CTR_UNTRACKED,          /* processes the tracked map had no room for */
	FX_CTR_UNTRACKED_FIRST_NS,
	FX_CTR_LOST_HOLDS,         /* libcuda mappings not held: the holds ring was full */
	FX_COUNTER_MAX,
};

struct fx_stats {
	__u64 c[FX_COUNTER_MAX]; /* enum fx_counter */
	__u64 unwoken;           /* state, not evidence: successful calls since the last forced wake-up */
};

#endif

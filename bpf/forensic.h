/* The records the BPF program hands to user space, defined once: bpf2go
 * generates the Go types from these structs, so kernel and user side cannot
 * disagree on a layout. */
#ifndef FORENSIC_H
#define FORENSIC_H

/* Most hooked symbols a probe cookie may name; the Go symbol table is checked
 * against it. */
#define FX_MAX_SYMBOLS 512
/* Nested hooked calls on one thread (a library calling its own exported
 * entry points) tracked per thread. Deeper calls are counted, not recorded. */
#define FX_MAX_DEPTH 4
#define FX_IN_LEN 32
#define FX_OUTA_LEN 32
#define FX_OUTB_LEN 8
#define FX_COMM_LEN 16
#define FX_FILENAME_LEN 128
#define FX_ARGS_LEN 256
/* User stack frames kept per failed call. Frames are stored by the kernel
 * as (build id, file offset), so they stay resolvable after the process
 * exits. */
#define FX_STACK_DEPTH 64
/* Bytes of a mapped file's name kept in a hold record. */
#define FX_NAME_LEN 64

/* In-argument source that is not a register: a struct passed by value lies
 * on the stack just above the return address (SysV x86-64, MEMORY class). */
#define FX_IN_STACK 6

enum fx_kind {
	FX_KIND_CALL = 1,
	FX_KIND_PROC = 2,
	FX_KIND_HOLD = 3, /* on the holds ring only */
};

enum fx_call_flags {
	FX_CALL_FROZEN = 1 << 0,      /* SIGSTOP sent at return (--freeze-on-failure) */
	FX_CALL_IN_FAULT = 1 << 1,    /* reading the input struct failed */
	FX_CALL_OUTA_FAULT = 1 << 2,  /* reading the first out pointer failed */
	FX_CALL_OUTB_FAULT = 1 << 3,  /* reading the second out pointer failed */
	FX_CALL_REORDERED = 1 << 4,   /* an inner frame never returned (longjmp) */
};

/* One completed call of a hooked symbol. */
struct fx_call {
	__u8 kind;
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
	__u8 in[FX_IN_LEN];     /* bytes read at entry from a pointer argument or the stack */
	__u8 outa[FX_OUTA_LEN]; /* bytes read at return through an out-pointer argument */
	__u8 outb[FX_OUTB_LEN]; /* ... and through a second one */
};

enum fx_proc_what {
	FX_PROC_FORK = 1,       /* a tracked process forked a new process */
	FX_PROC_EXEC = 2,
	FX_PROC_EXIT = 3,       /* the last thread of a tracked process exited */
	FX_PROC_FIRST_CALL = 4, /* --all: first hooked call of an untracked process */
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
};

/* Loss and health counters, one per CPU; user space sums them. Every count
 * here is evidence the analyzer reports: nothing is dropped silently. */
struct fx_stats {
	__u64 calls;            /* returns of tracked calls seen */
	__u64 lost_calls;       /* completed calls not delivered: ring buffer full */
	__u64 lost_first_ns;    /* exit time of the earliest lost call on this CPU */
	__u64 lost_last_ns;
	__u64 lost_inflight;    /* entries not stashed: in-flight map full */
	__u64 too_deep;         /* entries beyond FX_MAX_DEPTH */
	__u64 unmatched_returns; /* returns without a stashed entry */
	__u64 lost_proc;        /* lifecycle records not delivered */
	__u64 lost_proc_first_ns;
	__u64 stack_errors;     /* stack captures that failed */
	__u64 frozen;           /* processes stopped by --freeze-on-failure */
	__u64 unwoken;          /* successful calls since the last forced wake-up */
	__u64 lost_holds;       /* libcuda mappings not held: the holds ring was full */
};

#endif

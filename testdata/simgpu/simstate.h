/*
 * simstate.h - the simulated GPU's shared device state.
 *
 * One file (SIMGPU_STATE, default /tmp/simgpu-$UID.state) is mmap'ed
 * MAP_SHARED by every process that loads libcuda.so.1 or libnvidia-ml.so.1
 * from this directory. Each operation runs under a process mutex plus an
 * flock on the file. Both libraries compile this file in with hidden
 * visibility, so each library in a process has its own mapping and fd.
 */
#ifndef SIMSTATE_H
#define SIMSTATE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SIM_HIDDEN __attribute__((visibility("hidden")))
#define SIM_EXPORT __attribute__((visibility("default")))

#define SIM_MAX_DEV 8
#define SIM_MAX_MIG 7
#define SIM_MAX_PROC 1024
#define SIM_MAX_ORD (SIM_MAX_DEV * SIM_MAX_MIG)

#define SIM_STATE_MAGIC "SIMGPU\0\0"
#define SIM_STATE_VERSION 4u

struct sim_inst {
    uint64_t total;
    uint64_t reserved;
    uint64_t used;
};

struct sim_dev {
    uint64_t fb_total;
    uint64_t fb_reserved;
    uint64_t fb_used;      /* sum of all live allocations (all instances) */
    uint64_t bar1_total;
    uint64_t bar1_used;    /* includes the initial SIMGPU_BAR1_USED */
    struct sim_inst inst[SIM_MAX_MIG];
};

/* One row per (pid, physical device, MIG instance). Freed (pid = 0) when
 * it holds nothing: no framebuffer, no BAR1, no context. */
struct sim_proc {
    int32_t pid;
    int32_t phys;
    int32_t inst;          /* -1 when MIG is off */
    int32_t ctxs;          /* live contexts of that process on the device */
    uint64_t fb;           /* framebuffer bytes (ctx_fb included) */
    uint64_t ctx_fb;       /* framebuffer bytes its contexts hold (SIMGPU_CTX_MEM each) */
    uint64_t bar1;         /* BAR1 bytes mapped by that process */
};

struct sim_state {
    char magic[8];
    uint32_t version;
    uint32_t size;
    uint32_t ndev;
    uint32_t mig;          /* MIG instances per device, 0 = off */
    uint64_t peer_bar1;
    uint64_t pin_limit;    /* 0 = unlimited */
    uint64_t ctx_mem;      /* framebuffer each context holds, 0 = none */
    uint64_t creator_pid;
    struct sim_dev dev[SIM_MAX_DEV];
    uint32_t nproc;        /* high-water mark of proc[] */
    uint32_t pad;
    struct sim_proc proc[SIM_MAX_PROC];
};

/* Map the state file (create and initialize it from the environment if
 * absent). Idempotent and thread-safe. 0 on success, -1 on failure (a
 * message goes to stderr once). */
SIM_HIDDEN int sim_attach(void);

/* Lock the state (process mutex + flock), reclaim rows of dead processes,
 * and return it. sim_attach must have succeeded. */
SIM_HIDDEN struct sim_state *sim_lock(void);
SIM_HIDDEN void sim_unlock(void);

/* getpid(), cached (and reset in forked children). */
SIM_HIDDEN pid_t sim_pid(void);

/* Unlocked reads of constant fields (set once at creation). */
SIM_HIDDEN const struct sim_state *sim_peek(void);

/* Number of CUDA devices (MIG instances when MIG is on). */
SIM_HIDDEN int sim_cuda_count(const struct sim_state *st);
/* CUDA ordinal -> physical device and instance (-1 when MIG is off). */
SIM_HIDDEN void sim_ordinal(const struct sim_state *st, int ord, int *phys, int *inst);

/* Free framebuffer of a device (inst -1) or a MIG instance. */
SIM_HIDDEN uint64_t sim_fb_free(const struct sim_state *st, int phys, int inst);
SIM_HIDDEN uint64_t sim_fb_total(const struct sim_state *st, int phys, int inst);
SIM_HIDDEN uint64_t sim_fb_reserved(const struct sim_state *st, int phys, int inst);
SIM_HIDDEN uint64_t sim_fb_used(const struct sim_state *st, int phys, int inst);

/* Accounting on a locked state. Charges return 0, -1 when the resource
 * has less free than asked, -2 when the process table is full. */
SIM_HIDDEN int sim_fb_charge(struct sim_state *st, pid_t pid, int phys, int inst, uint64_t bytes);
SIM_HIDDEN void sim_fb_uncharge(struct sim_state *st, pid_t pid, int phys, int inst, uint64_t bytes);
SIM_HIDDEN int sim_bar1_charge(struct sim_state *st, pid_t pid, int phys, int inst, uint64_t bytes);
SIM_HIDDEN void sim_bar1_uncharge(struct sim_state *st, pid_t pid, int phys, int inst, uint64_t bytes);
/* A context's own framebuffer (ctx_mem) is charged with it: -1 when it
 * does not fit. */
SIM_HIDDEN int sim_ctx_adjust(struct sim_state *st, pid_t pid, int phys, int inst, int delta);
/* Drop every row of pid, returning what it held. */
SIM_HIDDEN void sim_release_pid(struct sim_state *st, pid_t pid);

/* Identity. */
SIM_HIDDEN void sim_uuid(int phys, int inst, unsigned char out[16]);
/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (prefix "MIG" for inst >= 0);
 * out needs 41 bytes. */
SIM_HIDDEN void sim_uuid_string(int phys, int inst, char *out, size_t len);
SIM_HIDDEN void sim_device_name(const struct sim_state *st, int phys, int inst, char *out, size_t len);
SIM_HIDDEN unsigned sim_pci_bus(int phys);

/* "123", "4K", "16G" (powers of two). 0 on success. */
SIM_HIDDEN int sim_parse_size(const char *s, uint64_t *out);

#endif

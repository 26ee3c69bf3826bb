/*
 * libcuda.c - the simulated CUDA driver (libcuda.so.1).
 *
 * Every exported cu* function is a separate function with cuda.h's C
 * signature. Versioned and _ptsz names share static implementations; no
 * exported function calls another exported function, so one application
 * call fires exactly one uprobe. Semantics: README.md.
 *
 * Per-process bookkeeping (pointer -> device, size, kind) lives here;
 * device usage, BAR1 and the per-process usage table live in the shared
 * state (simstate.c).
 */
#define _GNU_SOURCE
#include "simcuda.h"
#include "simstate.h"
#include "cuerrors.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define API SIM_EXPORT

#define MiB (1024ull * 1024ull)

/* ------------------------------------------------------------------------ */
/* Process state                                                             */
/* ------------------------------------------------------------------------ */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* guards everything below */
static atomic_int initialized;
static atomic_int sticky;

#define CTX_MAGIC 0x43545853u /* "SXTC" */

struct ctx {
    uint32_t magic;
    int ord;
    int phys, inst;
    int primary;
    int green; /* the context of a green context (cuGreenCtxDestroy frees it) */
    int destroyed;
    struct ctx *next; /* all contexts ever created (never freed) */
};

static struct ctx *ctx_all;

struct primary {
    struct ctx *c;
    int refs;
};
static struct primary prim[SIM_MAX_ORD];

#define STACK_MAX 128
static __thread struct ctx *tstack[STACK_MAX];
static __thread int tdepth;

enum kind {
    K_DEV = 1,    /* cuMemAlloc_v2 */
    K_DEV_V1,     /* cuMemAlloc */
    K_PITCH,      /* cuMemAllocPitch_v2 */
    K_PITCH_V1,   /* cuMemAllocPitch */
    K_MANAGED,    /* cuMemAllocManaged */
    K_ASYNC,      /* cuMemAllocAsync* (default pool) */
    K_POOLALLOC,  /* cuMemAllocFromPoolAsync* */
    K_POOLIMPORT, /* cuMemPoolImportPointer */
    K_IPC,        /* cuIpcOpenMemHandle* */
    K_EXTBUF,     /* cuExternalMemoryGetMappedBuffer */
    K_HOSTMAP_V1, /* 32-bit alias of host memory (cuMemHostGetDevicePointer) */
    K_ARRAY,      /* cuArrayCreate*, cuArray3DCreate* */
    K_MIPMAP,     /* cuMipmappedArrayCreate */
    K_POOL,       /* cuMemPoolCreate */
    K_VMM,        /* cuMemCreate / cuMemImportFromShareableHandle */
    K_EXTMEM,     /* cuImportExternalMemory */
};

/* Device pointers and handles: synthetic, never dereferenced. */
struct rec {
    uint64_t key;
    int kind;
    int ord;            /* CUDA ordinal the memory belongs to */
    int phys, inst;
    uint64_t size;      /* bytes requested (or consumed for pitch/arrays) */
    uint64_t fb;        /* framebuffer charged to this process */
    uint64_t bar1;      /* BAR1 charged to this process (owner's device) */
    int bar1_phys, bar1_inst;
    struct ctx *ctx;    /* context the record dies with, or NULL */
    uint64_t aux;       /* pool alloc: pool key; extbuf: ext key */
    uint64_t refs;      /* VMM: 1 + mappings; pool: live allocations bytes */
    int released;       /* VMM: cuMemRelease called; pool: destroyed */
    struct rec *hnext;
};

/* Host allocations and registrations: real memory. */
struct hrec {
    uintptr_t addr;
    size_t size;
    int registered;
    CUdeviceptr_v1 v1;  /* 32-bit alias, 0 until asked for */
    struct hrec *next;
};

struct va {
    uint64_t addr, size;
    struct va *next;
};

struct mapping {
    uint64_t addr, size;
    struct rec *h;        /* K_VMM */
    uint64_t granted;     /* bit per CUDA ordinal granted besides the owner */
    uint64_t bar1;
    struct mapping *next;
};

struct peer {
    struct ctx *from, *to;
    int phys, inst;
    uint64_t bytes;
    struct peer *next;
};

#define HBITS 16
#define HSIZE (1u << HBITS)
static struct rec *htab[HSIZE];
static struct hrec *hosts;
static struct va *vas;
static struct mapping *maps;
static struct peer *peers;
static uint64_t pinned;

/* Address layout: fake device pointers live above the 47-bit user address
 * space so they can never collide with host memory; 32-bit (v1) pointers
 * are below 4 GiB. */
#define DEV_BASE (1ull << 48)
#define DEV_WIN (1ull << 44) /* 16 TiB per CUDA ordinal */
#define VA_BASE (DEV_BASE + 64 * DEV_WIN)
#define VA_WIN (1ull << 46)
#define HANDLE_BASE (VA_BASE + VA_WIN)
#define V1_BASE 0x40000000ull
#define V1_END 0x100000000ull

static uint64_t dev_next[SIM_MAX_ORD];
static uint64_t v1_next;
static uint64_t va_next;
static uint64_t handle_next;

/* SIMGPU_FAIL */
struct failsym {
    char name[96];
    atomic_ulong count;
};
struct failent {
    int sym;
    unsigned long n;
    int code;
};
#define FAIL_MAX 64
static struct failsym fsyms[FAIL_MAX];
static int nfsyms;
static struct failent fents[FAIL_MAX];
static int nfents;
static pthread_once_t fail_once = PTHREAD_ONCE_INIT;

/* ------------------------------------------------------------------------ */
/* Entry checks                                                              */
/* ------------------------------------------------------------------------ */

static int is_sticky(int code)
{
    switch (code) {
    case 214: case 700: case 701: case 702: case 714: case 715:
    case 716: case 717: case 718: case 719:
        return 1;
    default:
        return 0;
    }
}

static void parse_fail(void)
{
    const char *env = getenv("SIMGPU_FAIL");
    if (!env || !*env)
        return;
    char *dup = strdup(env), *save = NULL;
    if (!dup)
        return;
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        char *c1 = strchr(tok, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c1 || !c2 || c1 == tok || (size_t)(c1 - tok) >= sizeof(fsyms[0].name)) {
            fprintf(stderr, "simgpu: ignoring bad SIMGPU_FAIL entry '%s'\n", tok);
            continue;
        }
        char *e1, *e2;
        unsigned long n = strtoul(c1 + 1, &e1, 10);
        long code = strtol(c2 + 1, &e2, 0);
        if (e1 != c2 || n == 0 || *e2 || code <= 0) {
            fprintf(stderr, "simgpu: ignoring bad SIMGPU_FAIL entry '%s'\n", tok);
            continue;
        }
        *c1 = 0;
        int s;
        for (s = 0; s < nfsyms; s++)
            if (strcmp(fsyms[s].name, tok) == 0)
                break;
        if (s == nfsyms) {
            if (nfsyms == FAIL_MAX)
                break;
            snprintf(fsyms[s].name, sizeof(fsyms[s].name), "%s", tok);
            atomic_init(&fsyms[s].count, 0);
            nfsyms++;
        }
        if (nfents == FAIL_MAX)
            break;
        fents[nfents].sym = s;
        fents[nfents].n = n;
        fents[nfents].code = (int)code;
        nfents++;
    }
    free(dup);
}

enum { F_INIT = 1, F_NOSTICKY = 2 };

static CUresult enter(const char *name, int flags)
{
    if (!(flags & F_NOSTICKY)) {
        int s = atomic_load_explicit(&sticky, memory_order_relaxed);
        if (s)
            return (CUresult)s;
    }
    pthread_once(&fail_once, parse_fail);
    if (nfents) {
        for (int s = 0; s < nfsyms; s++) {
            if (strcmp(fsyms[s].name, name) != 0)
                continue;
            unsigned long n = atomic_fetch_add(&fsyms[s].count, 1) + 1;
            for (int e = 0; e < nfents; e++) {
                if (fents[e].sym == s && fents[e].n == n) {
                    if (is_sticky(fents[e].code))
                        atomic_store(&sticky, fents[e].code);
                    return (CUresult)fents[e].code;
                }
            }
            break;
        }
    }
    if ((flags & F_INIT) && !atomic_load_explicit(&initialized, memory_order_acquire))
        return CUDA_ERROR_NOT_INITIALIZED;
    return CUDA_SUCCESS;
}

#define ENTER(flags)                                   \
    do {                                               \
        CUresult enter_rc_ = enter(__func__, (flags)); \
        if (enter_rc_ != CUDA_SUCCESS)                 \
            return enter_rc_;                          \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Helpers (all called with mu held unless noted)                            */
/* ------------------------------------------------------------------------ */

static int ord_count(void)
{
    const struct sim_state *st = sim_peek();
    return st ? sim_cuda_count(st) : 0;
}

static int valid_ord(int ord)
{
    return ord >= 0 && ord < ord_count() && ord < SIM_MAX_ORD;
}

static void ord_split(int ord, int *phys, int *inst)
{
    sim_ordinal(sim_peek(), ord, phys, inst);
}

/* Current context of the calling thread (no lock needed: TLS). */
static CUresult cur_ctx(struct ctx **out)
{
    if (tdepth == 0 || !tstack[tdepth - 1])
        return CUDA_ERROR_INVALID_CONTEXT;
    struct ctx *c = tstack[tdepth - 1];
    if (c->destroyed)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = c;
    return CUDA_SUCCESS;
}

#define NEED_CTX(c)                                  \
    struct ctx *c;                                   \
    do {                                             \
        CUresult need_rc_ = cur_ctx(&c);             \
        if (need_rc_ != CUDA_SUCCESS)                \
            return need_rc_;                         \
    } while (0)

static int ctx_known(struct ctx *c)
{
    for (struct ctx *x = ctx_all; x; x = x->next)
        if (x == c)
            return 1;
    return 0;
}

static unsigned hidx(uint64_t k)
{
    k ^= k >> 29;
    k *= 0xbf58476d1ce4e5b9ull;
    k ^= k >> 32;
    return (unsigned)(k & (HSIZE - 1));
}

static struct rec *hfind(uint64_t key)
{
    for (struct rec *r = htab[hidx(key)]; r; r = r->hnext)
        if (r->key == key)
            return r;
    return NULL;
}

static void hinsert(struct rec *r)
{
    unsigned i = hidx(r->key);
    r->hnext = htab[i];
    htab[i] = r;
}

static void hremove(struct rec *r)
{
    struct rec **pp = &htab[hidx(r->key)];
    while (*pp && *pp != r)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = r->hnext;
}

static struct rec *rec_new(int kind, int ord)
{
    struct rec *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->kind = kind;
    r->ord = ord;
    r->bar1_phys = -1;
    r->bar1_inst = -1;
    if (ord >= 0)
        ord_split(ord, &r->phys, &r->inst);
    return r;
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) & ~(a - 1);
}

/* A fresh fake device pointer for `size` bytes on CUDA ordinal `ord`
 * (v1: below 4 GiB). 0 when none is available. */
static uint64_t gen_devptr(int ord, uint64_t size, int v1)
{
    uint64_t align = size >= 2 * MiB ? 2 * MiB : 4096;
    uint64_t step = align_up(size ? size : 1, align);
    uint64_t lo, hi, *next;
    if (v1) {
        lo = V1_BASE;
        hi = V1_END;
        next = &v1_next;
    } else {
        lo = DEV_BASE + (uint64_t)ord * DEV_WIN;
        hi = lo + DEV_WIN;
        next = &dev_next[ord];
    }
    if (step > hi - lo)
        return 0;
    if (*next < lo || *next >= hi)
        *next = lo;
    uint64_t p = align_up(*next, align);
    for (int tries = 0; tries < 64; tries++) {
        if (p + step > hi || p + step < p)
            p = lo;
        if (!hfind(p)) {
            *next = p + step;
            return p;
        }
        p += step;
    }
    return 0;
}

static uint64_t gen_handle(void)
{
    if (handle_next < HANDLE_BASE)
        handle_next = HANDLE_BASE + 0x1000;
    handle_next += 0x100;
    return handle_next;
}

/* Shared-state charges. Return CUDA_SUCCESS or the failure code. */
static CUresult fb_charge(int phys, int inst, uint64_t bytes)
{
    struct sim_state *st = sim_lock();
    if (!st)
        return CUDA_ERROR_NOT_INITIALIZED;
    int r = sim_fb_charge(st, sim_pid(), phys, inst, bytes);
    sim_unlock();
    return r == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static void fb_uncharge(int phys, int inst, uint64_t bytes)
{
    if (!bytes)
        return;
    struct sim_state *st = sim_lock();
    if (!st)
        return;
    sim_fb_uncharge(st, sim_pid(), phys, inst, bytes);
    sim_unlock();
}

static CUresult bar1_charge(int phys, int inst, uint64_t bytes)
{
    struct sim_state *st = sim_lock();
    if (!st)
        return CUDA_ERROR_NOT_INITIALIZED;
    int r = sim_bar1_charge(st, sim_pid(), phys, inst, bytes);
    sim_unlock();
    return r == 0 ? CUDA_SUCCESS : CUDA_ERROR_MAP_FAILED;
}

static void bar1_uncharge(int phys, int inst, uint64_t bytes)
{
    if (!bytes)
        return;
    struct sim_state *st = sim_lock();
    if (!st)
        return;
    sim_bar1_uncharge(st, sim_pid(), phys, inst, bytes);
    sim_unlock();
}

/* Count a context in or out, with its own framebuffer (SIMGPU_CTX_MEM):
 * 0, or -1 when it does not fit. */
static int ctx_account(int phys, int inst, int delta)
{
    struct sim_state *st = sim_lock();
    if (!st)
        return 0;
    int rc = sim_ctx_adjust(st, sim_pid(), phys, inst, delta);
    sim_unlock();
    return rc;
}

static void pool_uncount(uint64_t pool_key, uint64_t bytes);

/* Release what a record holds and free it. */
static void rec_destroy(struct rec *r)
{
    hremove(r);
    fb_uncharge(r->phys, r->inst, r->fb);
    if (r->bar1)
        bar1_uncharge(r->bar1_phys, r->bar1_inst, r->bar1);
    if (r->kind == K_POOLALLOC)
        pool_uncount(r->aux, r->size);
    free(r);
}

static void pool_uncount(uint64_t pool_key, uint64_t bytes)
{
    struct rec *p = hfind(pool_key);
    if (!p || p->kind != K_POOL)
        return;
    p->refs = p->refs >= bytes ? p->refs - bytes : 0;
    if (p->released && p->refs == 0) {
        hremove(p);
        free(p);
    }
}

/* A device allocation of `kind` on ordinal ord; consumes `fb` bytes. */
static CUresult dev_alloc(int kind, int ord, uint64_t size, uint64_t fb, int v1, struct ctx *c,
                          uint64_t *out, struct rec **rout)
{
    struct rec *r = rec_new(kind, ord);
    if (!r)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t p = gen_devptr(ord, fb ? fb : size, v1);
    if (!p) {
        free(r);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (fb) {
        CUresult rc = fb_charge(r->phys, r->inst, fb);
        if (rc != CUDA_SUCCESS) {
            free(r);
            return rc;
        }
    }
    r->key = p;
    r->size = size;
    r->fb = fb;
    r->ctx = c;
    hinsert(r);
    *out = p;
    if (rout)
        *rout = r;
    return CUDA_SUCCESS;
}

static int ctx_bound_kind(int kind)
{
    switch (kind) {
    case K_DEV: case K_DEV_V1: case K_PITCH: case K_PITCH_V1: case K_MANAGED:
    case K_ASYNC: case K_POOLALLOC: case K_POOLIMPORT: case K_IPC: case K_EXTBUF:
    case K_ARRAY: case K_MIPMAP:
        return 1;
    default:
        return 0;
    }
}

/* A context goes away: the driver frees what was allocated in it and the
 * peer mappings from or to it. */
static void ctx_teardown(struct ctx *c)
{
    for (unsigned i = 0; i < HSIZE; i++) {
        struct rec *r = htab[i];
        while (r) {
            struct rec *nx = r->hnext;
            if (r->ctx == c && ctx_bound_kind(r->kind))
                rec_destroy(r);
            r = nx;
        }
    }
    struct peer **pp = &peers;
    while (*pp) {
        struct peer *p = *pp;
        if (p->from == c || p->to == c) {
            bar1_uncharge(p->phys, p->inst, p->bytes);
            *pp = p->next;
            free(p);
        } else {
            pp = &p->next;
        }
    }
    c->destroyed = 1;
    ctx_account(c->phys, c->inst, -1);
}

static struct ctx *ctx_new(int ord, int primary)
{
    struct ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->magic = CTX_MAGIC;
    c->ord = ord;
    ord_split(ord, &c->phys, &c->inst);
    c->primary = primary;
    if (ctx_account(c->phys, c->inst, +1) != 0) {
        free(c);
        return NULL;
    }
    c->next = ctx_all;
    ctx_all = c;
    return c;
}

static struct hrec *host_find_containing(uintptr_t p)
{
    for (struct hrec *h = hosts; h; h = h->next)
        if (p >= h->addr && p < h->addr + h->size)
            return h;
    return NULL;
}

static struct hrec *host_find_overlap(uintptr_t p, size_t n)
{
    for (struct hrec *h = hosts; h; h = h->next)
        if (p < h->addr + h->size && h->addr < p + n)
            return h;
    return NULL;
}

static void host_unlink(struct hrec *h)
{
    struct hrec **pp = &hosts;
    while (*pp && *pp != h)
        pp = &(*pp)->next;
    if (*pp)
        *pp = h->next;
    if (h->v1) {
        struct rec *r = hfind(h->v1);
        if (r && r->kind == K_HOSTMAP_V1) {
            hremove(r);
            free(r);
        }
    }
    pinned = pinned >= h->size ? pinned - h->size : 0;
}

static CUresult pin_check(size_t bytes)
{
    const struct sim_state *st = sim_peek();
    if (st && st->pin_limit && pinned + bytes > st->pin_limit)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* fork and exit                                                             */
/* ------------------------------------------------------------------------ */

static void atfork_prepare(void)
{
    pthread_mutex_lock(&mu);
}

static void atfork_parent(void)
{
    pthread_mutex_unlock(&mu);
}

/* The child starts with a clean driver: no contexts, no allocations, must
 * call cuInit again; SIMGPU_FAIL counts restart. */
static void atfork_child(void)
{
    pthread_mutex_init(&mu, NULL);
    atomic_store(&initialized, 0);
    atomic_store(&sticky, 0);
    memset(htab, 0, sizeof(htab));
    hosts = NULL;
    vas = NULL;
    maps = NULL;
    peers = NULL;
    pinned = 0;
    ctx_all = NULL;
    memset(prim, 0, sizeof(prim));
    tdepth = 0;
    for (int s = 0; s < nfsyms; s++)
        atomic_store(&fsyms[s].count, 0);
}

__attribute__((constructor)) static void lib_init(void)
{
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* Process exit returns what the process held, as the real driver does.
 * This runs in the process, before the kernel sees it exit: a sample taken
 * in between sees the memory free and the process still alive.
 * SIMGPU_EXIT_DELAY_MS widens that window (a slow teardown, a loaded host). */
__attribute__((destructor)) static void lib_fini(void)
{
    if (!sim_peek())
        return;
    struct sim_state *st = sim_lock();
    if (st) {
        sim_release_pid(st, sim_pid());
        sim_unlock();
    }
    const char *d = getenv("SIMGPU_EXIT_DELAY_MS");
    if (d && atoi(d) > 0) {
        struct timespec ts = {atoi(d) / 1000, (long)(atoi(d) % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* ------------------------------------------------------------------------ */
/* Initialization, version, devices                                          */
/* ------------------------------------------------------------------------ */

API CUresult cuInit(unsigned int Flags)
{
    ENTER(0);
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_attach() != 0)
        return CUDA_ERROR_NO_DEVICE;
    atomic_store_explicit(&initialized, 1, memory_order_release);
    return CUDA_SUCCESS;
}

API CUresult cuDriverGetVersion(int *driverVersion)
{
    ENTER(F_NOSTICKY);
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = SIMCUDA_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    ENTER(F_INIT);
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ord(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetCount(int *count)
{
    ENTER(F_INIT);
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = ord_count();
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    ENTER(F_INIT);
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ord(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    int phys, inst;
    ord_split(dev, &phys, &inst);
    sim_device_name(sim_peek(), phys, inst, name, (size_t)len);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    ENTER(F_INIT);
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ord(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    int phys, inst;
    ord_split(dev, &phys, &inst);
    *bytes = (size_t)sim_fb_total(sim_peek(), phys, inst);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    ENTER(F_INIT);
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ord(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    int phys, inst;
    ord_split(dev, &phys, &inst);
    int v;
    switch ((int)attrib) {
    case 1: v = 1024; break;           /* max threads per block */
    case 2: case 3: v = 1024; break;   /* max block dim x, y */
    case 4: v = 64; break;
    case 5: v = 2147483647; break;     /* max grid dim x */
    case 6: case 7: v = 65535; break;
    case 8: v = 49152; break;          /* shared memory per block */
    case 9: v = 65536; break;          /* constant memory */
    case 10: v = 32; break;            /* warp size */
    case 11: v = 2147483647; break;    /* max pitch */
    case 12: v = 65536; break;         /* registers per block */
    case 13: v = 1980000; break;       /* clock rate kHz */
    case 14: v = 512; break;           /* texture alignment */
    case 15: v = 1; break;
    case 16: v = inst >= 0 ? 16 : 132; break; /* multiprocessors */
    case 19: v = 1; break;             /* can map host memory */
    case 31: v = 1; break;             /* concurrent kernels */
    case 32: v = 1; break;             /* ECC enabled */
    case 33: v = (int)sim_pci_bus(phys); break;
    case 36: v = 2619000; break;       /* memory clock kHz */
    case 37: v = 5120; break;          /* memory bus width */
    case 38: v = 52428800; break;      /* L2 cache */
    case 39: v = 2048; break;          /* threads per multiprocessor */
    case 40: v = 3; break;             /* async engines */
    case 41: v = 1; break;             /* unified addressing */
    case 75: v = 9; break;             /* compute capability */
    case 76: v = 0; break;
    case 83: v = 1; break;             /* managed memory */
    case 89: v = 1; break;             /* concurrent managed access */
    case 102: v = 1; break;            /* VMM supported */
    case 103: v = 1; break;            /* POSIX fd handles */
    case 115: v = 1; break;            /* memory pools */
    default:
        if ((int)attrib <= 0 || (int)attrib > 140)
            return CUDA_ERROR_INVALID_VALUE;
        v = 0;
    }
    *pi = v;
    return CUDA_SUCCESS;
}

static CUresult device_uuid(CUuuid *uuid, CUdevice dev, int mig_aware)
{
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ord(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    int phys, inst;
    ord_split(dev, &phys, &inst);
    sim_uuid(phys, mig_aware ? inst : -1, (unsigned char *)uuid->bytes);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    ENTER(F_INIT);
    return device_uuid(uuid, dev, 0);
}

API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    ENTER(F_INIT);
    return device_uuid(uuid, dev, 1);
}

API CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    ENTER(F_INIT);
    if (!pciBusId || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ord(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    int phys, inst;
    ord_split(dev, &phys, &inst);
    snprintf(pciBusId, (size_t)len, "%04X:%02X:%02X.0", 0u, sim_pci_bus(phys), 0u);
    return CUDA_SUCCESS;
}

static const struct sim_cuerr *err_find(CUresult e)
{
    for (size_t i = 0; i < sizeof(sim_cuerrs) / sizeof(sim_cuerrs[0]); i++)
        if (sim_cuerrs[i].code == (int)e)
            return &sim_cuerrs[i];
    return NULL;
}

API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    ENTER(F_NOSTICKY);
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    const struct sim_cuerr *e = err_find(error);
    *pStr = e ? e->name : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    ENTER(F_NOSTICKY);
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    const struct sim_cuerr *e = err_find(error);
    *pStr = e ? e->text : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------------ */
/* cuGetProcAddress                                                          */
/* ------------------------------------------------------------------------ */

struct procent {
    const char *base;
    int since;     /* CUDA version that maps `base` to this function */
    int ptsz;      /* per-thread default stream variant */
    void *fn;
};

#define PE(base, since, fn) {base, since, 0, (void *)fn}
#define PZ(base, since, fn) {base, since, 1, (void *)fn}

static const struct procent procs[] = {
    PE("cuInit", 2000, cuInit),
    PE("cuDriverGetVersion", 2020, cuDriverGetVersion),
    PE("cuDeviceGet", 2000, cuDeviceGet),
    PE("cuDeviceGetCount", 2000, cuDeviceGetCount),
    PE("cuDeviceGetName", 2000, cuDeviceGetName),
    PE("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    PE("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    PE("cuDeviceGetUuid", 9020, cuDeviceGetUuid),
    PE("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    PE("cuDeviceGetPCIBusId", 4010, cuDeviceGetPCIBusId),
    PE("cuGetErrorName", 6000, cuGetErrorName),
    PE("cuGetErrorString", 6000, cuGetErrorString),
    PE("cuGetProcAddress", 11030, cuGetProcAddress),
    PE("cuGetProcAddress", 12000, cuGetProcAddress_v2),
    PE("cuCtxCreate", 2000, cuCtxCreate),
    PE("cuCtxCreate", 3020, cuCtxCreate_v2),
    PE("cuCtxCreate", 11040, cuCtxCreate_v3),
    PE("cuCtxCreate", 12050, cuCtxCreate_v4),
    PE("cuCtxDestroy", 2000, cuCtxDestroy),
    PE("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    PE("cuGreenCtxCreate", 12040, cuGreenCtxCreate),
    PE("cuCtxFromGreenCtx", 12040, cuCtxFromGreenCtx),
    PE("cuGreenCtxDestroy", 12040, cuGreenCtxDestroy),
    PE("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    PE("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease),
    PE("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    PE("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    PE("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    PE("cuCtxPushCurrent", 2000, cuCtxPushCurrent),
    PE("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    PE("cuCtxPopCurrent", 2000, cuCtxPopCurrent),
    PE("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    PE("cuCtxGetDevice", 2000, cuCtxGetDevice),
    PE("cuCtxEnablePeerAccess", 4000, cuCtxEnablePeerAccess),
    PE("cuCtxDisablePeerAccess", 4000, cuCtxDisablePeerAccess),
    PE("cuMemAlloc", 2000, cuMemAlloc),
    PE("cuMemAlloc", 3020, cuMemAlloc_v2),
    PE("cuMemAllocPitch", 2000, cuMemAllocPitch),
    PE("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    PE("cuMemAllocManaged", 6000, cuMemAllocManaged),
    PE("cuMemAllocAsync", 11020, cuMemAllocAsync),
    PZ("cuMemAllocAsync", 11020, cuMemAllocAsync_ptsz),
    PE("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync),
    PZ("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync_ptsz),
    PE("cuMemFree", 2000, cuMemFree),
    PE("cuMemFree", 3020, cuMemFree_v2),
    PE("cuMemFreeAsync", 11020, cuMemFreeAsync),
    PZ("cuMemFreeAsync", 11020, cuMemFreeAsync_ptsz),
    PE("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    PE("cuMemPoolCreate", 11020, cuMemPoolCreate),
    PE("cuMemPoolDestroy", 11020, cuMemPoolDestroy),
    PE("cuMemPoolExportPointer", 11020, cuMemPoolExportPointer),
    PE("cuMemPoolImportPointer", 11020, cuMemPoolImportPointer),
    PE("cuArrayCreate", 2000, cuArrayCreate),
    PE("cuArrayCreate", 3020, cuArrayCreate_v2),
    PE("cuArray3DCreate", 2000, cuArray3DCreate),
    PE("cuArray3DCreate", 3020, cuArray3DCreate_v2),
    PE("cuArrayDestroy", 2000, cuArrayDestroy),
    PE("cuMipmappedArrayCreate", 5000, cuMipmappedArrayCreate),
    PE("cuMipmappedArrayDestroy", 5000, cuMipmappedArrayDestroy),
    PE("cuMemAllocHost", 2000, cuMemAllocHost),
    PE("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    PE("cuMemHostAlloc", 2020, cuMemHostAlloc),
    PE("cuMemFreeHost", 2000, cuMemFreeHost),
    PE("cuMemHostRegister", 4000, cuMemHostRegister),
    PE("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    PE("cuMemHostUnregister", 4000, cuMemHostUnregister),
    PE("cuMemHostGetDevicePointer", 2020, cuMemHostGetDevicePointer),
    PE("cuMemHostGetDevicePointer", 3020, cuMemHostGetDevicePointer_v2),
    PE("cuMemCreate", 10020, cuMemCreate),
    PE("cuMemRelease", 10020, cuMemRelease),
    PE("cuMemAddressReserve", 10020, cuMemAddressReserve),
    PE("cuMemAddressFree", 10020, cuMemAddressFree),
    PE("cuMemMap", 10020, cuMemMap),
    PE("cuMemUnmap", 10020, cuMemUnmap),
    PE("cuMemMapArrayAsync", 11010, cuMemMapArrayAsync),
    PZ("cuMemMapArrayAsync", 11010, cuMemMapArrayAsync_ptsz),
    PE("cuMemSetAccess", 10020, cuMemSetAccess),
    PE("cuMemExportToShareableHandle", 10020, cuMemExportToShareableHandle),
    PE("cuMemImportFromShareableHandle", 10020, cuMemImportFromShareableHandle),
    PE("cuIpcGetMemHandle", 4010, cuIpcGetMemHandle),
    PE("cuIpcOpenMemHandle", 4010, cuIpcOpenMemHandle),
    PE("cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle_v2),
    PE("cuIpcCloseMemHandle", 4010, cuIpcCloseMemHandle),
    PE("cuImportExternalMemory", 10000, cuImportExternalMemory),
    PE("cuExternalMemoryGetMappedBuffer", 10000, cuExternalMemoryGetMappedBuffer),
    PE("cuDestroyExternalMemory", 10000, cuDestroyExternalMemory),
    PE("cuGraphicsMapResources", 3000, cuGraphicsMapResources),
    PZ("cuGraphicsMapResources", 7000, cuGraphicsMapResources_ptsz),
    PE("cuGraphicsUnmapResources", 3000, cuGraphicsUnmapResources),
    PZ("cuGraphicsUnmapResources", 7000, cuGraphicsUnmapResources_ptsz),
};

static CUresult get_proc(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *status)
{
    if (status)
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (!symbol || !pfn || flags > 3)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    int want_ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    int known = 0, has_ptsz = 0;
    for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++)
        if (strcmp(procs[i].base, symbol) == 0) {
            known = 1;
            has_ptsz |= procs[i].ptsz;
        }
    if (!known)
        return CUDA_ERROR_NOT_FOUND;
    int use_ptsz = want_ptsz && has_ptsz;
    const struct procent *best = NULL;
    for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
        const struct procent *p = &procs[i];
        if (strcmp(p->base, symbol) != 0 || p->ptsz != use_ptsz || p->since > cudaVersion)
            continue;
        if (!best || p->since > best->since)
            best = p;
    }
    if (!best) {
        if (status)
            *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = best->fn;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    ENTER(F_NOSTICKY);
    return get_proc(symbol, pfn, cudaVersion, flags, NULL);
}

API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *symbolStatus)
{
    ENTER(F_NOSTICKY);
    return get_proc(symbol, pfn, cudaVersion, flags, symbolStatus);
}

/* ------------------------------------------------------------------------ */
/* Contexts                                                                  */
/* ------------------------------------------------------------------------ */

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    if (!pctx || flags > 0x1ff)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ord(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (tdepth >= STACK_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&mu);
    struct ctx *c = ctx_new(dev, 0);
    pthread_mutex_unlock(&mu);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    tstack[tdepth++] = c;
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

API CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    ENTER(F_INIT);
    return ctx_create(pctx, flags, dev);
}

API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    ENTER(F_INIT);
    return ctx_create(pctx, flags, dev);
}

API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                            unsigned int flags, CUdevice dev)
{
    ENTER(F_INIT);
    if (numParams < 0 || (numParams > 0 && !paramsArray))
        return CUDA_ERROR_INVALID_VALUE;
    return ctx_create(pctx, flags, dev);
}

API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags,
                            CUdevice dev)
{
    ENTER(F_INIT);
    (void)ctxCreateParams;
    return ctx_create(pctx, flags, dev);
}

static void stack_remove(struct ctx *c)
{
    int j = 0;
    for (int i = 0; i < tdepth; i++)
        if (tstack[i] != c)
            tstack[j++] = tstack[i];
    tdepth = j;
}

static CUresult ctx_destroy(CUcontext ctx)
{
    struct ctx *c = (struct ctx *)ctx;
    pthread_mutex_lock(&mu);
    if (!c || !ctx_known(c) || c->destroyed || c->primary || c->green) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    ctx_teardown(c);
    pthread_mutex_unlock(&mu);
    stack_remove(c);
    return CUDA_SUCCESS;
}

API CUresult cuCtxDestroy(CUcontext ctx)
{
    ENTER(F_INIT);
    return ctx_destroy(ctx);
}

API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    ENTER(F_INIT);
    return ctx_destroy(ctx);
}

/*
 * Green contexts. The simulated GPU has no SM partitions: any resource
 * descriptor (NULL included) stands for the whole device. A green context
 * is a context that is not made current; it takes framebuffer like any
 * context. Its handle is its own (a struct green), distinct from the
 * CUcontext cuCtxFromGreenCtx gives for it, as on a real driver.
 */
#define GREEN_MAGIC 0x67726e63u

struct green {
    uint32_t magic;
    struct ctx *c;
};

static struct green *green_of(CUgreenCtx h)
{
    struct green *g = (struct green *)h;
    return g && g->magic == GREEN_MAGIC && !g->c->destroyed ? g : NULL;
}

API CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags)
{
    ENTER(F_INIT);
    (void)desc;
    if (!phCtx || flags > 1)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ord(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    struct green *g = calloc(1, sizeof(*g));
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&mu);
    struct ctx *c = ctx_new(dev, 0);
    if (c)
        c->green = 1;
    pthread_mutex_unlock(&mu);
    if (!c) {
        free(g);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    g->magic = GREEN_MAGIC;
    g->c = c;
    *phCtx = (CUgreenCtx)g;
    return CUDA_SUCCESS;
}

API CUresult cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx hCtx)
{
    ENTER(F_INIT);
    if (!pContext)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    struct green *g = green_of(hCtx);
    pthread_mutex_unlock(&mu);
    if (!g)
        return CUDA_ERROR_INVALID_CONTEXT;
    *pContext = (CUcontext)g->c;
    return CUDA_SUCCESS;
}

API CUresult cuGreenCtxDestroy(CUgreenCtx hCtx)
{
    ENTER(F_INIT);
    pthread_mutex_lock(&mu);
    struct green *g = green_of(hCtx);
    if (!g) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    struct ctx *c = g->c;
    ctx_teardown(c);
    g->magic = 0; /* never freed: a stale handle stays invalid */
    pthread_mutex_unlock(&mu);
    stack_remove(c);
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    ENTER(F_INIT);
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ord(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mu);
    struct primary *p = &prim[dev];
    if (!p->c) {
        struct ctx *c = ctx_new(dev, 1);
        if (!c) {
            pthread_mutex_unlock(&mu);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        p->c = c;
        p->refs = 0;
    } else if (p->refs == 0) {
        /* The primary context keeps its handle; it becomes active again. */
        if (ctx_account(p->c->phys, p->c->inst, +1) != 0) {
            pthread_mutex_unlock(&mu);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        p->c->destroyed = 0;
    }
    p->refs++;
    *pctx = (CUcontext)p->c;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

static CUresult primary_release(CUdevice dev)
{
    if (!valid_ord(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mu);
    struct primary *p = &prim[dev];
    if (p->refs <= 0 || !p->c) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (--p->refs == 0)
        ctx_teardown(p->c); /* inactive until retained again */
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    ENTER(F_INIT);
    return primary_release(dev);
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    ENTER(F_INIT);
    return primary_release(dev);
}

static int ctx_usable(struct ctx *c)
{
    pthread_mutex_lock(&mu);
    int ok = c && ctx_known(c) && !c->destroyed;
    pthread_mutex_unlock(&mu);
    return ok;
}

API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    ENTER(F_INIT);
    struct ctx *c = (struct ctx *)ctx;
    if (!c) {
        if (tdepth > 0)
            tdepth--;
        return CUDA_SUCCESS;
    }
    if (!ctx_usable(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (tdepth == 0)
        tdepth = 1;
    tstack[tdepth - 1] = c;
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    ENTER(F_INIT);
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = tdepth > 0 ? (CUcontext)tstack[tdepth - 1] : NULL;
    return CUDA_SUCCESS;
}

static CUresult ctx_push(CUcontext ctx)
{
    struct ctx *c = (struct ctx *)ctx;
    if (!ctx_usable(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (tdepth >= STACK_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    tstack[tdepth++] = c;
    return CUDA_SUCCESS;
}

API CUresult cuCtxPushCurrent(CUcontext ctx)
{
    ENTER(F_INIT);
    return ctx_push(ctx);
}

API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    ENTER(F_INIT);
    return ctx_push(ctx);
}

static CUresult ctx_pop(CUcontext *pctx)
{
    if (tdepth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct ctx *c = tstack[--tdepth];
    if (pctx)
        *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

API CUresult cuCtxPopCurrent(CUcontext *pctx)
{
    ENTER(F_INIT);
    return ctx_pop(pctx);
}

API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    ENTER(F_INIT);
    return ctx_pop(pctx);
}

API CUresult cuCtxGetDevice(CUdevice *device)
{
    ENTER(F_INIT);
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    *device = c->ord;
    return CUDA_SUCCESS;
}

API CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
    ENTER(F_INIT);
    NEED_CTX(c);
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct ctx *p = (struct ctx *)peerContext;
    pthread_mutex_lock(&mu);
    CUresult rc = CUDA_SUCCESS;
    if (!p || !ctx_known(p) || p->destroyed) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
        goto out;
    }
    if (p->ord == c->ord) {
        rc = CUDA_ERROR_INVALID_DEVICE;
        goto out;
    }
    for (struct peer *x = peers; x; x = x->next)
        if (x->from == c && x->to == p) {
            rc = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
            goto out;
        }
    struct peer *np = calloc(1, sizeof(*np));
    if (!np) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    uint64_t bytes = sim_peek()->peer_bar1;
    rc = bar1_charge(p->phys, p->inst, bytes);
    if (rc != CUDA_SUCCESS) {
        free(np);
        goto out;
    }
    np->from = c;
    np->to = p;
    np->phys = p->phys;
    np->inst = p->inst;
    np->bytes = bytes;
    np->next = peers;
    peers = np;
out:
    pthread_mutex_unlock(&mu);
    return rc;
}

API CUresult cuCtxDisablePeerAccess(CUcontext peerContext)
{
    ENTER(F_INIT);
    NEED_CTX(c);
    struct ctx *p = (struct ctx *)peerContext;
    pthread_mutex_lock(&mu);
    CUresult rc = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    for (struct peer **pp = &peers; *pp; pp = &(*pp)->next) {
        struct peer *x = *pp;
        if (x->from == c && x->to == p) {
            bar1_uncharge(x->phys, x->inst, x->bytes);
            *pp = x->next;
            free(x);
            rc = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Device memory                                                             */
/* ------------------------------------------------------------------------ */

static CUresult mem_alloc(int kind, uint64_t *out, uint64_t size, uint64_t fb, int v1)
{
    NEED_CTX(c);
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    CUresult rc = dev_alloc(kind, c->ord, size, fb, v1, c, out, NULL);
    pthread_mutex_unlock(&mu);
    return rc;
}

API CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    ENTER(F_INIT);
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t p;
    CUresult rc = mem_alloc(K_DEV_V1, &p, bytesize, bytesize, 1);
    if (rc == CUDA_SUCCESS)
        *dptr = (CUdeviceptr_v1)p;
    return rc;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    ENTER(F_INIT);
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t p;
    CUresult rc = mem_alloc(K_DEV, &p, bytesize, bytesize, 0);
    if (rc == CUDA_SUCCESS)
        *dptr = p;
    return rc;
}

static CUresult pitch_calc(size_t w, size_t h, unsigned elem, uint64_t *pitch, uint64_t *bytes)
{
    if (w == 0 || h == 0 || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t p = align_up(w, 512);
    if (p < w || __builtin_mul_overflow(p, (uint64_t)h, bytes))
        return CUDA_ERROR_INVALID_VALUE;
    *pitch = p;
    return CUDA_SUCCESS;
}

API CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
                             unsigned int Height, unsigned int ElementSizeBytes)
{
    ENTER(F_INIT);
    if (!dptr || !pPitch)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t pitch, bytes, p;
    CUresult rc = pitch_calc(WidthInBytes, Height, ElementSizeBytes, &pitch, &bytes);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (pitch > 0xffffffffu || bytes > 0xffffffffu)
        return CUDA_ERROR_INVALID_VALUE;
    rc = mem_alloc(K_PITCH_V1, &p, bytes, bytes, 1);
    if (rc == CUDA_SUCCESS) {
        *dptr = (CUdeviceptr_v1)p;
        *pPitch = (unsigned int)pitch;
    }
    return rc;
}

API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                size_t Height, unsigned int ElementSizeBytes)
{
    ENTER(F_INIT);
    if (!dptr || !pPitch)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t pitch, bytes, p;
    CUresult rc = pitch_calc(WidthInBytes, Height, ElementSizeBytes, &pitch, &bytes);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = mem_alloc(K_PITCH, &p, bytes, bytes, 0);
    if (rc == CUDA_SUCCESS) {
        *dptr = p;
        *pPitch = (size_t)pitch;
    }
    return rc;
}

API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    ENTER(F_INIT);
    if (!dptr || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t p;
    CUresult rc = mem_alloc(K_MANAGED, &p, bytesize, bytesize, 0);
    if (rc == CUDA_SUCCESS)
        *dptr = p;
    return rc;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    (void)hStream;
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t p;
    CUresult rc = mem_alloc(K_ASYNC, &p, bytesize, bytesize, 0);
    if (rc == CUDA_SUCCESS)
        *dptr = p;
    return rc;
}

API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    ENTER(F_INIT);
    return alloc_async(dptr, bytesize, hStream);
}

API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    ENTER(F_INIT);
    return alloc_async(dptr, bytesize, hStream);
}

static CUresult alloc_from_pool(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                CUstream hStream)
{
    (void)hStream;
    NEED_CTX(c);
    if (!dptr || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    CUresult rc;
    struct rec *pl = hfind((uint64_t)(uintptr_t)pool);
    if (!pl || pl->kind != K_POOL || pl->released) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (pl->size && pl->refs + bytesize > pl->size) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    uint64_t p;
    struct rec *r;
    rc = dev_alloc(K_POOLALLOC, pl->ord, bytesize, bytesize, 0, c, &p, &r);
    if (rc == CUDA_SUCCESS) {
        r->aux = pl->key;
        pl->refs += bytesize;
        *dptr = p;
    }
out:
    pthread_mutex_unlock(&mu);
    return rc;
}

API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                     CUstream hStream)
{
    ENTER(F_INIT);
    return alloc_from_pool(dptr, bytesize, pool, hStream);
}

API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                          CUstream hStream)
{
    ENTER(F_INIT);
    return alloc_from_pool(dptr, bytesize, pool, hStream);
}

/* Free linear device memory. `async` additionally accepts nothing more: all
 * linear kinds may be freed either way; IPC mappings and arrays may not. */
static CUresult mem_free(uint64_t dptr)
{
    NEED_CTX(c);
    (void)c;
    if (dptr == 0)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&mu);
    CUresult rc = CUDA_SUCCESS;
    struct rec *r = hfind(dptr);
    if (!r) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    switch (r->kind) {
    case K_DEV: case K_DEV_V1: case K_PITCH: case K_PITCH_V1: case K_MANAGED:
    case K_ASYNC: case K_POOLALLOC: case K_POOLIMPORT: case K_EXTBUF:
        rec_destroy(r);
        break;
    default:
        rc = CUDA_ERROR_INVALID_VALUE;
    }
out:
    pthread_mutex_unlock(&mu);
    return rc;
}

API CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
    ENTER(F_INIT);
    return mem_free((uint64_t)dptr);
}

API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    ENTER(F_INIT);
    return mem_free(dptr);
}

API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    ENTER(F_INIT);
    (void)hStream;
    return mem_free(dptr);
}

API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    ENTER(F_INIT);
    (void)hStream;
    return mem_free(dptr);
}

API CUresult cuMemGetInfo_v2(size_t *free_, size_t *total)
{
    ENTER(F_INIT);
    NEED_CTX(c);
    if (!free_ || !total)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_state *st = sim_lock();
    if (!st)
        return CUDA_ERROR_NOT_INITIALIZED;
    *free_ = (size_t)sim_fb_free(st, c->phys, c->inst);
    *total = (size_t)sim_fb_total(st, c->phys, c->inst);
    sim_unlock();
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    ENTER(F_INIT);
    NEED_CTX(c);
    (void)c;
    if (!pool || !poolProps || poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ord(poolProps->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mu);
    struct rec *r = rec_new(K_POOL, poolProps->location.id);
    if (!r) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r->key = gen_handle();
    r->size = poolProps->maxSize;
    hinsert(r);
    *pool = (CUmemoryPool)(uintptr_t)r->key;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    ENTER(F_INIT);
    pthread_mutex_lock(&mu);
    struct rec *r = hfind((uint64_t)(uintptr_t)pool);
    CUresult rc = CUDA_SUCCESS;
    if (!r || r->kind != K_POOL || r->released) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        /* Live allocations keep the pool until they are freed. */
        r->released = 1;
        if (r->refs == 0) {
            hremove(r);
            free(r);
        }
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

/* IPC / pool-export blob, 64 bytes. */
struct blob {
    char magic[8];
    int32_t pid;
    int32_t ord;
    uint64_t ptr;
    uint64_t size;
    uint64_t key;
    char pad[24];
};
_Static_assert(sizeof(struct blob) == 64, "blob");

#define IPC_MAGIC "SIMIPC1"
#define POOL_MAGIC "SIMPEX1"
#define VMM_MAGIC "SIMVMM1"

static CUresult open_remote(const struct blob *b, const char *magic, int kind, uint64_t *out)
{
    NEED_CTX(c);
    if (memcmp(b->magic, magic, 8) != 0 || !valid_ord(b->ord) || b->size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (b->pid == (int32_t)sim_pid())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (kill(b->pid, 0) != 0 && errno == ESRCH)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&mu);
    struct rec *r = rec_new(kind, b->ord);
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!r)
        goto out;
    uint64_t p = gen_devptr(b->ord, b->size, 0);
    if (!p) {
        free(r);
        goto out;
    }
    rc = bar1_charge(r->phys, r->inst, b->size);
    if (rc != CUDA_SUCCESS) {
        free(r);
        goto out;
    }
    r->key = p;
    r->size = b->size;
    r->bar1 = b->size;
    r->bar1_phys = r->phys;
    r->bar1_inst = r->inst;
    r->ctx = c;
    hinsert(r);
    *out = p;
out:
    pthread_mutex_unlock(&mu);
    return rc;
}

API CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *shareData_out, CUdeviceptr ptr)
{
    ENTER(F_INIT);
    NEED_CTX(c);
    (void)c;
    if (!shareData_out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    struct rec *r = hfind(ptr);
    CUresult rc = CUDA_SUCCESS;
    if (!r || (r->kind != K_POOLALLOC && r->kind != K_ASYNC)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        struct blob b;
        memset(&b, 0, sizeof(b));
        memcpy(b.magic, POOL_MAGIC, 8);
        b.pid = (int32_t)sim_pid();
        b.ord = r->ord;
        b.ptr = r->key;
        b.size = r->size;
        memcpy(shareData_out, &b, sizeof(b));
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

API CUresult cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool,
                                    CUmemPoolPtrExportData *shareData)
{
    ENTER(F_INIT);
    if (!ptr_out || !shareData)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    struct rec *pl = hfind((uint64_t)(uintptr_t)pool);
    int ok = pl && pl->kind == K_POOL && !pl->released;
    pthread_mutex_unlock(&mu);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    struct blob b;
    memcpy(&b, shareData, sizeof(b));
    uint64_t p;
    CUresult rc = open_remote(&b, POOL_MAGIC, K_POOLIMPORT, &p);
    if (rc == CUDA_SUCCESS)
        *ptr_out = p;
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Arrays                                                                    */
/* ------------------------------------------------------------------------ */

static uint64_t format_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT: return 4;
    default: return 0;
    }
}

static CUresult array_bytes(uint64_t w, uint64_t h, uint64_t d, CUarray_format f, unsigned ch,
                            uint64_t *out)
{
    uint64_t e = format_bytes(f);
    if (w == 0 || e == 0 || (ch != 1 && ch != 2 && ch != 4))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t b = e * ch;
    if (__builtin_mul_overflow(b, w, &b) || __builtin_mul_overflow(b, h ? h : 1, &b) ||
        __builtin_mul_overflow(b, d ? d : 1, &b))
        return CUDA_ERROR_INVALID_VALUE;
    *out = b;
    return CUDA_SUCCESS;
}

static CUresult array_create(int kind, void **pHandle, uint64_t bytes)
{
    NEED_CTX(c);
    pthread_mutex_lock(&mu);
    struct rec *r = rec_new(kind, c->ord);
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!r)
        goto out;
    rc = fb_charge(r->phys, r->inst, bytes);
    if (rc != CUDA_SUCCESS) {
        free(r);
        goto out;
    }
    r->key = gen_handle();
    r->size = bytes;
    r->fb = bytes;
    r->ctx = c;
    hinsert(r);
    *pHandle = (void *)(uintptr_t)r->key;
out:
    pthread_mutex_unlock(&mu);
    return rc;
}

API CUresult cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *pAllocateArray)
{
    ENTER(F_INIT);
    if (!pHandle || !pAllocateArray)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t bytes;
    CUresult rc = array_bytes(pAllocateArray->Width, pAllocateArray->Height, 1,
                              pAllocateArray->Format, pAllocateArray->NumChannels, &bytes);
    if (rc != CUDA_SUCCESS)
        return rc;
    return array_create(K_ARRAY, (void **)pHandle, bytes);
}

API CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
    ENTER(F_INIT);
    if (!pHandle || !pAllocateArray)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t bytes;
    CUresult rc = array_bytes(pAllocateArray->Width, pAllocateArray->Height, 1,
                              pAllocateArray->Format, pAllocateArray->NumChannels, &bytes);
    if (rc != CUDA_SUCCESS)
        return rc;
    return array_create(K_ARRAY, (void **)pHandle, bytes);
}

API CUresult cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *pAllocateArray)
{
    ENTER(F_INIT);
    if (!pHandle || !pAllocateArray)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t bytes;
    CUresult rc = array_bytes(pAllocateArray->Width, pAllocateArray->Height,
                              pAllocateArray->Depth, pAllocateArray->Format,
                              pAllocateArray->NumChannels, &bytes);
    if (rc != CUDA_SUCCESS)
        return rc;
    return array_create(K_ARRAY, (void **)pHandle, bytes);
}

API CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
    ENTER(F_INIT);
    if (!pHandle || !pAllocateArray)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t bytes;
    CUresult rc = array_bytes(pAllocateArray->Width, pAllocateArray->Height,
                              pAllocateArray->Depth, pAllocateArray->Format,
                              pAllocateArray->NumChannels, &bytes);
    if (rc != CUDA_SUCCESS)
        return rc;
    return array_create(K_ARRAY, (void **)pHandle, bytes);
}

static CUresult handle_destroy(uint64_t key, int kind)
{
    pthread_mutex_lock(&mu);
    struct rec *r = hfind(key);
    CUresult rc = CUDA_SUCCESS;
    if (!r || r->kind != kind)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        rec_destroy(r);
    pthread_mutex_unlock(&mu);
    return rc;
}

API CUresult cuArrayDestroy(CUarray hArray)
{
    ENTER(F_INIT);
    return handle_destroy((uint64_t)(uintptr_t)hArray, K_ARRAY);
}

API CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
                                    const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
                                    unsigned int numMipmapLevels)
{
    ENTER(F_INIT);
    if (!pHandle || !pMipmappedArrayDesc || numMipmapLevels == 0)
        return CUDA_ERROR_INVALID_VALUE;
    const CUDA_ARRAY3D_DESCRIPTOR *d = pMipmappedArrayDesc;
    uint64_t maxdim = d->Width;
    if (d->Height > maxdim)
        maxdim = d->Height;
    if (d->Depth > maxdim)
        maxdim = d->Depth;
    unsigned maxlevels = 0;
    for (uint64_t m = maxdim; m; m >>= 1)
        maxlevels++;
    if (numMipmapLevels > maxlevels)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t total = 0;
    for (unsigned l = 0; l < numMipmapLevels; l++) {
        uint64_t w = d->Width >> l, h = d->Height >> l, dd = d->Depth >> l, b;
        CUresult rc = array_bytes(w ? w : 1, d->Height ? (h ? h : 1) : 0,
                                  d->Depth ? (dd ? dd : 1) : 0, d->Format, d->NumChannels, &b);
        if (rc != CUDA_SUCCESS)
            return rc;
        if (__builtin_add_overflow(total, b, &total))
            return CUDA_ERROR_INVALID_VALUE;
    }
    return array_create(K_MIPMAP, (void **)pHandle, total);
}

API CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
    ENTER(F_INIT);
    return handle_destroy((uint64_t)(uintptr_t)hMipmappedArray, K_MIPMAP);
}

/* ------------------------------------------------------------------------ */
/* Host memory                                                               */
/* ------------------------------------------------------------------------ */

static CUresult host_alloc(void **pp, size_t bytesize)
{
    NEED_CTX(c);
    (void)c;
    if (!pp || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    CUresult rc = pin_check(bytesize);
    if (rc != CUDA_SUCCESS)
        goto out;
    struct hrec *h = calloc(1, sizeof(*h));
    void *mem = NULL;
    if (!h || posix_memalign(&mem, 4096, bytesize) != 0) {
        free(h);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    h->addr = (uintptr_t)mem;
    h->size = bytesize;
    h->next = hosts;
    hosts = h;
    pinned += bytesize;
    *pp = mem;
out:
    pthread_mutex_unlock(&mu);
    return rc;
}

API CUresult cuMemAllocHost(void **pp, unsigned int bytesize)
{
    ENTER(F_INIT);
    return host_alloc(pp, bytesize);
}

API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    ENTER(F_INIT);
    return host_alloc(pp, bytesize);
}

API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    ENTER(F_INIT);
    if (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                            CU_MEMHOSTALLOC_WRITECOMBINED))
        return CUDA_ERROR_INVALID_VALUE;
    return host_alloc(pp, bytesize);
}

API CUresult cuMemFreeHost(void *p)
{
    ENTER(F_INIT);
    NEED_CTX(c);
    (void)c;
    pthread_mutex_lock(&mu);
    struct hrec *h = hosts;
    while (h && !(h->addr == (uintptr_t)p && !h->registered))
        h = h->next;
    CUresult rc = CUDA_SUCCESS;
    if (!h || !p) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        host_unlink(h);
        free((void *)h->addr);
        free(h);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

static CUresult host_register(void *p, size_t bytesize, unsigned int Flags)
{
    NEED_CTX(c);
    (void)c;
    if (!p || bytesize == 0 || (Flags & ~0xfu))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    CUresult rc = CUDA_SUCCESS;
    if (host_find_overlap((uintptr_t)p, bytesize)) {
        rc = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
        goto out;
    }
    rc = pin_check(bytesize);
    if (rc != CUDA_SUCCESS)
        goto out;
    struct hrec *h = calloc(1, sizeof(*h));
    if (!h) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    h->addr = (uintptr_t)p;
    h->size = bytesize;
    h->registered = 1;
    h->next = hosts;
    hosts = h;
    pinned += bytesize;
out:
    pthread_mutex_unlock(&mu);
    return rc;
}

API CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    ENTER(F_INIT);
    return host_register(p, bytesize, Flags);
}

API CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    ENTER(F_INIT);
    return host_register(p, bytesize, Flags);
}

API CUresult cuMemHostUnregister(void *p)
{
    ENTER(F_INIT);
    NEED_CTX(c);
    (void)c;
    pthread_mutex_lock(&mu);
    struct hrec *h = hosts;
    while (h && !(h->addr == (uintptr_t)p && h->registered))
        h = h->next;
    CUresult rc = CUDA_SUCCESS;
    if (!h || !p) {
        rc = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    } else {
        host_unlink(h);
        free(h);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

static CUresult host_devptr(uint64_t *out, void *p, unsigned int Flags, int v1)
{
    NEED_CTX(c);
    if (!out || !p || Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    CUresult rc = CUDA_SUCCESS;
    struct hrec *h = host_find_containing((uintptr_t)p);
    if (!h) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (!v1) {
        *out = (uint64_t)(uintptr_t)p; /* unified addressing */
        goto out;
    }
    if (!h->v1) {
        struct rec *r = rec_new(K_HOSTMAP_V1, -1);
        uint64_t a = r ? gen_devptr(c->ord, h->size, 1) : 0;
        if (!a) {
            free(r);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        r->key = a;
        r->size = h->size;
        hinsert(r);
        h->v1 = (CUdeviceptr_v1)a;
    }
    *out = h->v1 + ((uintptr_t)p - h->addr);
out:
    pthread_mutex_unlock(&mu);
    return rc;
}

API CUresult cuMemHostGetDevicePointer(CUdeviceptr_v1 *pdptr, void *p, unsigned int Flags)
{
    ENTER(F_INIT);
    if (!pdptr)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t d;
    CUresult rc = host_devptr(&d, p, Flags, 1);
    if (rc == CUDA_SUCCESS)
        *pdptr = (CUdeviceptr_v1)d;
    return rc;
}

API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    ENTER(F_INIT);
    if (!pdptr)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t d;
    CUresult rc = host_devptr(&d, p, Flags, 0);
    if (rc == CUDA_SUCCESS)
        *pdptr = d;
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Virtual memory management                                                 */
/* ------------------------------------------------------------------------ */

static void vmm_unref(struct rec *h)
{
    if (h->refs > 0)
        h->refs--;
    if (h->refs == 0)
        rec_destroy(h);
}

API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                         const CUmemAllocationProp *prop, unsigned long long flags)
{
    ENTER(F_INIT);
    NEED_CTX(c);
    (void)c;
    if (!handle || !prop || size == 0 || flags != 0 ||
        prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ord(prop->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mu);
    struct rec *r = rec_new(K_VMM, prop->location.id);
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!r)
        goto out;
    rc = fb_charge(r->phys, r->inst, size);
    if (rc != CUDA_SUCCESS) {
        free(r);
        goto out;
    }
    r->key = gen_handle();
    r->size = size;
    r->fb = size;
    r->refs = 1;
    hinsert(r);
    *handle = r->key;
out:
    pthread_mutex_unlock(&mu);
    return rc;
}

API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    ENTER(F_INIT);
    NEED_CTX(c);
    (void)c;
    pthread_mutex_lock(&mu);
    struct rec *h = hfind(handle);
    CUresult rc = CUDA_SUCCESS;
    if (!h || h->kind != K_VMM || h->released) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        h->released = 1;
        vmm_unref(h); /* memory goes when the last mapping goes */
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                 unsigned long long flags)
{
    ENTER(F_INIT);
    NEED_CTX(c);
    (void)c;
    (void)addr; /* a hint only */
    if (!ptr || size == 0 || flags != 0 || (alignment & (alignment - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t align = alignment > 2 * MiB ? alignment : 2 * MiB;
    pthread_mutex_lock(&mu);
    CUresult rc = CUDA_SUCCESS;
    if (va_next < VA_BASE)
        va_next = VA_BASE;
    uint64_t p = align_up(va_next, align);
    if (p + size > VA_BASE + VA_WIN || p + size < p) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    struct va *v = calloc(1, sizeof(*v));
    if (!v) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    v->addr = p;
    v->size = size;
    v->next = vas;
    vas = v;
    va_next = align_up(p + size, 2 * MiB);
    *ptr = p;
out:
    pthread_mutex_unlock(&mu);
    return rc;
}

API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    ENTER(F_INIT);
    NEED_CTX(c);
    (void)c;
    pthread_mutex_lock(&mu);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    for (struct va **pp = &vas; *pp; pp = &(*pp)->next) {
        struct va *v = *pp;
        if (v->addr == ptr && v->size == size) {
            *pp = v->next;
            free(v);
            rc = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                      unsigned long long flags)
{
    ENTER(F_INIT);
    NEED_CTX(c);
    (void)c;
    if (size == 0 || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    CUresult rc = CUDA_SUCCESS;
    struct rec *h = hfind(handle);
    if (!h || h->kind != K_VMM || h->released || offset > h->size || size > h->size - offset) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    struct va *v = vas;
    while (v && !(ptr >= v->addr && ptr + size <= v->addr + v->size))
        v = v->next;
    if (!v) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    for (struct mapping *m = maps; m; m = m->next)
        if (ptr < m->addr + m->size && m->addr < ptr + size) {
            rc = CUDA_ERROR_ALREADY_MAPPED;
            goto out;
        }
    struct mapping *m = calloc(1, sizeof(*m));
    if (!m) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    m->addr = ptr;
    m->size = size;
    m->h = h;
    m->next = maps;
    maps = m;
    h->refs++;
out:
    pthread_mutex_unlock(&mu);
    return rc;
}

API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    ENTER(F_INIT);
    NEED_CTX(c);
    (void)c;
    pthread_mutex_lock(&mu);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    struct mapping **pp = &maps;
    while (*pp) {
        struct mapping *m = *pp;
        if (m->addr >= ptr && m->addr + m->size <= ptr + size) {
            *pp = m->next;
            bar1_uncharge(m->h->phys, m->h->inst, m->bar1);
            vmm_unref(m->h);
            free(m);
            rc = CUDA_SUCCESS;
        } else {
            pp = &m->next;
        }
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

static CUresult map_array(CUarrayMapInfo *mapInfoList, unsigned int count, CUstream hStream)
{
    (void)hStream;
    NEED_CTX(c);
    (void)c;
    if (count == 0)
        return CUDA_SUCCESS;
    if (!mapInfoList)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_ERROR_INVALID_HANDLE; /* no sparse arrays in the simulator */
}

API CUresult cuMemMapArrayAsync(CUarrayMapInfo *mapInfoList, unsigned int count, CUstream hStream)
{
    ENTER(F_INIT);
    return map_array(mapInfoList, count, hStream);
}

API CUresult cuMemMapArrayAsync_ptsz(CUarrayMapInfo *mapInfoList, unsigned int count,
                                     CUstream hStream)
{
    ENTER(F_INIT);
    return map_array(mapInfoList, count, hStream);
}

API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    ENTER(F_INIT);
    NEED_CTX(c);
    (void)c;
    if (!desc || count == 0 || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
            return CUDA_ERROR_INVALID_VALUE;
        if (!valid_ord(desc[i].location.id) || desc[i].location.id >= 64)
            return CUDA_ERROR_INVALID_DEVICE;
        if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&mu);
    CUresult rc = CUDA_SUCCESS;
    int found = 0;
    /* Pass 1: what each owner device needs; all or nothing. */
    uint64_t need[SIM_MAX_DEV] = {0};
    for (struct mapping *m = maps; m; m = m->next) {
        if (!(m->addr >= ptr && m->addr + m->size <= ptr + size))
            continue;
        found = 1;
        uint64_t g = m->granted;
        for (size_t i = 0; i < count; i++) {
            int id = desc[i].location.id;
            if (id == m->h->ord)
                continue;
            uint64_t bit = 1ull << id;
            if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && !(g & bit)) {
                need[m->h->phys] += m->size;
                g |= bit;
            } else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE) {
                g &= ~bit;
            }
        }
    }
    if (!found) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    {
        struct sim_state *st = sim_lock();
        for (int d = 0; st && d < (int)st->ndev; d++) {
            struct sim_dev *dv = &st->dev[d];
            uint64_t avail = dv->bar1_total > dv->bar1_used ? dv->bar1_total - dv->bar1_used : 0;
            if (need[d] > avail)
                rc = CUDA_ERROR_MAP_FAILED;
        }
        sim_unlock();
        if (rc != CUDA_SUCCESS)
            goto out;
    }
    /* Pass 2: apply. */
    for (struct mapping *m = maps; m; m = m->next) {
        if (!(m->addr >= ptr && m->addr + m->size <= ptr + size))
            continue;
        for (size_t i = 0; i < count; i++) {
            int id = desc[i].location.id;
            if (id == m->h->ord)
                continue;
            uint64_t bit = 1ull << id;
            if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && !(m->granted & bit)) {
                if (bar1_charge(m->h->phys, m->h->inst, m->size) != CUDA_SUCCESS) {
                    rc = CUDA_ERROR_MAP_FAILED; /* lost a race with another process */
                    goto out;
                }
                m->granted |= bit;
                m->bar1 += m->size;
            } else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE && (m->granted & bit)) {
                bar1_uncharge(m->h->phys, m->h->inst, m->size);
                m->granted &= ~bit;
                m->bar1 -= m->size;
            }
        }
    }
out:
    pthread_mutex_unlock(&mu);
    return rc;
}

API CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                          CUmemAllocationHandleType handleType,
                                          unsigned long long flags)
{
    ENTER(F_INIT);
    NEED_CTX(c);
    (void)c;
    if (!shareableHandle || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&mu);
    struct rec *h = hfind(handle);
    CUresult rc = CUDA_SUCCESS;
    if (!h || h->kind != K_VMM || h->released) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    struct blob b;
    memset(&b, 0, sizeof(b));
    memcpy(b.magic, VMM_MAGIC, 8);
    b.pid = (int32_t)sim_pid();
    b.ord = h->ord;
    b.size = h->size;
    b.key = h->key;
    int fd = memfd_create("simgpu-vmm", MFD_CLOEXEC);
    if (fd < 0 || pwrite(fd, &b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
        if (fd >= 0)
            close(fd);
        rc = CUDA_ERROR_OPERATING_SYSTEM;
        goto out;
    }
    *(int *)shareableHandle = fd;
out:
    pthread_mutex_unlock(&mu);
    return rc;
}

API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                            CUmemAllocationHandleType shHandleType)
{
    ENTER(F_INIT);
    NEED_CTX(c);
    (void)c;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    int fd = (int)(intptr_t)osHandle;
    struct blob b;
    if (fd < 0 || pread(fd, &b, sizeof(b), 0) != (ssize_t)sizeof(b) ||
        memcmp(b.magic, VMM_MAGIC, 8) != 0 || !valid_ord(b.ord) || b.size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    struct rec *r = rec_new(K_VMM, b.ord);
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (r) {
        r->key = gen_handle();
        r->size = b.size;
        r->fb = 0; /* the exporter owns the memory */
        r->refs = 1;
        hinsert(r);
        *handle = r->key;
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* IPC                                                                       */
/* ------------------------------------------------------------------------ */

API CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    ENTER(F_INIT);
    NEED_CTX(c);
    (void)c;
    if (!pHandle)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    struct rec *r = hfind(dptr);
    CUresult rc = CUDA_SUCCESS;
    if (!r || (r->kind != K_DEV && r->kind != K_DEV_V1 && r->kind != K_PITCH &&
               r->kind != K_PITCH_V1)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        struct blob b;
        memset(&b, 0, sizeof(b));
        memcpy(b.magic, IPC_MAGIC, 8);
        b.pid = (int32_t)sim_pid();
        b.ord = r->ord;
        b.ptr = r->key;
        b.size = r->size;
        memcpy(pHandle, &b, sizeof(b));
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

static CUresult ipc_open(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    if (!pdptr || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    struct blob b;
    memcpy(&b, &handle, sizeof(b));
    uint64_t p;
    CUresult rc = open_remote(&b, IPC_MAGIC, K_IPC, &p);
    if (rc == CUDA_SUCCESS)
        *pdptr = p;
    return rc;
}

API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    ENTER(F_INIT);
    return ipc_open(pdptr, handle, Flags);
}

API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    ENTER(F_INIT);
    return ipc_open(pdptr, handle, Flags);
}

API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    ENTER(F_INIT);
    NEED_CTX(c);
    (void)c;
    pthread_mutex_lock(&mu);
    struct rec *r = hfind(dptr);
    CUresult rc = CUDA_SUCCESS;
    if (!r || r->kind != K_IPC)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        rec_destroy(r);
    pthread_mutex_unlock(&mu);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* External memory, graphics interop                                         */
/* ------------------------------------------------------------------------ */

API CUresult cuImportExternalMemory(CUexternalMemory *extMem_out,
                                    const CUDA_EXTERNAL_MEMORY_HANDLE_DESC *memHandleDesc)
{
    ENTER(F_INIT);
    NEED_CTX(c);
    if (!extMem_out || !memHandleDesc || memHandleDesc->size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (memHandleDesc->type != CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD)
        return CUDA_ERROR_NOT_SUPPORTED;
    int fd = memHandleDesc->handle.fd;
    if (fd < 0 || fcntl(fd, F_GETFD) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    struct rec *r = rec_new(K_EXTMEM, c->ord);
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (r) {
        r->key = gen_handle();
        r->size = memHandleDesc->size;
        hinsert(r);
        *extMem_out = (CUexternalMemory)(uintptr_t)r->key;
        close(fd); /* ownership of the fd passes to the driver */
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

API CUresult cuExternalMemoryGetMappedBuffer(CUdeviceptr *devPtr, CUexternalMemory extMem,
                                             const CUDA_EXTERNAL_MEMORY_BUFFER_DESC *bufferDesc)
{
    ENTER(F_INIT);
    NEED_CTX(c);
    if (!devPtr || !bufferDesc || bufferDesc->size == 0 || bufferDesc->flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    struct rec *e = hfind((uint64_t)(uintptr_t)extMem);
    if (!e || e->kind != K_EXTMEM || bufferDesc->offset > e->size ||
        bufferDesc->size > e->size - bufferDesc->offset)
        goto out;
    uint64_t p;
    struct rec *r;
    rc = dev_alloc(K_EXTBUF, e->ord, bufferDesc->size, 0, 0, c, &p, &r);
    if (rc == CUDA_SUCCESS) {
        r->aux = e->key;
        *devPtr = p;
    }
out:
    pthread_mutex_unlock(&mu);
    return rc;
}

API CUresult cuDestroyExternalMemory(CUexternalMemory extMem)
{
    ENTER(F_INIT);
    return handle_destroy((uint64_t)(uintptr_t)extMem, K_EXTMEM);
}

static CUresult gfx(unsigned int count, CUgraphicsResource *resources, CUstream hStream)
{
    (void)resources;
    (void)hStream;
    NEED_CTX(c);
    (void)c;
    return count == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

API CUresult cuGraphicsMapResources(unsigned int count, CUgraphicsResource *resources, CUstream hStream)
{
    ENTER(F_INIT);
    return gfx(count, resources, hStream);
}

API CUresult cuGraphicsMapResources_ptsz(unsigned int count, CUgraphicsResource *resources,
                                         CUstream hStream)
{
    ENTER(F_INIT);
    return gfx(count, resources, hStream);
}

API CUresult cuGraphicsUnmapResources(unsigned int count, CUgraphicsResource *resources,
                                      CUstream hStream)
{
    ENTER(F_INIT);
    return gfx(count, resources, hStream);
}

API CUresult cuGraphicsUnmapResources_ptsz(unsigned int count, CUgraphicsResource *resources,
                                           CUstream hStream)
{
    ENTER(F_INIT);
    return gfx(count, resources, hStream);
}

/*
 * simwork.c - a scriptable CUDA driver API workload.
 *
 *   simwork 'STEP; STEP; ...'          (several arguments are joined with ';')
 *
 * simwork dlopens $SIMWORK_LIBCUDA (default "libcuda.so.1", found by the
 * loader) and dlsyms every function it uses, so one script runs against the
 * simulated driver and against NVIDIA's. A symbol the library lacks fails
 * the step that needs it with a message, never a crash.
 *
 * Output: a step prints nothing on success (except the steps that exist to
 * print). A failed CUDA call prints one stderr line
 *     simwork: SYMBOL -> CODE NAME
 * and the script goes on. Syntax errors are reported before anything runs
 * (exit status 2).
 *
 * Counting: every call through a hooked exported name is counted per
 * (thread, symbol, device of the thread's current context when the call is
 * made, -1 if none). At exit (normal end, `exit`, before `crash`, and in
 * forked children when they finish) lines "pid tid symbol count device" are
 * appended to $SIMWORK_CALLS if it is set. cuGetErrorName,
 * cuGetErrorString, cuDeviceGetCount, cuCtxGetDevice, cuGetProcAddress and
 * cuMemGetInfo_v2 are helpers simwork uses for itself and are not counted.
 *
 * Step language. Steps are separated by ';' or newlines; `{ ... }` delimits
 * blocks; "double quotes" make one token; # starts a comment. SIZE takes K,
 * M, G, T suffixes (powers of two); DEV is a CUDA device ordinal. Inside
 * blocks, `%t` in a token becomes the thread index (0 outside `threads`),
 * `%d` the thread index modulo cuDeviceGetCount, `%%` a percent sign.
 *
 * contexts and devices
 *   init                 cuInit(0)
 *   use DEV              cuDeviceGet + cuDevicePrimaryCtxRetain + cuCtxSetCurrent
 *   ctx DEV              cuDeviceGet + cuCtxCreate_v2 (pushes the new context)
 *   ctx-v1 DEV | ctx-v3 DEV | ctx-v4 DEV   the same through cuCtxCreate, _v3, _v4
 *   ctx-pop              cuCtxPopCurrent_v2
 *   ctx-push             cuCtxPushCurrent_v2 of the last popped or created context
 *   ctx-destroy          cuCtxDestroy_v2 of the most recently created context
 *   green DEV            cuGreenCtxCreate on device DEV (a NULL descriptor: the whole
 *                        device; the green context is not made current)
 *   green-push           cuCtxFromGreenCtx + cuCtxPushCurrent_v2 of the last green context
 *   green-destroy        cuGreenCtxDestroy of the last green context
 *   primary-release DEV  cuDevicePrimaryCtxRelease_v2
 *   uuid DEV | uuid-v1 DEV   cuDeviceGetUuid_v2 | cuDeviceGetUuid; prints "uuid DEV GPU-..."
 *   pci DEV              cuDeviceGetPCIBusId; prints "pci DEV 0000:41:00.0"
 *   meminfo              cuMemGetInfo_v2 (helper); prints "meminfo DEV FREE TOTAL"
 * device memory
 *   alloc SIZE | alloc-v1 SIZE              cuMemAlloc_v2 | cuMemAlloc
 *   alloc-pitch W H E | alloc-pitch-v1 W H E   cuMemAllocPitch_v2 | cuMemAllocPitch
 *   alloc-managed SIZE                       cuMemAllocManaged (GLOBAL)
 *   alloc-async SIZE | alloc-async-ptsz SIZE cuMemAllocAsync(_ptsz) on stream 0
 *   pool-create [MAXSIZE]                    cuMemPoolCreate on the current device; MAXSIZE
 *                                            is the pool's maxSize (default 0: no limit)
 *   alloc-pool SIZE | alloc-pool-ptsz SIZE   cuMemAllocFromPoolAsync(_ptsz), last pool
 *   array W H | array-v1 W H                 cuArrayCreate_v2 | cuArrayCreate (FLOAT x1)
 *   array3d W H D | array3d-v1 W H D         cuArray3DCreate_v2 | cuArray3DCreate
 *   mipmap W H LEVELS                        cuMipmappedArrayCreate
 *   vmm SIZE [DEV...]    cuMemCreate (pinned, current device) + cuMemAddressReserve
 *                        + cuMemMap + one cuMemSetAccess granting every DEV, in the
 *                        order given, read-write (default: the current device). List
 *                        the owner first, as NCCL and PyTorch do: `vmm 64M 0 1` on
 *                        device 0 grants [0, 1]; each DEV other than the owner is
 *                        charged to the owner's BAR1. At most 16 DEVs.
 *   expandable VA CHUNK  PyTorch's expandable segments: cuMemAddressReserve of VA once,
 *                        then CHUNK at a time cuMemCreate + cuMemMap + cuMemSetAccess
 *                        (current device) until a call fails or VA is full
 * host memory
 *   alloc-host SIZE | alloc-host-v1 SIZE     cuMemAllocHost_v2 | cuMemAllocHost
 *   host-alloc SIZE [FLAGS]                  cuMemHostAlloc
 *   host-register SIZE | host-register-v1 SIZE   malloc + cuMemHostRegister_v2 | cuMemHostRegister
 *   host-devptr | host-devptr-v1             cuMemHostGetDevicePointer_v2 | v1, last host memory
 * sharing
 *   ipc-export FILE      cuIpcGetMemHandle of the most recent device allocation;
 *                        the 64 bytes go to FILE (tmp + rename)
 *   ipc-open FILE | ipc-open-v1 FILE   wait up to 20 s for FILE, then
 *                        cuIpcOpenMemHandle_v2 | cuIpcOpenMemHandle (flags 1)
 *   pool-export FILE     cuMemPoolExportPointer of the last pool/async allocation
 *   pool-import FILE     wait for FILE, cuMemPoolImportPointer into the last pool
 *                        (pool-create first if there is none)
 *   peer DEV             cuDevicePrimaryCtxRetain(DEV) + cuCtxEnablePeerAccess
 *   export-fd            cuMemExportToShareableHandle (POSIX fd) of the last vmm handle
 *   import-fd            cuMemImportFromShareableHandle of the last exported fd
 *   ext-import SIZE      cuImportExternalMemory (opaque fd of a SIZE memfd)
 *   ext-map SIZE         cuExternalMemoryGetMappedBuffer of the last ext-import
 *   gfx | gfx-ptsz       cuGraphicsMapResources(0) + cuGraphicsUnmapResources(0) (_ptsz)
 *   map-array | map-array-ptsz   cuMemMapArrayAsync(NULL, 0, 0) (_ptsz)
 * releasing
 *   free                 release the most recent live resource with its matching
 *                        call (see release_res); inside `threads`, the thread's own
 *   free-all             release all live resources, newest first
 * control
 *   repeat N { ... }     run the block N times
 *   until-fail { ... }   run the block until a step in it failed, normally a
 *                        CUDA call (whole iterations; at most 1,000,000)
 *   threads N { ... }    run the block in N threads started together; join them
 *   fork { ... }         fork a child that runs the block and exits 0 (its
 *                        counters start at zero); the parent does not wait
 *   wait                 waitpid every forked child; prints "child PID status S"
 *                        (S = exit status, or 128 + signal number)
 *   sleep MS | wait-signal (SIGUSR1) | wait-file FILE (60 s max) | touch FILE
 *   thread-name NAME     name the calling thread (pthread_setname_np; the kernel
 *                        keeps 15 bytes, a longer NAME is cut)
 *   print TEXT...        print the words to stdout
 *   load PATH            dlopen PATH (another libcuda file) and make every later
 *                        call through it, in this process (in a fork block: the
 *                        child only); `init` again before using it
 *   exit N               exit with status N
 *   crash segv | crash abort   write the calls file, then die
 * load
 *   stress N             N x (cuMemAlloc_v2(4096) + cuMemFree_v2), tight loop
 *   mix N                N x cuMemAlloc_v2(64K..4M), cuMemAllocAsync(1M),
 *                        cuMemFreeAsync, cuMemAllocHost_v2(64K), cuMemFreeHost,
 *                        cuMemFree_v2; tight loop
 *   paced RATE SECONDS [SIZE]   cuMemAlloc_v2(SIZE, default 4096) + cuMemFree_v2 (the
 *                        free only after a successful allocation) for SECONDS, issuing
 *                        calls at RATE calls/s (0: as fast as possible); a thread that
 *                        falls behind catches up. Waits sleep down to the last 200 us,
 *                        then spin on clock_gettime. Prints
 *                        "paced CALLS calls FAILED failed NS ns RATE calls/s"
 *   (stress, mix and paced print no per-call lines; if any call failed they print
 *    one summary line "simwork: stress: F of C calls failed (first: SYM -> CODE NAME)")
 * timing
 *   clock                print "clock NS", CLOCK_MONOTONIC in nanoseconds (for
 *                        timing a step from inside the process: clock; mix N; clock)
 */
#define _GNU_SOURCE
#include "simcuda.h"
#include "simcalls.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

/* ------------------------------------------------------------------------ */
/* Library                                                                   */
/* ------------------------------------------------------------------------ */

#define SW_PTR(n) static __typeof__(n) *p_##n;
SIMCALL_SYMS(SW_PTR)
#undef SW_PTR

static void *g_lib;
static const char *g_libname;

/* Point every function at the library of handle h. */
static void use_lib(void *h, const char *name)
{
    g_lib = h;
    g_libname = name;
#define SW_SYM(n) p_##n = (__typeof__(p_##n))dlsym(g_lib, #n);
    SIMCALL_SYMS(SW_SYM)
#undef SW_SYM
}

static void load_lib(void)
{
    const char *name = getenv("SIMWORK_LIBCUDA");
    if (!name || !*name)
        name = "libcuda.so.1";
    void *h = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        fprintf(stderr, "simwork: cannot load %s: %s\n", name, dlerror());
        exit(2);
    }
    use_lib(h, name);
}

static void errline(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof(buf) - 2)
        n = (int)sizeof(buf) - 2;
    buf[n++] = '\n';
    ssize_t w = write(2, buf, (size_t)n);
    (void)w;
}

static const char *err_name(int rc)
{
    const char *s = NULL;
    if (p_cuGetErrorName && p_cuGetErrorName((CUresult)rc, &s) == CUDA_SUCCESS && s)
        return s;
    return NULL;
}

static void report(const char *sym, int rc)
{
    const char *n = err_name(rc);
    if (n)
        errline("simwork: %s -> %d %s", sym, rc, n);
    else
        errline("simwork: %s -> %d", sym, rc);
}

#define MISSING (-1)

static int call_done(const char *sym, int rc)
{
    if (rc == MISSING)
        errline("simwork: %s: symbol not found in %s", sym, g_libname);
    else if (rc != 0)
        report(sym, rc);
    return rc;
}

/* A counted call through a hooked name; nonzero on failure (reported). */
#define CALL(sym, ...)                                                               \
    call_done(#sym, p_##sym ? (simcalls_count(SC_##sym), (int)p_##sym(__VA_ARGS__)) \
                            : MISSING)

/* Refresh the cached device of the calling thread's current context. */
static void refresh_dev(void)
{
    CUdevice d;
    if (p_cuCtxGetDevice && p_cuCtxGetDevice(&d) == CUDA_SUCCESS)
        simcalls_set_device(d);
    else
        simcalls_set_device(-1);
}

/* ------------------------------------------------------------------------ */
/* Script                                                                    */
/* ------------------------------------------------------------------------ */

struct node {
    int argc;
    char **argv;
    struct node *body; /* block steps */
    int has_body;
    struct node *next;
    const struct stepdef *def;
};

struct exec;
typedef int (*step_fn)(struct exec *e, int argc, char **argv);

struct stepdef {
    const char *name;
    int min, max;   /* arguments */
    int block;      /* takes { ... } */
    int cuda;       /* needs the library */
    step_fn fn;
};

/* Execution context of one thread of the script. */
struct exec {
    int tindex;
    int owner;      /* 0: top level (may release anything) */
    CUcontext created[64];
    int ncreated;
    CUcontext last_ctx;
    CUgreenCtx last_green;
    CUmemoryPool last_pool;
    int last_fd;
};

static atomic_int g_owner_seq;

/* ---- resources --------------------------------------------------------- */

enum rkind {
    RK_ALLOC = 1, RK_ALLOC_V1, RK_PITCH, RK_PITCH_V1, RK_MANAGED, RK_ASYNC, RK_ASYNC_PTSZ,
    RK_POOLALLOC, RK_POOLALLOC_PTSZ, RK_POOL, RK_ARRAY, RK_MIPMAP, RK_VMM, RK_VMM_IMPORT,
    RK_HOST, RK_HOSTREG, RK_IPC, RK_POOLIMPORT, RK_PEER, RK_EXT, RK_EXTBUF, RK_VA, RK_SEGMENT,
};

struct res {
    int kind;
    int owner;
    int live;
    CUdeviceptr ptr;
    size_t size;
    void *host;
    void *handle;                   /* pool, array, mipmap, ext, peer context */
    CUmemGenericAllocationHandle mh;
    int steps;                      /* vmm: 1 created, 2 reserved, 3 mapped */
};

static pthread_mutex_t res_mu = PTHREAD_MUTEX_INITIALIZER;
static struct res *resv;
static size_t nres, capres;

static void res_push(struct exec *e, struct res r)
{
    pthread_mutex_lock(&res_mu);
    if (nres == capres) {
        size_t nc = capres ? capres * 2 : 64;
        struct res *nv = realloc(resv, nc * sizeof(*nv));
        if (!nv)
            abort();
        resv = nv;
        capres = nc;
    }
    r.owner = e->owner;
    r.live = 1;
    resv[nres++] = r;
    pthread_mutex_unlock(&res_mu);
}

static int owned(struct exec *e, const struct res *r)
{
    return r->live && (e->owner == 0 || r->owner == e->owner);
}

static int kind_in(int kind, const int *kinds)
{
    for (; *kinds; kinds++)
        if (*kinds == kind)
            return 1;
    return 0;
}

/* Most recent live resource of one of `kinds` (NULL-terminated; NULL: any),
 * copied out; `take` removes it. */
static int res_find(struct exec *e, const int *kinds, int take, struct res *out)
{
    int found = 0;
    pthread_mutex_lock(&res_mu);
    for (size_t i = nres; i-- > 0;) {
        struct res *r = &resv[i];
        if (!owned(e, r) || (kinds && !kind_in(r->kind, kinds)))
            continue;
        *out = *r;
        if (take)
            r->live = 0;
        found = 1;
        break;
    }
    while (nres > 0 && !resv[nres - 1].live)
        nres--;
    pthread_mutex_unlock(&res_mu);
    return found;
}

static const int K_DEVMEM[] = {RK_ALLOC, RK_ALLOC_V1, RK_PITCH, RK_PITCH_V1, RK_MANAGED,
                               RK_ASYNC, RK_ASYNC_PTSZ, RK_POOLALLOC, RK_POOLALLOC_PTSZ, 0};
static const int K_POOLMEM[] = {RK_POOLALLOC, RK_POOLALLOC_PTSZ, RK_ASYNC, RK_ASYNC_PTSZ, 0};
static const int K_HOSTMEM[] = {RK_HOST, RK_HOSTREG, 0};
static const int K_VMMH[] = {RK_VMM, 0};
static const int K_EXTM[] = {RK_EXT, 0};

/* Release one resource with its matching call(s). */
NOINLINE int release_res(struct exec *e, struct res *r)
{
    int rc = 0;
    switch (r->kind) {
    case RK_ALLOC: case RK_PITCH: case RK_MANAGED: case RK_EXTBUF:
        rc = CALL(cuMemFree_v2, r->ptr);
        break;
    case RK_ALLOC_V1: case RK_PITCH_V1:
        rc = CALL(cuMemFree, (CUdeviceptr_v1)r->ptr);
        break;
    case RK_ASYNC: case RK_POOLALLOC: case RK_POOLIMPORT:
        rc = CALL(cuMemFreeAsync, r->ptr, NULL);
        break;
    case RK_ASYNC_PTSZ: case RK_POOLALLOC_PTSZ:
        rc = CALL(cuMemFreeAsync_ptsz, r->ptr, NULL);
        break;
    case RK_POOL:
        rc = CALL(cuMemPoolDestroy, (CUmemoryPool)r->handle);
        if (e->last_pool == (CUmemoryPool)r->handle)
            e->last_pool = NULL;
        break;
    case RK_ARRAY:
        rc = CALL(cuArrayDestroy, (CUarray)r->handle);
        break;
    case RK_MIPMAP:
        rc = CALL(cuMipmappedArrayDestroy, (CUmipmappedArray)r->handle);
        break;
    case RK_VMM:
        if (r->steps >= 3)
            rc |= CALL(cuMemUnmap, r->ptr, r->size) != 0;
        if (r->steps >= 2)
            rc |= CALL(cuMemAddressFree, r->ptr, r->size) != 0;
        rc |= CALL(cuMemRelease, r->mh) != 0;
        break;
    case RK_VMM_IMPORT:
        rc = CALL(cuMemRelease, r->mh);
        break;
    case RK_SEGMENT:
        rc |= CALL(cuMemUnmap, r->ptr, r->size) != 0;
        rc |= CALL(cuMemRelease, r->mh) != 0;
        break;
    case RK_VA:
        rc = CALL(cuMemAddressFree, r->ptr, r->size);
        break;
    case RK_HOST:
        rc = CALL(cuMemFreeHost, r->host);
        break;
    case RK_HOSTREG:
        rc = CALL(cuMemHostUnregister, r->host);
        free(r->host);
        break;
    case RK_IPC:
        rc = CALL(cuIpcCloseMemHandle, r->ptr);
        break;
    case RK_PEER:
        rc = CALL(cuCtxDisablePeerAccess, (CUcontext)r->handle);
        break;
    case RK_EXT:
        rc = CALL(cuDestroyExternalMemory, (CUexternalMemory)r->handle);
        break;
    default:
        break;
    }
    return rc != 0;
}

/* ---- argument parsing ---------------------------------------------------- */

static int parse_u64(const char *s, uint64_t *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno)
        return -1;
    uint64_t mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mul = 1ull << 10; end++; break;
    case 'M': mul = 1ull << 20; end++; break;
    case 'G': mul = 1ull << 30; end++; break;
    case 'T': mul = 1ull << 40; end++; break;
    default: break;
    }
    if (*end || (mul > 1 && v > UINT64_MAX / mul))
        return -1;
    *out = v * mul;
    return 0;
}

static int arg_u64(const char *step, const char *s, uint64_t *out)
{
    if (parse_u64(s, out) != 0) {
        errline("simwork: %s: bad number '%s'", step, s);
        return -1;
    }
    return 0;
}

static int arg_int(const char *step, const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 0);
    if (errno || end == s || *end || v < -1000000000L || v > 1000000000L) {
        errline("simwork: %s: bad integer '%s'", step, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

#define U64(var, i)                                  \
    uint64_t var;                                    \
    if (arg_u64(argv[0], argv[i], &var) != 0)        \
        return 1
#define INT(var, i)                                  \
    int var;                                         \
    if (arg_int(argv[0], argv[i], &var) != 0)        \
        return 1

static int cur_dev_or0(void)
{
    int d = simcalls_device();
    return d >= 0 ? d : 0;
}

static int write_atomic(const char *path, const void *data, size_t len)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0 || write(fd, data, len) != (ssize_t)len || close(fd) != 0 || rename(tmp, path) != 0) {
        errline("simwork: cannot write %s: %s", path, strerror(errno));
        if (fd >= 0)
            unlink(tmp);
        return -1;
    }
    return 0;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int wait_for_file(const char *path, int seconds)
{
    for (long waited = 0; waited <= seconds * 1000L; waited += 10) {
        if (access(path, F_OK) == 0)
            return 0;
        sleep_ms(10);
    }
    errline("simwork: timed out waiting for %s", path);
    return -1;
}

static int read_blob(const char *path, void *buf, size_t len)
{
    if (wait_for_file(path, 20) != 0)
        return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, len) : -1;
    if (fd >= 0)
        close(fd);
    if (n != (ssize_t)len) {
        errline("simwork: %s: expected %zu bytes", path, len);
        return -1;
    }
    return 0;
}

static int need(int ok, const char *step, const char *what)
{
    if (!ok)
        errline("simwork: %s: %s", step, what);
    return !ok;
}

/* ------------------------------------------------------------------------ */
/* Steps: contexts and devices                                               */
/* ------------------------------------------------------------------------ */

NOINLINE int step_init(struct exec *e, int argc, char **argv)
{
    (void)e; (void)argc; (void)argv;
    return CALL(cuInit, 0) != 0;
}

NOINLINE int step_use(struct exec *e, int argc, char **argv)
{
    (void)e; (void)argc;
    INT(dev, 1);
    CUdevice d;
    CUcontext c;
    int rc = CALL(cuDeviceGet, &d, dev) || CALL(cuDevicePrimaryCtxRetain, &c, d) ||
             CALL(cuCtxSetCurrent, c);
    refresh_dev();
    return rc;
}

static int ctx_common(struct exec *e, int dev, int variant)
{
    CUdevice d;
    CUcontext c = NULL;
    if (CALL(cuDeviceGet, &d, dev))
        return 1;
    int rc;
    switch (variant) {
    case 1: rc = CALL(cuCtxCreate, &c, 0, d); break;
    case 3: rc = CALL(cuCtxCreate_v3, &c, NULL, 0, 0, d); break;
    case 4: rc = CALL(cuCtxCreate_v4, &c, NULL, 0, d); break;
    default: rc = CALL(cuCtxCreate_v2, &c, 0, d); break;
    }
    if (rc == 0) {
        if (e->ncreated < 64)
            e->created[e->ncreated++] = c;
        e->last_ctx = c;
    }
    refresh_dev();
    return rc != 0;
}

NOINLINE int step_ctx(struct exec *e, int argc, char **argv)
{
    (void)argc;
    INT(dev, 1);
    int variant = 2;
    if (strcmp(argv[0], "ctx-v1") == 0)
        variant = 1;
    else if (strcmp(argv[0], "ctx-v3") == 0)
        variant = 3;
    else if (strcmp(argv[0], "ctx-v4") == 0)
        variant = 4;
    return ctx_common(e, dev, variant);
}

NOINLINE int step_ctx_pop(struct exec *e, int argc, char **argv)
{
    (void)argc; (void)argv;
    CUcontext c = NULL;
    int rc = CALL(cuCtxPopCurrent_v2, &c);
    if (rc == 0 && c)
        e->last_ctx = c;
    refresh_dev();
    return rc != 0;
}

NOINLINE int step_ctx_push(struct exec *e, int argc, char **argv)
{
    (void)argc;
    if (need(e->last_ctx != NULL, argv[0], "no context popped or created"))
        return 1;
    int rc = CALL(cuCtxPushCurrent_v2, e->last_ctx);
    refresh_dev();
    return rc != 0;
}

NOINLINE int step_ctx_destroy(struct exec *e, int argc, char **argv)
{
    (void)argc;
    if (need(e->ncreated > 0, argv[0], "no created context"))
        return 1;
    CUcontext c = e->created[--e->ncreated];
    int rc = CALL(cuCtxDestroy_v2, c);
    if (e->last_ctx == c)
        e->last_ctx = NULL;
    refresh_dev();
    return rc != 0;
}

NOINLINE int step_green(struct exec *e, int argc, char **argv)
{
    (void)argc;
    INT(dev, 1);
    CUgreenCtx g = NULL;
    /* The CUdevice of an ordinal is the ordinal. No SM split: NULL stands
     * for the whole device on the simulated GPU (a real driver wants a
     * descriptor from cuDevResourceGenerateDesc). */
    int rc = CALL(cuGreenCtxCreate, &g, NULL, (CUdevice)dev, 0);
    if (rc == 0)
        e->last_green = g;
    return rc != 0;
}

NOINLINE int step_green_push(struct exec *e, int argc, char **argv)
{
    (void)argc;
    if (need(e->last_green != NULL, argv[0], "no green context created"))
        return 1;
    CUcontext c = NULL;
    int rc = CALL(cuCtxFromGreenCtx, &c, e->last_green) || CALL(cuCtxPushCurrent_v2, c);
    refresh_dev();
    return rc != 0;
}

NOINLINE int step_green_destroy(struct exec *e, int argc, char **argv)
{
    (void)argc;
    if (need(e->last_green != NULL, argv[0], "no green context created"))
        return 1;
    int rc = CALL(cuGreenCtxDestroy, e->last_green);
    e->last_green = NULL;
    refresh_dev();
    return rc != 0;
}

NOINLINE int step_primary_release(struct exec *e, int argc, char **argv)
{
    (void)e; (void)argc;
    INT(dev, 1);
    int rc = CALL(cuDevicePrimaryCtxRelease_v2, dev);
    refresh_dev();
    return rc != 0;
}

NOINLINE int step_uuid(struct exec *e, int argc, char **argv)
{
    (void)e; (void)argc;
    INT(dev, 1);
    CUuuid u;
    int rc = strcmp(argv[0], "uuid-v1") == 0 ? CALL(cuDeviceGetUuid, &u, dev)
                                             : CALL(cuDeviceGetUuid_v2, &u, dev);
    if (rc)
        return 1;
    const unsigned char *b = (const unsigned char *)u.bytes;
    printf("uuid %d GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\n",
           dev, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
           b[13], b[14], b[15]);
    return 0;
}

NOINLINE int step_pci(struct exec *e, int argc, char **argv)
{
    (void)e; (void)argc;
    INT(dev, 1);
    char buf[64];
    if (CALL(cuDeviceGetPCIBusId, buf, (int)sizeof(buf), dev))
        return 1;
    printf("pci %d %s\n", dev, buf);
    return 0;
}

NOINLINE int step_meminfo(struct exec *e, int argc, char **argv)
{
    (void)e; (void)argc;
    size_t fr = 0, tot = 0;
    if (need(p_cuMemGetInfo_v2 != NULL, argv[0], "cuMemGetInfo_v2 not found"))
        return 1;
    int rc = p_cuMemGetInfo_v2(&fr, &tot);
    if (rc) {
        report("cuMemGetInfo_v2", rc);
        return 1;
    }
    printf("meminfo %d %zu %zu\n", simcalls_device(), fr, tot);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Steps: device memory                                                      */
/* ------------------------------------------------------------------------ */

NOINLINE int step_alloc(struct exec *e, int argc, char **argv)
{
    (void)argc;
    U64(size, 1);
    struct res r = {0};
    if (strcmp(argv[0], "alloc-v1") == 0) {
        if (need(size <= 0xffffffffu, argv[0], "size does not fit 32 bits"))
            return 1;
        CUdeviceptr_v1 p = 0;
        if (CALL(cuMemAlloc, &p, (unsigned int)size))
            return 1;
        r.kind = RK_ALLOC_V1;
        r.ptr = p;
    } else {
        CUdeviceptr p = 0;
        if (CALL(cuMemAlloc_v2, &p, (size_t)size))
            return 1;
        r.kind = RK_ALLOC;
        r.ptr = p;
    }
    r.size = size;
    res_push(e, r);
    return 0;
}

NOINLINE int step_alloc_pitch(struct exec *e, int argc, char **argv)
{
    (void)argc;
    U64(w, 1);
    U64(h, 2);
    U64(el, 3);
    struct res r = {0};
    if (strcmp(argv[0], "alloc-pitch-v1") == 0) {
        CUdeviceptr_v1 p = 0;
        unsigned int pitch = 0;
        if (CALL(cuMemAllocPitch, &p, &pitch, (unsigned)w, (unsigned)h, (unsigned)el))
            return 1;
        r.kind = RK_PITCH_V1;
        r.ptr = p;
        r.size = (size_t)pitch * h;
    } else {
        CUdeviceptr p = 0;
        size_t pitch = 0;
        if (CALL(cuMemAllocPitch_v2, &p, &pitch, (size_t)w, (size_t)h, (unsigned)el))
            return 1;
        r.kind = RK_PITCH;
        r.ptr = p;
        r.size = pitch * h;
    }
    res_push(e, r);
    return 0;
}

NOINLINE int step_alloc_managed(struct exec *e, int argc, char **argv)
{
    (void)argc;
    U64(size, 1);
    CUdeviceptr p = 0;
    if (CALL(cuMemAllocManaged, &p, (size_t)size, CU_MEM_ATTACH_GLOBAL))
        return 1;
    struct res r = {.kind = RK_MANAGED, .ptr = p, .size = size};
    res_push(e, r);
    return 0;
}

NOINLINE int step_alloc_async(struct exec *e, int argc, char **argv)
{
    (void)argc;
    U64(size, 1);
    CUdeviceptr p = 0;
    int ptsz = strcmp(argv[0], "alloc-async-ptsz") == 0;
    int rc = ptsz ? CALL(cuMemAllocAsync_ptsz, &p, (size_t)size, NULL)
                  : CALL(cuMemAllocAsync, &p, (size_t)size, NULL);
    if (rc)
        return 1;
    struct res r = {.kind = ptsz ? RK_ASYNC_PTSZ : RK_ASYNC, .ptr = p, .size = size};
    res_push(e, r);
    return 0;
}

static int pool_create(struct exec *e, uint64_t max_size)
{
    CUmemPoolProps props;
    memset(&props, 0, sizeof(props));
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = cur_dev_or0();
    props.maxSize = (size_t)max_size;
    CUmemoryPool pool = NULL;
    if (CALL(cuMemPoolCreate, &pool, &props))
        return 1;
    struct res r = {.kind = RK_POOL, .handle = pool};
    res_push(e, r);
    e->last_pool = pool;
    return 0;
}

NOINLINE int step_pool_create(struct exec *e, int argc, char **argv)
{
    uint64_t max_size = 0; /* no limit but the device's memory */
    if (argc > 1 && arg_u64(argv[0], argv[1], &max_size) != 0)
        return 1;
    return pool_create(e, max_size);
}

NOINLINE int step_alloc_pool(struct exec *e, int argc, char **argv)
{
    (void)argc;
    U64(size, 1);
    if (need(e->last_pool != NULL, argv[0], "no pool (use pool-create)"))
        return 1;
    CUdeviceptr p = 0;
    int ptsz = strcmp(argv[0], "alloc-pool-ptsz") == 0;
    int rc = ptsz ? CALL(cuMemAllocFromPoolAsync_ptsz, &p, (size_t)size, e->last_pool, NULL)
                  : CALL(cuMemAllocFromPoolAsync, &p, (size_t)size, e->last_pool, NULL);
    if (rc)
        return 1;
    struct res r = {.kind = ptsz ? RK_POOLALLOC_PTSZ : RK_POOLALLOC, .ptr = p, .size = size};
    res_push(e, r);
    return 0;
}

NOINLINE int step_array(struct exec *e, int argc, char **argv)
{
    (void)argc;
    U64(w, 1);
    U64(h, 2);
    CUarray a = NULL;
    int rc;
    if (strcmp(argv[0], "array-v1") == 0) {
        CUDA_ARRAY_DESCRIPTOR_v1 d = {(unsigned)w, (unsigned)h, CU_AD_FORMAT_FLOAT, 1};
        rc = CALL(cuArrayCreate, &a, &d);
    } else {
        CUDA_ARRAY_DESCRIPTOR d = {(size_t)w, (size_t)h, CU_AD_FORMAT_FLOAT, 1};
        rc = CALL(cuArrayCreate_v2, &a, &d);
    }
    if (rc)
        return 1;
    struct res r = {.kind = RK_ARRAY, .handle = a, .size = w * (h ? h : 1) * 4};
    res_push(e, r);
    return 0;
}

NOINLINE int step_array3d(struct exec *e, int argc, char **argv)
{
    (void)argc;
    U64(w, 1);
    U64(h, 2);
    U64(dd, 3);
    CUarray a = NULL;
    int rc;
    if (strcmp(argv[0], "array3d-v1") == 0) {
        CUDA_ARRAY3D_DESCRIPTOR_v1 d = {(unsigned)w, (unsigned)h, (unsigned)dd, CU_AD_FORMAT_FLOAT,
                                        1, 0};
        rc = CALL(cuArray3DCreate, &a, &d);
    } else {
        CUDA_ARRAY3D_DESCRIPTOR d = {(size_t)w, (size_t)h, (size_t)dd, CU_AD_FORMAT_FLOAT, 1, 0};
        rc = CALL(cuArray3DCreate_v2, &a, &d);
    }
    if (rc)
        return 1;
    struct res r = {.kind = RK_ARRAY, .handle = a};
    res_push(e, r);
    return 0;
}

NOINLINE int step_mipmap(struct exec *e, int argc, char **argv)
{
    (void)argc;
    U64(w, 1);
    U64(h, 2);
    U64(levels, 3);
    CUDA_ARRAY3D_DESCRIPTOR d = {(size_t)w, (size_t)h, 0, CU_AD_FORMAT_FLOAT, 1, 0};
    CUmipmappedArray m = NULL;
    if (CALL(cuMipmappedArrayCreate, &m, &d, (unsigned)levels))
        return 1;
    struct res r = {.kind = RK_MIPMAP, .handle = m};
    res_push(e, r);
    return 0;
}

#define VMM_MAX_GRANTS 16

NOINLINE int step_vmm(struct exec *e, int argc, char **argv)
{
    U64(size, 1);
    int owner = cur_dev_or0();
    CUmemAccessDesc acc[VMM_MAX_GRANTS];
    size_t ngrant = argc > 2 ? (size_t)(argc - 2) : 1;
    memset(acc, 0, sizeof(acc));
    for (size_t i = 0; i < ngrant; i++) {
        int dev = owner;
        if (argc > 2 && arg_int(argv[0], argv[2 + i], &dev) != 0)
            return 1;
        acc[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        acc[i].location.id = dev;
        acc[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = owner;
    CUmemGenericAllocationHandle h = 0;
    if (CALL(cuMemCreate, &h, (size_t)size, &prop, 0ull))
        return 1;
    struct res r = {.kind = RK_VMM, .mh = h, .size = size, .steps = 1};
    int rc = 0;
    CUdeviceptr va = 0;
    if (CALL(cuMemAddressReserve, &va, (size_t)size, (size_t)0, (CUdeviceptr)0, 0ull)) {
        rc = 1;
    } else {
        r.ptr = va;
        r.steps = 2;
        if (CALL(cuMemMap, va, (size_t)size, (size_t)0, h, 0ull)) {
            rc = 1;
        } else {
            r.steps = 3;
            if (CALL(cuMemSetAccess, va, (size_t)size, acc, ngrant))
                rc = 1;
        }
    }
    res_push(e, r);
    return rc;
}

/* expandable VA CHUNK: how PyTorch's expandable segments grow: reserve VA
 * bytes of address space once, then grow into it CHUNK at a time
 * (cuMemCreate on the current device + cuMemMap + cuMemSetAccess for the
 * current device) until a call fails or the range is full. */
NOINLINE int step_expandable(struct exec *e, int argc, char **argv)
{
    (void)argc;
    U64(va_size, 1);
    U64(chunk, 2);
    if (need(chunk > 0 && chunk <= va_size, argv[0], "CHUNK must be between 1 and VA"))
        return 1;
    int dev = cur_dev_or0();
    CUdeviceptr va = 0;
    if (CALL(cuMemAddressReserve, &va, (size_t)va_size, (size_t)0, (CUdeviceptr)0, 0ull))
        return 1;
    struct res rv = {.kind = RK_VA, .ptr = va, .size = va_size};
    res_push(e, rv);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof(acc));
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = dev;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (uint64_t off = 0; off + chunk <= va_size; off += chunk) {
        CUmemGenericAllocationHandle h = 0;
        if (CALL(cuMemCreate, &h, (size_t)chunk, &prop, 0ull))
            return 1;
        if (CALL(cuMemMap, va + off, (size_t)chunk, (size_t)0, h, 0ull)) {
            CALL(cuMemRelease, h);
            return 1;
        }
        struct res r = {.kind = RK_SEGMENT, .ptr = va + off, .size = chunk, .mh = h};
        res_push(e, r);
        if (CALL(cuMemSetAccess, va + off, (size_t)chunk, &acc, (size_t)1))
            return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Steps: host memory                                                        */
/* ------------------------------------------------------------------------ */

NOINLINE int step_alloc_host(struct exec *e, int argc, char **argv)
{
    (void)argc;
    U64(size, 1);
    void *p = NULL;
    int rc;
    if (strcmp(argv[0], "alloc-host-v1") == 0) {
        if (need(size <= 0xffffffffu, argv[0], "size does not fit 32 bits"))
            return 1;
        rc = CALL(cuMemAllocHost, &p, (unsigned int)size);
    } else {
        rc = CALL(cuMemAllocHost_v2, &p, (size_t)size);
    }
    if (rc)
        return 1;
    struct res r = {.kind = RK_HOST, .host = p, .size = size};
    res_push(e, r);
    return 0;
}

NOINLINE int step_host_alloc(struct exec *e, int argc, char **argv)
{
    U64(size, 1);
    uint64_t flags = 0;
    if (argc > 2 && arg_u64(argv[0], argv[2], &flags) != 0)
        return 1;
    void *p = NULL;
    if (CALL(cuMemHostAlloc, &p, (size_t)size, (unsigned)flags))
        return 1;
    struct res r = {.kind = RK_HOST, .host = p, .size = size};
    res_push(e, r);
    return 0;
}

NOINLINE int step_host_register(struct exec *e, int argc, char **argv)
{
    (void)argc;
    U64(size, 1);
    void *p = NULL;
    if (need(size > 0 && posix_memalign(&p, 4096, (size_t)size) == 0, argv[0],
             "host malloc failed"))
        return 1;
    int rc = strcmp(argv[0], "host-register-v1") == 0
                 ? CALL(cuMemHostRegister, p, (size_t)size, 0u)
                 : CALL(cuMemHostRegister_v2, p, (size_t)size, 0u);
    if (rc) {
        free(p);
        return 1;
    }
    struct res r = {.kind = RK_HOSTREG, .host = p, .size = size};
    res_push(e, r);
    return 0;
}

NOINLINE int step_host_devptr(struct exec *e, int argc, char **argv)
{
    (void)argc;
    struct res h;
    if (need(res_find(e, K_HOSTMEM, 0, &h), argv[0], "no host allocation"))
        return 1;
    if (strcmp(argv[0], "host-devptr-v1") == 0) {
        CUdeviceptr_v1 d = 0;
        return CALL(cuMemHostGetDevicePointer, &d, h.host, 0u) != 0;
    }
    CUdeviceptr d = 0;
    return CALL(cuMemHostGetDevicePointer_v2, &d, h.host, 0u) != 0;
}

/* ------------------------------------------------------------------------ */
/* Steps: sharing                                                            */
/* ------------------------------------------------------------------------ */

NOINLINE int step_ipc_export(struct exec *e, int argc, char **argv)
{
    (void)argc;
    struct res r;
    if (need(res_find(e, K_DEVMEM, 0, &r), argv[0], "no device allocation"))
        return 1;
    CUipcMemHandle h;
    memset(&h, 0, sizeof(h));
    if (CALL(cuIpcGetMemHandle, &h, r.ptr))
        return 1;
    return write_atomic(argv[1], &h, sizeof(h)) != 0;
}

NOINLINE int step_ipc_open(struct exec *e, int argc, char **argv)
{
    (void)argc;
    CUipcMemHandle h;
    if (read_blob(argv[1], &h, sizeof(h)) != 0)
        return 1;
    CUdeviceptr p = 0;
    int rc = strcmp(argv[0], "ipc-open-v1") == 0
                 ? CALL(cuIpcOpenMemHandle, &p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
                 : CALL(cuIpcOpenMemHandle_v2, &p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (rc)
        return 1;
    struct res r = {.kind = RK_IPC, .ptr = p};
    res_push(e, r);
    return 0;
}

NOINLINE int step_pool_export(struct exec *e, int argc, char **argv)
{
    (void)argc;
    struct res r;
    if (need(res_find(e, K_POOLMEM, 0, &r), argv[0], "no pool allocation"))
        return 1;
    CUmemPoolPtrExportData d;
    memset(&d, 0, sizeof(d));
    if (CALL(cuMemPoolExportPointer, &d, r.ptr))
        return 1;
    return write_atomic(argv[1], &d, sizeof(d)) != 0;
}

NOINLINE int step_pool_import(struct exec *e, int argc, char **argv)
{
    (void)argc;
    CUmemPoolPtrExportData d;
    if (read_blob(argv[1], &d, sizeof(d)) != 0)
        return 1;
    if (!e->last_pool && pool_create(e, 0))
        return 1;
    CUdeviceptr p = 0;
    if (CALL(cuMemPoolImportPointer, &p, e->last_pool, &d))
        return 1;
    struct res r = {.kind = RK_POOLIMPORT, .ptr = p};
    res_push(e, r);
    return 0;
}

NOINLINE int step_peer(struct exec *e, int argc, char **argv)
{
    (void)argc;
    INT(dev, 1);
    CUcontext pc = NULL;
    if (CALL(cuDevicePrimaryCtxRetain, &pc, dev) || CALL(cuCtxEnablePeerAccess, pc, 0u))
        return 1;
    struct res r = {.kind = RK_PEER, .handle = pc};
    res_push(e, r);
    return 0;
}

NOINLINE int step_export_fd(struct exec *e, int argc, char **argv)
{
    (void)argc;
    struct res r;
    if (need(res_find(e, K_VMMH, 0, &r), argv[0], "no vmm allocation"))
        return 1;
    int fd = -1;
    if (CALL(cuMemExportToShareableHandle, &fd, r.mh, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
             0ull))
        return 1;
    e->last_fd = fd;
    return 0;
}

NOINLINE int step_import_fd(struct exec *e, int argc, char **argv)
{
    (void)argc;
    if (need(e->last_fd >= 0, argv[0], "no exported fd (use export-fd)"))
        return 1;
    CUmemGenericAllocationHandle h = 0;
    if (CALL(cuMemImportFromShareableHandle, &h, (void *)(intptr_t)e->last_fd,
             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return 1;
    struct res r = {.kind = RK_VMM_IMPORT, .mh = h};
    res_push(e, r);
    return 0;
}

NOINLINE int step_ext_import(struct exec *e, int argc, char **argv)
{
    (void)argc;
    U64(size, 1);
    int fd = memfd_create("simwork-ext", MFD_CLOEXEC);
    if (need(fd >= 0 && ftruncate(fd, (off_t)size) == 0, argv[0], "memfd failed")) {
        if (fd >= 0)
            close(fd);
        return 1;
    }
    CUDA_EXTERNAL_MEMORY_HANDLE_DESC d;
    memset(&d, 0, sizeof(d));
    d.type = CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD;
    d.handle.fd = fd;
    d.size = size;
    CUexternalMemory ext = NULL;
    if (CALL(cuImportExternalMemory, &ext, &d)) {
        close(fd);
        return 1;
    }
    /* the driver owns the fd now */
    struct res r = {.kind = RK_EXT, .handle = ext, .size = size};
    res_push(e, r);
    return 0;
}

NOINLINE int step_ext_map(struct exec *e, int argc, char **argv)
{
    (void)argc;
    U64(size, 1);
    struct res x;
    if (need(res_find(e, K_EXTM, 0, &x), argv[0], "no external memory (use ext-import)"))
        return 1;
    CUDA_EXTERNAL_MEMORY_BUFFER_DESC d;
    memset(&d, 0, sizeof(d));
    d.offset = 0;
    d.size = size;
    CUdeviceptr p = 0;
    if (CALL(cuExternalMemoryGetMappedBuffer, &p, (CUexternalMemory)x.handle, &d))
        return 1;
    struct res r = {.kind = RK_EXTBUF, .ptr = p, .size = size};
    res_push(e, r);
    return 0;
}

NOINLINE int step_gfx(struct exec *e, int argc, char **argv)
{
    (void)e; (void)argc;
    if (strcmp(argv[0], "gfx-ptsz") == 0)
        return (CALL(cuGraphicsMapResources_ptsz, 0u, NULL, NULL) != 0) |
               (CALL(cuGraphicsUnmapResources_ptsz, 0u, NULL, NULL) != 0);
    return (CALL(cuGraphicsMapResources, 0u, NULL, NULL) != 0) |
           (CALL(cuGraphicsUnmapResources, 0u, NULL, NULL) != 0);
}

NOINLINE int step_map_array(struct exec *e, int argc, char **argv)
{
    (void)e; (void)argc;
    if (strcmp(argv[0], "map-array-ptsz") == 0)
        return CALL(cuMemMapArrayAsync_ptsz, NULL, 0u, NULL) != 0;
    return CALL(cuMemMapArrayAsync, NULL, 0u, NULL) != 0;
}

/* ------------------------------------------------------------------------ */
/* Steps: releasing                                                          */
/* ------------------------------------------------------------------------ */

NOINLINE int step_free(struct exec *e, int argc, char **argv)
{
    (void)argc;
    struct res r;
    if (need(res_find(e, NULL, 1, &r), argv[0], "nothing to free"))
        return 1;
    return release_res(e, &r);
}

NOINLINE int step_free_all(struct exec *e, int argc, char **argv)
{
    (void)argc; (void)argv;
    struct res r;
    int failed = 0;
    while (res_find(e, NULL, 1, &r))
        failed |= release_res(e, &r);
    return failed;
}

/* ------------------------------------------------------------------------ */
/* Steps: load                                                               */
/* ------------------------------------------------------------------------ */

static void load_summary(const char *step, unsigned long failed, unsigned long calls,
                         const char *sym, int rc)
{
    if (!failed)
        return;
    const char *n = err_name(rc);
    errline("simwork: %s: %lu of %lu calls failed (first: %s -> %d%s%s)", step, failed, calls, sym,
            rc, n ? " " : "", n ? n : "");
}

NOINLINE int step_stress(struct exec *e, int argc, char **argv)
{
    (void)e; (void)argc;
    U64(n, 1);
    if (need(p_cuMemAlloc_v2 && p_cuMemFree_v2, argv[0], "cuMemAlloc_v2/cuMemFree_v2 not found"))
        return 1;
    unsigned long allocs = 0, frees = 0, failed = 0;
    const char *fsym = NULL;
    int frc = 0;
    for (uint64_t i = 0; i < n; i++) {
        CUdeviceptr p = 0;
        allocs++;
        int rc = p_cuMemAlloc_v2(&p, 4096);
        if (rc) {
            if (!failed++) {
                fsym = "cuMemAlloc_v2";
                frc = rc;
            }
            continue;
        }
        frees++;
        rc = p_cuMemFree_v2(p);
        if (rc && !failed++) {
            fsym = "cuMemFree_v2";
            frc = rc;
        }
    }
    simcalls_add(SC_cuMemAlloc_v2, allocs);
    simcalls_add(SC_cuMemFree_v2, frees);
    load_summary(argv[0], failed, allocs + frees, fsym, frc);
    return failed != 0;
}

NOINLINE int step_mix(struct exec *e, int argc, char **argv)
{
    (void)e; (void)argc;
    U64(n, 1);
    if (need(p_cuMemAlloc_v2 && p_cuMemFree_v2 && p_cuMemAllocAsync && p_cuMemFreeAsync &&
                 p_cuMemAllocHost_v2 && p_cuMemFreeHost,
             argv[0], "a mix symbol is missing"))
        return 1;
    unsigned long c[6] = {0}, failed = 0;
    const char *fsym = NULL;
    int frc = 0;
#define MIXFAIL(sym, rc)            \
    do {                            \
        if (!failed++) {            \
            fsym = sym;             \
            frc = rc;               \
        }                           \
    } while (0)
    for (uint64_t i = 0; i < n; i++) {
        CUdeviceptr a = 0, b = 0;
        void *h = NULL;
        size_t sz = (size_t)(64u << 10) << (i % 7); /* 64K .. 4M */
        int rc, ra, rb, rh;
        c[0]++;
        if ((ra = p_cuMemAlloc_v2(&a, sz)))
            MIXFAIL("cuMemAlloc_v2", ra);
        c[1]++;
        if ((rb = p_cuMemAllocAsync(&b, (size_t)1 << 20, NULL)))
            MIXFAIL("cuMemAllocAsync", rb);
        if (!rb) {
            c[2]++;
            if ((rc = p_cuMemFreeAsync(b, NULL)))
                MIXFAIL("cuMemFreeAsync", rc);
        }
        c[3]++;
        if ((rh = p_cuMemAllocHost_v2(&h, (size_t)64 << 10)))
            MIXFAIL("cuMemAllocHost_v2", rh);
        if (!rh) {
            c[4]++;
            if ((rc = p_cuMemFreeHost(h)))
                MIXFAIL("cuMemFreeHost", rc);
        }
        if (!ra) {
            c[5]++;
            if ((rc = p_cuMemFree_v2(a)))
                MIXFAIL("cuMemFree_v2", rc);
        }
    }
#undef MIXFAIL
    simcalls_add(SC_cuMemAlloc_v2, c[0]);
    simcalls_add(SC_cuMemAllocAsync, c[1]);
    simcalls_add(SC_cuMemFreeAsync, c[2]);
    simcalls_add(SC_cuMemAllocHost_v2, c[3]);
    simcalls_add(SC_cuMemFreeHost, c[4]);
    simcalls_add(SC_cuMemFree_v2, c[5]);
    load_summary(argv[0], failed, c[0] + c[1] + c[2] + c[3] + c[4] + c[5], fsym, frc);
    return failed != 0;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

NOINLINE int step_paced(struct exec *e, int argc, char **argv)
{
    (void)e;
    U64(rate, 1);
    U64(secs, 2);
    uint64_t size = 4096;
    if (argc > 3 && arg_u64(argv[0], argv[3], &size) != 0)
        return 1;
    if (need(p_cuMemAlloc_v2 && p_cuMemFree_v2, argv[0], "cuMemAlloc_v2/cuMemFree_v2 not found"))
        return 1;
    unsigned long allocs = 0, frees = 0, failed = 0;
    const char *fsym = NULL;
    int frc = 0;
    uint64_t t0 = mono_ns(), end = t0 + secs * 1000000000ull, t;
    while ((t = mono_ns()) < end) {
        if (rate) {
            /* Call number allocs+frees is due at t0 + (allocs+frees)/rate. */
            uint64_t due = t0 + (uint64_t)((double)(allocs + frees) * 1e9 / (double)rate);
            if (t < due) {
                if (due - t > 200000)
                    sleep_ns(due - t - 100000);
                while (mono_ns() < due)
                    ;
            }
        }
        CUdeviceptr p = 0;
        allocs++;
        int rc = p_cuMemAlloc_v2(&p, (size_t)size);
        if (rc) {
            if (!failed++) {
                fsym = "cuMemAlloc_v2";
                frc = rc;
            }
            continue;
        }
        frees++;
        rc = p_cuMemFree_v2(p);
        if (rc && !failed++) {
            fsym = "cuMemFree_v2";
            frc = rc;
        }
    }
    uint64_t el = mono_ns() - t0;
    simcalls_add(SC_cuMemAlloc_v2, allocs);
    simcalls_add(SC_cuMemFree_v2, frees);
    printf("paced %lu calls %lu failed %llu ns %.0f calls/s\n", allocs + frees, failed,
           (unsigned long long)el, el ? (double)(allocs + frees) * 1e9 / (double)el : 0.0);
    load_summary(argv[0], failed, allocs + frees, fsym, frc);
    return failed != 0;
}

NOINLINE int step_clock(struct exec *e, int argc, char **argv)
{
    (void)e; (void)argc; (void)argv;
    printf("clock %llu\n", (unsigned long long)mono_ns());
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Steps: process control                                                    */
/* ------------------------------------------------------------------------ */

static pid_t *g_children;
static size_t g_nchildren, g_capchildren;
static pthread_mutex_t g_children_mu = PTHREAD_MUTEX_INITIALIZER;

NOINLINE int step_wait(struct exec *e, int argc, char **argv)
{
    (void)e; (void)argc; (void)argv;
    pthread_mutex_lock(&g_children_mu);
    pid_t *kids = g_children;
    size_t n = g_nchildren;
    g_children = NULL;
    g_nchildren = g_capchildren = 0;
    pthread_mutex_unlock(&g_children_mu);
    for (size_t i = 0; i < n; i++) {
        int st = 0;
        pid_t r;
        do
            r = waitpid(kids[i], &st, 0);
        while (r < 0 && errno == EINTR);
        int s = r < 0 ? 255 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        printf("child %d status %d\n", (int)kids[i], s);
    }
    free(kids);
    return 0;
}

NOINLINE int step_sleep(struct exec *e, int argc, char **argv)
{
    (void)e; (void)argc;
    U64(ms, 1);
    sleep_ms((long)ms);
    return 0;
}

/* thread-name NAME: name the calling thread (its kernel comm, what
 * pthread_setname_np sets), so a test can check that a failure is reported
 * with the name of the thread that made it. The kernel keeps 15 bytes: a
 * longer NAME is cut to them. */
NOINLINE int step_thread_name(struct exec *e, int argc, char **argv)
{
    (void)e; (void)argc;
    char name[16];
    snprintf(name, sizeof(name), "%s", argv[1]);
    int err = pthread_setname_np(pthread_self(), name);
    if (err != 0) {
        fprintf(stderr, "simwork: thread-name %s: %s\n", name, strerror(err));
        return 1;
    }
    return 0;
}

NOINLINE int step_wait_signal(struct exec *e, int argc, char **argv)
{
    (void)e; (void)argc; (void)argv;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    int sig;
    while (sigwait(&set, &sig) != 0)
        ;
    return 0;
}

NOINLINE int step_wait_file(struct exec *e, int argc, char **argv)
{
    (void)e; (void)argc;
    return wait_for_file(argv[1], 60) != 0;
}

/* load PATH: dlopen another libcuda file and call through it from now on. */
NOINLINE int step_load(struct exec *e, int argc, char **argv)
{
    (void)e; (void)argc;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        errline("simwork: cannot load %s: %s", argv[1], dlerror());
        return 1;
    }
    char *name = strdup(argv[1]);
    if (!name)
        abort();
    use_lib(h, name);
    return 0;
}

NOINLINE int step_touch(struct exec *e, int argc, char **argv)
{
    (void)e; (void)argc;
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        errline("simwork: touch %s: %s", argv[1], strerror(errno));
        return 1;
    }
    futimens(fd, NULL);
    close(fd);
    return 0;
}

NOINLINE int step_print(struct exec *e, int argc, char **argv)
{
    (void)e;
    for (int i = 1; i < argc; i++)
        printf(i > 1 ? " %s" : "%s", argv[i]);
    printf("\n");
    return 0;
}

NOINLINE int step_exit(struct exec *e, int argc, char **argv)
{
    (void)e; (void)argc;
    INT(code, 1);
    fflush(NULL);
    exit(code);
}

static volatile uintptr_t g_zero;

NOINLINE int step_crash(struct exec *e, int argc, char **argv)
{
    (void)e; (void)argc;
    simcalls_write();
    fflush(NULL);
    if (strcmp(argv[1], "abort") == 0)
        abort();
    *(volatile int *)g_zero = 1;
    abort();
}

/* ------------------------------------------------------------------------ */
/* Interpreter                                                               */
/* ------------------------------------------------------------------------ */

static int exec_list(struct exec *e, struct node *n);

static int g_ndev_for_d = -1;

static int ndev_for_d(void)
{
    int n = __atomic_load_n(&g_ndev_for_d, __ATOMIC_RELAXED);
    if (n > 0)
        return n;
    if (!p_cuDeviceGetCount || p_cuDeviceGetCount(&n) != CUDA_SUCCESS || n <= 0)
        return 1; /* not cached: cuInit may come later */
    __atomic_store_n(&g_ndev_for_d, n, __ATOMIC_RELAXED);
    return n;
}

static char *subst(struct exec *e, const char *tok)
{
    if (!strchr(tok, '%'))
        return strdup(tok);
    size_t cap = strlen(tok) + 64, len = 0;
    char *out = malloc(cap);
    if (!out)
        abort();
    for (const char *p = tok; *p; p++) {
        char num[32];
        const char *ins = NULL;
        if (p[0] == '%' && p[1] == 't') {
            snprintf(num, sizeof(num), "%d", e->tindex);
            ins = num;
            p++;
        } else if (p[0] == '%' && p[1] == 'd') {
            snprintf(num, sizeof(num), "%d", e->tindex % ndev_for_d());
            ins = num;
            p++;
        } else if (p[0] == '%' && p[1] == '%') {
            ins = "%";
            p++;
        }
        size_t add = ins ? strlen(ins) : 1;
        if (len + add + 1 > cap) {
            cap = (len + add + 1) * 2;
            out = realloc(out, cap);
            if (!out)
                abort();
        }
        if (ins) {
            memcpy(out + len, ins, add);
            len += add;
        } else {
            out[len++] = *p;
        }
    }
    out[len] = 0;
    return out;
}

struct thread_arg {
    struct exec e;
    struct node *body;
    pthread_barrier_t *barrier;
};

NOINLINE static void *thread_main(void *p)
{
    struct thread_arg *a = p;
    pthread_barrier_wait(a->barrier);
    exec_list(&a->e, a->body);
    return NULL;
}

NOINLINE int run_threads(struct exec *e, int n, struct node *body)
{
    if (n <= 0)
        return 0;
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, (unsigned)n);
    struct thread_arg *args = calloc((size_t)n, sizeof(*args));
    pthread_t *tids = calloc((size_t)n, sizeof(*tids));
    if (!args || !tids)
        abort();
    for (int i = 0; i < n; i++) {
        args[i].e = *e;
        args[i].e.tindex = i;
        args[i].e.owner = atomic_fetch_add(&g_owner_seq, 1) + 1;
        args[i].e.ncreated = 0;
        args[i].body = body;
        args[i].barrier = &barrier;
        if (pthread_create(&tids[i], NULL, thread_main, &args[i]) != 0) {
            errline("simwork: threads: cannot create thread %d", i);
            exit(2);
        }
    }
    for (int i = 0; i < n; i++)
        pthread_join(tids[i], NULL);
    pthread_barrier_destroy(&barrier);
    free(args);
    free(tids);
    return 0;
}

NOINLINE int run_fork(struct exec *e, struct node *body)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        errline("simwork: fork: %s", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        simcalls_forked_child();
        pthread_mutex_init(&res_mu, NULL);
        pthread_mutex_init(&g_children_mu, NULL);
        nres = 0; /* the parent's resources are not ours to free */
        g_nchildren = 0;
        struct exec child = *e;
        child.ncreated = 0;
        child.last_ctx = NULL;
        child.last_pool = NULL;
        exec_list(&child, body);
        fflush(NULL);
        exit(0);
    }
    pthread_mutex_lock(&g_children_mu);
    if (g_nchildren == g_capchildren) {
        g_capchildren = g_capchildren ? g_capchildren * 2 : 8;
        g_children = realloc(g_children, g_capchildren * sizeof(*g_children));
        if (!g_children)
            abort();
    }
    g_children[g_nchildren++] = pid;
    pthread_mutex_unlock(&g_children_mu);
    return 0;
}

NOINLINE int exec_node(struct exec *e, struct node *n)
{
    char **argv = calloc((size_t)n->argc + 1, sizeof(char *));
    if (!argv)
        abort();
    for (int i = 0; i < n->argc; i++)
        argv[i] = subst(e, n->argv[i]);
    int failed = 0;
    const char *name = argv[0];
    if (strcmp(name, "repeat") == 0) {
        uint64_t k;
        if (arg_u64(name, argv[1], &k) != 0) {
            failed = 1;
        } else {
            for (uint64_t i = 0; i < k; i++)
                failed |= exec_list(e, n->body);
        }
    } else if (strcmp(name, "until-fail") == 0) {
        for (long i = 0; i < 1000000; i++)
            if (exec_list(e, n->body))
                break;
    } else if (strcmp(name, "threads") == 0) {
        int k;
        failed = arg_int(name, argv[1], &k) != 0 || run_threads(e, k, n->body);
    } else if (strcmp(name, "fork") == 0) {
        failed = run_fork(e, n->body);
    } else {
        failed = n->def->fn(e, n->argc, argv);
    }
    for (int i = 0; i < n->argc; i++)
        free(argv[i]);
    free(argv);
    return failed;
}

static int exec_list(struct exec *e, struct node *n)
{
    int failed = 0;
    for (; n; n = n->next)
        failed |= exec_node(e, n);
    return failed;
}

/* ---- parser ---------------------------------------------------------- */

static const struct stepdef steps[] = {
    {"init", 0, 0, 0, 1, step_init},
    {"use", 1, 1, 0, 1, step_use},
    {"ctx", 1, 1, 0, 1, step_ctx},
    {"ctx-v1", 1, 1, 0, 1, step_ctx},
    {"ctx-v3", 1, 1, 0, 1, step_ctx},
    {"ctx-v4", 1, 1, 0, 1, step_ctx},
    {"ctx-pop", 0, 0, 0, 1, step_ctx_pop},
    {"ctx-push", 0, 0, 0, 1, step_ctx_push},
    {"ctx-destroy", 0, 0, 0, 1, step_ctx_destroy},
    {"green", 1, 1, 0, 1, step_green},
    {"green-push", 0, 0, 0, 1, step_green_push},
    {"green-destroy", 0, 0, 0, 1, step_green_destroy},
    {"primary-release", 1, 1, 0, 1, step_primary_release},
    {"uuid", 1, 1, 0, 1, step_uuid},
    {"uuid-v1", 1, 1, 0, 1, step_uuid},
    {"pci", 1, 1, 0, 1, step_pci},
    {"meminfo", 0, 0, 0, 1, step_meminfo},
    {"alloc", 1, 1, 0, 1, step_alloc},
    {"alloc-v1", 1, 1, 0, 1, step_alloc},
    {"alloc-pitch", 3, 3, 0, 1, step_alloc_pitch},
    {"alloc-pitch-v1", 3, 3, 0, 1, step_alloc_pitch},
    {"alloc-managed", 1, 1, 0, 1, step_alloc_managed},
    {"alloc-async", 1, 1, 0, 1, step_alloc_async},
    {"alloc-async-ptsz", 1, 1, 0, 1, step_alloc_async},
    {"pool-create", 0, 1, 0, 1, step_pool_create},
    {"alloc-pool", 1, 1, 0, 1, step_alloc_pool},
    {"alloc-pool-ptsz", 1, 1, 0, 1, step_alloc_pool},
    {"array", 2, 2, 0, 1, step_array},
    {"array-v1", 2, 2, 0, 1, step_array},
    {"array3d", 3, 3, 0, 1, step_array3d},
    {"array3d-v1", 3, 3, 0, 1, step_array3d},
    {"mipmap", 3, 3, 0, 1, step_mipmap},
    {"vmm", 1, 1 + VMM_MAX_GRANTS, 0, 1, step_vmm},
    {"expandable", 2, 2, 0, 1, step_expandable},
    {"alloc-host", 1, 1, 0, 1, step_alloc_host},
    {"alloc-host-v1", 1, 1, 0, 1, step_alloc_host},
    {"host-alloc", 1, 2, 0, 1, step_host_alloc},
    {"host-register", 1, 1, 0, 1, step_host_register},
    {"host-register-v1", 1, 1, 0, 1, step_host_register},
    {"host-devptr", 0, 0, 0, 1, step_host_devptr},
    {"host-devptr-v1", 0, 0, 0, 1, step_host_devptr},
    {"ipc-export", 1, 1, 0, 1, step_ipc_export},
    {"ipc-open", 1, 1, 0, 1, step_ipc_open},
    {"ipc-open-v1", 1, 1, 0, 1, step_ipc_open},
    {"pool-export", 1, 1, 0, 1, step_pool_export},
    {"pool-import", 1, 1, 0, 1, step_pool_import},
    {"peer", 1, 1, 0, 1, step_peer},
    {"export-fd", 0, 0, 0, 1, step_export_fd},
    {"import-fd", 0, 0, 0, 1, step_import_fd},
    {"ext-import", 1, 1, 0, 1, step_ext_import},
    {"ext-map", 1, 1, 0, 1, step_ext_map},
    {"gfx", 0, 0, 0, 1, step_gfx},
    {"gfx-ptsz", 0, 0, 0, 1, step_gfx},
    {"map-array", 0, 0, 0, 1, step_map_array},
    {"map-array-ptsz", 0, 0, 0, 1, step_map_array},
    {"free", 0, 0, 0, 1, step_free},
    {"free-all", 0, 0, 0, 1, step_free_all},
    {"stress", 1, 1, 0, 1, step_stress},
    {"mix", 1, 1, 0, 1, step_mix},
    {"paced", 2, 3, 0, 1, step_paced},
    {"clock", 0, 0, 0, 0, step_clock},
    {"repeat", 1, 1, 1, 0, NULL},
    {"until-fail", 0, 0, 1, 0, NULL},
    {"threads", 1, 1, 1, 0, NULL},
    {"fork", 0, 0, 1, 0, NULL},
    {"wait", 0, 0, 0, 0, step_wait},
    {"sleep", 1, 1, 0, 0, step_sleep},
    {"thread-name", 1, 1, 0, 0, step_thread_name},
    {"wait-signal", 0, 0, 0, 0, step_wait_signal},
    {"wait-file", 1, 1, 0, 0, step_wait_file},
    {"touch", 1, 1, 0, 0, step_touch},
    {"load", 1, 1, 0, 1, step_load},
    {"print", 0, 1000, 0, 0, step_print},
    {"exit", 1, 1, 0, 0, step_exit},
    {"crash", 1, 1, 0, 0, step_crash},
};

enum { T_WORD, T_SEMI, T_OPEN, T_CLOSE, T_END };

struct lexer {
    const char *p;
    char *word;
};

static int lex(struct lexer *lx)
{
    for (;;) {
        while (*lx->p == ' ' || *lx->p == '\t' || *lx->p == '\r')
            lx->p++;
        if (*lx->p == '#') { /* comment to end of line */
            while (*lx->p && *lx->p != '\n')
                lx->p++;
            continue;
        }
        break;
    }
    char c = *lx->p;
    if (!c)
        return T_END;
    if (c == ';' || c == '\n') {
        lx->p++;
        return T_SEMI;
    }
    if (c == '{') {
        lx->p++;
        return T_OPEN;
    }
    if (c == '}') {
        lx->p++;
        return T_CLOSE;
    }
    const char *start = lx->p;
    size_t len;
    if (c == '"') {
        start = ++lx->p;
        while (*lx->p && *lx->p != '"')
            lx->p++;
        len = (size_t)(lx->p - start);
        if (*lx->p == '"')
            lx->p++;
    } else {
        while (*lx->p && !strchr(" \t\r\n;{}", *lx->p))
            lx->p++;
        len = (size_t)(lx->p - start);
    }
    lx->word = strndup(start, len);
    if (!lx->word)
        abort();
    return T_WORD;
}

static int g_needs_lib;

__attribute__((format(printf, 1, 2), noreturn)) static void syntax(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "simwork: syntax error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

/* list := { stmt (';' | newline) }* ; stops at '}' or end */
static struct node *parse_list(struct lexer *lx, int nested)
{
    struct node *head = NULL, **tail = &head;
    int tok = lex(lx);
    for (;;) {
        if (tok == T_END) {
            if (nested)
                syntax("%s", "missing '}'");
            return head;
        }
        if (tok == T_CLOSE) {
            if (!nested)
                syntax("%s", "unexpected '}'");
            return head;
        }
        if (tok == T_SEMI) {
            tok = lex(lx);
            continue;
        }
        if (tok == T_OPEN)
            syntax("%s", "unexpected '{'");
        /* a statement: words up to ';' '{' '}' or end */
        struct node *n = calloc(1, sizeof(*n));
        if (!n)
            abort();
        int cap = 4;
        n->argv = malloc(sizeof(char *) * (size_t)cap);
        while (tok == T_WORD) {
            if (n->argc + 1 >= cap) {
                cap *= 2;
                n->argv = realloc(n->argv, sizeof(char *) * (size_t)cap);
            }
            n->argv[n->argc++] = lx->word;
            tok = lex(lx);
        }
        n->argv[n->argc] = NULL;
        const struct stepdef *d = NULL;
        for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
            if (strcmp(steps[i].name, n->argv[0]) == 0)
                d = &steps[i];
        if (!d)
            syntax("unknown step '%s'", n->argv[0]);
        if (n->argc - 1 < d->min || n->argc - 1 > d->max)
            syntax("wrong number of arguments to '%s'", n->argv[0]);
        n->def = d;
        g_needs_lib |= d->cuda;
        if (d->block) {
            if (tok != T_OPEN)
                syntax("'%s' needs a { block }", n->argv[0]);
            n->has_body = 1;
            n->body = parse_list(lx, 1);
            tok = lex(lx);
        } else if (tok == T_OPEN) {
            syntax("'%s' takes no block", n->argv[0]);
        }
        *tail = n;
        tail = &n->next;
        if (tok == T_CLOSE && !nested)
            syntax("%s", "unexpected '}'");
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: simwork 'STEP; STEP; ...'  (see simwork.c for the steps)\n");
        return 2;
    }
    size_t total = 1;
    for (int i = 1; i < argc; i++)
        total += strlen(argv[i]) + 1;
    char *script = malloc(total);
    if (!script)
        return 2;
    script[0] = 0;
    for (int i = 1; i < argc; i++) {
        if (i > 1)
            strcat(script, ";");
        strcat(script, argv[i]);
    }
    struct lexer lx = {script, NULL};
    struct node *prog = parse_list(&lx, 0);

    setvbuf(stdout, NULL, _IOLBF, 0);
    /* SIGUSR1 stays pending until wait-signal takes it. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    simcalls_init();
    if (g_needs_lib)
        load_lib();
    struct exec top;
    memset(&top, 0, sizeof(top));
    top.last_fd = -1;
    exec_list(&top, prog);
    fflush(NULL);
    return 0;
}

/*
 * gc.h: what the gpu-check workloads share. They load libcuda with dlopen
 * (no CUDA headers or toolkit needed to build them) and print what they
 * did as "GROUND key=value ..." lines on stdout: the ground truth that
 * scripts/gpu-check.sh compares with what forensic recorded.
 *
 * The types and constants below are cuda.h's (CUDA 12), only those used.
 * The libcuda loaded is $GPU_CHECK_LIBCUDA, else "libcuda.so.1" through the
 * loader (LD_LIBRARY_PATH, then the loader cache), as an application does.
 *
 * Exit status of every workload: 0 it did what it set out to do (including
 * the failure it provokes), 3 the planned failure did not happen, 4 setup
 * failed (no libcuda, no device, an unexpected error before the planned
 * step).
 */
#ifndef GC_H
#define GC_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;

typedef struct {
    int type; /* CU_MEM_LOCATION_TYPE_DEVICE = 1 */
    int id;
} gc_CUmemLocation;

typedef struct {
    int type;                 /* CU_MEM_ALLOCATION_TYPE_PINNED = 1 */
    int requestedHandleTypes; /* CU_MEM_HANDLE_TYPE_NONE = 0 */
    gc_CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} gc_CUmemAllocationProp;

typedef struct {
    gc_CUmemLocation location;
    int flags; /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3 */
} gc_CUmemAccessDesc;

_Static_assert(sizeof(gc_CUmemAllocationProp) == 32, "CUmemAllocationProp is 32 bytes");
_Static_assert(sizeof(gc_CUmemAccessDesc) == 12, "CUmemAccessDesc is 12 bytes");

#define GC_MiB (1ull << 20)
#define GC_GiB (1ull << 30)

#define GC_EXIT_OK 0
#define GC_EXIT_NOT_PROVOKED 3
#define GC_EXIT_SETUP 4

static void *gc_lib;
static const char *gc_libname;

/* The hooked calls a workload made, by exported name, printed at exit as
 * one "GROUND calls.NAME=N ..." line: what forensic must have recorded. */
static struct {
    const char *name;
    long n;
} gc_tab[32];
static int gc_ntab;

static inline void gc_add(const char *name, long n)
{
    for (int i = 0; i < gc_ntab; i++)
        if (!strcmp(gc_tab[i].name, name)) {
            gc_tab[i].n += n;
            return;
        }
    if (gc_ntab < 32) {
        gc_tab[gc_ntab].name = name;
        gc_tab[gc_ntab++].n = n;
    }
}

static inline void gc_count(const char *name)
{
    gc_add(name, 1);
}

static inline void gc_print_calls(void)
{
    printf("GROUND");
    for (int i = 0; i < gc_ntab; i++)
        printf(" calls.%s=%ld", gc_tab[i].name, gc_tab[i].n);
    printf("\n");
    fflush(stdout);
}

/* GC_CALL counts a call of the hooked function f (a variable holding
 * dlsym of the exported name given as a string) and makes it. */
#define GC_CALL(f, name, ...) (gc_count(name), (f)(__VA_ARGS__))

/* gc_open loads libcuda; exits 4 when it cannot. */
static inline void gc_open(void)
{
    gc_libname = getenv("GPU_CHECK_LIBCUDA");
    if (!gc_libname || !*gc_libname)
        gc_libname = "libcuda.so.1";
    gc_lib = dlopen(gc_libname, RTLD_NOW | RTLD_GLOBAL);
    if (!gc_lib) {
        fprintf(stderr, "gpu-check: dlopen %s: %s\n", gc_libname, dlerror());
        printf("GROUND setup=failed reason=no-libcuda\n");
        exit(GC_EXIT_SETUP);
    }
    atexit(gc_print_calls);
}

/* gc_sym returns an exported function of libcuda, or NULL. */
static inline void *gc_sym(const char *name)
{
    return dlsym(gc_lib, name);
}

/* gc_need returns an exported function; exits 4 when it is missing. */
static inline void *gc_need(const char *name)
{
    void *f = gc_sym(name);
    if (!f) {
        fprintf(stderr, "gpu-check: %s not exported by %s\n", name, gc_libname);
        printf("GROUND setup=failed reason=missing-%s\n", name);
        exit(GC_EXIT_SETUP);
    }
    return f;
}

static inline const char *gc_errname(CUresult rc)
{
    static char buf[32];
    CUresult (*name)(CUresult, const char **) = (CUresult(*)(CUresult, const char **))gc_sym("cuGetErrorName");
    const char *s = NULL;
    if (name && name(rc, &s) == 0 && s)
        return s;
    snprintf(buf, sizeof buf, "CUresult_%d", rc);
    return buf;
}

/* gc_setup: cuInit, device 0, its primary context made current (what the
 * CUDA runtime does). Exits 4 on failure. */
static inline CUdevice gc_setup(void)
{
    CUresult (*cuInit)(unsigned) = (CUresult(*)(unsigned))gc_need("cuInit");
    CUresult (*cuDeviceGet)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))gc_need("cuDeviceGet");
    CUresult (*retain)(CUcontext *, CUdevice) = (CUresult(*)(CUcontext *, CUdevice))gc_need("cuDevicePrimaryCtxRetain");
    CUresult (*setCurrent)(CUcontext) = (CUresult(*)(CUcontext))gc_need("cuCtxSetCurrent");
    CUdevice dev = 0;
    CUcontext ctx = NULL;
    CUresult rc;
    if ((rc = GC_CALL(cuInit, "cuInit", 0)) != 0 || (rc = GC_CALL(cuDeviceGet, "cuDeviceGet", &dev, 0)) != 0 ||
        (rc = GC_CALL(retain, "cuDevicePrimaryCtxRetain", &ctx, dev)) != 0 ||
        (rc = GC_CALL(setCurrent, "cuCtxSetCurrent", ctx)) != 0) {
        fprintf(stderr, "gpu-check: device setup failed: %d %s\n", rc, gc_errname(rc));
        printf("GROUND setup=failed result=%d result_name=%s\n", rc, gc_errname(rc));
        exit(GC_EXIT_SETUP);
    }
    return dev;
}

/* gc_mem: free and total device memory of the current context, through
 * cuMemGetInfo_v2 (not a hooked call). 0, 0 when unavailable. */
static inline void gc_mem(size_t *free, size_t *total)
{
    CUresult (*info)(size_t *, size_t *) = (CUresult(*)(size_t *, size_t *))gc_sym("cuMemGetInfo_v2");
    *free = *total = 0;
    if (!info || info(free, total) != 0)
        *free = *total = 0;
}

/* gc_granularity: the VMM allocation granularity of dev (2 MiB when the
 * library has no cuMemGetAllocationGranularity, as the simulator). */
static inline size_t gc_granularity(CUdevice dev)
{
    CUresult (*gran)(size_t *, const gc_CUmemAllocationProp *, int) =
        (CUresult(*)(size_t *, const gc_CUmemAllocationProp *, int))gc_sym("cuMemGetAllocationGranularity");
    gc_CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;
    prop.location.type = 1;
    prop.location.id = dev;
    size_t g = 0;
    if (!gran || gran(&g, &prop, 0 /* CU_MEM_ALLOC_GRANULARITY_MINIMUM */) != 0 || g == 0)
        g = 2 * GC_MiB;
    return g;
}

static inline double gc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* gc_hold: keep the state for the recorder's samples (the one the failure
 * triggered, and the next periodic one) before releasing anything. */
static inline void gc_hold(void)
{
    const char *s = getenv("GPU_CHECK_HOLD_MS");
    long ms = s ? atol(s) : 500;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* gc_size parses a byte count with an optional K, M, G or T suffix. */
static inline unsigned long long gc_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    switch (*end) {
    case 'K': case 'k': v <<= 10; break;
    case 'M': case 'm': v <<= 20; break;
    case 'G': case 'g': v <<= 30; break;
    case 'T': case 't': v <<= 40; break;
    }
    return v;
}

#endif

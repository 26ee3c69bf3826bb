/*
 * rt_oom: allocate device memory through the CUDA runtime (cudaMalloc, as
 * PyTorch's and CuPy's allocators do) until it fails, hold it, free it.
 * The runtime reaches the driver through its own entry points
 * (cuGetProcAddress), so this checks that those calls are recorded too.
 *
 * Two builds of this one file:
 *   nvcc -x cu -DGC_LINKED -o rt_oom rt_oom.c      the runtime linked (statically, nvcc's default)
 *   cc -o rt_oom rt_oom.c -ldl                      the runtime loaded with dlopen:
 *   rt_oom LIBCUDART [CHUNK]                        e.g. /usr/local/cuda/lib64/libcudart.so.12
 * CHUNK defaults to 1G. Exit status as in gc.h.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef GC_LINKED
#include <cuda_runtime.h>
#define rtMalloc cudaMalloc
#define rtFree cudaFree
#define rtErrorName cudaGetErrorName
#define rtRuntimeGetVersion cudaRuntimeGetVersion
typedef cudaError_t rterr;
#else
#include <dlfcn.h>
typedef int rterr;
static rterr (*rtMalloc)(void **, size_t);
static rterr (*rtFree)(void *);
static const char *(*rtErrorName)(rterr);
static rterr (*rtRuntimeGetVersion)(int *);
#endif

static unsigned long long size_arg(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    switch (*end) {
    case 'K': case 'k': v <<= 10; break;
    case 'M': case 'm': v <<= 20; break;
    case 'G': case 'g': v <<= 30; break;
    }
    return v;
}

int main(int argc, char **argv)
{
    int a = 1;
    const char *how = "linked";
#ifndef GC_LINKED
    if (argc < 2) {
        fprintf(stderr, "usage: rt_oom LIBCUDART [CHUNK]\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "gpu-check: dlopen %s: %s\n", argv[1], dlerror());
        printf("GROUND setup=failed reason=no-libcudart\n");
        return 4;
    }
    rtMalloc = (rterr(*)(void **, size_t))dlsym(lib, "cudaMalloc");
    rtFree = (rterr(*)(void *))dlsym(lib, "cudaFree");
    rtErrorName = (const char *(*)(rterr))dlsym(lib, "cudaGetErrorName");
    rtRuntimeGetVersion = (rterr(*)(int *))dlsym(lib, "cudaRuntimeGetVersion");
    if (!rtMalloc || !rtFree || !rtErrorName || !rtRuntimeGetVersion) {
        printf("GROUND setup=failed reason=libcudart-lacks-cudaMalloc\n");
        return 4;
    }
    how = argv[1];
    a = 2;
#endif
    unsigned long long chunk = argc > a ? size_arg(argv[a]) : 1ull << 30;
    int ver = 0;
    rtRuntimeGetVersion(&ver);
    /* cudaFree(0) creates the primary context, as frameworks do first. */
    rterr e = rtFree(0);
    if (e != 0) {
        printf("GROUND setup=failed runtime=%s result=%d result_name=%s\n", how, (int)e, rtErrorName(e));
        return 4;
    }
    printf("GROUND runtime=%s runtime_version=%d chunk=%llu\n", how, ver, chunk);
    enum { MAXN = 1 << 16 };
    static void *ptrs[MAXN];
    int n = 0, calls = 0;
    while (n < MAXN) {
        calls++;
        e = rtMalloc(&ptrs[n], chunk);
        if (e != 0)
            break;
        n++;
    }
    if (e == 0) {
        printf("GROUND runtime_failure=none calls.cudaMalloc=%d\n", calls);
        return 3;
    }
    printf("GROUND runtime_failure=cudaMalloc result=%d result_name=%s size=%llu allocated=%d calls.cudaMalloc=%d\n",
           (int)e, rtErrorName(e), chunk, n, calls);
    fflush(stdout);
    struct timespec ts = {0, 500000000L};
    nanosleep(&ts, NULL);
    for (int i = n - 1; i >= 0; i--)
        rtFree(ptrs[i]);
    printf("GROUND calls.cudaFree=%d\n", n + 1);
    return 0;
}

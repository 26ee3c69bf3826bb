/*
 * callchain - a chain of C functions that ends in a failed CUDA call, as an
 * optimized production binary makes it: built by `make` with -O2
 * -fomit-frame-pointer (callchain_o2) and with -O1 (callchain_o1), so the
 * stack at the failure can only be unwound with the call-frame
 * information, not with frame pointers.
 *
 *   callchain LIBCUDA [SIZE]
 *   callchain LIBCUDA SIZE N same      N failed allocations from one call site
 *   callchain LIBCUDA SIZE N deeper    N failed allocations, the i-th i calls
 *                                      deeper (a new call site every time)
 *
 * main -> run_job -> init_driver -> cuInit(0); then
 * run_job -> load_model -> alloc_weights -> cuMemAlloc_v2(SIZE, default 1 TiB),
 * after cuDeviceGet(0), cuDevicePrimaryCtxRetain and cuCtxSetCurrent.
 * Exit status: 0 if every call succeeded, 1 if one failed (the first failure
 * ends the chain), 2 if LIBCUDA cannot be loaded. NVIDIA's libcuda without
 * a GPU fails cuInit with 100 (CUDA_ERROR_NO_DEVICE).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHAIN __attribute__((noinline, noclone, used))

typedef int (*init_fn)(unsigned);
typedef int (*dev_get_fn)(int *, int);
typedef int (*retain_fn)(void **, int);
typedef int (*set_fn)(void *);
typedef int (*alloc_fn)(unsigned long long *, size_t);

static struct {
    init_fn init;
    dev_get_fn dev_get;
    retain_fn retain;
    set_fn set_current;
    alloc_fn alloc;
} cu;

/* Each link keeps a little state on its stack and uses its callee's
 * result after the call, so none is a tail call and each has a frame. */
CHAIN int init_driver(int attempt)
{
    volatile char scratch[48];
    memset((char *)scratch, attempt, sizeof(scratch));
    int rc = cu.init(0);
    if (rc != 0)
        fprintf(stderr, "callchain: cuInit -> %d (attempt %d)\n", rc, scratch[0]);
    return rc;
}

CHAIN int alloc_weights(size_t size, int shard)
{
    volatile unsigned long long ptr[4] = {0};
    int rc = cu.alloc((unsigned long long *)&ptr[shard & 3], size);
    if (rc != 0)
        fprintf(stderr, "callchain: cuMemAlloc_v2(%zu) -> %d\n", size, rc);
    return rc;
}

CHAIN int load_model(size_t size)
{
    volatile int shards = 1;
    int rc = 0;
    for (int i = 0; i < shards && rc == 0; i++)
        rc = alloc_weights(size, i);
    return rc;
}

static volatile int sink;

/* descend recurses depth calls deep, then allocates: each depth is a
 * call site of its own (another stack pointer). */
CHAIN int descend(size_t size, int depth)
{
    int rc = depth > 0 ? descend(size, depth - 1) : alloc_weights(size, 0);
    sink = rc; /* after the call: not a tail call */
    return rc;
}

/* storm makes n failed allocations after the driver is up. */
CHAIN int storm(size_t size, int n, int deeper)
{
    int failed = 0;
    for (int i = 0; i < n; i++)
        failed += (deeper ? descend(size, i) : alloc_weights(size, 0)) != 0;
    return failed;
}

CHAIN int run_job(size_t size)
{
    volatile int attempt = 1;
    int rc = init_driver(attempt);
    if (rc != 0)
        return rc;
    int dev = -1;
    void *ctx = NULL;
    if ((rc = cu.dev_get(&dev, 0)) != 0 || (rc = cu.retain(&ctx, dev)) != 0 || (rc = cu.set_current(ctx)) != 0) {
        fprintf(stderr, "callchain: context -> %d\n", rc);
        return rc;
    }
    rc = load_model(size);
    return rc;
}

/* start brings the driver up for a storm. */
CHAIN int start(void)
{
    int dev = -1;
    void *ctx = NULL;
    int rc = init_driver(1);
    if (rc == 0 && (rc = cu.dev_get(&dev, 0)) == 0 && (rc = cu.retain(&ctx, dev)) == 0)
        rc = cu.set_current(ctx);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: callchain LIBCUDA [SIZE]\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "callchain: %s\n", dlerror());
        return 2;
    }
    cu.init = (init_fn)dlsym(h, "cuInit");
    cu.dev_get = (dev_get_fn)dlsym(h, "cuDeviceGet");
    cu.retain = (retain_fn)dlsym(h, "cuDevicePrimaryCtxRetain");
    cu.set_current = (set_fn)dlsym(h, "cuCtxSetCurrent");
    cu.alloc = (alloc_fn)dlsym(h, "cuMemAlloc_v2");
    if (!cu.init || !cu.dev_get || !cu.retain || !cu.set_current || !cu.alloc) {
        fprintf(stderr, "callchain: %s lacks a driver function\n", argv[1]);
        return 2;
    }
    size_t size = argc > 2 ? strtoull(argv[2], NULL, 0) : 1ull << 40;
    if (argc > 3) {
        int n = atoi(argv[3]);
        int deeper = argc > 4 && strcmp(argv[4], "deeper") == 0;
        if (start() != 0)
            return 1;
        return storm(size, n, deeper) != 0 ? 1 : 0;
    }
    int rc = run_job(size);
    return rc != 0 ? 1 : 0;
}

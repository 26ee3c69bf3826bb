/*
 * weights_oom - load model weights, then grow a KV cache until the device
 * runs out of memory.
 *
 *   cuInit, cuDeviceGet(0), cuDeviceGetUuid_v2, cuDevicePrimaryCtxRetain,
 *   cuCtxSetCurrent; load_weights(): 4 x 2 GiB cuMemAlloc_v2;
 *   grow_kv_cache(): 1 GiB cuMemAlloc_v2 blocks until one fails.
 *
 * With the defaults (16 GiB framebuffer, 512 MiB reserved) the 8th KV block
 * fails:
 *   weights_oom: cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY after 7 KV blocks
 * Then everything is freed; exit status 1 if an allocation failed, else 0.
 * Linked against libcuda.so.1 directly; writes $SIMWORK_CALLS like simwork.
 */
#define _GNU_SOURCE
#include "simcuda.h"
#include "simcalls.h"

#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))
#define GiB (1ull << 30)
#define MAX_BLOCKS 4096

/* Count, call, and remember the current device for the counters. */
#define CALL(sym, ...) (simcalls_count(SC_##sym), sym(__VA_ARGS__))

static CUdeviceptr weights[4];
static CUdeviceptr kv[MAX_BLOCKS];
static int nkv;

static const char *errname(CUresult rc)
{
    const char *s = NULL;
    if (cuGetErrorName(rc, &s) != CUDA_SUCCESS || !s)
        return "?";
    return s;
}

static void die(const char *what, CUresult rc)
{
    fprintf(stderr, "weights_oom: %s failed: %s\n", what, errname(rc));
    exit(2);
}

NOINLINE int load_weights(void)
{
    for (int i = 0; i < 4; i++) {
        CUresult rc = CALL(cuMemAlloc_v2, &weights[i], 2 * GiB);
        if (rc != CUDA_SUCCESS) {
            fprintf(stderr, "weights_oom: cuMemAlloc_v2 failed: %s after %d weight shards\n",
                    errname(rc), i);
            return -1;
        }
    }
    return 0;
}

NOINLINE int grow_kv_cache(void)
{
    while (nkv < MAX_BLOCKS) {
        CUresult rc = CALL(cuMemAlloc_v2, &kv[nkv], 1 * GiB);
        if (rc != CUDA_SUCCESS) {
            fprintf(stderr, "weights_oom: cuMemAlloc_v2 failed: %s after %d KV blocks\n",
                    errname(rc), nkv);
            return -1;
        }
        nkv++;
    }
    return 0;
}

NOINLINE void free_all(void)
{
    for (int i = nkv - 1; i >= 0; i--)
        CALL(cuMemFree_v2, kv[i]);
    for (int i = 3; i >= 0; i--)
        if (weights[i])
            CALL(cuMemFree_v2, weights[i]);
}

int main(void)
{
    simcalls_init();
    CUresult rc;
    CUdevice dev;
    CUcontext ctx;
    CUuuid uuid;
    if ((rc = CALL(cuInit, 0)) != CUDA_SUCCESS)
        die("cuInit", rc);
    if ((rc = CALL(cuDeviceGet, &dev, 0)) != CUDA_SUCCESS)
        die("cuDeviceGet", rc);
    if ((rc = CALL(cuDeviceGetUuid_v2, &uuid, dev)) != CUDA_SUCCESS)
        die("cuDeviceGetUuid_v2", rc);
    if ((rc = CALL(cuDevicePrimaryCtxRetain, &ctx, dev)) != CUDA_SUCCESS)
        die("cuDevicePrimaryCtxRetain", rc);
    if ((rc = CALL(cuCtxSetCurrent, ctx)) != CUDA_SUCCESS)
        die("cuCtxSetCurrent", rc);
    simcalls_set_device(dev);
    const unsigned char *u = (const unsigned char *)uuid.bytes;
    printf("weights_oom: device %d GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
           "%02x%02x%02x%02x%02x%02x\n",
           dev, u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
           u[13], u[14], u[15]);
    fflush(stdout);
    int failed = load_weights() != 0 || grow_kv_cache() != 0;
    free_all();
    return failed ? 1 : 0;
}

/*
 * simtest - in-process checks of the simulated libcuda (linked directly).
 * Run by tests/check.sh with a fresh state: SIMGPU_DEVICES=2,
 * SIMGPU_PIN_LIMIT=64M, defaults otherwise.
 */
#define _GNU_SOURCE
#include "simcuda.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1ull << 20)
#define GiB (1ull << 30)

static int failures;

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "simtest:%d: check failed: %s\n", __LINE__, #cond); \
            failures++;                                                        \
        }                                                                      \
    } while (0)

#define EQ(expr, want)                                                              \
    do {                                                                            \
        long long got_ = (long long)(expr), want_ = (long long)(want);              \
        if (got_ != want_) {                                                        \
            fprintf(stderr, "simtest:%d: %s = %lld, want %lld\n", __LINE__, #expr,  \
                    got_, want_);                                                   \
            failures++;                                                             \
        }                                                                           \
    } while (0)

static size_t free_now(void)
{
    size_t f = 0, t = 0;
    EQ(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS);
    return f;
}

static void test_error_names(void)
{
    static const struct {
        int code;
        const char *name;
    } want[] = {
        {0, "CUDA_SUCCESS"}, {1, "CUDA_ERROR_INVALID_VALUE"}, {2, "CUDA_ERROR_OUT_OF_MEMORY"},
        {3, "CUDA_ERROR_NOT_INITIALIZED"}, {4, "CUDA_ERROR_DEINITIALIZED"},
        {100, "CUDA_ERROR_NO_DEVICE"}, {101, "CUDA_ERROR_INVALID_DEVICE"},
        {200, "CUDA_ERROR_INVALID_IMAGE"}, {201, "CUDA_ERROR_INVALID_CONTEXT"},
        {205, "CUDA_ERROR_MAP_FAILED"}, {206, "CUDA_ERROR_UNMAP_FAILED"},
        {208, "CUDA_ERROR_ALREADY_MAPPED"}, {211, "CUDA_ERROR_NOT_MAPPED"},
        {214, "CUDA_ERROR_ECC_UNCORRECTABLE"}, {400, "CUDA_ERROR_INVALID_HANDLE"},
        {700, "CUDA_ERROR_ILLEGAL_ADDRESS"}, {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
        {702, "CUDA_ERROR_LAUNCH_TIMEOUT"}, {704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"},
        {705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED"}, {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED"},
        {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"},
        {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"}, {714, "CUDA_ERROR_HARDWARE_STACK_ERROR"},
        {715, "CUDA_ERROR_ILLEGAL_INSTRUCTION"}, {716, "CUDA_ERROR_MISALIGNED_ADDRESS"},
        {717, "CUDA_ERROR_INVALID_ADDRESS_SPACE"}, {718, "CUDA_ERROR_INVALID_PC"},
        {719, "CUDA_ERROR_LAUNCH_FAILED"}, {800, "CUDA_ERROR_NOT_PERMITTED"},
        {801, "CUDA_ERROR_NOT_SUPPORTED"}, {999, "CUDA_ERROR_UNKNOWN"},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const char *n = NULL, *s = NULL;
        EQ(cuGetErrorName((CUresult)want[i].code, &n), CUDA_SUCCESS);
        CHECK(n && strcmp(n, want[i].name) == 0);
        EQ(cuGetErrorString((CUresult)want[i].code, &s), CUDA_SUCCESS);
        CHECK(s && *s);
    }
    const char *n = "x";
    EQ(cuGetErrorName((CUresult)12345, &n), CUDA_ERROR_INVALID_VALUE);
    CHECK(n == NULL);
}

static void test_proc_address(void)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    EQ(cuGetProcAddress("cuMemAlloc", &fn, 12020, 0), CUDA_SUCCESS);
    CHECK(fn == (void *)cuMemAlloc_v2);
    EQ(cuGetProcAddress("cuMemAlloc", &fn, 3010, 0), CUDA_SUCCESS);
    CHECK(fn == (void *)cuMemAlloc);
    EQ(cuGetProcAddress("cuMemAllocAsync", &fn, 12020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
       CUDA_SUCCESS);
    CHECK(fn == (void *)cuMemAllocAsync_ptsz);
    EQ(cuGetProcAddress("cuMemAllocAsync", &fn, 12020, 0), CUDA_SUCCESS);
    CHECK(fn == (void *)cuMemAllocAsync);
    /* no _ptsz variant: the plain one */
    EQ(cuGetProcAddress("cuMemFree", &fn, 12020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
       CUDA_SUCCESS);
    CHECK(fn == (void *)cuMemFree_v2);
    EQ(cuGetProcAddress("cuCtxCreate", &fn, 12020, 0), CUDA_SUCCESS);
    CHECK(fn == (void *)cuCtxCreate_v3);
    EQ(cuGetProcAddress("cuIpcOpenMemHandle", &fn, 12020, 0), CUDA_SUCCESS);
    CHECK(fn == (void *)cuIpcOpenMemHandle_v2);
    EQ(cuGetProcAddress("cuMemHostRegister", &fn, 12020, 0), CUDA_SUCCESS);
    CHECK(fn == (void *)cuMemHostRegister_v2);
    EQ(cuGetProcAddress_v2("cuMemAllocAsync", &fn, 10000, 0, &st), CUDA_ERROR_NOT_FOUND);
    EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    EQ(cuGetProcAddress_v2("cuNoSuchThing", &fn, 12020, 0, &st), CUDA_ERROR_NOT_FOUND);
    EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    EQ(cuGetProcAddress_v2("cuDeviceGetUuid", &fn, 12020, 0, &st), CUDA_SUCCESS);
    EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
    CHECK(fn == (void *)cuDeviceGetUuid_v2);
}

static void test_devices(void)
{
    int n = 0, ver = 0;
    EQ(cuDeviceGetCount(&n), CUDA_SUCCESS);
    EQ(n, 2);
    EQ(cuDriverGetVersion(&ver), CUDA_SUCCESS);
    EQ(ver, 12020);
    CUdevice d;
    EQ(cuDeviceGet(&d, 2), CUDA_ERROR_INVALID_DEVICE);
    EQ(cuDeviceGet(&d, 1), CUDA_SUCCESS);
    EQ(d, 1);
    CUuuid u0, u1, u1v1;
    EQ(cuDeviceGetUuid_v2(&u0, 0), CUDA_SUCCESS);
    EQ(cuDeviceGetUuid_v2(&u1, 1), CUDA_SUCCESS);
    EQ(cuDeviceGetUuid(&u1v1, 1), CUDA_SUCCESS);
    CHECK(memcmp(&u0, &u1, sizeof(u0)) != 0);
    CHECK(memcmp(&u1, &u1v1, sizeof(u1)) == 0);
    char bus[32], name[128];
    EQ(cuDeviceGetPCIBusId(bus, sizeof(bus), 1), CUDA_SUCCESS);
    CHECK(strcmp(bus, "0000:43:00.0") == 0);
    EQ(cuDeviceGetName(name, sizeof(name), 0), CUDA_SUCCESS);
    CHECK(strcmp(name, "NVIDIA Simulated H100 16GB") == 0);
    size_t tot = 0;
    EQ(cuDeviceTotalMem_v2(&tot, 0), CUDA_SUCCESS);
    EQ(tot, 16 * GiB);
    int v = 0;
    EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 1), CUDA_SUCCESS);
    EQ(v, 0x43);
    EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0), CUDA_SUCCESS);
    EQ(v, 9);
}

static void test_contexts(void)
{
    CUcontext c = (CUcontext)1, a = NULL, b = NULL, cur = NULL;
    CUdeviceptr p;
    EQ(cuCtxGetCurrent(&c), CUDA_SUCCESS);
    CHECK(c == NULL);
    EQ(cuMemAlloc_v2(&p, MiB), CUDA_ERROR_INVALID_CONTEXT);
    EQ(cuCtxCreate_v2(&a, 0, 0), CUDA_SUCCESS);
    EQ(cuCtxCreate(&b, 0, 1), CUDA_SUCCESS);
    CUdevice d = -1;
    EQ(cuCtxGetDevice(&d), CUDA_SUCCESS);
    EQ(d, 1);
    EQ(cuCtxPopCurrent_v2(&cur), CUDA_SUCCESS);
    CHECK(cur == b);
    EQ(cuCtxGetDevice(&d), CUDA_SUCCESS);
    EQ(d, 0);
    EQ(cuCtxPushCurrent_v2(b), CUDA_SUCCESS);
    /* a context's allocations die with it */
    size_t before = free_now();
    EQ(cuMemAlloc_v2(&p, 100 * MiB), CUDA_SUCCESS);
    EQ(free_now(), before - 100 * MiB);
    EQ(cuCtxDestroy_v2(b), CUDA_SUCCESS);
    EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    CHECK(cur == a);
    EQ(cuCtxSetCurrent(b), CUDA_ERROR_INVALID_CONTEXT);
    EQ(cuCtxPushCurrent(b), CUDA_ERROR_INVALID_CONTEXT);
    EQ(cuCtxDestroy(a), CUDA_SUCCESS);
    EQ(cuCtxPopCurrent(&cur), CUDA_ERROR_INVALID_CONTEXT);
    CUcontext v3 = NULL, pr = NULL, pr2 = NULL;
    EQ(cuCtxCreate_v3(&v3, NULL, 0, 0, 1), CUDA_SUCCESS);
    EQ(cuMemAlloc_v2(&p, 100 * MiB), CUDA_SUCCESS);
    EQ(free_now(), before - 100 * MiB); /* b's 100 MiB went with b */
    EQ(cuCtxDestroy_v2(v3), CUDA_SUCCESS);
    EQ(cuMemAlloc_v2(&p, MiB), CUDA_ERROR_INVALID_CONTEXT);
    /* primary contexts */
    EQ(cuDevicePrimaryCtxRetain(&pr, 1), CUDA_SUCCESS);
    EQ(cuDevicePrimaryCtxRetain(&pr2, 1), CUDA_SUCCESS);
    CHECK(pr == pr2);
    EQ(cuCtxDestroy_v2(pr), CUDA_ERROR_INVALID_CONTEXT);
    EQ(cuCtxSetCurrent(pr), CUDA_SUCCESS);
    EQ(free_now(), before); /* v3's allocation went with v3 */
    EQ(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
    EQ(cuMemAlloc_v2(&p, MiB), CUDA_SUCCESS);
    EQ(cuMemFree_v2(p), CUDA_SUCCESS);
    EQ(cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
    EQ(cuMemAlloc_v2(&p, MiB), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    EQ(cuDevicePrimaryCtxRelease_v2(1), CUDA_ERROR_INVALID_CONTEXT);
    /* retained again: same handle, usable again by threads that had it current */
    EQ(cuDevicePrimaryCtxRetain(&pr2, 1), CUDA_SUCCESS);
    CHECK(pr == pr2);
    EQ(cuMemAlloc_v2(&p, MiB), CUDA_SUCCESS);
    EQ(cuMemFree_v2(p), CUDA_SUCCESS);
    EQ(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
    EQ(cuCtxSetCurrent(NULL), CUDA_SUCCESS);
}

/* A green context is not made current; its CUcontext is a handle of its
 * own, and its allocations die with it. */
static void test_green_contexts(void)
{
    CUgreenCtx g = NULL;
    CUcontext c = NULL, cur = (CUcontext)1;
    CUdeviceptr p;
    EQ(cuGreenCtxCreate(&g, NULL, 0, 0), CUDA_SUCCESS);
    EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    CHECK(cur == NULL);
    EQ(cuCtxFromGreenCtx(&c, g), CUDA_SUCCESS);
    CHECK(c != NULL && (void *)c != (void *)g);
    EQ(cuCtxPushCurrent_v2(c), CUDA_SUCCESS);
    size_t before = free_now();
    EQ(cuMemAlloc_v2(&p, 100 * MiB), CUDA_SUCCESS);
    EQ(free_now(), before - 100 * MiB);
    EQ(cuCtxDestroy_v2(c), CUDA_ERROR_INVALID_CONTEXT); /* only cuGreenCtxDestroy frees it */
    EQ(cuGreenCtxDestroy(g), CUDA_SUCCESS);
    EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    CHECK(cur == NULL);
    CUcontext a = NULL;
    EQ(cuCtxCreate_v2(&a, 0, 0), CUDA_SUCCESS);
    EQ(free_now(), before); /* the 100 MiB went with the green context */
    EQ(cuCtxDestroy_v2(a), CUDA_SUCCESS);
    EQ(cuGreenCtxDestroy(g), CUDA_ERROR_INVALID_CONTEXT);
    EQ(cuCtxFromGreenCtx(&c, g), CUDA_ERROR_INVALID_CONTEXT);
    EQ(cuGreenCtxCreate(&g, NULL, 99, 0), CUDA_ERROR_INVALID_DEVICE);
}

static void use(int dev)
{
    CUcontext c;
    EQ(cuDevicePrimaryCtxRetain(&c, dev), CUDA_SUCCESS);
    EQ(cuCtxSetCurrent(c), CUDA_SUCCESS);
}

static void test_memory(void)
{
    use(0);
    size_t f0 = free_now();
    EQ(f0, 16 * GiB - 512 * MiB);
    CUdeviceptr a = 0, b = 0, big[16];
    EQ(cuMemAlloc_v2(&a, 0), CUDA_ERROR_INVALID_VALUE);
    EQ(cuMemAlloc_v2(&a, 3 * GiB), CUDA_SUCCESS);
    EQ(free_now(), f0 - 3 * GiB);
    EQ(cuMemAlloc_v2(&b, 13 * GiB), CUDA_ERROR_OUT_OF_MEMORY);
    EQ(cuMemFree_v2(a), CUDA_SUCCESS);
    EQ(cuMemFree_v2(a), CUDA_ERROR_INVALID_VALUE);
    EQ(cuMemFree_v2(0), CUDA_SUCCESS);
    EQ(free_now(), f0);
    /* fill exactly */
    int n = 0;
    while (n < 16 && cuMemAlloc_v2(&big[n], GiB) == CUDA_SUCCESS)
        n++;
    EQ(n, 15);
    while (n > 0)
        EQ(cuMemFree_v2(big[--n]), CUDA_SUCCESS);
    /* v1: 32-bit pointers */
    CUdeviceptr_v1 v1 = 0;
    EQ(cuMemAlloc(&v1, 4 * MiB), CUDA_SUCCESS);
    CHECK(v1 != 0);
    EQ(cuMemFree(v1), CUDA_SUCCESS);
    /* pitch: width rounded up to 512 */
    size_t pitch = 0;
    EQ(cuMemAllocPitch_v2(&a, &pitch, 1000, 100, 4), CUDA_SUCCESS);
    EQ(pitch, 1024);
    EQ(free_now(), f0 - 1024 * 100);
    EQ(cuMemFree_v2(a), CUDA_SUCCESS);
    unsigned int pitch1 = 0;
    EQ(cuMemAllocPitch(&v1, &pitch1, 513, 10, 8), CUDA_SUCCESS);
    EQ(pitch1, 1024);
    EQ(cuMemAllocPitch(&v1, &pitch1, 513, 10, 3), CUDA_ERROR_INVALID_VALUE);
    EQ(cuMemFree(v1), CUDA_SUCCESS);
    /* managed, async, pools */
    EQ(cuMemAllocManaged(&a, MiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    EQ(cuMemAllocAsync_ptsz(&b, 2 * MiB, NULL), CUDA_SUCCESS);
    EQ(free_now(), f0 - 3 * MiB);
    EQ(cuMemFreeAsync_ptsz(b, NULL), CUDA_SUCCESS);
    EQ(cuMemFree_v2(a), CUDA_SUCCESS);
    CUmemPoolProps pp;
    memset(&pp, 0, sizeof(pp));
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pp.location.id = 1;
    pp.maxSize = 8 * MiB;
    CUmemoryPool pool;
    EQ(cuMemPoolCreate(&pool, &pp), CUDA_SUCCESS);
    EQ(cuMemAllocFromPoolAsync(&a, 6 * MiB, pool, NULL), CUDA_SUCCESS);
    EQ(cuMemAllocFromPoolAsync(&b, 4 * MiB, pool, NULL), CUDA_ERROR_OUT_OF_MEMORY);
    EQ(free_now(), f0); /* the pool lives on device 1 */
    EQ(cuMemFreeAsync(a, NULL), CUDA_SUCCESS);
    EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
    EQ(cuMemAllocFromPoolAsync(&a, MiB, pool, NULL), CUDA_ERROR_INVALID_VALUE);
    /* arrays */
    CUarray arr;
    CUDA_ARRAY_DESCRIPTOR ad = {100, 10, CU_AD_FORMAT_FLOAT, 4};
    EQ(cuArrayCreate_v2(&arr, &ad), CUDA_SUCCESS);
    EQ(free_now(), f0 - 100 * 10 * 16);
    EQ(cuArrayDestroy(arr), CUDA_SUCCESS);
    EQ(cuArrayDestroy(arr), CUDA_ERROR_INVALID_HANDLE);
    CUDA_ARRAY3D_DESCRIPTOR_v1 a3 = {8, 8, 8, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0};
    EQ(cuArray3DCreate(&arr, &a3), CUDA_SUCCESS);
    EQ(free_now(), f0 - 512);
    EQ(cuArrayDestroy(arr), CUDA_SUCCESS);
    CUmipmappedArray mm;
    CUDA_ARRAY3D_DESCRIPTOR md = {64, 64, 0, CU_AD_FORMAT_FLOAT, 1, 0};
    EQ(cuMipmappedArrayCreate(&mm, &md, 8), CUDA_ERROR_INVALID_VALUE);
    EQ(cuMipmappedArrayCreate(&mm, &md, 3), CUDA_SUCCESS);
    EQ(free_now(), f0 - 4 * (64 * 64 + 32 * 32 + 16 * 16));
    EQ(cuMipmappedArrayDestroy(mm), CUDA_SUCCESS);
    EQ(free_now(), f0);
    /* pointers are distinct per device and fit 32 bits for v1 */
    CUdeviceptr d0, d1;
    EQ(cuMemAlloc_v2(&d0, MiB), CUDA_SUCCESS);
    use(1);
    EQ(cuMemAlloc_v2(&d1, MiB), CUDA_SUCCESS);
    CHECK(d0 != d1 && (d0 >> 40) != (d1 >> 40));
    EQ(cuMemFree_v2(d1), CUDA_SUCCESS);
    EQ(cuMemFree_v2(d0), CUDA_SUCCESS); /* freeing from another device's context is fine */
    use(0);
    /* IPC of one's own allocation */
    CUipcMemHandle h;
    EQ(cuMemAlloc_v2(&a, MiB), CUDA_SUCCESS);
    EQ(cuIpcGetMemHandle(&h, a), CUDA_SUCCESS);
    EQ(cuIpcOpenMemHandle_v2(&b, h, 1), CUDA_ERROR_INVALID_CONTEXT);
    EQ(cuIpcCloseMemHandle(a), CUDA_ERROR_INVALID_VALUE);
    EQ(cuMemFree_v2(a), CUDA_SUCCESS);
    /* misc */
    EQ(cuMemMapArrayAsync(NULL, 0, NULL), CUDA_SUCCESS);
    EQ(cuGraphicsMapResources(0, NULL, NULL), CUDA_SUCCESS);
    CUgraphicsResource gr = NULL;
    EQ(cuGraphicsUnmapResources_ptsz(1, &gr, NULL), CUDA_ERROR_INVALID_HANDLE);
}

static void test_host(void)
{
    use(0);
    void *p = NULL, *q = NULL;
    EQ(cuMemAllocHost_v2(&p, 8 * MiB), CUDA_SUCCESS);
    CUdeviceptr dp;
    CUdeviceptr_v1 dp1;
    EQ(cuMemHostGetDevicePointer_v2(&dp, (char *)p + 16, 0), CUDA_SUCCESS);
    EQ(dp, (CUdeviceptr)(uintptr_t)p + 16);
    EQ(cuMemHostGetDevicePointer(&dp1, (char *)p + 16, 0), CUDA_SUCCESS);
    CHECK(dp1 != 0);
    EQ(cuMemHostRegister_v2(p, 4096, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    EQ(cuMemFreeHost(p), CUDA_SUCCESS);
    char *buf = aligned_alloc(4096, 16 * MiB);
    EQ(cuMemHostRegister_v2(buf, 16 * MiB, 0), CUDA_SUCCESS);
    EQ(cuMemHostRegister(buf + 4096, 4096, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    EQ(cuMemHostUnregister(buf + 4096), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    /* SIMGPU_PIN_LIMIT=64M */
    EQ(cuMemHostAlloc(&q, 48 * MiB + 1, 0), CUDA_ERROR_OUT_OF_MEMORY);
    EQ(cuMemHostAlloc(&q, 48 * MiB, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
    EQ(cuMemHostAlloc(&q, MiB, 0x100), CUDA_ERROR_INVALID_VALUE);
    EQ(cuMemHostUnregister(buf), CUDA_SUCCESS);
    EQ(cuMemFreeHost(q), CUDA_SUCCESS);
    EQ(cuMemAllocHost(&q, 64 * MiB), CUDA_SUCCESS);
    EQ(cuMemFreeHost(q), CUDA_SUCCESS);
    free(buf);
}

static void test_vmm(void)
{
    use(0);
    size_t f0 = free_now();
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h, h2;
    EQ(cuMemCreate(&h, 64 * MiB, &prop, 0), CUDA_SUCCESS);
    EQ(free_now(), f0 - 64 * MiB);
    CUdeviceptr va;
    EQ(cuMemAddressReserve(&va, 64 * MiB, 0, 0, 0), CUDA_SUCCESS);
    EQ(cuMemMap(va, 64 * MiB, 0, h, 0), CUDA_SUCCESS);
    EQ(cuMemMap(va, 64 * MiB, 0, h, 0), CUDA_ERROR_ALREADY_MAPPED);
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    EQ(cuMemSetAccess(va, 64 * MiB, &acc, 1), CUDA_SUCCESS);
    int fd = -1;
    EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
    CHECK(fd >= 0);
    EQ(cuMemImportFromShareableHandle(&h2, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
       CUDA_SUCCESS);
    EQ(free_now(), f0 - 64 * MiB);
    EQ(cuMemRelease(h2), CUDA_SUCCESS);
    EQ(cuMemRelease(h), CUDA_SUCCESS);
    EQ(free_now(), f0 - 64 * MiB); /* still mapped */
    EQ(cuMemUnmap(va, 64 * MiB), CUDA_SUCCESS);
    EQ(free_now(), f0);
    EQ(cuMemAddressFree(va, 64 * MiB), CUDA_SUCCESS);
    EQ(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
    close(fd);
}

struct tharg {
    int dev;
    int ok;
};

static pthread_barrier_t g_barrier;

static void *thread_body(void *p)
{
    struct tharg *a = p;
    CUcontext c;
    CUdeviceptr ptrs[64];
    pthread_barrier_wait(&g_barrier);
    a->ok = cuDevicePrimaryCtxRetain(&c, a->dev) == CUDA_SUCCESS && cuCtxSetCurrent(c) == CUDA_SUCCESS;
    for (int round = 0; round < 200 && a->ok; round++) {
        for (int i = 0; i < 64; i++)
            a->ok &= cuMemAlloc_v2(&ptrs[i], MiB) == CUDA_SUCCESS;
        CUdevice d = -1;
        a->ok &= cuCtxGetDevice(&d) == CUDA_SUCCESS && d == a->dev;
        for (int i = 0; i < 64; i++)
            a->ok &= cuMemFree_v2(ptrs[i]) == CUDA_SUCCESS;
    }
    a->ok &= cuMemAlloc_v2(&ptrs[0], GiB) == CUDA_SUCCESS;
    return NULL;
}

static void test_threads(void)
{
    size_t f[2];
    use(0);
    f[0] = free_now();
    use(1);
    f[1] = free_now();
    pthread_t t[4];
    struct tharg a[4];
    pthread_barrier_init(&g_barrier, NULL, 4);
    for (int i = 0; i < 4; i++) {
        a[i].dev = i % 2;
        a[i].ok = 0;
        pthread_create(&t[i], NULL, thread_body, &a[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CHECK(a[i].ok);
    }
    use(0);
    EQ(free_now(), f[0] - 2 * GiB);
    use(1);
    EQ(free_now(), f[1] - 2 * GiB);
}

static void test_fail_injection(void)
{
    /* SIMGPU_FAIL=cuMemAlloc_v2:3:2,cuMemFree_v2:1:999 in the child only */
    pid_t pid = fork();
    if (pid == 0) {
        int bad = 0;
        CUcontext c;
        CUdeviceptr p[4] = {0, 0, 0, 0}, keep;
        bad |= cuInit(0) != CUDA_SUCCESS;
        bad |= cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS || cuCtxSetCurrent(c) != CUDA_SUCCESS;
        bad |= cuMemAlloc_v2(&p[0], MiB) != CUDA_SUCCESS;
        bad |= cuMemAlloc_v2(&p[1], MiB) != CUDA_SUCCESS;
        keep = p[2] = 0x1234;
        bad |= cuMemAlloc_v2(&p[2], MiB) != CUDA_ERROR_OUT_OF_MEMORY;
        bad |= p[2] != keep; /* changes nothing */
        bad |= cuMemAlloc_v2(&p[3], MiB) != CUDA_SUCCESS;
        bad |= cuMemFree_v2(p[0]) != CUDA_ERROR_UNKNOWN;
        bad |= cuMemFree_v2(p[0]) != CUDA_SUCCESS;
        /* sticky: 700 poisons everything after */
        bad |= cuMemFree_v2(p[1]) != CUDA_ERROR_ILLEGAL_ADDRESS;
        bad |= cuMemFree_v2(p[3]) != CUDA_ERROR_ILLEGAL_ADDRESS;
        bad |= cuCtxSetCurrent(c) != CUDA_ERROR_ILLEGAL_ADDRESS;
        const char *n = NULL;
        bad |= cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &n) != CUDA_SUCCESS;
        _exit(bad);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(int argc, char **argv)
{
    (void)argv;
    CUdeviceptr p;
    int n;
    if (argc > 1) { /* child mode for the fail-injection test */
        test_fail_injection();
        return failures ? 1 : 0;
    }
    EQ(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    EQ(cuMemAlloc_v2(&p, 1), CUDA_ERROR_NOT_INITIALIZED);
    test_error_names(); /* works before cuInit */
    EQ(cuInit(1), CUDA_ERROR_INVALID_VALUE);
    EQ(cuInit(0), CUDA_SUCCESS);
    test_proc_address();
    test_devices();
    test_contexts();
    test_green_contexts();
    test_memory();
    test_host();
    test_vmm();
    test_threads();
    if (failures) {
        fprintf(stderr, "simtest: %d failures\n", failures);
        return 1;
    }
    printf("simtest: ok\n");
    return 0;
}

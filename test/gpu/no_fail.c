/*
 * no_fail: a short run in which no call fails: a device allocation and its
 * free, page-locked host memory, a host registration, and a VMM sequence
 * (create, reserve, map, set access, and back).
 */
#include "gc.h"
#include <sys/mman.h>

#define STEP(f, name, ...)                                                                    \
    do {                                                                                      \
        CUresult rc_ = GC_CALL(f, name, __VA_ARGS__);                                         \
        if (rc_ != 0) {                                                                       \
            printf("GROUND first_failure=%s result=%d result_name=%s\n", name, rc_,           \
                   gc_errname(rc_));                                                          \
            return GC_EXIT_SETUP;                                                             \
        }                                                                                     \
    } while (0)

int main(void)
{
    gc_open();
    CUdevice dev = gc_setup();
    CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))gc_need("cuMemAlloc_v2");
    CUresult (*release)(CUdeviceptr) = (CUresult(*)(CUdeviceptr))gc_need("cuMemFree_v2");
    CUresult (*hostAlloc)(void **, size_t) = (CUresult(*)(void **, size_t))gc_need("cuMemAllocHost_v2");
    CUresult (*hostFree)(void *) = (CUresult(*)(void *))gc_need("cuMemFreeHost");
    CUresult (*reg)(void *, size_t, unsigned) = (CUresult(*)(void *, size_t, unsigned))gc_need("cuMemHostRegister_v2");
    CUresult (*unreg)(void *) = (CUresult(*)(void *))gc_need("cuMemHostUnregister");
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const gc_CUmemAllocationProp *, unsigned long long) =
        (CUresult(*)(CUmemGenericAllocationHandle *, size_t, const gc_CUmemAllocationProp *, unsigned long long))gc_need("cuMemCreate");
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long) =
        (CUresult(*)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))gc_need("cuMemAddressReserve");
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) =
        (CUresult(*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))gc_need("cuMemMap");
    CUresult (*access)(CUdeviceptr, size_t, const gc_CUmemAccessDesc *, size_t) =
        (CUresult(*)(CUdeviceptr, size_t, const gc_CUmemAccessDesc *, size_t))gc_need("cuMemSetAccess");
    CUresult (*unmap)(CUdeviceptr, size_t) = (CUresult(*)(CUdeviceptr, size_t))gc_need("cuMemUnmap");
    CUresult (*addrFree)(CUdeviceptr, size_t) = (CUresult(*)(CUdeviceptr, size_t))gc_need("cuMemAddressFree");
    CUresult (*memRelease)(CUmemGenericAllocationHandle) = (CUresult(*)(CUmemGenericAllocationHandle))gc_need("cuMemRelease");

    CUdeviceptr d;
    STEP(alloc, "cuMemAlloc_v2", &d, 64 * GC_MiB);
    STEP(release, "cuMemFree_v2", d);

    void *h;
    STEP(hostAlloc, "cuMemAllocHost_v2", &h, 4 * GC_MiB);
    STEP(hostFree, "cuMemFreeHost", h);

    size_t len = 4 * GC_MiB;
    void *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        perror("gpu-check: mmap");
        return GC_EXIT_SETUP;
    }
    memset(buf, 1, len);
    STEP(reg, "cuMemHostRegister_v2", buf, len, 0);
    STEP(unreg, "cuMemHostUnregister", buf);

    size_t g = gc_granularity(dev);
    gc_CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;
    prop.location.type = 1;
    prop.location.id = dev;
    CUmemGenericAllocationHandle hd;
    CUdeviceptr va;
    gc_CUmemAccessDesc acc = {{1, dev}, 3};
    STEP(create, "cuMemCreate", &hd, g, &prop, 0);
    STEP(reserve, "cuMemAddressReserve", &va, g, 0, 0, 0);
    STEP(map, "cuMemMap", va, g, 0, hd, 0);
    STEP(access, "cuMemSetAccess", va, g, &acc, 1);
    STEP(unmap, "cuMemUnmap", va, g);
    STEP(addrFree, "cuMemAddressFree", va, g);
    STEP(memRelease, "cuMemRelease", hd);
    printf("GROUND first_failure=none granularity=%zu\n", g);
    return GC_EXIT_OK;
}

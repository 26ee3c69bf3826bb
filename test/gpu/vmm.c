/*
 * vmm: the virtual memory management sequence (cuMemCreate,
 * cuMemAddressReserve, cuMemMap, cuMemSetAccess) once successfully and
 * released, then again with one step made to fail:
 *
 *   vmm map-oversize   cuMemMap of twice the handle's size (CUDA_ERROR_INVALID_VALUE expected)
 *   vmm create-oom     cuMemCreate of more than the device's total memory
 */
#include "gc.h"

typedef CUresult (*create_t)(CUmemGenericAllocationHandle *, size_t, const gc_CUmemAllocationProp *, unsigned long long);
typedef CUresult (*reserve_t)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*map_t)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*access_t)(CUdeviceptr, size_t, const gc_CUmemAccessDesc *, size_t);
typedef CUresult (*unmap_t)(CUdeviceptr, size_t);
typedef CUresult (*release_t)(CUmemGenericAllocationHandle);

static create_t create;
static reserve_t reserve;
static map_t map;
static access_t access_;
static unmap_t unmap, addrFree;
static release_t memRelease;

static int fail(const char *sym, CUresult rc, unsigned long long size)
{
    printf("GROUND first_failure=%s result=%d result_name=%s size=%llu\n", sym, rc, gc_errname(rc), size);
    fflush(stdout);
    gc_hold();
    return GC_EXIT_OK;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "map-oversize";
    if (strcmp(mode, "map-oversize") && strcmp(mode, "create-oom")) {
        fprintf(stderr, "usage: vmm map-oversize|create-oom\n");
        return 2;
    }
    gc_open();
    CUdevice dev = gc_setup();
    create = (create_t)gc_need("cuMemCreate");
    reserve = (reserve_t)gc_need("cuMemAddressReserve");
    map = (map_t)gc_need("cuMemMap");
    access_ = (access_t)gc_need("cuMemSetAccess");
    unmap = (unmap_t)gc_need("cuMemUnmap");
    addrFree = (unmap_t)gc_need("cuMemAddressFree");
    memRelease = (release_t)gc_need("cuMemRelease");

    size_t g = gc_granularity(dev);
    size_t free0, total;
    gc_mem(&free0, &total);
    printf("GROUND granularity=%zu device_free=%zu device_total=%zu mode=%s\n", g, free0, total, mode);
    gc_CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;
    prop.location.type = 1;
    prop.location.id = dev;
    gc_CUmemAccessDesc acc = {{1, dev}, 3};
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    CUresult rc;

    /* Once through, successfully. */
    if ((rc = GC_CALL(create, "cuMemCreate", &h, g, &prop, 0)) != 0)
        return printf("GROUND setup=failed step=cuMemCreate result=%d\n", rc), GC_EXIT_SETUP;
    if ((rc = GC_CALL(reserve, "cuMemAddressReserve", &va, 4 * g, 0, 0, 0)) != 0)
        return printf("GROUND setup=failed step=cuMemAddressReserve result=%d\n", rc), GC_EXIT_SETUP;
    if ((rc = GC_CALL(map, "cuMemMap", va, g, 0, h, 0)) != 0)
        return printf("GROUND setup=failed step=cuMemMap result=%d\n", rc), GC_EXIT_SETUP;
    if ((rc = GC_CALL(access_, "cuMemSetAccess", va, g, &acc, 1)) != 0)
        return printf("GROUND setup=failed step=cuMemSetAccess result=%d\n", rc), GC_EXIT_SETUP;
    GC_CALL(unmap, "cuMemUnmap", va, g);
    printf("GROUND sequence=ok\n");

    if (!strcmp(mode, "map-oversize")) {
        /* The reservation holds 4 granules and the handle one: map two. */
        rc = GC_CALL(map, "cuMemMap", va, 2 * g, 0, h, 0);
        if (rc == 0) {
            GC_CALL(unmap, "cuMemUnmap", va, 2 * g);
            printf("GROUND first_failure=none note=oversized-map-succeeded\n");
            return GC_EXIT_NOT_PROVOKED;
        }
        int r = fail("cuMemMap", rc, 2ull * g);
        GC_CALL(addrFree, "cuMemAddressFree", va, 4 * g);
        GC_CALL(memRelease, "cuMemRelease", h);
        return r;
    }
    /* create-oom: more than the whole device, rounded to the granularity. */
    if (total == 0)
        total = 1ull << 40;
    unsigned long long big = ((total + g) / g + 1) * g;
    CUmemGenericAllocationHandle h2;
    rc = GC_CALL(create, "cuMemCreate", &h2, big, &prop, 0);
    if (rc == 0) {
        GC_CALL(memRelease, "cuMemRelease", h2);
        printf("GROUND first_failure=none note=create-of-%llu-succeeded\n", big);
        return GC_EXIT_NOT_PROVOKED;
    }
    int r = fail("cuMemCreate", rc, big);
    GC_CALL(addrFree, "cuMemAddressFree", va, 4 * g);
    GC_CALL(memRelease, "cuMemRelease", h);
    return r;
}

/*
 * drv_oom: allocate device memory through the driver API (cuMemAlloc_v2)
 * until it fails, hold it so the recorder samples the exhausted GPU, then
 * free everything.
 *
 *   drv_oom [CHUNK]        CHUNK bytes per call (K/M/G suffix), default 1G
 */
#include "gc.h"

int main(int argc, char **argv)
{
    unsigned long long chunk = argc > 1 ? gc_size(argv[1]) : GC_GiB;
    gc_open();
    gc_setup();
    CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))gc_need("cuMemAlloc_v2");
    CUresult (*release)(CUdeviceptr) = (CUresult(*)(CUdeviceptr))gc_need("cuMemFree_v2");
    size_t free0, total;
    gc_mem(&free0, &total);
    printf("GROUND device_free=%zu device_total=%zu chunk=%llu\n", free0, total, chunk);

    enum { MAXN = 1 << 16 };
    static CUdeviceptr ptrs[MAXN];
    int n = 0;
    CUresult rc = 0;
    while (n < MAXN) {
        rc = GC_CALL(alloc, "cuMemAlloc_v2", &ptrs[n], chunk);
        if (rc != 0)
            break;
        n++;
    }
    if (rc == 0) {
        printf("GROUND first_failure=none\n");
        return GC_EXIT_NOT_PROVOKED;
    }
    printf("GROUND first_failure=cuMemAlloc_v2 result=%d result_name=%s size=%llu allocated=%d bytes_held=%llu\n",
           rc, gc_errname(rc), chunk, n, (unsigned long long)n * chunk);
    fflush(stdout);
    gc_hold();
    for (int i = n - 1; i >= 0; i--)
        GC_CALL(release, "cuMemFree_v2", ptrs[i]);
    return GC_EXIT_OK;
}

/*
 * host_reg: page-lock (register) more host memory than the machine can
 * pin. A small registration succeeds first; then a region of SIZE bytes
 * (default: twice the machine's RAM) is reserved PROT_NONE and
 * MAP_NORESERVE, and cuMemHostRegister_v2 is asked to pin it all. Nothing
 * is ever touched: the kernel refuses to pin inaccessible pages at the
 * first one (the NVIDIA driver ignores RLIMIT_MEMLOCK, and root is exempt
 * from it anyway, so `ulimit -l` cannot provoke this), so the check costs
 * no memory. On the simulated GPU, SIMGPU_PIN_LIMIT refuses it.
 *
 *   host_reg [SIZE]
 */
#include "gc.h"
#include <sys/mman.h>

int main(int argc, char **argv)
{
    unsigned long long size;
    if (argc > 1) {
        size = gc_size(argv[1]);
    } else {
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        size = 2ull * (unsigned long long)pages * (unsigned long long)psz;
        if (size < GC_GiB)
            size = GC_GiB;
    }
    gc_open();
    gc_setup();
    CUresult (*reg)(void *, size_t, unsigned) = (CUresult(*)(void *, size_t, unsigned))gc_need("cuMemHostRegister_v2");
    CUresult (*unreg)(void *) = (CUresult(*)(void *))gc_need("cuMemHostUnregister");

    size_t small = 2 * GC_MiB;
    void *buf = mmap(NULL, small, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        perror("gpu-check: mmap");
        return GC_EXIT_SETUP;
    }
    memset(buf, 1, small);
    CUresult rc = GC_CALL(reg, "cuMemHostRegister_v2", buf, small, 0);
    if (rc != 0) {
        printf("GROUND first_failure=cuMemHostRegister_v2 result=%d result_name=%s size=%zu note=the-small-registration-failed\n",
               rc, gc_errname(rc), small);
        return GC_EXIT_SETUP;
    }
    GC_CALL(unreg, "cuMemHostUnregister", buf);

    void *huge = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (huge == MAP_FAILED) {
        perror("gpu-check: mmap of the region to register");
        printf("GROUND setup=failed reason=mmap size=%llu\n", size);
        return GC_EXIT_SETUP;
    }
    double t0 = gc_now();
    rc = GC_CALL(reg, "cuMemHostRegister_v2", huge, size, 0);
    double ms = (gc_now() - t0) / 1e6;
    if (rc == 0) {
        printf("GROUND first_failure=none note=registration-of-%llu-bytes-succeeded\n", size);
        GC_CALL(unreg, "cuMemHostUnregister", huge);
        return GC_EXIT_NOT_PROVOKED;
    }
    printf("GROUND first_failure=cuMemHostRegister_v2 result=%d result_name=%s size=%llu call_ms=%.1f\n", rc,
           gc_errname(rc), size, ms);
    fflush(stdout);
    gc_hold();
    return GC_EXIT_OK;
}

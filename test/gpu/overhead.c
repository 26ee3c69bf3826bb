/*
 * overhead: time N pairs of cuMemAlloc_v2 + cuMemFree_v2 with
 * clock_gettime(CLOCK_MONOTONIC), in ROUNDS rounds after a warm-up, and
 * print each round's and the median round's nanoseconds per pair. Run it
 * plainly and under `forensic record` to see what the probes cost.
 *
 *   overhead [N [SIZE [ROUNDS]]]     defaults: 20000 pairs of 2M, 3 rounds
 */
#include "gc.h"

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 20000;
    unsigned long long size = argc > 2 ? gc_size(argv[2]) : 2 * GC_MiB;
    int rounds = argc > 3 ? atoi(argv[3]) : 3;
    if (n < 1 || rounds < 1 || rounds > 32 || size == 0) {
        fprintf(stderr, "usage: overhead [N [SIZE [ROUNDS]]]\n");
        return 2;
    }
    gc_open();
    gc_setup();
    CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))gc_need("cuMemAlloc_v2");
    CUresult (*release)(CUdeviceptr) = (CUresult(*)(CUdeviceptr))gc_need("cuMemFree_v2");
    long warm = n / 10 < 100 ? 100 : n / 10, failed = 0;
    CUdeviceptr p;
    /* The timed loops call directly; their calls are counted in bulk. */
    for (long i = 0; i < warm; i++) {
        if (GC_CALL(alloc, "cuMemAlloc_v2", &p, size) != 0 || GC_CALL(release, "cuMemFree_v2", p) != 0)
            failed++;
    }
    double per[32];
    for (int r = 0; r < rounds; r++) {
        long frees = n;
        double t0 = gc_now();
        for (long i = 0; i < n; i++) {
            if (alloc(&p, size) != 0) {
                failed++;
                frees--;
                continue;
            }
            if (release(p) != 0)
                failed++;
        }
        per[r] = (gc_now() - t0) / n;
        gc_add("cuMemAlloc_v2", n);
        gc_add("cuMemFree_v2", frees);
        printf("GROUND round=%d pairs=%ld size=%llu ns_per_pair=%.0f\n", r, n, size, per[r]);
    }
    qsort(per, rounds, sizeof per[0], cmp);
    printf("GROUND median_ns_per_pair=%.0f pairs=%ld rounds=%d size=%llu failed_calls=%ld\n", per[rounds / 2], n, rounds,
           size, failed);
    return failed ? GC_EXIT_SETUP : GC_EXIT_OK;
}

/*
 * nvmlq - a tiny NVML client for the self-test. It dlopens
 * $NVMLQ_LIB (default: libnvidia-ml.so.1 next to this program's parent
 * directory, i.e. $OUT/libnvidia-ml.so.1) the way go-nvml does
 * (RTLD_LAZY | RTLD_GLOBAL), calls nvmlInit_v2, runs one command and prints
 * the result on stdout. A failing NVML call prints "rc N" on stdout and
 * exits 3.
 *
 *   count | ver | uuid I | name I | pci I | mem I | mem1 I | mem2bad I |
 *   bar1 I | procs I | procs1 I | mig I | miguuid I J | migmem I J |
 *   migprocs I J | byuuid UUID | bypci BUSID | misc I
 */
#define _GNU_SOURCE
#include "simnvml.h"

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *lib;

static void *sym(const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "nvmlq: %s missing\n", name);
        exit(4);
    }
    return p;
}

#define F(name) ((__typeof__(name) *)sym(#name))

static void chk(nvmlReturn_t rc)
{
    if (rc != NVML_SUCCESS) {
        printf("rc %d\n", (int)rc);
        exit(3);
    }
}

static nvmlDevice_t dev(const char *s)
{
    nvmlDevice_t d;
    chk(F(nvmlDeviceGetHandleByIndex_v2)((unsigned)atoi(s), &d));
    return d;
}

static nvmlDevice_t mig(const char *i, const char *j)
{
    nvmlDevice_t m;
    chk(F(nvmlDeviceGetMigDeviceHandleByIndex)(dev(i), (unsigned)atoi(j), &m));
    return m;
}

static void print_procs(nvmlDevice_t d)
{
    unsigned n = 0;
    nvmlProcessInfo_t infos[64];
    n = 64;
    chk(F(nvmlDeviceGetComputeRunningProcesses_v3)(d, &n, infos));
    for (unsigned i = 0; i < n; i++)
        printf("%u %llu %d %d\n", infos[i].pid, infos[i].usedGpuMemory, (int)infos[i].gpuInstanceId,
               (int)infos[i].computeInstanceId);
}

static void print_mem(nvmlDevice_t d)
{
    nvmlMemory_v2_t m;
    memset(&m, 0, sizeof(m));
    m.version = nvmlMemory_v2;
    chk(F(nvmlDeviceGetMemoryInfo_v2)(d, &m));
    printf("%llu %llu %llu %llu\n", m.total, m.reserved, m.free, m.used);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: nvmlq CMD [ARGS]\n");
        return 2;
    }
    char path[PATH_MAX];
    const char *env = getenv("NVMLQ_LIB");
    if (env && *env) {
        snprintf(path, sizeof(path), "%s", env);
    } else {
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n <= 0)
            return 2;
        self[n] = 0;
        char *d = dirname(self); /* $OUT/tests */
        snprintf(path, sizeof(path), "%s/../libnvidia-ml.so.1", d);
    }
    lib = dlopen(path, RTLD_LAZY | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "nvmlq: %s\n", dlerror());
        return 2;
    }
    chk(F(nvmlInit_v2)());
    const char *cmd = argv[1];
    const char *a = argc > 2 ? argv[2] : "0";
    const char *b = argc > 3 ? argv[3] : "0";
    char buf[128];
    if (!strcmp(cmd, "count")) {
        unsigned n;
        chk(F(nvmlDeviceGetCount_v2)(&n));
        printf("%u\n", n);
    } else if (!strcmp(cmd, "ver")) {
        char drv[80], nv[80];
        int cuda, cuda2;
        chk(F(nvmlSystemGetDriverVersion)(drv, sizeof(drv)));
        chk(F(nvmlSystemGetNVMLVersion)(nv, sizeof(nv)));
        chk(F(nvmlSystemGetCudaDriverVersion)(&cuda));
        chk(F(nvmlSystemGetCudaDriverVersion_v2)(&cuda2));
        printf("%s %s %d %d\n", drv, nv, cuda, cuda2);
    } else if (!strcmp(cmd, "uuid")) {
        chk(F(nvmlDeviceGetUUID)(dev(a), buf, sizeof(buf)));
        printf("%s\n", buf);
    } else if (!strcmp(cmd, "name")) {
        chk(F(nvmlDeviceGetName)(dev(a), buf, sizeof(buf)));
        printf("%s\n", buf);
    } else if (!strcmp(cmd, "pci")) {
        nvmlPciInfo_t p;
        chk(F(nvmlDeviceGetPciInfo_v3)(dev(a), &p));
        printf("%s %s %u %08x\n", p.busId, p.busIdLegacy, p.bus, p.pciDeviceId);
    } else if (!strcmp(cmd, "mem")) {
        print_mem(dev(a));
    } else if (!strcmp(cmd, "mem1")) {
        nvmlMemory_t m;
        chk(F(nvmlDeviceGetMemoryInfo)(dev(a), &m));
        printf("%llu %llu %llu\n", m.total, m.free, m.used);
    } else if (!strcmp(cmd, "mem2bad")) {
        nvmlMemory_v2_t m;
        memset(&m, 0, sizeof(m));
        m.version = (unsigned)sizeof(m) | (1u << 24);
        chk(F(nvmlDeviceGetMemoryInfo_v2)(dev(a), &m));
        printf("accepted\n");
    } else if (!strcmp(cmd, "bar1")) {
        nvmlBAR1Memory_t m;
        chk(F(nvmlDeviceGetBAR1MemoryInfo)(dev(a), &m));
        printf("%llu %llu %llu\n", m.bar1Total, m.bar1Free, m.bar1Used);
    } else if (!strcmp(cmd, "procs")) {
        print_procs(dev(a));
    } else if (!strcmp(cmd, "procs1")) {
        unsigned n = 64;
        nvmlProcessInfo_v1_t infos[64];
        chk(F(nvmlDeviceGetComputeRunningProcesses)(dev(a), &n, infos));
        for (unsigned i = 0; i < n; i++)
            printf("%u %llu\n", infos[i].pid, infos[i].usedGpuMemory);
    } else if (!strcmp(cmd, "mig")) {
        unsigned cur, pend, cnt;
        chk(F(nvmlDeviceGetMigMode)(dev(a), &cur, &pend));
        chk(F(nvmlDeviceGetMaxMigDeviceCount)(dev(a), &cnt));
        printf("%u %u %u\n", cur, pend, cnt);
    } else if (!strcmp(cmd, "miguuid")) {
        nvmlDevice_t m = mig(a, b), parent;
        unsigned is, gi;
        chk(F(nvmlDeviceGetUUID)(m, buf, sizeof(buf)));
        chk(F(nvmlDeviceIsMigDeviceHandle)(m, &is));
        chk(F(nvmlDeviceGetDeviceHandleFromMigDeviceHandle)(m, &parent));
        chk(F(nvmlDeviceGetGpuInstanceId)(m, &gi));
        printf("%s %u %d %u\n", buf, is, parent == dev(a), gi);
    } else if (!strcmp(cmd, "migmem")) {
        print_mem(mig(a, b));
    } else if (!strcmp(cmd, "migprocs")) {
        print_procs(mig(a, b));
    } else if (!strcmp(cmd, "byuuid")) {
        nvmlDevice_t d;
        unsigned idx;
        chk(F(nvmlDeviceGetHandleByUUID)(a, &d));
        chk(F(nvmlDeviceGetIndex)(d, &idx));
        printf("%u\n", idx);
    } else if (!strcmp(cmd, "bypci")) {
        nvmlDevice_t d;
        unsigned idx;
        chk(F(nvmlDeviceGetHandleByPciBusId_v2)(a, &d));
        chk(F(nvmlDeviceGetIndex)(d, &idx));
        printf("%u\n", idx);
    } else if (!strcmp(cmd, "misc")) {
        nvmlDevice_t d = dev(a);
        nvmlEnableState_t pm;
        nvmlComputeMode_t cm;
        unsigned g, w, mg, mw, minor;
        chk(F(nvmlDeviceGetPersistenceMode)(d, &pm));
        chk(F(nvmlDeviceGetComputeMode)(d, &cm));
        chk(F(nvmlDeviceGetCurrPcieLinkGeneration)(d, &g));
        chk(F(nvmlDeviceGetCurrPcieLinkWidth)(d, &w));
        chk(F(nvmlDeviceGetMaxPcieLinkGeneration)(d, &mg));
        chk(F(nvmlDeviceGetMaxPcieLinkWidth)(d, &mw));
        chk(F(nvmlDeviceGetMinorNumber)(d, &minor));
        printf("%d %d %u %u %u %u %u\n", (int)pm, (int)cm, g, w, mg, mw, minor);
    } else {
        fprintf(stderr, "nvmlq: unknown command %s\n", cmd);
        return 2;
    }
    chk(F(nvmlShutdown)());
    return 0;
}

/*
 * libnvml.c - the simulated NVML (libnvidia-ml.so.1), reading the same
 * shared state as the simulated libcuda. Semantics: README.md.
 */
#define _GNU_SOURCE
#include "simnvml.h"
#include "simcuda.h"
#include "simstate.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <strings.h>

#define API SIM_EXPORT

#define DRIVER_VERSION "535.999.01"
#define NVML_VERSION "12.535.999.01"

struct nvdev {
    uint32_t magic;
    int phys;
    int inst; /* -1 for the GPU itself */
};

#define NVDEV_MAGIC 0x4e564d4cu
static struct nvdev gpus[SIM_MAX_DEV];
static struct nvdev migs[SIM_MAX_DEV][SIM_MAX_MIG];
static atomic_int init_refs;

/* SIMGPU_NVML_UNSUPPORTED */
static char *unsup;
static pthread_once_t unsup_once = PTHREAD_ONCE_INIT;

static void parse_unsup(void)
{
    const char *e = getenv("SIMGPU_NVML_UNSUPPORTED");
    if (!e || !*e)
        return;
    size_t n = strlen(e);
    unsup = malloc(n + 3);
    if (!unsup)
        return;
    /* ",a,b," so that ",name," is an exact match */
    unsup[0] = ',';
    memcpy(unsup + 1, e, n);
    unsup[n + 1] = ',';
    unsup[n + 2] = 0;
    for (char *p = unsup; *p; p++)
        if (*p == ' ')
            *p = ',';
}

static int unsupported(const char *name)
{
    pthread_once(&unsup_once, parse_unsup);
    if (!unsup)
        return 0;
    char key[128];
    snprintf(key, sizeof(key), ",%s,", name);
    return strstr(unsup, key) != NULL;
}

static nvmlReturn_t nv_enter(const char *name, int need_init)
{
    if (unsupported(name))
        return NVML_ERROR_NOT_SUPPORTED;
    if (need_init && atomic_load(&init_refs) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    return NVML_SUCCESS;
}

#define ENTER()                                              \
    do {                                                     \
        nvmlReturn_t enter_rc_ = nv_enter(__func__, 1);      \
        if (enter_rc_ != NVML_SUCCESS)                       \
            return enter_rc_;                                \
    } while (0)

/* Resolve a handle to (phys, inst). */
static nvmlReturn_t dev_of(nvmlDevice_t h, int *phys, int *inst)
{
    const struct sim_state *st = sim_peek();
    struct nvdev *d = (struct nvdev *)h;
    if (!st || !d)
        return NVML_ERROR_INVALID_ARGUMENT;
    uintptr_t p = (uintptr_t)d;
    int ok = 0;
    if (p >= (uintptr_t)&gpus[0] && p < (uintptr_t)&gpus[SIM_MAX_DEV] &&
        (p - (uintptr_t)&gpus[0]) % sizeof(struct nvdev) == 0)
        ok = d->phys < (int)st->ndev;
    else if (p >= (uintptr_t)&migs[0][0] &&
             p < (uintptr_t)(&migs[0][0] + SIM_MAX_DEV * SIM_MAX_MIG) &&
             (p - (uintptr_t)&migs[0][0]) % sizeof(struct nvdev) == 0)
        ok = d->phys < (int)st->ndev && d->inst < (int)st->mig;
    if (!ok || d->magic != NVDEV_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    *phys = d->phys;
    *inst = d->inst;
    return NVML_SUCCESS;
}

#define DEV(h, phys, inst)                                   \
    int phys, inst;                                          \
    do {                                                     \
        nvmlReturn_t dev_rc_ = dev_of((h), &phys, &inst);    \
        if (dev_rc_ != NVML_SUCCESS)                         \
            return dev_rc_;                                  \
    } while (0)

static nvmlReturn_t copy_str(char *dst, unsigned int len, const char *src)
{
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = strlen(src);
    if (len < n + 1)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, n + 1);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------ */

static nvmlReturn_t do_init(void)
{
    const char *e = getenv("SIMGPU_NVML_INIT_ERROR");
    if (e && *e) {
        char *end;
        long v = strtol(e, &end, 0);
        if (*end == 0 && v != 0)
            return (nvmlReturn_t)v;
    }
    if (sim_attach() != 0)
        return NVML_ERROR_DRIVER_NOT_LOADED;
    for (int i = 0; i < SIM_MAX_DEV; i++) {
        gpus[i].magic = NVDEV_MAGIC;
        gpus[i].phys = i;
        gpus[i].inst = -1;
        for (int j = 0; j < SIM_MAX_MIG; j++) {
            migs[i][j].magic = NVDEV_MAGIC;
            migs[i][j].phys = i;
            migs[i][j].inst = j;
        }
    }
    atomic_fetch_add(&init_refs, 1);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlInit(void)
{
    nvmlReturn_t rc = nv_enter(__func__, 0);
    return rc != NVML_SUCCESS ? rc : do_init();
}

API nvmlReturn_t nvmlInit_v2(void)
{
    nvmlReturn_t rc = nv_enter(__func__, 0);
    return rc != NVML_SUCCESS ? rc : do_init();
}

API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    nvmlReturn_t rc = nv_enter(__func__, 0);
    return rc != NVML_SUCCESS ? rc : do_init();
}

API nvmlReturn_t nvmlShutdown(void)
{
    ENTER();
    int v = atomic_load(&init_refs);
    while (v > 0 && !atomic_compare_exchange_weak(&init_refs, &v, v - 1))
        ;
    return v > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

API const char *nvmlErrorString(nvmlReturn_t result)
{
    switch ((int)result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt Request Issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request";
    case 18: return "RM has detected an NVML/RM version mismatch";
    case 19: return "In use by another client";
    case 20: return "Insufficient Memory";
    case 21: return "No data";
    case 22: return "ECC is enabled";
    case 23: return "Insufficient resources";
    case 24: return "Frequency not supported";
    case 25: return "Argument version mismatch";
    case 26: return "Deprecated";
    case 27: return "Not ready";
    case 28: return "GPU not found";
    case 29: return "Invalid state";
    case 999: return "Unknown Error";
    default: return "Unknown Error";
    }
}

API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    ENTER();
    return copy_str(version, length, DRIVER_VERSION);
}

API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    ENTER();
    return copy_str(version, length, NVML_VERSION);
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    ENTER();
    if (!cudaDriverVersion)
        return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = SIMCUDA_DRIVER_VERSION;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    ENTER();
    if (!cudaDriverVersion)
        return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = SIMCUDA_DRIVER_VERSION;
    return NVML_SUCCESS;
}

static nvmlReturn_t get_count(unsigned int *n)
{
    if (!n)
        return NVML_ERROR_INVALID_ARGUMENT;
    *n = sim_peek()->ndev;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    ENTER();
    return get_count(deviceCount);
}

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    ENTER();
    return get_count(deviceCount);
}

static nvmlReturn_t by_index(unsigned int index, nvmlDevice_t *device)
{
    if (!device || index >= sim_peek()->ndev)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = (nvmlDevice_t)&gpus[index];
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    ENTER();
    return by_index(index, device);
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    ENTER();
    return by_index(index, device);
}

API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    ENTER();
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    const struct sim_state *st = sim_peek();
    char buf[64];
    for (int i = 0; i < (int)st->ndev; i++) {
        sim_uuid_string(i, -1, buf, sizeof(buf));
        if (strcasecmp(buf, uuid) == 0) {
            *device = (nvmlDevice_t)&gpus[i];
            return NVML_SUCCESS;
        }
        for (int j = 0; j < (int)st->mig; j++) {
            sim_uuid_string(i, j, buf, sizeof(buf));
            if (strcasecmp(buf, uuid) == 0) {
                *device = (nvmlDevice_t)&migs[i][j];
                return NVML_SUCCESS;
            }
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

static nvmlReturn_t by_pci(const char *busid, nvmlDevice_t *device)
{
    if (!busid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned dom = 0, bus = 0, dv = 0, fn = 0;
    if (sscanf(busid, "%x:%x:%x.%x", &dom, &bus, &dv, &fn) != 4) {
        dom = 0;
        if (sscanf(busid, "%x:%x.%x", &bus, &dv, &fn) != 3)
            return NVML_ERROR_INVALID_ARGUMENT;
    }
    const struct sim_state *st = sim_peek();
    for (int i = 0; i < (int)st->ndev; i++)
        if (dom == 0 && dv == 0 && fn == 0 && bus == sim_pci_bus(i)) {
            *device = (nvmlDevice_t)&gpus[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    ENTER();
    return by_pci(pciBusId, device);
}

API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    ENTER();
    return by_pci(pciBusId, device);
}

API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    ENTER();
    DEV(device, phys, inst);
    (void)inst;
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned)phys;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    ENTER();
    DEV(device, phys, inst);
    char buf[64];
    sim_uuid_string(phys, inst, buf, sizeof(buf));
    return copy_str(uuid, length, buf);
}

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    ENTER();
    DEV(device, phys, inst);
    char buf[96];
    sim_device_name(sim_peek(), phys, inst, buf, sizeof(buf));
    return copy_str(name, length, buf);
}

static nvmlReturn_t pci_info(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    DEV(device, phys, inst);
    (void)inst;
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof(*pci));
    pci->domain = 0;
    pci->bus = sim_pci_bus(phys);
    pci->device = 0;
    pci->pciDeviceId = 0x233110deu;
    pci->pciSubSystemId = 0x16c110deu;
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", 0u, pci->bus, 0u);
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", 0u, pci->bus, 0u);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    ENTER();
    return pci_info(device, pci);
}

API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    ENTER();
    return pci_info(device, pci);
}

API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    ENTER();
    return pci_info(device, pci);
}

/* SIMGPU_NVML_DELAY_MS: a memory-info query answers this late, with the
 * state at its end, as a busy driver on a loaded host does. */
static void query_delay(void)
{
    const char *d = getenv("SIMGPU_NVML_DELAY_MS");
    int ms = d ? atoi(d) : 0;
    if (ms > 0) {
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    ENTER();
    query_delay();
    DEV(device, phys, inst);
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct sim_state *st = sim_lock();
    uint64_t total = sim_fb_total(st, phys, inst), res = sim_fb_reserved(st, phys, inst),
             used = sim_fb_used(st, phys, inst);
    sim_unlock();
    /* v1 folds the reservation into used, as older drivers do. */
    uint64_t u = used + res;
    memory->total = total;
    memory->used = u;
    memory->free = total > u ? total - u : 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    ENTER();
    query_delay();
    DEV(device, phys, inst);
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    struct sim_state *st = sim_lock();
    uint64_t total = sim_fb_total(st, phys, inst), res = sim_fb_reserved(st, phys, inst),
             used = sim_fb_used(st, phys, inst);
    sim_unlock();
    memory->total = total;
    memory->reserved = res;
    memory->used = used;
    memory->free = total > res + used ? total - res - used : 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1Memory)
{
    ENTER();
    DEV(device, phys, inst);
    (void)inst;
    if (!bar1Memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct sim_state *st = sim_lock();
    uint64_t t = st->dev[phys].bar1_total, u = st->dev[phys].bar1_used;
    sim_unlock();
    bar1Memory->bar1Total = t;
    bar1Memory->bar1Used = u;
    bar1Memory->bar1Free = t > u ? t - u : 0;
    return NVML_SUCCESS;
}

/* Process rows for a GPU (all instances) or one MIG instance. */
static nvmlReturn_t processes(nvmlDevice_t device, unsigned int *infoCount, void *infos, int v1)
{
    DEV(device, phys, inst);
    if (!infoCount || (*infoCount && !infos))
        return NVML_ERROR_INVALID_ARGUMENT;
    struct sim_state *st = sim_lock();
    unsigned n = 0;
    for (uint32_t i = 0; i < st->nproc; i++) {
        const struct sim_proc *r = &st->proc[i];
        if (r->pid == 0 || r->phys != phys || (inst >= 0 && r->inst != inst))
            continue;
        if (r->fb == 0 && r->ctxs <= 0)
            continue;
        if (n < *infoCount) {
            if (v1) {
                nvmlProcessInfo_v1_t *o = (nvmlProcessInfo_v1_t *)infos + n;
                memset(o, 0, sizeof(*o));
                o->pid = (unsigned)r->pid;
                o->usedGpuMemory = r->fb;
            } else {
                nvmlProcessInfo_t *o = (nvmlProcessInfo_t *)infos + n;
                memset(o, 0, sizeof(*o));
                o->pid = (unsigned)r->pid;
                o->usedGpuMemory = r->fb;
                o->gpuInstanceId = r->inst >= 0 ? (unsigned)r->inst + 1 : 0xFFFFFFFFu;
                o->computeInstanceId = r->inst >= 0 ? 0u : 0xFFFFFFFFu;
            }
        }
        n++;
    }
    sim_unlock();
    nvmlReturn_t rc = n > *infoCount ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    *infoCount = n;
    return rc;
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_v1_t *infos)
{
    ENTER();
    return processes(device, infoCount, infos, 1);
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                         unsigned int *infoCount,
                                                         nvmlProcessInfo_v2_t *infos)
{
    ENTER();
    return processes(device, infoCount, infos, 0);
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                         unsigned int *infoCount,
                                                         nvmlProcessInfo_t *infos)
{
    ENTER();
    return processes(device, infoCount, infos, 0);
}

/* No graphics clients on a simulated compute GPU. */
static nvmlReturn_t no_processes(nvmlDevice_t device, unsigned int *infoCount)
{
    DEV(device, phys, inst);
    (void)phys;
    (void)inst;
    if (!infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *infoCount = 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                       nvmlProcessInfo_v1_t *infos)
{
    ENTER();
    (void)infos;
    return no_processes(device, infoCount);
}

API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device,
                                                          unsigned int *infoCount,
                                                          nvmlProcessInfo_v2_t *infos)
{
    ENTER();
    (void)infos;
    return no_processes(device, infoCount);
}

API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device,
                                                          unsigned int *infoCount,
                                                          nvmlProcessInfo_t *infos)
{
    ENTER();
    (void)infos;
    return no_processes(device, infoCount);
}

API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                      unsigned int *pendingMode)
{
    ENTER();
    DEV(device, phys, inst);
    (void)phys;
    if (!currentMode || !pendingMode || inst >= 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned m = sim_peek()->mig ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    *currentMode = m;
    *pendingMode = m;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    ENTER();
    DEV(device, phys, inst);
    (void)phys;
    if (!count || inst >= 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = sim_peek()->mig;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                     nvmlDevice_t *migDevice)
{
    ENTER();
    DEV(device, phys, inst);
    if (!migDevice || inst >= 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= sim_peek()->mig)
        return NVML_ERROR_NOT_FOUND;
    *migDevice = (nvmlDevice_t)&migs[phys][index];
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    ENTER();
    DEV(device, phys, inst);
    (void)phys;
    if (!isMigDevice)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isMigDevice = inst >= 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                              nvmlDevice_t *device)
{
    ENTER();
    DEV(migDevice, phys, inst);
    if (!device || inst < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = (nvmlDevice_t)&gpus[phys];
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    ENTER();
    DEV(device, phys, inst);
    (void)phys;
    if (!id || inst < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *id = (unsigned)inst + 1;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    ENTER();
    DEV(device, phys, inst);
    (void)phys;
    if (!id || inst < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *id = 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    ENTER();
    DEV(device, phys, inst);
    (void)phys;
    (void)inst;
    if (!mode)
        return NVML_ERROR_INVALID_ARGUMENT;
    *mode = NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
    ENTER();
    DEV(device, phys, inst);
    (void)phys;
    (void)inst;
    if (!mode)
        return NVML_ERROR_INVALID_ARGUMENT;
    *mode = NVML_COMPUTEMODE_DEFAULT;
    return NVML_SUCCESS;
}

static nvmlReturn_t uint_out(nvmlDevice_t device, unsigned int *out, unsigned int v)
{
    DEV(device, phys, inst);
    (void)phys;
    (void)inst;
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = v;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *currLinkGen)
{
    ENTER();
    return uint_out(device, currLinkGen, 4);
}

API nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *currLinkWidth)
{
    ENTER();
    return uint_out(device, currLinkWidth, 16);
}

API nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGen)
{
    ENTER();
    return uint_out(device, maxLinkGen, 5);
}

API nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *maxLinkWidth)
{
    ENTER();
    return uint_out(device, maxLinkWidth, 16);
}

API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    ENTER();
    DEV(device, phys, inst);
    (void)inst;
    if (!minorNumber)
        return NVML_ERROR_INVALID_ARGUMENT;
    *minorNumber = (unsigned)phys;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    ENTER();
    DEV(device, phys, inst);
    (void)phys;
    (void)inst;
    if (!utilization)
        return NVML_ERROR_INVALID_ARGUMENT;
    utilization->gpu = 0;
    utilization->memory = 0;
    return NVML_SUCCESS;
}

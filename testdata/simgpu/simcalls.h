/*
 * simcalls.h - per-(thread, symbol, device) call counters written to
 * $SIMWORK_CALLS at exit, shared by simwork and the scenario programs.
 *
 * Line format: "pid tid symbol count device\n", device being the CUDA
 * ordinal of the calling thread's current context when the call was made,
 * or -1 when it had none. Lines are appended with O_APPEND, in blocks of
 * whole lines, so several processes can share one file.
 */
#ifndef SIMCALLS_H
#define SIMCALLS_H

/* Every hooked exported name. */
#define SIMCALL_SYMS(X)                                                        \
    X(cuInit) X(cuDriverGetVersion) X(cuDeviceGet) X(cuDeviceGetCount)        \
    X(cuDeviceGetName) X(cuDeviceTotalMem_v2) X(cuDeviceGetAttribute)         \
    X(cuDeviceGetUuid) X(cuDeviceGetUuid_v2) X(cuDeviceGetPCIBusId)           \
    X(cuGetErrorName) X(cuGetErrorString) X(cuGetProcAddress)                 \
    X(cuGetProcAddress_v2)                                                     \
    X(cuCtxCreate) X(cuCtxCreate_v2) X(cuCtxCreate_v3) X(cuCtxCreate_v4)      \
    X(cuCtxDestroy) X(cuCtxDestroy_v2) X(cuDevicePrimaryCtxRetain)            \
    X(cuDevicePrimaryCtxRelease) X(cuDevicePrimaryCtxRelease_v2)              \
    X(cuCtxSetCurrent) X(cuCtxGetCurrent) X(cuCtxPushCurrent)                 \
    X(cuCtxPushCurrent_v2) X(cuCtxPopCurrent) X(cuCtxPopCurrent_v2)           \
    X(cuCtxGetDevice) X(cuGreenCtxCreate) X(cuCtxFromGreenCtx)                 \
    X(cuGreenCtxDestroy)                                                       \
    X(cuMemAlloc) X(cuMemAlloc_v2) X(cuMemAllocPitch) X(cuMemAllocPitch_v2)   \
    X(cuMemAllocManaged) X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz)           \
    X(cuMemAllocFromPoolAsync) X(cuMemAllocFromPoolAsync_ptsz) X(cuMemCreate) \
    X(cuMemPoolCreate) X(cuMemPoolDestroy) X(cuArrayCreate)                   \
    X(cuArrayCreate_v2) X(cuArray3DCreate) X(cuArray3DCreate_v2)              \
    X(cuArrayDestroy) X(cuMipmappedArrayCreate) X(cuMipmappedArrayDestroy)    \
    X(cuMemAllocHost) X(cuMemAllocHost_v2) X(cuMemHostAlloc) X(cuMemFreeHost) \
    X(cuMemHostRegister) X(cuMemHostRegister_v2) X(cuMemHostUnregister)       \
    X(cuMemHostGetDevicePointer) X(cuMemHostGetDevicePointer_v2)              \
    X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap) X(cuMemUnmap)      \
    X(cuMemMapArrayAsync) X(cuMemMapArrayAsync_ptsz) X(cuMemSetAccess)        \
    X(cuMemRelease) X(cuMemExportToShareableHandle)                           \
    X(cuMemImportFromShareableHandle) X(cuMemPoolExportPointer)               \
    X(cuMemPoolImportPointer) X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle)      \
    X(cuIpcOpenMemHandle_v2) X(cuIpcCloseMemHandle) X(cuCtxEnablePeerAccess)  \
    X(cuCtxDisablePeerAccess) X(cuImportExternalMemory)                       \
    X(cuExternalMemoryGetMappedBuffer) X(cuDestroyExternalMemory)             \
    X(cuGraphicsMapResources) X(cuGraphicsMapResources_ptsz)                  \
    X(cuGraphicsUnmapResources) X(cuGraphicsUnmapResources_ptsz)              \
    X(cuMemFree) X(cuMemFree_v2) X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz)     \
    X(cuMemGetInfo_v2)

enum simcall_sym {
#define SIMCALL_ENUM(n) SC_##n,
    SIMCALL_SYMS(SIMCALL_ENUM)
#undef SIMCALL_ENUM
    SC__COUNT
};

#define SIMCALLS_MAX_DEV 64

extern const char *const simcall_names[SC__COUNT];

/* Count one call of `sym` by the calling thread, on its current device. */
void simcalls_count(int sym);
/* Count n calls at once (tight loops). */
void simcalls_add(int sym, unsigned long n);
/* The calling thread's current device (-1: no context). */
void simcalls_set_device(int dev);
int simcalls_device(void);
/* Register the atexit writer (once). */
void simcalls_init(void);
/* Write the counters now (idempotent per process). */
void simcalls_write(void);
/* In a forked child: forget the parent's counters. */
void simcalls_forked_child(void);

#endif

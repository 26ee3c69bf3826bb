/*
 * ipc_map - an IPC open that fails with CUDA_ERROR_MAP_FAILED although the
 * framebuffer has plenty free: BAR1 is the limit.
 *
 * Parent: cuInit, use device 0 (cuDeviceGet, cuDevicePrimaryCtxRetain,
 * cuCtxSetCurrent), cuMemAlloc_v2(512 MiB), cuIpcGetMemHandle, fork.
 * Child: cuInit, use device 0, read the handle from a pipe,
 * cuIpcOpenMemHandle_v2 (flags 1). With the default BAR1 (256 MiB, 4 MiB
 * used) the open fails; the child prints
 *   ipc_map: cuIpcOpenMemHandle_v2 failed: CUDA_ERROR_MAP_FAILED
 * and exits 1 (0 if the open worked; it then closes the mapping). The
 * parent waits, frees, and exits with the child's status.
 * IPC_MAP_SIZE (bytes, K/M/G suffix) overrides the allocation size.
 * Both processes write $SIMWORK_CALLS lines.
 */
#define _GNU_SOURCE
#include "simcuda.h"
#include "simcalls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define CALL(sym, ...) (simcalls_count(SC_##sym), sym(__VA_ARGS__))

static const char *errname(CUresult rc)
{
    const char *s = NULL;
    if (cuGetErrorName(rc, &s) != CUDA_SUCCESS || !s)
        return "?";
    return s;
}

static int check(const char *who, const char *what, CUresult rc)
{
    if (rc != CUDA_SUCCESS) {
        fprintf(stderr, "ipc_map: %s: %s failed: %s\n", who, what, errname(rc));
        return -1;
    }
    return 0;
}

NOINLINE int use_device0(const char *who)
{
    CUdevice dev;
    CUcontext ctx;
    if (check(who, "cuInit", CALL(cuInit, 0)) || check(who, "cuDeviceGet", CALL(cuDeviceGet, &dev, 0)) ||
        check(who, "cuDevicePrimaryCtxRetain", CALL(cuDevicePrimaryCtxRetain, &ctx, dev)) ||
        check(who, "cuCtxSetCurrent", CALL(cuCtxSetCurrent, ctx)))
        return -1;
    simcalls_set_device(dev);
    return 0;
}

NOINLINE int child_open(int rfd)
{
    simcalls_set_device(-1);
    if (use_device0("child"))
        return 2;
    CUipcMemHandle h;
    size_t got = 0;
    while (got < sizeof(h)) {
        ssize_t n = read(rfd, (char *)&h + got, sizeof(h) - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fprintf(stderr, "ipc_map: child: short read of the handle\n");
            return 2;
        }
        got += (size_t)n;
    }
    CUdeviceptr p = 0;
    CUresult rc = CALL(cuIpcOpenMemHandle_v2, &p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (rc != CUDA_SUCCESS) {
        fprintf(stderr, "ipc_map: cuIpcOpenMemHandle_v2 failed: %s\n", errname(rc));
        return 1;
    }
    printf("ipc_map: child opened the handle\n");
    CALL(cuIpcCloseMemHandle, p);
    return 0;
}

int main(void)
{
    simcalls_init();
    unsigned long long size = 512ull << 20;
    const char *env = getenv("IPC_MAP_SIZE");
    if (env && *env) {
        char *end;
        size = strtoull(env, &end, 0);
        switch (*end) {
        case 'K': case 'k': size <<= 10; break;
        case 'M': case 'm': size <<= 20; break;
        case 'G': case 'g': size <<= 30; break;
        default: break;
        }
    }
    if (use_device0("parent"))
        return 2;
    CUdeviceptr p = 0;
    CUipcMemHandle h;
    if (check("parent", "cuMemAlloc_v2", CALL(cuMemAlloc_v2, &p, (size_t)size)) ||
        check("parent", "cuIpcGetMemHandle", CALL(cuIpcGetMemHandle, &h, p)))
        return 2;
    int fds[2];
    if (pipe(fds) != 0) {
        perror("ipc_map: pipe");
        return 2;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("ipc_map: fork");
        return 2;
    }
    if (pid == 0) {
        simcalls_forked_child();
        close(fds[1]);
        int st = child_open(fds[0]);
        fflush(NULL);
        exit(st);
    }
    close(fds[0]);
    if (write(fds[1], &h, sizeof(h)) != (ssize_t)sizeof(h))
        perror("ipc_map: write");
    close(fds[1]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    CALL(cuMemFree_v2, p);
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}

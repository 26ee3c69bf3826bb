/*
 * secret_o2 - a program built -O2 without frame pointers whose private
 * library (libsecret.so, found next to it) fails a cuMemAlloc_v2 while a
 * secret lies in a stack buffer of the function that called it
 * (handle_request). The privacy tests check that the secret reaches no
 * byte of run.db or of any export unless --keep-stack-bytes asks for the
 * stack's bytes, and that the stack is still named.
 *
 *   secret_o2 LIBCUDA [SIZE]        SIZE default 1 TiB
 *
 * main -> serve -> handle_request (libsecret.so) -> cuMemAlloc_v2.
 * Exit status 1 when the allocation failed, 0 when not, 2 when LIBCUDA
 * cannot be loaded.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define CHAIN __attribute__((noinline, noclone, used))

typedef int (*alloc_fn)(unsigned long long *, size_t);
int handle_request(alloc_fn alloc, size_t size);

static volatile int sink;

CHAIN int serve(alloc_fn alloc, size_t size)
{
    int rc = handle_request(alloc, size);
    sink = rc; /* after the call: not a tail call */
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: secret_o2 LIBCUDA [SIZE]\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) {
        fprintf(stderr, "secret: %s\n", dlerror());
        return 2;
    }
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
    int (*dev_get)(int *, int) = (int (*)(int *, int))dlsym(h, "cuDeviceGet");
    int (*retain)(void **, int) = (int (*)(void **, int))dlsym(h, "cuDevicePrimaryCtxRetain");
    int (*set_current)(void *) = (int (*)(void *))dlsym(h, "cuCtxSetCurrent");
    alloc_fn alloc = (alloc_fn)dlsym(h, "cuMemAlloc_v2");
    if (!init || !dev_get || !retain || !set_current || !alloc) {
        fprintf(stderr, "secret: %s lacks a symbol\n", argv[1]);
        return 2;
    }
    int dev = 0;
    void *ctx = NULL;
    if (init(0) != 0 || dev_get(&dev, 0) != 0 || retain(&ctx, dev) != 0 || set_current(ctx) != 0) {
        fprintf(stderr, "secret: the driver did not start\n");
        return 1;
    }
    size_t size = argc > 2 ? strtoull(argv[2], NULL, 0) : (size_t)1 << 40;
    return serve(alloc, size) != 0 ? 1 : 0;
}

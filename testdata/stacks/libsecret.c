/*
 * libsecret - the private library of secret_o2 (secret_main.c): the
 * function that makes the failing CUDA call keeps a secret in a buffer on
 * its own stack while it calls, as a server keeps a request's text or a
 * token. The secret is decoded at run time, so its text is in no file:
 * wherever it shows up, it was copied from the process's memory.
 */
#include <stddef.h>
#include <stdio.h>

#define CHAIN __attribute__((noinline, noclone, used, visibility("default")))

typedef int (*alloc_fn)(unsigned long long *, size_t);

/* The secret, each byte XORed with 0x5a. */
static const unsigned char hidden[] = {
    0x1c, 0x15, 0x08, 0x1f, 0x14, 0x09, 0x13, 0x19, 0x77, 0x09, 0x1f, 0x19, 0x08, 0x1f, 0x0e, 0x77,
    0x6d, 0x3c, 0x69, 0x3b, 0x63, 0x39, 0x6f, 0x6b, 0x77, 0x2e, 0x35, 0x31, 0x3f, 0x34,
};

/* handle_request decodes the secret into its stack buffer, makes the
 * allocation and uses the buffer after the call, so the buffer is live
 * across it. */
CHAIN int handle_request(alloc_fn alloc, size_t size)
{
    volatile char secret[64];
    size_t n = sizeof(hidden);
    for (size_t i = 0; i < n; i++)
        secret[i] = (char)(hidden[i] ^ 0x5a);
    secret[n] = 0;
    unsigned long long ptr = 0;
    int rc = alloc(&ptr, size);
    unsigned sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (unsigned char)secret[i];
    if (rc != 0)
        fprintf(stderr, "secret: cuMemAlloc_v2(%zu) -> %d (request checksum %u)\n", size, rc, sum);
    return rc;
}

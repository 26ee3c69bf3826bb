/* A library exporting two symbols of the table, for bpf's frame tests:
 * cuMemAlloc_v2 calls cuMemFree_v2 (a nested call, as a library calling
 * its own entry points), and for one size the inner call longjmps out, so
 * its return probe never runs. The program (main, with -DNEST_MAIN) waits
 * for a byte on stdin, then makes the calls named by its arguments. */
#include <setjmp.h>
#include <stdlib.h>
#include <unistd.h>

/* Neither inlined nor cloned: each call enters the exported symbol. */
#if defined(__clang__)
#define ENTRY __attribute__((noinline))
#else
#define ENTRY __attribute__((noipa))
#endif

static jmp_buf out;

ENTRY int cuMemFree_v2(unsigned long p)
{
	if (p == 0xdead)
		longjmp(out, 1);
	return 0;
}

ENTRY int cuMemAlloc_v2(unsigned long *dptr, unsigned long size)
{
	if (size == 1)
		cuMemFree_v2(0x1234);
	if (size == 2 && !setjmp(out))
		cuMemFree_v2(0xdead);
	*dptr = 0x7000 + size;
	return size == 4 ? 2 : 0;
}

#ifdef NEST_MAIN
int main(int argc, char **argv)
{
	char b;
	if (read(0, &b, 1) != 1)
		return 2;
	for (int i = 1; i < argc; i++) {
		unsigned long p = 0;
		cuMemAlloc_v2(&p, strtoul(argv[i], 0, 0));
	}
	return 0;
}
#endif

/* Calls target() N times from under 16 nested 4 KiB frames, so that a
 * 16 KiB copy from the stack pointer stays inside the stack; prints the
 * time per call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
__attribute__((noinline)) int target(int x) { __asm__ volatile("" ::: "memory"); return x + 1; }
static long n;
__attribute__((noinline)) int deep(int d, volatile char *p)
{
	volatile char pad[4096];
	pad[0] = d;
	if (d > 0)
		return deep(d - 1, pad) + pad[0];
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	int s = 0;
	for (long i = 0; i < n; i++)
		s += target((int)i);
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%.1f ns/call\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
	return s;
}
int main(int argc, char **argv) { n = atol(argv[1]); return deep(16, 0) == 42; }

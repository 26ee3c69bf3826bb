/* Capture of a thread's registers and stack from inside the program, as a
 * BPF program would capture them at a probe: the callee-saved registers,
 * the instruction and stack pointers, and a copy of the stack from the
 * stack pointer up to the top of its mapping. The unwind package's tests
 * read the file this writes (see unwind/capture_test.go for the layout).
 *
 * FX_CAPTURE(p) must be used inline in the function whose frame is to be
 * the innermost: the instruction pointer it records is its own. */
#ifndef FX_CAPTURE_H
#define FX_CAPTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__clang__)
#define FX_OPAQUE __attribute__((noinline))
#else
/* No inlining, cloning or interprocedural propagation: the function keeps
 * its name and its own frame, but its body is still optimized. */
#define FX_OPAQUE __attribute__((noipa))
#endif

struct fx_regs {
	uint64_t ip, sp, bp, bx, r12, r13, r14, r15;
};

static struct fx_regs fx_captured;

#define FX_CAPTURE(p)                                                    \
	__asm__ volatile("movq %%rsp, 8(%0)\n\t"                         \
			 "movq %%rbp, 16(%0)\n\t"                        \
			 "movq %%rbx, 24(%0)\n\t"                        \
			 "movq %%r12, 32(%0)\n\t"                        \
			 "movq %%r13, 40(%0)\n\t"                        \
			 "movq %%r14, 48(%0)\n\t"                        \
			 "movq %%r15, 56(%0)\n\t"                        \
			 "leaq 0(%%rip), %%rax\n\t"                      \
			 "movq %%rax, 0(%0)\n\t"                         \
			 :                                               \
			 : "r"(p)                                        \
			 : "rax", "memory")

/* The [start, end) of the mapping holding addr, from /proc/self/maps. */
static int fx_mapping_of(const char *maps, uint64_t addr, uint64_t *start, uint64_t *end)
{
	const char *line = maps;
	while (*line) {
		unsigned long long lo, hi;
		if (sscanf(line, "%llx-%llx", &lo, &hi) == 2 && lo <= addr && addr < hi) {
			*start = lo;
			*end = hi;
			return 0;
		}
		const char *nl = strchr(line, '\n');
		if (!nl)
			break;
		line = nl + 1;
	}
	return -1;
}

static char *fx_read_maps(size_t *len)
{
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f)
		return NULL;
	size_t cap = 1 << 16, n = 0;
	char *buf = (char *)malloc(cap + 1);
	size_t got;
	while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
		n += got;
		if (n == cap) {
			cap *= 2;
			buf = (char *)realloc(buf, cap + 1);
		}
	}
	fclose(f);
	if (buf)
		buf[n] = 0;
	*len = n;
	return buf;
}

/* Writes "FXSTACK1", the eight registers, the stack's address and length,
 * the stack bytes, the maps text's length and the text, all little-endian,
 * to the file named by $FX_CAPTURE_OUT. */
static void fx_dump(const struct fx_regs *r)
{
	const char *out = getenv("FX_CAPTURE_OUT");
	size_t mlen;
	char *maps = fx_read_maps(&mlen);
	uint64_t start, end;
	if (!out || !maps || fx_mapping_of(maps, r->sp, &start, &end) != 0) {
		fprintf(stderr, "capture: no output file, maps or stack mapping\n");
		exit(2);
	}
	uint64_t len = end - r->sp, ml = mlen;
	FILE *f = fopen(out, "wb");
	if (!f) {
		perror(out);
		exit(2);
	}
	fwrite("FXSTACK1", 1, 8, f);
	fwrite(r, sizeof *r, 1, f);
	fwrite(&r->sp, 8, 1, f);
	fwrite(&len, 8, 1, f);
	fwrite((const void *)(uintptr_t)r->sp, 1, len, f);
	fwrite(&ml, 8, 1, f);
	fwrite(maps, 1, mlen, f);
	if (fclose(f) != 0) {
		perror(out);
		exit(2);
	}
	free(maps);
}

#endif

/* What a full stack capture costs at a uretprobe: the registers, then up
 * to copy_len bytes of the user stack copied page by page (a copy that
 * crosses the top of the stack keeps what lies below), then, when emit is
 * set, one ring buffer record of the bytes copied. Built and loaded by
 * bpfcost/main.go (docs/stacks.md, "Cost"). */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct pt_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};

#define MAXSTACK 16384
#define HDR 64
struct rec {
	__u64 ip, sp, bp, bx, r12, r13, r14, r15;
	__u8 stack[MAXSTACK];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rec);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 26);
} rb SEC(".maps");

const volatile __u32 copy_len = 0; /* bytes: a multiple of 4096, at most MAXSTACK */
const volatile __u8 emit = 0;
const volatile __u64 rb_flags = 0;
__u64 faults = 0, lost = 0;

SEC("uretprobe")
int ret(struct pt_regs *ctx)
{
	__u32 k = 0;
	struct rec *r = bpf_map_lookup_elem(&scratch, &k);
	if (!r)
		return 0;
	r->ip = ctx->ip; r->sp = ctx->sp; r->bp = ctx->bp; r->bx = ctx->bx;
	r->r12 = ctx->r12; r->r13 = ctx->r13; r->r14 = ctx->r14; r->r15 = ctx->r15;
	__u32 n = 0;
	/* Page by page, so that a copy crossing the top of the stack keeps
	 * what lies below it. */
	for (int i = 0; i < MAXSTACK / 4096; i++) {
		if (n >= copy_len)
			break;
		if (bpf_probe_read_user(r->stack + (i * 4096), 4096, (void *)(r->sp + i * 4096)) != 0) {
			__sync_fetch_and_add(&faults, 1);
			break;
		}
		n += 4096;
	}
	if (emit) {
		__u64 size = HDR + (n & (MAXSTACK * 2 - 1));
		if (size > sizeof(*r))
			size = sizeof(*r);
		if (bpf_ringbuf_output(&rb, r, size, rb_flags) != 0)
			__sync_fetch_and_add(&lost, 1);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";

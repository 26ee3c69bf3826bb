/*
 * simstate.c - shared device state of the simulated GPU (see simstate.h).
 */
#define _GNU_SOURCE
#include "simstate.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define KiB 1024ull
#define MiB (1024ull * KiB)
#define GiB (1024ull * MiB)

static pthread_mutex_t g_attach_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sim_state *g_st;
static int g_fd = -1;
static char g_path[PATH_MAX];
static int g_atfork_done;
static pid_t g_pid; /* cached getpid(); reset in forked children */

pid_t sim_pid(void)
{
    pid_t p = __atomic_load_n(&g_pid, __ATOMIC_RELAXED);
    if (!p) {
        p = getpid();
        __atomic_store_n(&g_pid, p, __ATOMIC_RELAXED);
    }
    return p;
}

int sim_parse_size(const char *s, uint64_t *out)
{
    if (!s)
        return -1;
    while (isspace((unsigned char)*s))
        s++;
    if (!isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno)
        return -1;
    uint64_t mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mul = KiB; end++; break;
    case 'M': mul = MiB; end++; break;
    case 'G': mul = GiB; end++; break;
    case 'T': mul = 1024 * GiB; end++; break;
    default: break;
    }
    if (mul != 1) {
        if (*end == 'i' || *end == 'I')
            end++;
        if (*end == 'B' || *end == 'b')
            end++;
    }
    while (isspace((unsigned char)*end))
        end++;
    if (*end)
        return -1;
    if (mul != 1 && v > UINT64_MAX / mul)
        return -1;
    *out = v * mul;
    return 0;
}

static uint64_t env_size(const char *name, uint64_t def)
{
    const char *v = getenv(name);
    uint64_t x;
    if (!v || !*v)
        return def;
    if (sim_parse_size(v, &x) != 0) {
        fprintf(stderr, "simgpu: ignoring bad %s=%s\n", name, v);
        return def;
    }
    return x;
}

static void state_init(struct sim_state *st)
{
    memset(st, 0, sizeof(*st));
    memcpy(st->magic, SIM_STATE_MAGIC, 8);
    st->version = SIM_STATE_VERSION;
    st->size = sizeof(*st);
    uint64_t ndev = env_size("SIMGPU_DEVICES", 1);
    if (ndev < 1 || ndev > SIM_MAX_DEV) {
        fprintf(stderr, "simgpu: SIMGPU_DEVICES must be 1..%d, using 1\n", SIM_MAX_DEV);
        ndev = 1;
    }
    uint64_t mig = env_size("SIMGPU_MIG", 0);
    if (mig > SIM_MAX_MIG) {
        fprintf(stderr, "simgpu: SIMGPU_MIG must be 0..%d, using 0\n", SIM_MAX_MIG);
        mig = 0;
    }
    uint64_t fb_total = env_size("SIMGPU_FB_TOTAL", 16 * GiB);
    uint64_t fb_res = env_size("SIMGPU_FB_RESERVED", 512 * MiB);
    uint64_t bar1_total = env_size("SIMGPU_BAR1_TOTAL", 256 * MiB);
    uint64_t bar1_used = env_size("SIMGPU_BAR1_USED", 4 * MiB);
    if (fb_res > fb_total)
        fb_res = fb_total;
    if (bar1_used > bar1_total)
        bar1_used = bar1_total;
    st->ndev = (uint32_t)ndev;
    st->mig = (uint32_t)mig;
    st->peer_bar1 = env_size("SIMGPU_PEER_BAR1", 32 * MiB);
    st->pin_limit = env_size("SIMGPU_PIN_LIMIT", 0);
    st->ctx_mem = env_size("SIMGPU_CTX_MEM", 0);
    st->creator_pid = (uint64_t)getpid();
    for (uint32_t d = 0; d < st->ndev; d++) {
        struct sim_dev *dv = &st->dev[d];
        dv->fb_total = fb_total;
        dv->fb_reserved = fb_res;
        dv->bar1_total = bar1_total;
        dv->bar1_used = bar1_used;
        for (uint32_t i = 0; i < st->mig; i++) {
            dv->inst[i].total = fb_total / st->mig;
            dv->inst[i].reserved = fb_res / st->mig;
        }
    }
}

static int state_valid(const struct sim_state *st)
{
    return memcmp(st->magic, SIM_STATE_MAGIC, 8) == 0 && st->version == SIM_STATE_VERSION &&
           st->size == sizeof(*st) && st->ndev >= 1 && st->ndev <= SIM_MAX_DEV &&
           st->mig <= SIM_MAX_MIG && st->nproc <= SIM_MAX_PROC;
}

static int flock_retry(int fd, int op)
{
    int r;
    do
        r = flock(fd, op);
    while (r != 0 && errno == EINTR);
    return r;
}

/* After fork the child shares the parent's open file description, so flock
 * would not exclude the two: the child opens the file again. */
static void atfork_prepare(void)
{
    pthread_mutex_lock(&g_mu);
}

static void atfork_parent(void)
{
    pthread_mutex_unlock(&g_mu);
}

static void atfork_child(void)
{
    g_pid = 0;
    pthread_mutex_init(&g_attach_mu, NULL);
    pthread_mutex_init(&g_mu, NULL);
    if (g_fd >= 0) {
        close(g_fd);
        g_fd = open(g_path, O_RDWR | O_CLOEXEC);
    }
}

int sim_attach(void)
{
    static int reported;
    pthread_mutex_lock(&g_attach_mu);
    if (g_st) {
        pthread_mutex_unlock(&g_attach_mu);
        return 0;
    }
    const char *p = getenv("SIMGPU_STATE");
    if (p && *p)
        snprintf(g_path, sizeof(g_path), "%s", p);
    else
        snprintf(g_path, sizeof(g_path), "/tmp/simgpu-%u.state", (unsigned)getuid());
    int fd = open(g_path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        goto fail;
    if (flock_retry(fd, LOCK_EX) != 0)
        goto fail_fd;
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        goto fail_unlock;
    int fresh = 0;
    if ((size_t)sb.st_size != sizeof(struct sim_state)) {
        if (sb.st_size != 0)
            fprintf(stderr, "simgpu: %s has an unknown layout; reinitializing it\n", g_path);
        if (ftruncate(fd, 0) != 0 || ftruncate(fd, sizeof(struct sim_state)) != 0)
            goto fail_unlock;
        fresh = 1;
    }
    void *m = mmap(NULL, sizeof(struct sim_state), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        goto fail_unlock;
    struct sim_state *st = m;
    if (!fresh && !state_valid(st)) {
        fprintf(stderr, "simgpu: %s is not a valid state file; reinitializing it\n", g_path);
        fresh = 1;
    }
    if (fresh)
        state_init(st);
    flock_retry(fd, LOCK_UN);
    g_fd = fd;
    if (!g_atfork_done) {
        pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
        g_atfork_done = 1;
    }
    __atomic_store_n(&g_st, st, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_attach_mu);
    return 0;

fail_unlock:
    flock_retry(fd, LOCK_UN);
fail_fd:
    close(fd);
fail:
    if (!reported) {
        reported = 1;
        fprintf(stderr, "simgpu: cannot use state file %s: %s\n", g_path, strerror(errno));
    }
    pthread_mutex_unlock(&g_attach_mu);
    return -1;
}

const struct sim_state *sim_peek(void)
{
    return __atomic_load_n(&g_st, __ATOMIC_ACQUIRE);
}

static void drop_row(struct sim_state *st, struct sim_proc *r)
{
    if (r->phys >= 0 && r->phys < (int)st->ndev) {
        struct sim_dev *d = &st->dev[r->phys];
        d->fb_used = d->fb_used >= r->fb ? d->fb_used - r->fb : 0;
        if (r->inst >= 0 && r->inst < SIM_MAX_MIG) {
            struct sim_inst *in = &d->inst[r->inst];
            in->used = in->used >= r->fb ? in->used - r->fb : 0;
        }
        d->bar1_used = d->bar1_used >= r->bar1 ? d->bar1_used - r->bar1 : 0;
    }
    memset(r, 0, sizeof(*r));
}

static void reclaim_dead(struct sim_state *st)
{
    pid_t me = sim_pid();
    pid_t alive_cache = 0, dead_cache = 0;
    for (uint32_t i = 0; i < st->nproc; i++) {
        struct sim_proc *r = &st->proc[i];
        if (r->pid == 0 || r->pid == me)
            continue;
        if (r->pid == alive_cache)
            continue;
        int dead = r->pid == dead_cache;
        if (!dead && kill(r->pid, 0) != 0 && errno == ESRCH)
            dead = 1;
        if (dead) {
            dead_cache = r->pid;
            drop_row(st, r);
        } else {
            alive_cache = r->pid;
        }
    }
    while (st->nproc > 0 && st->proc[st->nproc - 1].pid == 0)
        st->nproc--;
}

struct sim_state *sim_lock(void)
{
    struct sim_state *st = (struct sim_state *)sim_peek();
    if (!st)
        return NULL;
    pthread_mutex_lock(&g_mu);
    if (g_fd < 0)
        g_fd = open(g_path, O_RDWR | O_CLOEXEC);
    if (g_fd >= 0)
        flock_retry(g_fd, LOCK_EX);
    reclaim_dead(st);
    return st;
}

void sim_unlock(void)
{
    if (g_fd >= 0)
        flock_retry(g_fd, LOCK_UN);
    pthread_mutex_unlock(&g_mu);
}

int sim_cuda_count(const struct sim_state *st)
{
    return (int)(st->ndev * (st->mig ? st->mig : 1));
}

void sim_ordinal(const struct sim_state *st, int ord, int *phys, int *inst)
{
    if (st->mig) {
        *phys = ord / (int)st->mig;
        *inst = ord % (int)st->mig;
    } else {
        *phys = ord;
        *inst = -1;
    }
}

uint64_t sim_fb_total(const struct sim_state *st, int phys, int inst)
{
    return inst >= 0 ? st->dev[phys].inst[inst].total : st->dev[phys].fb_total;
}

uint64_t sim_fb_reserved(const struct sim_state *st, int phys, int inst)
{
    return inst >= 0 ? st->dev[phys].inst[inst].reserved : st->dev[phys].fb_reserved;
}

uint64_t sim_fb_used(const struct sim_state *st, int phys, int inst)
{
    return inst >= 0 ? st->dev[phys].inst[inst].used : st->dev[phys].fb_used;
}

uint64_t sim_fb_free(const struct sim_state *st, int phys, int inst)
{
    uint64_t t = sim_fb_total(st, phys, inst), r = sim_fb_reserved(st, phys, inst),
             u = sim_fb_used(st, phys, inst);
    return t > r + u ? t - r - u : 0;
}

static struct sim_proc *row(struct sim_state *st, pid_t pid, int phys, int inst, int create)
{
    struct sim_proc *hole = NULL;
    for (uint32_t i = 0; i < st->nproc; i++) {
        struct sim_proc *r = &st->proc[i];
        if (r->pid == pid && r->phys == phys && r->inst == inst)
            return r;
        if (!hole && r->pid == 0)
            hole = r;
    }
    if (!create)
        return NULL;
    if (!hole) {
        if (st->nproc >= SIM_MAX_PROC)
            return NULL;
        hole = &st->proc[st->nproc++];
    }
    memset(hole, 0, sizeof(*hole));
    hole->pid = pid;
    hole->phys = phys;
    hole->inst = inst;
    return hole;
}

static void maybe_drop(struct sim_proc *r)
{
    if (r->fb == 0 && r->bar1 == 0 && r->ctxs <= 0)
        memset(r, 0, sizeof(*r));
}

int sim_fb_charge(struct sim_state *st, pid_t pid, int phys, int inst, uint64_t bytes)
{
    if (sim_fb_free(st, phys, inst) < bytes)
        return -1;
    struct sim_proc *r = row(st, pid, phys, inst, 1);
    if (!r)
        return -2;
    r->fb += bytes;
    st->dev[phys].fb_used += bytes;
    if (inst >= 0)
        st->dev[phys].inst[inst].used += bytes;
    return 0;
}

void sim_fb_uncharge(struct sim_state *st, pid_t pid, int phys, int inst, uint64_t bytes)
{
    struct sim_proc *r = row(st, pid, phys, inst, 0);
    if (!r)
        return; /* already reclaimed (state reinitialized?) */
    if (bytes > r->fb)
        bytes = r->fb;
    r->fb -= bytes;
    struct sim_dev *d = &st->dev[phys];
    d->fb_used = d->fb_used >= bytes ? d->fb_used - bytes : 0;
    if (inst >= 0)
        d->inst[inst].used = d->inst[inst].used >= bytes ? d->inst[inst].used - bytes : 0;
    maybe_drop(r);
}

int sim_bar1_charge(struct sim_state *st, pid_t pid, int phys, int inst, uint64_t bytes)
{
    struct sim_dev *d = &st->dev[phys];
    uint64_t avail = d->bar1_total > d->bar1_used ? d->bar1_total - d->bar1_used : 0;
    if (avail < bytes)
        return -1;
    struct sim_proc *r = row(st, pid, phys, inst, 1);
    if (!r)
        return -2;
    r->bar1 += bytes;
    d->bar1_used += bytes;
    return 0;
}

void sim_bar1_uncharge(struct sim_state *st, pid_t pid, int phys, int inst, uint64_t bytes)
{
    struct sim_proc *r = row(st, pid, phys, inst, 0);
    if (!r)
        return;
    if (bytes > r->bar1)
        bytes = r->bar1;
    r->bar1 -= bytes;
    struct sim_dev *d = &st->dev[phys];
    d->bar1_used = d->bar1_used >= bytes ? d->bar1_used - bytes : 0;
    maybe_drop(r);
}

int sim_ctx_adjust(struct sim_state *st, pid_t pid, int phys, int inst, int delta)
{
    if (delta > 0 && st->ctx_mem) {
        int rc = sim_fb_charge(st, pid, phys, inst, st->ctx_mem);
        if (rc != 0)
            return rc;
    }
    struct sim_proc *r = row(st, pid, phys, inst, delta > 0);
    if (!r)
        return delta > 0 ? -2 : 0;
    if (delta > 0) {
        r->ctx_fb += st->ctx_mem;
    } else if (delta < 0 && r->ctx_fb) {
        uint64_t n = r->ctx_fb < st->ctx_mem ? r->ctx_fb : st->ctx_mem;
        r->ctx_fb -= n;
        if (n > r->fb)
            n = r->fb;
        r->fb -= n;
        struct sim_dev *d = &st->dev[phys];
        d->fb_used = d->fb_used >= n ? d->fb_used - n : 0;
        if (inst >= 0)
            d->inst[inst].used = d->inst[inst].used >= n ? d->inst[inst].used - n : 0;
    }
    r->ctxs += delta;
    if (r->ctxs < 0)
        r->ctxs = 0;
    maybe_drop(r);
    return 0;
}

void sim_release_pid(struct sim_state *st, pid_t pid)
{
    for (uint32_t i = 0; i < st->nproc; i++)
        if (st->proc[i].pid == pid)
            drop_row(st, &st->proc[i]);
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void sim_uuid(int phys, int inst, unsigned char out[16])
{
    uint64_t seed = 0x53494d4750550000ull ^ ((uint64_t)(phys + 1) << 8) ^ (uint64_t)(inst + 1);
    uint64_t a = splitmix64(&seed), b = splitmix64(&seed);
    for (int i = 0; i < 8; i++) {
        out[i] = (unsigned char)(a >> (56 - 8 * i));
        out[8 + i] = (unsigned char)(b >> (56 - 8 * i));
    }
}

void sim_uuid_string(int phys, int inst, char *out, size_t len)
{
    unsigned char u[16];
    sim_uuid(phys, inst, u);
    snprintf(out, len,
             "%s-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             inst >= 0 ? "MIG" : "GPU", u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9],
             u[10], u[11], u[12], u[13], u[14], u[15]);
}

static unsigned long long gib_round(uint64_t b)
{
    return (unsigned long long)((b + GiB / 2) / GiB);
}

void sim_device_name(const struct sim_state *st, int phys, int inst, char *out, size_t len)
{
    unsigned long long g = gib_round(st->dev[phys].fb_total);
    if (inst >= 0)
        snprintf(out, len, "NVIDIA Simulated H100 %lluGB MIG 1g.%llugb", g,
                 gib_round(st->dev[phys].inst[inst].total));
    else
        snprintf(out, len, "NVIDIA Simulated H100 %lluGB", g);
}

unsigned sim_pci_bus(int phys)
{
    return 0x41u + 2u * (unsigned)phys;
}

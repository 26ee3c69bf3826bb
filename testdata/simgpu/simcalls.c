/*
 * simcalls.c - call counters for simwork and the scenarios (simcalls.h).
 */
#define _GNU_SOURCE
#include "simcalls.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

const char *const simcall_names[SC__COUNT] = {
#define SIMCALL_NAME(n) #n,
    SIMCALL_SYMS(SIMCALL_NAME)
#undef SIMCALL_NAME
};

struct tcounts {
    pid_t tid;
    uint64_t c[SC__COUNT][SIMCALLS_MAX_DEV + 1]; /* [sym][device + 1] */
    struct tcounts *next;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct tcounts *g_all;
static int g_written;
static __thread struct tcounts *t_counts;
static __thread int t_dev = -1;

static struct tcounts *mine(void)
{
    struct tcounts *t = t_counts;
    if (t)
        return t;
    t = calloc(1, sizeof(*t));
    if (!t)
        abort();
    t->tid = (pid_t)syscall(SYS_gettid);
    pthread_mutex_lock(&g_mu);
    t->next = g_all;
    g_all = t;
    pthread_mutex_unlock(&g_mu);
    t_counts = t;
    return t;
}

static int dev_slot(void)
{
    int d = t_dev;
    if (d < -1 || d >= SIMCALLS_MAX_DEV)
        d = -1;
    return d + 1;
}

void simcalls_count(int sym)
{
    mine()->c[sym][dev_slot()]++;
}

void simcalls_add(int sym, unsigned long n)
{
    mine()->c[sym][dev_slot()] += n;
}

void simcalls_set_device(int dev)
{
    t_dev = dev;
}

int simcalls_device(void)
{
    return t_dev;
}

static void flush_block(int fd, char *buf, size_t *len)
{
    size_t off = 0;
    while (off < *len) {
        ssize_t w = write(fd, buf + off, *len - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    *len = 0;
}

void simcalls_write(void)
{
    pthread_mutex_lock(&g_mu);
    if (g_written) {
        pthread_mutex_unlock(&g_mu);
        return;
    }
    g_written = 1;
    const char *path = getenv("SIMWORK_CALLS");
    if (!path || !*path) {
        pthread_mutex_unlock(&g_mu);
        return;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (fd < 0) {
        pthread_mutex_unlock(&g_mu);
        return;
    }
    pid_t pid = getpid();
    char buf[4096];
    size_t len = 0;
    for (struct tcounts *t = g_all; t; t = t->next) {
        for (int s = 0; s < SC__COUNT; s++) {
            for (int d = 0; d <= SIMCALLS_MAX_DEV; d++) {
                uint64_t n = t->c[s][d];
                if (!n)
                    continue;
                char line[160];
                int l = snprintf(line, sizeof(line), "%d %d %s %llu %d\n", (int)pid, (int)t->tid,
                                 simcall_names[s], (unsigned long long)n, d - 1);
                if (l <= 0 || (size_t)l >= sizeof(line))
                    continue;
                if (len + (size_t)l > sizeof(buf))
                    flush_block(fd, buf, &len);
                memcpy(buf + len, line, (size_t)l);
                len += (size_t)l;
            }
        }
    }
    flush_block(fd, buf, &len);
    close(fd);
    pthread_mutex_unlock(&g_mu);
}

static void at_exit(void)
{
    simcalls_write();
}

void simcalls_init(void)
{
    static int done;
    if (!done) {
        done = 1;
        atexit(at_exit);
    }
}

void simcalls_forked_child(void)
{
    pthread_mutex_init(&g_mu, NULL);
    g_all = NULL; /* the parent's tables stay allocated but unlisted */
    g_written = 0;
    t_counts = NULL;
    t_dev = -1;
}

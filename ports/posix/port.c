#include "ports/posix/port.h"
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

int64_t port_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

double port_now_s(void) { return port_now_ns() * 1e-9; }

void port_sleep_ns(int64_t ns)
{
    if (ns <= 0) return;
    struct timespec ts = {ns / 1000000000LL, ns % 1000000000LL};
    while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

int port_ncpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

size_t port_mem_total(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    size_t total = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : 0;
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "r"); /* "max" when unlimited */
    unsigned long long lim;
    if (f) {
        if (fscanf(f, "%llu", &lim) == 1 && lim > 0 && (!total || lim < total)) total = (size_t)lim;
        fclose(f);
    }
    return total;
}

void port_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

int port_thread_start(port_thread *t, void *(*fn)(void *), void *arg)
{
    pthread_attr_t at;
    size_t sz = 0;
    if (pthread_attr_init(&at)) return pthread_create(t, NULL, fn, arg);
    if (pthread_attr_getstacksize(&at, &sz) == 0 && sz < PORT_THREAD_STACK) pthread_attr_setstacksize(&at, PORT_THREAD_STACK);
    int rc = pthread_create(t, &at, fn, arg);
    pthread_attr_destroy(&at);
    return rc;
}

int port_stack_at_least(size_t bytes)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_STACK, &r)) return -1;
    if (r.rlim_cur == RLIM_INFINITY || r.rlim_cur >= bytes) return 0;
    rlim_t want = bytes;
    if (r.rlim_max != RLIM_INFINITY && r.rlim_max < want) want = r.rlim_max;
    if (want > r.rlim_cur) {
        r.rlim_cur = want;
        if (setrlimit(RLIMIT_STACK, &r)) return -1;
    }
    return want >= bytes ? 0 : -1;
}

void port_thread_join(port_thread t) { pthread_join(t, NULL); }

void port_mutex_init(port_mutex *m) { pthread_mutex_init(m, NULL); }

void port_cond_init(port_cond *c)
{
    pthread_condattr_t at;
    pthread_condattr_init(&at);
    pthread_condattr_setclock(&at, CLOCK_MONOTONIC);
    pthread_cond_init(c, &at);
    pthread_condattr_destroy(&at);
}

int port_cond_wait_until(port_cond *c, port_mutex *m, int64_t deadline_ns)
{
    struct timespec ts = {deadline_ns / 1000000000LL, deadline_ns % 1000000000LL};
    return pthread_cond_timedwait(c, m, &ts);
}

void *port_alloc_huge(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    size_t n = (bytes + huge - 1) & ~(huge - 1);
    if (n < bytes) return NULL;
    void *p = aligned_alloc(huge, n ? n : huge);
    if (!p) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, n, MADV_HUGEPAGE); /* advice: without THP it is a no-op */
#endif
    return p;
}

void *port_alloc_large(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    void *p = port_alloc_huge(bytes);
    if (p) memset(p, 0, (bytes + huge - 1) & ~(huge - 1));
    return p;
}

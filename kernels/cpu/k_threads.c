/* The kernel thread pool (the ISA switch and the other settings: k_settings.c).
 *
 * Pool: k_set_threads(n) starts n-1 workers once; k_parallel_for hands them a job
 * (fn, ctx, ntasks) and the caller works too. Tasks are claimed from an atomic counter,
 * so which thread runs which task varies, but kernels define tasks so that every
 * output element is computed by exactly one task in a fixed order: results do not
 * depend on the thread count. A call made while the pool is busy (another caller
 * thread, or a nested call from inside a task) simply runs inline. */
#include "kernels/k.h"
#include "kernels/cpu/k_int.h"
#include "ports/posix/port.h"
#include "rt/isa.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define K_MAX_THREADS 64

static struct {
    int n;                        /* threads including the caller */
    port_thread th[K_MAX_THREADS];
    port_mutex mu;                /* guards gen, quit, active */
    port_cond wake, done;
    uint64_t gen;                 /* bumped per job */
    int quit, active;
    k_task_fn fn;
    void *ctx;
    int ntasks;
    atomic_int next;
    atomic_flag busy;             /* one k_parallel_for at a time */
} pool = {.n = 1, .busy = ATOMIC_FLAG_INIT};
static int pool_inited;
static _Thread_local int in_task;

static void run_tasks(void)
{
    int t;
    in_task = 1;
    while ((t = atomic_fetch_add(&pool.next, 1)) < pool.ntasks) pool.fn(pool.ctx, t);
    in_task = 0;
}

static void *worker(void *arg)
{
    (void)arg;
    uint64_t seen = 0;
    port_mutex_lock(&pool.mu);
    for (;;) {
        while (pool.gen == seen && !pool.quit) port_cond_wait(&pool.wake, &pool.mu);
        if (pool.quit) break;
        seen = pool.gen;
        port_mutex_unlock(&pool.mu);
        run_tasks();
        port_mutex_lock(&pool.mu);
        if (--pool.active == 0) port_cond_signal(&pool.done);
    }
    port_mutex_unlock(&pool.mu);
    return NULL;
}

/* A forked child has none of the workers: it starts again with one thread (else its
 * first parallel kernel would wait for them forever). */
static void pool_after_fork(void)
{
    port_mutex_init(&pool.mu);
    port_cond_init(&pool.wake);
    port_cond_init(&pool.done);
    pool.n = 1;
    pool.quit = 0;
    pool.active = 0;
    atomic_flag_clear(&pool.busy);
}

void k_set_threads(int n)
{
    if (n < 1) n = 1;
    if (n > K_MAX_THREADS) n = K_MAX_THREADS;
    if (!pool_inited) {
        port_mutex_init(&pool.mu);
        port_cond_init(&pool.wake);
        port_cond_init(&pool.done);
        pthread_atfork(NULL, NULL, pool_after_fork);
        pool_inited = 1;
        /* the calling thread runs tasks too: its stack as the workers' (port.h) */
        if (port_stack_at_least(PORT_THREAD_STACK))
            fprintf(stderr, "ddprt: kernels: the stack limit is under 8 MiB and cannot be raised (ulimit -s): "
                            "large GEMMs may overflow it\n");
    }
    if (n == pool.n) return;
    while (atomic_flag_test_and_set(&pool.busy)) port_cpu_relax();
    /* Stop the old workers, then start the new set. */
    port_mutex_lock(&pool.mu);
    pool.quit = 1;
    port_cond_broadcast(&pool.wake);
    port_mutex_unlock(&pool.mu);
    for (int i = 1; i < pool.n; i++) port_thread_join(pool.th[i]);
    pool.quit = 0;
    pool.gen = 0;
    int started = 1;
    for (int i = 1; i < n; i++) {
        if (port_thread_start(&pool.th[i], worker, NULL) != 0) {
            fprintf(stderr, "ddprt: kernels: could not start thread %d of %d; using %d\n",
                    i + 1, n, started);
            break;
        }
        started++;
    }
    pool.n = started;
    atomic_flag_clear(&pool.busy);
}

int k_threads(void) { return pool.n; }

void k_parallel_for(int ntasks, k_task_fn fn, void *ctx)
{
    if (ntasks <= 0) return;
    if (pool.n <= 1 || ntasks == 1 || in_task || atomic_flag_test_and_set(&pool.busy)) {
        for (int t = 0; t < ntasks; t++) fn(ctx, t);
        return;
    }
    pool.fn = fn;
    pool.ctx = ctx;
    pool.ntasks = ntasks;
    atomic_store(&pool.next, 0);
    port_mutex_lock(&pool.mu);
    pool.active = pool.n - 1;
    pool.gen++;
    port_cond_broadcast(&pool.wake);
    port_mutex_unlock(&pool.mu);
    run_tasks();
    port_mutex_lock(&pool.mu);
    while (pool.active > 0) port_cond_wait(&pool.done, &pool.mu);
    port_mutex_unlock(&pool.mu);
    atomic_flag_clear(&pool.busy);
}

/* The platform layer (POSIX): time, threads, CPU count. The core calls these rather
 * than reaching for OS APIs directly (MicroPython ports/ style). */
#ifndef PORT_H
#define PORT_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

int64_t port_now_ns(void);              /* monotonic */
double port_now_s(void);
void port_sleep_ns(int64_t ns);
int port_ncpus(void);                   /* CPUs this process may run on */
void port_cpu_relax(void);              /* pause instruction for spin loops */
/* Memory this process may use, in bytes: the machine's RAM, or the cgroup's limit
 * (cgroup v2 memory.max: containers, Slurm's --mem) where that is lower; 0 if unknown. */
size_t port_mem_total(void);
/* Zeroed memory for large buffers read at random rows (the --invariant fold's
 * accumulators): 2 MiB aligned and, where the kernel allows, on transparent huge pages,
 * so a row's first touch is not a TLB miss. NULL if out of memory; free() frees it. */
void *port_alloc_large(size_t bytes);
/* The same without zeroing (pages are touched, and counted in RSS, as they are used):
 * the arenas. free() frees it. */
void *port_alloc_huge(size_t bytes);

typedef pthread_t port_thread;
typedef pthread_mutex_t port_mutex;
typedef pthread_cond_t port_cond;
/* Threads start with at least PORT_THREAD_STACK bytes of stack: a GEMM's packed panels take
 * up to 1.6 MiB of one frame (kernels/cpu/k_gemm.h, k_amx.c), and glibc's default is 2 MiB
 * under `ulimit -s unlimited` (reserved address space: pages are touched as used). */
#define PORT_THREAD_STACK ((size_t)8 << 20)
int port_thread_start(port_thread *t, void *(*fn)(void *), void *arg);
/* Raises this process's soft stack limit (the main thread's stack, which runs kernels too)
 * to at least `bytes` where the hard limit allows: 0 when it is now at least that (or
 * unlimited), -1 when not. */
int port_stack_at_least(size_t bytes);
void port_thread_join(port_thread t);
void port_mutex_init(port_mutex *m);
void port_cond_init(port_cond *c);      /* uses CLOCK_MONOTONIC */
/* Waits until signalled or the monotonic deadline (ns) passes; returns 0 or ETIMEDOUT. */
int port_cond_wait_until(port_cond *c, port_mutex *m, int64_t deadline_ns);
#define port_mutex_lock pthread_mutex_lock
#define port_mutex_unlock pthread_mutex_unlock
#define port_cond_signal pthread_cond_signal
#define port_cond_broadcast pthread_cond_broadcast
#define port_cond_wait pthread_cond_wait
#endif

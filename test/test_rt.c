#include "test/t.h"
#include "rt/arena.h"
#include "rt/tensor.h"
#include "ports/posix/port.h"
#include <pthread.h>
#include <sys/resource.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TEST(arena_aligns_and_tracks_high_water)
{
    rt_arena a;
    CHECK(rt_arena_init(&a, "test", 4096) == 0);
    void *p = rt_arena_alloc(&a, 3, RT_MEM_PARAMS, "p");
    void *q = rt_arena_alloc(&a, 100, RT_MEM_GRADS, "q");
    CHECK(((uintptr_t)p % RT_ALIGN) == 0 && ((uintptr_t)q % RT_ALIGN) == 0);
    CHECK((char *)q - (char *)p == RT_ALIGN);
    size_t m = rt_arena_mark(&a);
    rt_arena_alloc(&a, 1000, RT_MEM_ACTS, "r");
    rt_arena_reset(&a, m);
    CHECK_EQ(a.used, m);
    CHECK(a.high >= m + 1000);
    CHECK(rt_arena_try_alloc(&a, 1 << 20, RT_MEM_ACTS, "too big") == NULL);
    rt_arena_free(&a);
}

/* Arenas of 8 MiB and more start on a 2 MiB boundary (transparent huge pages where the
 * kernel gives them: fewer TLB misses over ResNet's and GPT's activations); the whole
 * size is usable, from its first byte to its last. */
TEST(arena_large_is_huge_page_aligned)
{
    rt_arena a;
    size_t n = (size_t)9 << 20;
    CHECK(rt_arena_init(&a, "large", n) == 0);
    CHECK(((uintptr_t)a.base & (((size_t)2 << 20) - 1)) == 0);
    CHECK(a.size >= n);
    char *p = rt_arena_alloc(&a, n, RT_MEM_ACTS, "all of it");
    CHECK((void *)p == (void *)a.base);
    p[0] = 1, p[n - 1] = 2;
    CHECK(p[0] + p[n - 1] == 3);
    rt_arena_free(&a);
}

TEST(arena_plan_matches_real)
{
    rt_arena plan, real;
    rt_arena_plan(&plan, "plan");
    rt_tensor t = rt_tensor_new(&plan, RT_MEM_ACTS, "x", RT_F32, 4, 64, 10, 24, 24);
    CHECK(t.data == NULL);
    rt_tensor_new(&plan, RT_MEM_PARAMS, "w", RT_F32, 2, 50, 320, 0, 0);
    CHECK(rt_arena_init(&real, "real", plan.high) == 0);
    rt_tensor u = rt_tensor_new(&real, RT_MEM_ACTS, "x", RT_F32, 4, 64, 10, 24, 24);
    rt_tensor_new(&real, RT_MEM_PARAMS, "w", RT_F32, 2, 50, 320, 0, 0);
    CHECK(u.data != NULL);
    CHECK_EQ(real.used, plan.used);
    CHECK_EQ(rt_tensor_numel(&u), 64 * 10 * 24 * 24);
    rt_arena_free(&real);
}

TEST(arena_overflow_names_request)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        rt_arena a;
        rt_arena_init(&a, "host", 1024);
        rt_arena_alloc(&a, 512, RT_MEM_ACTS, "conv1.out");
        rt_arena_alloc(&a, 4096, RT_MEM_ACTS, "conv2.out");
        _exit(0);
    }
    close(fds[1]);
    char buf[512] = {0};
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    int st;
    waitpid(pid, &st, 0);
    CHECK(n > 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    CHECKF(strstr(buf, "conv2.out") && strstr(buf, "4096") && strstr(buf, "512 of 1024"), "got: %s", buf);
}

/* port threads get PORT_THREAD_STACK even where the default is smaller (`ulimit -s
 * unlimited` gives glibc's 2 MiB), and port_stack_at_least raises a lower soft limit:
 * in a child, with the default thread stack and the soft limit set to 1 MiB. */
static void *stack_probe(void *arg)
{
    pthread_attr_t a;
    size_t *sz = arg;
    if (pthread_getattr_np(pthread_self(), &a) == 0) {
        pthread_attr_getstacksize(&a, sz);
        pthread_attr_destroy(&a);
    }
    return NULL;
}

TEST(port_threads_and_the_main_stack_get_8_mib)
{
    pid_t pid = fork();
    if (pid == 0) {
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, (size_t)1 << 20);
        pthread_setattr_default_np(&a);
        struct rlimit r;
        getrlimit(RLIMIT_STACK, &r);
        int lowered = r.rlim_max == RLIM_INFINITY || r.rlim_max >= PORT_THREAD_STACK;
        if (lowered) {
            r.rlim_cur = (rlim_t)1 << 20;
            setrlimit(RLIMIT_STACK, &r);
        }
        size_t got = 0;
        port_thread t;
        if (port_thread_start(&t, stack_probe, &got)) _exit(2);
        port_thread_join(t);
        if (got < PORT_THREAD_STACK) _exit(3);
        if (lowered && port_stack_at_least(PORT_THREAD_STACK)) _exit(4);
        getrlimit(RLIMIT_STACK, &r);
        _exit(lowered && r.rlim_cur != RLIM_INFINITY && r.rlim_cur < PORT_THREAD_STACK ? 5 : 0);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
}

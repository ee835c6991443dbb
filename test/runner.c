/* Test runner: forks each registered test, enforces a per-test deadline, prints one
 * line per failure (file:line) and ends with "N passed, N failed". */
#include "test/t.h"
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define T_MAX 1024
static struct { const char *name, *file; t_fn fn; } tests[T_MAX];
static int ntests, nfail_checks;
static const char *cur_name = "?";

void t_register(const char *name, t_fn fn, const char *file)
{
    if (ntests == T_MAX) { fprintf(stderr, "too many tests\n"); exit(2); }
    tests[ntests].name = name; tests[ntests].fn = fn; tests[ntests].file = file;
    ntests++;
}

void t_fail(const char *file, int line, const char *fmt, ...)
{
    /* Cap the output: a broken loop over a million elements should not flood. */
    if (++nfail_checks > 20) return;
    va_list ap;
    fprintf(stdout, "FAIL %s: %s:%d: ", cur_name, file, line);
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

const char *t_prog(const char *name)
{
    static char buf[8][512];
    static int k;
    const char *b = getenv("DDPRT_BUILD");
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", b ? b : "build", name);
    return p;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_test(const void *a, const void *b)
{
    const char *fa = *(const char *const *)a, *fb = *(const char *const *)b;
    return strcmp(fa, fb);
}

int main(int argc, char **argv)
{
    int passed = 0, failed = 0, verbose = getenv("T_VERBOSE") != NULL;
    int timeout = getenv("DDPRT_TEST_TIMEOUT") ? atoi(getenv("DDPRT_TEST_TIMEOUT")) : 300;
    (void)cmp_test;
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* Flight-recorder files of the jobs that tests fail on purpose go to a scratch
     * directory, not into the source tree. */
    char tdir[] = "/tmp/ddprt-test-trace-XXXXXX";
    int own_tdir = !getenv("DDPRT_TRACE_DIR") && mkdtemp(tdir);
    if (own_tdir) setenv("DDPRT_TRACE_DIR", tdir, 1);
    for (int i = 0; i < ntests; i++) {
        /* Optional filters: run tests whose name or file contains any argument. */
        int want = argc < 2;
        for (int a = 1; a < argc && !want; a++)
            want = strstr(tests[i].name, argv[a]) || strstr(tests[i].file, argv[a]);
        if (!want) continue;
        double t0 = now_s();
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            cur_name = tests[i].name;
            setpgid(0, 0); /* so a hung test's children die with it */
            alarm(timeout);
            tests[i].fn();
            fflush(NULL);
            _exit(nfail_checks ? 1 : 0);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        kill(-pid, SIGKILL); /* reap leftovers of multi-process tests */
        double dt = now_s() - t0;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
            passed++;
            if (verbose) printf("ok   %s (%.2fs)\n", tests[i].name, dt);
        } else {
            failed++;
            if (WIFSIGNALED(st))
                printf("FAIL %s: %s: killed by signal %d%s (%.2fs)\n", tests[i].name, tests[i].file,
                       WTERMSIG(st), WTERMSIG(st) == SIGALRM ? " (test deadline)" : "", dt);
            else
                printf("FAIL %s: %s: exit %d (%.2fs)\n", tests[i].name, tests[i].file, WEXITSTATUS(st), dt);
        }
    }
    if (own_tdir) {
        char cmd[96];
        snprintf(cmd, sizeof cmd, "rm -rf %s", tdir);
        if (system(cmd)) printf("runner: could not remove %s\n", tdir);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

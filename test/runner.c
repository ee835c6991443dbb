/* Test runner: forks each registered test, enforces a per-test deadline, prints one
 * line per failure (file:line) and ends with "N passed, N failed". What a test writes
 * (its details, the output of in-process library errors it provokes on purpose) is
 * captured and shown only when it fails, or with T_VERBOSE=1; t_note() lines show always,
 * each distinct note once (a skip that many tests report is one line). Progress: one line
 * (tests done / total, elapsed) rewritten in place on a terminal, else every ~10 s. */
#include "test/t.h"
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <errno.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#define T_MAX 1024
#define JOBS_MAX 16
/* A test running (T_JOBS). */
struct running {
    pid_t pid;
    int i, cap;
    double t0;
};
static struct { const char *name, *file; t_fn fn; } tests[T_MAX];
static int ntests, nfail_checks, note_fd = 1;
static const char *cur_name = "?";

void t_note(const char *fmt, ...)
{
    char line[1024];
    int n = snprintf(line, sizeof line, "note %s: ", cur_name);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && n < (int)sizeof line) n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    if (write(note_fd, line, (size_t)n) < 0) {}
}

/* A file for one test's stdout and stderr, already unlinked. */
static int capture_file(void)
{
    const char *t = getenv("TMPDIR");
    char path[512];
    snprintf(path, sizeof path, "%s/ddprt-test-out-XXXXXX", t && *t ? t : "/tmp");
    int fd = mkstemp(path);
    if (fd >= 0) unlink(path);
    return fd;
}

/* Copies what the test wrote to our stdout (the last 64 KiB at most). */
static void replay(int fd)
{
    char buf[8192];
    off_t end = lseek(fd, 0, SEEK_END), from = end > 65536 ? end - 65536 : 0;
    if (from) printf("  ... (%lld bytes of output before this cut)\n", (long long)from);
    fflush(stdout);
    lseek(fd, from, SEEK_SET);
    for (ssize_t r; (r = read(fd, buf, sizeof buf)) > 0;)
        if (write(1, buf, (size_t)r) < 0) break;
}

void t_register(const char *name, t_fn fn, const char *file)
{
    if (ntests == T_MAX) { fprintf(stderr, "too many tests\n"); exit(2); }
    tests[ntests].name = name; tests[ntests].fn = fn; tests[ntests].file = file;
    ntests++;
}

int t_registered(const char *name)
{
    for (int i = 0; i < ntests; i++)
        if (!strcmp(tests[i].name, name)) return 1;
    return 0;
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

int t_san(const char *which)
{
    const char *s = getenv("DDPRT_SAN");
    return s && *s && strstr(s, which);
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

/* ---- progress line and notes (parent side) */
static int tty;
static double t_start, last_progress;

static void progress(int done, int total, int failed, int force)
{
    double t = now_s();
    if (!tty && !force && t - last_progress < 10) return;
    last_progress = t;
    if (tty)
        printf("\r\033[K[%d/%d tests, %d failed, %.0f s]", done, total, failed, t - t_start);
    else
        printf("progress: %d/%d tests, %d failed, %.0f s\n", done, total, failed, t - t_start);
    fflush(stdout);
}

/* Before printing a line of its own, the parent takes the in-place progress line away. */
static void clear_progress(void)
{
    if (tty) printf("\r\033[K");
}

/* Notes the children appended to the notes file since the last look: each distinct text
 * (the part after "note TEST: ") once, with the first test that said it. */
#define NOTES_MAX 64
static char *seen[NOTES_MAX];
static int nseen;
static void show_notes(FILE *notes)
{
    char line[1100];
    while (fgets(line, sizeof line, notes)) {
        const char *body = strstr(line, ": ");
        body = body ? body + 2 : line;
        int dup = 0;
        for (int i = 0; i < nseen && !dup; i++) dup = !strcmp(seen[i], body);
        if (dup) continue;
        if (nseen < NOTES_MAX) seen[nseen++] = strdup(body);
        clear_progress();
        fputs(line, stdout);
    }
    clearerr(notes);
}

int main(int argc, char **argv)
{
    int passed = 0, failed = 0, verbose = getenv("T_VERBOSE") != NULL;
    /* Sanitizer builds run 5-15x slower: a 2-rank resnet20 test took 153 s alone under
     * TSan and over 300 s beside the other tests on a loaded 2-core machine. */
    const char *san = getenv("DDPRT_SAN");
    int timeout = getenv("DDPRT_TEST_TIMEOUT") ? atoi(getenv("DDPRT_TEST_TIMEOUT"))
                  : san && strstr(san, "thread")  ? 900
                  : san && strstr(san, "address") ? 600
                                                  : 300;
    (void)cmp_test;
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* Flight-recorder files of the jobs that tests fail on purpose go to a scratch
     * directory, not into the source tree. */
    char tdir[] = "/tmp/ddprt-test-trace-XXXXXX";
    int own_tdir = !getenv("DDPRT_TRACE_DIR") && mkdtemp(tdir);
    if (own_tdir) setenv("DDPRT_TRACE_DIR", tdir, 1);
    /* Optional filters: run tests whose name or file contains any argument. */
    static char want[T_MAX];
    int total = 0;
    for (int i = 0; i < ntests; i++) {
        want[i] = argc < 2;
        for (int a = 1; a < argc && !want[i]; a++)
            want[i] = strstr(tests[i].name, argv[a]) || strstr(tests[i].file, argv[a]);
        total += want[i];
    }
    /* T_LIST: the tests the filters pick, "name file" a line, none run (test_simt.c checks
     * that every device test is in one of make test's suites). */
    if (getenv("T_LIST")) {
        for (int i = 0; i < ntests; i++)
            if (want[i]) printf("%s %s\n", tests[i].name, tests[i].file);
        return 0;
    }
    /* Children append their notes to one file; the parent shows each text once. */
    char npath[] = "/tmp/ddprt-test-notes-XXXXXX";
    int nfd = mkstemp(npath);
    FILE *notes = NULL;
    if (nfd >= 0) {
        /* Own open file descriptions: the writers append, the reader keeps its offset. */
        notes = fopen(npath, "r");
        note_fd = open(npath, O_WRONLY | O_APPEND);
        unlink(npath);
        close(nfd);
        if (!notes || note_fd < 0) {
            if (notes) fclose(notes);
            notes = NULL;
            note_fd = 1;
        }
    }
    tty = isatty(1) && !verbose;
    t_start = last_progress = now_s();
    /* T_JOBS=N: up to N tests at once (the device suites of pure kernel tests, on the
     * executor: one core each, test_simt.c); results in the order they end. */
    int jobs = getenv("T_JOBS") ? atoi(getenv("T_JOBS")) : 1;
    if (jobs < 1) jobs = 1;
    if (jobs > JOBS_MAX) jobs = JOBS_MAX;
    struct running run[JOBS_MAX];
    int nrun = 0;
    for (int i = 0; i < ntests || nrun > 0;) {
        if (i < ntests && !want[i]) {
            i++;
            continue;
        }
        if (i < ntests && nrun < jobs) {
            progress(passed + failed, total, failed, 0);
            fflush(NULL);
            struct running *r = &run[nrun++];
            r->i = i, r->t0 = now_s(), r->cap = capture_file();
            r->pid = fork();
            if (r->pid == 0) {
                cur_name = tests[i].name;
                setpgid(0, 0); /* so a hung test's children die with it */
                if (r->cap >= 0) {
                    if (!notes) note_fd = dup(1);
                    dup2(r->cap, 1);
                    dup2(r->cap, 2);
                    close(r->cap);
                }
                alarm(timeout);
                tests[i].fn();
                fflush(NULL);
                _exit(nfail_checks ? 1 : 0);
            }
            i++;
            continue;
        }
        int st = 0;
        pid_t pid = waitpid(-1, &st, 0);
        int k = 0;
        while (k < nrun && run[k].pid != pid) k++;
        if (pid < 0 || k == nrun) {
            if (pid < 0 && errno != EINTR) break; /* no child left: cannot happen while nrun > 0 */
            continue;
        }
        struct running r = run[k];
        run[k] = run[--nrun];
        kill(-pid, SIGKILL); /* reap leftovers of multi-process tests */
        double dt = now_s() - r.t0;
        int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (notes) show_notes(notes);
        if (!ok || verbose) clear_progress();
        if (r.cap >= 0 && (!ok || verbose)) replay(r.cap);
        if (r.cap >= 0) close(r.cap);
        if (ok) {
            passed++;
            if (verbose) printf("ok   %s (%.2fs)\n", tests[r.i].name, dt);
        } else {
            failed++;
            if (WIFSIGNALED(st))
                printf("FAIL %s: %s: killed by signal %d%s (%.2fs)\n", tests[r.i].name, tests[r.i].file,
                       WTERMSIG(st), WTERMSIG(st) == SIGALRM ? " (test deadline)" : "", dt);
            else
                printf("FAIL %s: %s: exit %d (%.2fs)\n", tests[r.i].name, tests[r.i].file, WEXITSTATUS(st), dt);
        }
    }
    clear_progress();
    if (own_tdir) {
        char cmd[96];
        snprintf(cmd, sizeof cmd, "rm -rf %s", tdir);
        if (system(cmd)) printf("runner: could not remove %s\n", tdir);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

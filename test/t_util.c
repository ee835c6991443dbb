#include "test/t_util.h"
#include "test/t.h"
#include "test/t_data.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

float t_uniform(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    *s = x;
    return (float)((x >> 40) * 0x1p-24 * 2.0 - 1.0);
}

float *t_uniform_buf(uint64_t *s, size_t n)
{
    float *p = malloc(n * sizeof *p + 64);
    for (size_t i = 0; i < n; i++) p[i] = t_uniform(s);
    return p;
}

void t_check_close(const char *file, int line, const char *what, const float *got, const double *ref, size_t n,
                   double tol)
{
    double mref = 1.0, merr = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) if (fabs(ref[i]) > mref) mref = fabs(ref[i]);
    for (size_t i = 0; i < n; i++) {
        double e = fabs(got[i] - ref[i]);
        if (!(e <= merr)) { merr = e; at = i; }
    }
    if (!(merr / mref <= tol))
        t_fail(file, line, "%s: element %zu got %.7g want %.7g (rel err %.3g > %.1g)", what, at, n ? got[at] : 0.0,
               n ? ref[at] : 0.0, merr / mref, tol);
}

int t_sh(const char *cmd, char *out, size_t len)
{
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t n = fread(out, 1, len - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int t_train_synthetic(const char *tag, int gz, int epochs, const char *args, char *out, size_t len, const char **dir)
{
    *dir = t_tmpdir(tag);
    t_write_synthetic_dataset(*dir, 1200, 300, gz);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s --data %s --epochs %d --batch-size 32 --lr 0.05 --threads 1 %s 2>&1",
             t_prog("ddprt-train"), *dir, epochs, args);
    return t_sh(cmd, out, len);
}

void t_check_accuracy(const char *out, int total, int min_correct, const char *what)
{
    const char *last = NULL;
    for (const char *p = out; (p = strstr(p, "Test set: Average loss: ")); p++) last = p;
    CHECKF(last != NULL, "%s: no test line in %s", what, out);
    if (!last) return;
    double loss;
    int correct, n;
    CHECK(sscanf(last, "Test set: Average loss: %lf, Accuracy: %d/%d", &loss, &correct, &n) == 3);
    CHECK_EQ(n, total);
    CHECKF(correct >= min_correct, "only %d/%d correct %s", correct, n, what);
}

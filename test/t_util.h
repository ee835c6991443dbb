/* Small helpers shared by test files: a seeded xorshift, the tolerance check of a
 * kernel's output against a double-precision reference, a shell command's output. */
#ifndef T_UTIL_H
#define T_UTIL_H
#include <stddef.h>
#include <stdint.h>

/* Next value of the xorshift state *s, uniform in [-1, 1). */
float t_uniform(uint64_t *s);
/* n values of t_uniform(s), with 64 bytes of slack past the end (vector tails). */
float *t_uniform_buf(uint64_t *s, size_t n);
/* max |got - ref| / max(1, max |ref|) <= tol, else a failure at the caller's line that
 * names the worst element. */
#define CHECK_CLOSE(what, got, ref, n, tol) t_check_close(__FILE__, __LINE__, what, got, ref, n, tol)
void t_check_close(const char *file, int line, const char *what, const float *got, const double *ref, size_t n,
                   double tol);
/* Runs cmd with /bin/sh, its stdout into out (NUL-terminated, cut at len - 1 bytes):
 * the exit status, 128 + the signal that ended it, or -1 when it could not start. */
int t_sh(const char *cmd, char *out, size_t len);
/* ddprt-train on a fresh synthetic data set (1200 training images, 300 test; gzip when
 * gz) in t_tmpdir(tag), `--epochs E --batch-size 32 --lr 0.05 --threads 1` and args: its
 * exit status (t_sh), its output with stderr in out; the data folder in *dir. */
int t_train_synthetic(const char *tag, int gz, int epochs, const char *args, char *out, size_t len, const char **dir);
/* The last "Test set: Average loss: L, Accuracy: C/T" line of out is there, with T ==
 * total and C >= min_correct; a failure names `what`. */
void t_check_accuracy(const char *out, int total, int min_correct, const char *what);
#endif

/* Minimal test framework: TEST(name) registers itself; the runner (test/runner.c)
 * forks one child per test so a crash or hang in one test cannot hide the others. */
#ifndef T_H
#define T_H
#include <math.h>
#include <stddef.h>

typedef void (*t_fn)(void);
void t_register(const char *name, t_fn fn, const char *file);
/* Whether a test of that name is registered (every op needs a test named op_KIND). */
int t_registered(const char *name);
void t_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* One line shown even when the test passes (a skip and its reason); other output of a
 * test is shown only when it fails. */
void t_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Path of a built program ("ddprt-train", "t-rank"), under $DDPRT_BUILD. */
const char *t_prog(const char *name);
/* Whether the build runs under that sanitizer ("thread", "address"; "" any): make asan /
 * tsan / ubsan set $DDPRT_SAN to their -fsanitize flags. */
int t_san(const char *which);

#define TEST(name)                                                          \
    static void name(void);                                                 \
    __attribute__((constructor)) static void name##_reg(void)               \
    { t_register(#name, name, __FILE__); }                                  \
    static void name(void)

#define CHECK(c) do { if (!(c)) t_fail(__FILE__, __LINE__, "%s", #c); } while (0)
#define CHECKF(c, ...) do { if (!(c)) t_fail(__FILE__, __LINE__, __VA_ARGS__); } while (0)
#define CHECK_EQ(a, b) do { long long a_ = (long long)(a), b_ = (long long)(b);      \
    if (a_ != b_) t_fail(__FILE__, __LINE__, "%s == %s (%lld vs %lld)", #a, #b, a_, b_); } while (0)
/* Relative-or-absolute tolerance: |a-b| <= tol * max(1, |a|, |b|). */
#define CHECK_NEAR(a, b, tol) do { double a_ = (a), b_ = (b), m_ = fabs(a_) > fabs(b_) ? fabs(a_) : fabs(b_); \
    if (!(fabs(a_ - b_) <= (tol) * (m_ > 1 ? m_ : 1))) \
        t_fail(__FILE__, __LINE__, "%s ~ %s (%.9g vs %.9g, tol %g)", #a, #b, a_, b_, (double)(tol)); } while (0)
#endif

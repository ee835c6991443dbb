/* Every kernel test on every SIMD path this CPU has: the default run exercises the
 * best path only, so the kernel tests (test_kernels*.c, test_conv_maxt.c,
 * test_optim.c) run again in a child runner under DDPRT_ISA=generic, avx2 and (on an
 * AVX512-BF16 CPU) avx512. A path the CPU lacks is skipped with a note. */
#include "test/t.h"
#include "test/t_proc.h"
#include "kernels/k.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TEST(isa_paths_run_every_kernel_test)
{
    const char *b = getenv("DDPRT_BUILD");
    char runner[512];
    snprintf(runner, sizeof runner, "%s/test-runner", b ? b : "build");
    const char *best = k_isa(), *isas[] = {"generic", "avx2", "avx512"};
    static const char *const pats[] = {"test_kernels", "test_conv_maxt", "test_optim"};
    for (int i = 0; i < 3; i++) {
        if (!strcmp(isas[i], best)) break; /* the default run covers the best path */
        if (k_set_isa(isas[i]) != 0) {
            t_note("%s not supported here: skipped", isas[i]);
            continue;
        }
        for (int p = 0; p < 3; p++) {
            char env[64], name[64];
            snprintf(env, sizeof env, "DDPRT_ISA=%s", isas[i]);
            snprintf(name, sizeof name, "isa-%s-%d", isas[i], p);
            char *const argv[] = {runner, (char *)pats[p], NULL}, *const envv[] = {env, NULL};
            t_proc pr;
            t_spawn(&pr, name, argv, envv);
            int rc = t_wait(&pr, 600);
            const char *out = t_slurp(pr.out);
            CHECKF(rc == 0 && strstr(out, " 0 failed"), "DDPRT_ISA=%s %s: exit %d: %s%s", isas[i], pats[p], rc, out,
                   t_slurp(pr.err));
        }
    }
    k_set_isa(NULL);
}

/* --amp bf16 where the CPU path has no bf16 dot product: one warning line naming the
 * path, training still runs; with AVX512-BF16, none, unless its vdpbf16ps is too slow for
 * the convs (one line saying so). */
static const char *train_bf16(const char *isa, int *rc)
{
    char env[64];
    snprintf(env, sizeof env, "DDPRT_ISA=%s", isa ? isa : "");
    const char *argv[] = {t_prog("ddprt-train"), "--data", "synthetic", "--model", "lenet", "--amp", "bf16",
                          "--max-steps", "1", "--epochs", "1", "--no-eval", "--threads", "1", NULL};
    char *const envv[] = {env, NULL};
    t_proc p;
    t_spawn(&p, isa ? isa : "best", (char *const *)argv, isa ? envv : NULL);
    *rc = t_wait(&p, 120);
    return t_slurp(p.err);
}

TEST(isa_paths_bf16_without_avx512bf16_warns_once)
{
    int rc;
    if (k_set_isa("avx2") == 0) {
        const char *err = train_bf16("avx2", &rc);
        CHECKF(rc == 0, "exit %d: %s", rc, err);
        const char *w = strstr(err, "--amp bf16: this CPU path (avx2 kernels)");
        CHECKF(w != NULL, "no warning in: %s", err);
        CHECKF(w && !strstr(w + 1, "--amp bf16:"), "warned more than once: %s", err);
    } else t_note("avx2 not supported here: skipped");
    k_set_isa(NULL);
    if (!strcmp(k_isa(), "avx512bf16")) { /* the default path: no DDPRT_ISA */
        const char *err = train_bf16(NULL, &rc);
        /* LeNet's convs: where vdpbf16ps is slow (Intel) one line says they run fp32 kernels */
        const char *w = strstr(err, "--amp bf16: this CPU's vdpbf16ps runs at half its FMA rate");
        CHECKF(rc == 0 && (k_bf16_conv_dot() ? !strstr(err, "--amp bf16:") : w && !strstr(w + 1, "--amp bf16:")),
               "exit %d (conv dot %d): %s", rc, k_bf16_conv_dot(), err);
    }
    k_set_isa(NULL);
}

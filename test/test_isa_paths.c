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

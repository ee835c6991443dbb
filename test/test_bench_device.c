/* ddprt-bench allreduce --device cuda (apps/bench/bench_device.c) on the SIMT executor
 * (build/t-bench-simt), 2 processes: the table's shape, not its timings (a loaded
 * 2-core machine says nothing about a GPU's): one row per size 1K..64K (x4), both paths
 * and the device copy present, every time and bandwidth positive (tiny figures print in
 * exponent form, never as 0.000), no wrong element. */
#include "test/t.h"
#include "test/t_util.h"
#include <stdio.h>
#include <string.h>

#if DDPRT_HAVE_SIMT
TEST(bench_device_cuda_table_on_the_executor)
{
    static char out[1 << 16];
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s --nproc-per-node 2 -- %s allreduce --device cuda -b 1K -e 64K -f 4 -n 2 -w 1 2>&1",
             t_prog("ddprt-launch"), t_prog("t-bench-simt"));
    CHECKF(t_sh(cmd, out, sizeof out) == 0, "%s", out);
    CHECKF(strstr(out, "ipc: the registered staging's path (cuda_ipc)") && strstr(out, "ipc-time") &&
               strstr(out, "stg-time") && strstr(out, "d2d-time") && strstr(out, "# Avg bus bandwidth    : ipc "),
           "%s", out);
    size_t want = 1024;
    int rows = 0;
    for (const char *p = out; (p = strstr(p, "[rank 0] ")); p++) {
        size_t size, count;
        int iters;
        double t[2], alg[2], bus[2], cp, cpbw, ratio, pct;
        long long wrong[2];
        if (sscanf(p + 9, " %zu %zu %d | %lf %lf %lf %lld | %lf %lf %lf %lld | %lf %lf | %lf %lf", &size, &count, &iters,
                   &t[0], &alg[0], &bus[0], &wrong[0], &t[1], &alg[1], &bus[1], &wrong[1], &cp, &cpbw, &ratio,
                   &pct) != 15)
            continue;
        CHECKF(size == want && count == size / 4 && iters >= 1, "row %d: size %zu count %zu iters %d\n%s", rows, size,
               count, iters, out);
        for (int k = 0; k < 2; k++)
            CHECKF(t[k] > 0 && alg[k] > 0 && bus[k] > 0 && wrong[k] == 0, "row %d, path %d: %g us %g %g GB/s, %lld wrong",
                   rows, k, t[k], alg[k], bus[k], wrong[k]);
        CHECKF(cp > 0 && cpbw > 0 && ratio > 0 && pct > 0, "row %d: copy %g us %g GB/s\n%s", rows, cp, cpbw, out);
        want *= 4, rows++;
    }
    CHECKF(rows == 4, "%d rows (1K, 4K, 16K, 64K wanted)\n%s", rows, out);
}
#endif

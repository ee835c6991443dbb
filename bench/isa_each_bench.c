/* The kernels that rt/isa_each.h instantiates per ISA level (Adam, max over time, the
 * reductions) against the same kernels built from another revision (their symbols
 * renamed old_*: bench/isa_each.sh builds them), on every level this CPU has. Thread
 * CPU time, the minimum of alternating runs: the least disturbed on a shared machine. */
#include "kernels/k.h"
#include "kernels/k_optim.h"
#include "transport/tp_reduce.h"
#include "ports/posix/port.h"
#include "rt/isa.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static int64_t cpu_ns(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
void old_k_adam_step(size_t n, const k_adam_cfg *cfg, float *p, const float *g, float *m, float *v);
void old_k_max_time_fwd(int n, int c, int len, const float *x, float *y, int32_t *idx);
void old_tp_reduce_isa(int isa, void *dst, const void *a, const void *b, size_t n, rt_dtype dt, tp_op op);
int old_tp_isa_best(void);
static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
#define R 31
int main(void)
{
    size_t N = 1 << 20;
    float *p = malloc(N * 4), *g = malloc(N * 4), *m = calloc(N, 4), *v = calloc(N, 4), *x = malloc(N * 4), *y = malloc(N * 4);
    int32_t *idx = malloc(N * 4);
    for (size_t i = 0; i < N; i++) p[i] = g[i] = x[i] = (float)(rand() % 1000) * 1e-3f;
    k_adam_cfg c = {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .step_size = 1e-3f, .bc2_sqrt = 0.03f, .decay_mul = 1};
    printf("# min of %d alternating runs, thread CPU time, us; 1 thread\n", R);
    printf("%-34s %10s %10s\n", "kernel / level", "before", "after");
    for (int lvl = 0; lvl <= RT_ISA_AVX512 && lvl <= rt_isa_best(); lvl++) {
        k_set_isa(rt_isa_name(lvl));
        double t[2][R];
        for (int r = 0; r < R; r++)
            for (int w = 0; w < 2; w++) {
                int64_t t0 = cpu_ns();
                if (w) k_adam_step(N, &c, p, g, m, v); else old_k_adam_step(N, &c, p, g, m, v);
                t[w][r] = (cpu_ns() - t0) * 1e-3;
            }
        qsort(t[0], R, 8, cmpd), qsort(t[1], R, 8, cmpd);
        printf("adam 1M floats / %-17s %10.1f %10.1f\n", rt_isa_name(lvl), t[0][0], t[1][0]);
        for (int r = 0; r < R; r++)
            for (int w = 0; w < 2; w++) {
                int64_t t0 = cpu_ns();
                if (w) k_max_time_fwd(64, 256, 64, x, y, idx); else old_k_max_time_fwd(64, 256, 64, x, y, idx);
                t[w][r] = (cpu_ns() - t0) * 1e-3;
            }
        qsort(t[0], R, 8, cmpd), qsort(t[1], R, 8, cmpd);
        printf("max_time 64x256x64 / %-13s %10.1f %10.1f\n", rt_isa_name(lvl), t[0][0], t[1][0]);
        static const rt_dtype dts[] = {RT_F32, RT_BF16, RT_F16};
        static const char *dn[] = {"f32", "bf16", "f16"};
        for (int d = 0; d < 3; d++) {
            for (int r = 0; r < R; r++)
                for (int w = 0; w < 2; w++) {
                    int64_t t0 = cpu_ns();
                    if (w) tp_reduce_isa(lvl, y, x, p, N / 2, dts[d], TP_SUM); else old_tp_reduce_isa(lvl, y, x, p, N / 2, dts[d], TP_SUM);
                    t[w][r] = (cpu_ns() - t0) * 1e-3;
                }
            qsort(t[0], R, 8, cmpd), qsort(t[1], R, 8, cmpd);
            printf("reduce sum 512K %-4s / %-12s %10.1f %10.1f\n", dn[d], rt_isa_name(lvl), t[0][0], t[1][0]);
        }
    }
    return 0;
}

/* BatchNorm2d pieces (PyTorch semantics: biased variance normalises; the caller keeps
 * the running statistics). Every per-channel sum is taken in double, plane by plane in
 * batch order, by one task that owns the channel: the result does not depend on the
 * thread count. Forward and dx fold the per-channel factors so each element costs one
 * or two FMAs; all four kernels are one pass over their inputs (memory-bound). */
#include "kernels/k.h"
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"
#include <math.h>

/* s[0] += sum(u), s[1] += sum(u*v) with u = a - ash, v = b - bsh; the differences in
 * float (exact for the stats' own shift when values are close), products and sums in
 * double. a == b gives the sum of squares. */
static void uv_sums_scalar(size_t n, const float *a, float ash, const float *b, float bsh, double *s)
{
    double su = 0, suv = 0;
    for (size_t i = 0; i < n; i++) {
        double u = a[i] - ash, v = b[i] - bsh;
        su += u;
        suv += u * v;
    }
    s[0] += su;
    s[1] += suv;
}

/* uv_sums(d, 0, x, mean) of d = ReLU's backward of dy: dy where the BN output
 * (x - mean)*ra + rb (k_affine_span's: an FMA when `fused`, else a product then a sum)
 * is > 0, else 0, without storing d. */
static void relu_sums_scalar(size_t n, const float *dy, const float *x, float mean, float ra, float rb, int fused,
                              double *s)
{
    double su = 0, suv = 0;
    for (size_t i = 0; i < n; i++) {
        float v = x[i] - mean, t = fused ? fmaf(v, ra, rb) : v * ra + rb, d = t > 0.0f ? dy[i] : 0.0f;
        double u = d - 0.0f;
        su += u;
        suv += u * (double)v;
    }
    s[0] += su;
    s[1] += suv;
}

/* Prefetch distance (floats): one plane in order is a single read stream, which the
 * hardware prefetcher alone ran at ~60 % of the copy bandwidth (resnet18's 100 MB BN
 * statistics, both x86 paths); 1.5 KB ahead measured best of 512 B..8 KB (noisy: 1-2 KB
 * within 5 %). It runs into the next plane (the next in memory) and is harmless past
 * the end. */
#define BN_PF 384
/* uv_sums, relu_sums (uv_sums(d, 0, x, mean) of relu_sums_scalar's d) and stats2 (the
 * statistics of two planes: the same sums as two uv_sums calls), per ISA level. */
#define RT_ISA_TEMPLATE "kernels/cpu/k_bn_simd.h"
#include "rt/isa_each.h"

static void uv_sums(size_t n, const float *a, float ash, const float *b, float bsh, double *s)
{
    RT_ISA_CALL(k_isa_level(), uv_sums, n, a, ash, b, bsh, s);
}
static void relu_sums(size_t n, const float *dy, const float *x, float mean, float ra, float rb, double *s)
{
    RT_ISA_CALL(k_isa_level(), relu_sums, n, dy, x, mean, ra, rb, s);
}
static void stats2(size_t n, const float *a, float ash, const float *b, float bsh, double *sa, double *sb)
{
    RT_ISA_CALL(k_isa_level(), stats2, n, a, ash, b, bsh, sa, sb);
}

typedef struct bn_job {
    int n, c, hw, parts;
    const float *x, *dy, *mean, *invstd, *gamma, *beta, *dgamma_in, *dbeta_in, *add;
    float *y, *o1, *o2;
    double m;
    int relu; /* ReLU fused after the BatchNorm (k_bn_relu_fwd / _bwd_sums / _bwd_dx) */
} bn_job;

static int bn_parts(int units, long elems)
{
    int t = k_threads();
    if (t <= 1 || elems < K_PAR_MIN_ELEMS) return 1;
    return units < t ? (units > 0 ? units : 1) : t;
}

/* Channels [lo, hi) of this task, in chunks of BN_CH: within a chunk the planes are
 * read in memory order (image-major), each channel's sum still in image order. Going
 * channel by channel instead (a jump every plane) measured 2x slower. */
#define BN_CH 128
static void stats_task(void *ctx, int task)
{
    const bn_job *j = ctx;
    long lo, hi;
    k_split(j->c, j->parts, task, &lo, &hi);
    double s[BN_CH][2];
    float k[BN_CH];
    for (long c0 = lo; c0 < hi; c0 += BN_CH) {
        int nc = hi - c0 < BN_CH ? (int)(hi - c0) : BN_CH;
        for (int t = 0; t < nc; t++) {
            /* Shifted sums (by the channel's first value): the variance does not
             * cancel away when |mean| >> std. */
            k[t] = j->hw > 0 && j->n > 0 ? j->x[(c0 + t) * j->hw] : 0.0f;
            s[t][0] = s[t][1] = 0.0;
        }
        for (int i = 0; i < j->n; i++) {
            int t = 0;
            for (; t + 1 < nc; t += 2) {
                const float *p = j->x + ((long)i * j->c + c0 + t) * j->hw;
                stats2((size_t)j->hw, p, k[t], p + j->hw, k[t + 1], s[t], s[t + 1]);
            }
            if (t < nc) {
                const float *p = j->x + ((long)i * j->c + c0 + t) * j->hw;
                uv_sums((size_t)j->hw, p, k[t], p, k[t], s[t]);
            }
        }
        double cnt = (double)j->n * j->hw;
        for (int t = 0; t < nc; t++) {
            double mu = cnt > 0 ? s[t][0] / cnt : 0.0, var = cnt > 0 ? s[t][1] / cnt - mu * mu : 0.0;
            j->o1[c0 + t] = (float)(k[t] + mu);
            j->o2[c0 + t] = (float)(var > 0 ? var : 0.0);
        }
    }
}

void k_bn_stats(int n, int c, int hw, const float *x, float *mean, float *var)
{
    bn_job j = {.n = n, .c = c, .hw = hw, .x = x, .o1 = mean, .o2 = var};
    j.parts = bn_parts(c, (long)n * c * hw);
    k_parallel_for(j.parts, stats_task, &j);
}

/* Planes [lo, hi) of n*c. */
static void fwd_task(void *ctx, int task)
{
    const bn_job *j = ctx;
    long lo, hi;
    k_split((long)j->n * j->c, j->parts, task, &lo, &hi);
    for (long pl = lo; pl < hi; pl++) {
        int ch = (int)(pl % j->c);
        float a = j->invstd[ch] * (j->gamma ? j->gamma[ch] : 1.0f);
        float b = j->beta ? j->beta[ch] : 0.0f;
        if (j->add) k_affine_add_relu_span((size_t)j->hw, -j->mean[ch], a, b, j->x + pl * j->hw, j->add + pl * j->hw,
                                           j->y + pl * j->hw);
        else (j->relu ? k_affine_relu_span : k_affine_span)((size_t)j->hw, -j->mean[ch], a, b, j->x + pl * j->hw,
                                                            j->y + pl * j->hw);
    }
}

void k_bn_fwd(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
              const float *gamma, const float *beta, float *y)
{
    bn_job j = {.n = n, .c = c, .hw = hw, .x = x, .mean = mean, .invstd = invstd, .gamma = gamma,
                .beta = beta, .y = y};
    j.parts = bn_parts(n * c, (long)n * c * hw);
    k_parallel_for(j.parts, fwd_task, &j);
}

void k_bn_relu_fwd(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                   const float *gamma, const float *beta, float *y)
{
    bn_job j = {.n = n, .c = c, .hw = hw, .x = x, .mean = mean, .invstd = invstd, .gamma = gamma,
                .beta = beta, .y = y, .relu = 1};
    j.parts = bn_parts(n * c, (long)n * c * hw);
    k_parallel_for(j.parts, fwd_task, &j);
}

void k_bn_add_relu_fwd(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                       const float *gamma, const float *beta, const float *s, float *y)
{
    bn_job j = {.n = n, .c = c, .hw = hw, .x = x, .mean = mean, .invstd = invstd, .gamma = gamma,
                .beta = beta, .y = y, .relu = 1, .add = s};
    j.parts = bn_parts(n * c, (long)n * c * hw);
    k_parallel_for(j.parts, fwd_task, &j);
}

/* k_bn_relu_bwd: planes [lo, hi), the BN output re-made in chunks on the stack. */
static void relu_mask_task(void *ctx, int task)
{
    const bn_job *j = ctx;
    long lo, hi;
    float t[1024];
    k_split((long)j->n * j->c, j->parts, task, &lo, &hi);
    for (long pl = lo; pl < hi; pl++) {
        int ch = (int)(pl % j->c);
        float a = j->invstd[ch] * (j->gamma ? j->gamma[ch] : 1.0f);
        for (long e = 0; e < j->hw; e += 1024) {
            size_t m = j->hw - e < 1024 ? (size_t)(j->hw - e) : 1024;
            long off = pl * j->hw + e;
            k_affine_span(m, -j->mean[ch], a, j->beta ? j->beta[ch] : 0.0f, j->x + off, t);
            k_relu_bwd_span(m, t, j->dy + off, j->y + off);
        }
    }
}

void k_bn_relu_bwd(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                   const float *gamma, const float *beta, const float *dy, float *dx)
{
    bn_job j = {.n = n, .c = c, .hw = hw, .x = x, .dy = dy, .mean = mean, .invstd = invstd, .gamma = gamma,
                .beta = beta, .y = dx};
    j.parts = bn_parts(n * c, (long)n * c * hw);
    k_parallel_for(j.parts, relu_mask_task, &j);
}

static void sums_task(void *ctx, int task)
{
    const bn_job *j = ctx;
    long lo, hi;
    k_split(j->c, j->parts, task, &lo, &hi);
    double s[BN_CH][2];
    for (long c0 = lo; c0 < hi; c0 += BN_CH) {
        int nc = hi - c0 < BN_CH ? (int)(hi - c0) : BN_CH;
        for (int t = 0; t < nc; t++) s[t][0] = s[t][1] = 0.0;
        for (int i = 0; i < j->n; i++)
            for (int t = 0; t < nc; t++) {
                long off = ((long)i * j->c + c0 + t) * j->hw, ch = c0 + t;
                if (j->relu)
                    relu_sums((size_t)j->hw, j->dy + off, j->x + off, j->mean[ch],
                              j->invstd[ch] * (j->gamma ? j->gamma[ch] : 1.0f), j->beta ? j->beta[ch] : 0.0f, s[t]);
                else uv_sums((size_t)j->hw, j->dy + off, 0.0f, j->x + off, j->mean[ch], s[t]);
            }
        for (int t = 0; t < nc; t++) {
            j->o1[c0 + t] = (float)(s[t][1] * j->invstd[c0 + t]); /* dgamma = sum dy * xhat */
            j->o2[c0 + t] = (float)s[t][0];                       /* dbeta */
        }
    }
}

void k_bn_bwd_sums(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                   const float *dy, float *dgamma, float *dbeta)
{
    bn_job j = {.n = n, .c = c, .hw = hw, .x = x, .dy = dy, .mean = mean, .invstd = invstd,
                .o1 = dgamma, .o2 = dbeta};
    j.parts = bn_parts(c, (long)n * c * hw);
    k_parallel_for(j.parts, sums_task, &j);
}

void k_bn_relu_bwd_sums(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                        const float *gamma, const float *beta, const float *dy, float *dgamma, float *dbeta)
{
    bn_job j = {.n = n, .c = c, .hw = hw, .x = x, .dy = dy, .mean = mean, .invstd = invstd, .gamma = gamma,
                .beta = beta, .o1 = dgamma, .o2 = dbeta, .relu = 1};
    j.parts = bn_parts(c, (long)n * c * hw);
    k_parallel_for(j.parts, sums_task, &j);
}

/* dx = A*dy + B*(x - mean) + C with A = gamma*invstd, B = -A*invstd*dgamma/m,
 * C = -A*dbeta/m (the factors in double, once per plane). */
static void dx_task(void *ctx, int task)
{
    const bn_job *j = ctx;
    long lo, hi;
    k_split((long)j->n * j->c, j->parts, task, &lo, &hi);
    for (long pl = lo; pl < hi; pl++) {
        int ch = (int)(pl % j->c);
        double is = j->invstd[ch], A = (j->gamma ? j->gamma[ch] : 1.0) * is;
        double B = -A * is * j->dgamma_in[ch] / j->m, C = -A * j->dbeta_in[ch] / j->m;
        if (j->relu)
            k_affine2_relu_span((size_t)j->hw, (float)A, j->dy + pl * j->hw, (float)B, j->x + pl * j->hw,
                                -j->mean[ch], (float)C, j->invstd[ch] * (j->gamma ? j->gamma[ch] : 1.0f),
                                j->beta ? j->beta[ch] : 0.0f, j->y + pl * j->hw);
        else
            k_affine2_span((size_t)j->hw, (float)A, j->dy + pl * j->hw, (float)B, j->x + pl * j->hw,
                           -j->mean[ch], (float)C, j->y + pl * j->hw);
    }
}

void k_bn_bwd_dx(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                 const float *gamma, const float *dgamma, const float *dbeta, double m,
                 const float *dy, float *dx)
{
    bn_job j = {.n = n, .c = c, .hw = hw, .x = x, .dy = dy, .mean = mean, .invstd = invstd,
                .gamma = gamma, .dgamma_in = dgamma, .dbeta_in = dbeta, .y = dx, .m = m};
    j.parts = bn_parts(n * c, (long)n * c * hw);
    k_parallel_for(j.parts, dx_task, &j);
}

void k_bn_relu_bwd_dx(int n, int c, int hw, const float *x, const float *mean, const float *invstd,
                      const float *gamma, const float *beta, const float *dgamma, const float *dbeta, double m,
                      const float *dy, float *dx)
{
    bn_job j = {.n = n, .c = c, .hw = hw, .x = x, .dy = dy, .mean = mean, .invstd = invstd, .gamma = gamma,
                .beta = beta, .dgamma_in = dgamma, .dbeta_in = dbeta, .y = dx, .m = m, .relu = 1};
    j.parts = bn_parts(n * c, (long)n * c * hw);
    k_parallel_for(j.parts, dx_task, &j);
}

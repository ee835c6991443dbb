/* BatchNorm2d pieces (PyTorch semantics: biased variance normalises; the caller keeps
 * the running statistics). Every per-channel sum is taken in double, plane by plane in
 * batch order, by one task that owns the channel: the result does not depend on the
 * thread count. Forward and dx fold the per-channel factors so each element costs one
 * or two FMAs; all four kernels are one pass over their inputs (memory-bound). */
#include "kernels/k.h"
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"
#include <math.h>
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define K_BN_X86 1
#endif

/* s[0] += sum(u), s[1] += sum(u*v) with u = a - ash, v = b - bsh; the differences in
 * float (exact for the stats' own shift when values are close), products and sums in
 * double. a == b gives the sum of squares. */
static void uv_sums_generic(size_t n, const float *a, float ash, const float *b, float bsh, double *s)
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
static void relu_sums_generic(size_t n, const float *dy, const float *x, float mean, float ra, float rb, int fused,
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

#ifdef K_BN_X86
/* Prefetch distance (floats): one plane in order is a single read stream, which the
 * hardware prefetcher alone ran at ~60 % of the copy bandwidth (resnet18's 100 MB BN
 * statistics, both x86 paths); 1.5 KB ahead measured best of 512 B..8 KB (noisy: 1-2 KB within 5 %). It runs into
 * the next plane (the next in memory) and is harmless past the end. */
#define BN_PF 384
/* Two products (or values) per lane are added in float, then the 16-lane partial goes
 * into double accumulators: fewer instructions than converting every element, and a
 * float partial of two terms loses nothing that matters. `same` (the statistics:
 * v = u) is a constant in each instantiation, so the loop reads x once. */
__attribute__((target("avx512f"))) static inline void acc_pd(__m512 f, __m512d *lo, __m512d *hi)
{
    *lo = _mm512_add_pd(*lo, _mm512_cvtps_pd(_mm512_castps512_ps256(f)));
    *hi = _mm512_add_pd(*hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1))));
}

__attribute__((target("avx512f"), always_inline)) static inline void
uv_sums_avx512_t(const int same, size_t n, const float *a, float ash, const float *b, float bsh, double *s)
{
    __m512 va = _mm512_set1_ps(ash), vb = _mm512_set1_ps(bsh);
    __m512d u0 = _mm512_setzero_pd(), u1 = u0, p0 = u0, p1 = u0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm_prefetch((const char *)(a + i + BN_PF), _MM_HINT_T0);
        _mm_prefetch((const char *)(a + i + BN_PF + 16), _MM_HINT_T0);
        if (!same) _mm_prefetch((const char *)(b + i + BN_PF), _MM_HINT_T0);
        if (!same) _mm_prefetch((const char *)(b + i + BN_PF + 16), _MM_HINT_T0);
        __m512 ua = _mm512_sub_ps(_mm512_loadu_ps(a + i), va);
        __m512 ub = _mm512_sub_ps(_mm512_loadu_ps(a + i + 16), va);
        __m512 xa = same ? ua : _mm512_sub_ps(_mm512_loadu_ps(b + i), vb);
        __m512 xb = same ? ub : _mm512_sub_ps(_mm512_loadu_ps(b + i + 16), vb);
        acc_pd(_mm512_add_ps(ua, ub), &u0, &u1);
        acc_pd(_mm512_fmadd_ps(ub, xb, _mm512_mul_ps(ua, xa)), &p0, &p1);
    }
    s[0] += _mm512_reduce_add_pd(_mm512_add_pd(u0, u1));
    s[1] += _mm512_reduce_add_pd(_mm512_add_pd(p0, p1));
    if (i < n) uv_sums_generic(n - i, a + i, ash, b + i, bsh, s);
}

/* The statistics of two planes at once, each with its own accumulators and exactly
 * the operations of uv_sums_avx512_t(1, ...) on it: two read streams keep more
 * memory in flight than one (resnet18's BN statistics: ~75 -> ~90 % of the copy). */
__attribute__((target("avx512f"))) static void stats2_avx512(size_t n, const float *a, float ash, const float *b,
                                                             float bsh, double *sa, double *sb)
{
    __m512 va = _mm512_set1_ps(ash), vb = _mm512_set1_ps(bsh);
    __m512d u0 = _mm512_setzero_pd(), u1 = u0, p0 = u0, p1 = u0, v0 = u0, v1 = u0, q0 = u0, q1 = u0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm_prefetch((const char *)(a + i + BN_PF), _MM_HINT_T0);
        _mm_prefetch((const char *)(a + i + BN_PF + 16), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + i + BN_PF), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + i + BN_PF + 16), _MM_HINT_T0);
        __m512 ua = _mm512_sub_ps(_mm512_loadu_ps(a + i), va), ub = _mm512_sub_ps(_mm512_loadu_ps(a + i + 16), va);
        __m512 xa = _mm512_sub_ps(_mm512_loadu_ps(b + i), vb), xb = _mm512_sub_ps(_mm512_loadu_ps(b + i + 16), vb);
        acc_pd(_mm512_add_ps(ua, ub), &u0, &u1);
        acc_pd(_mm512_fmadd_ps(ub, ub, _mm512_mul_ps(ua, ua)), &p0, &p1);
        acc_pd(_mm512_add_ps(xa, xb), &v0, &v1);
        acc_pd(_mm512_fmadd_ps(xb, xb, _mm512_mul_ps(xa, xa)), &q0, &q1);
    }
    sa[0] += _mm512_reduce_add_pd(_mm512_add_pd(u0, u1));
    sa[1] += _mm512_reduce_add_pd(_mm512_add_pd(p0, p1));
    sb[0] += _mm512_reduce_add_pd(_mm512_add_pd(v0, v1));
    sb[1] += _mm512_reduce_add_pd(_mm512_add_pd(q0, q1));
    if (i < n) {
        uv_sums_generic(n - i, a + i, ash, a + i, ash, sa);
        uv_sums_generic(n - i, b + i, bsh, b + i, bsh, sb);
    }
}

__attribute__((target("avx512f"))) static void uv_sums_avx512(size_t n, const float *a, float ash,
                                                              const float *b, float bsh, double *s)
{
    if (a == b && ash == bsh) uv_sums_avx512_t(1, n, a, ash, b, bsh, s);
    else uv_sums_avx512_t(0, n, a, ash, b, bsh, s);
}

/* uv_sums_avx512_t(0, n, dy, 0, x, mean) with dy masked by ReLU's backward
 * (relu_sums_generic). */
__attribute__((target("avx512f"))) static void relu_sums_avx512(size_t n, const float *dy, const float *x,
                                                                float mean, float ra, float rb, double *s)
{
    __m512 va = _mm512_setzero_ps(), vb = _mm512_set1_ps(mean), vra = _mm512_set1_ps(ra), vrb = _mm512_set1_ps(rb);
    __m512d u0 = _mm512_setzero_pd(), u1 = u0, p0 = u0, p1 = u0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm_prefetch((const char *)(dy + i + BN_PF), _MM_HINT_T0);
        _mm_prefetch((const char *)(dy + i + BN_PF + 16), _MM_HINT_T0);
        _mm_prefetch((const char *)(x + i + BN_PF), _MM_HINT_T0);
        _mm_prefetch((const char *)(x + i + BN_PF + 16), _MM_HINT_T0);
        __m512 xa = _mm512_sub_ps(_mm512_loadu_ps(x + i), vb), xb = _mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vb);
        __mmask16 ka = _mm512_cmp_ps_mask(_mm512_fmadd_ps(xa, vra, vrb), _mm512_setzero_ps(), _CMP_GT_OQ);
        __mmask16 kb = _mm512_cmp_ps_mask(_mm512_fmadd_ps(xb, vra, vrb), _mm512_setzero_ps(), _CMP_GT_OQ);
        __m512 ua = _mm512_sub_ps(_mm512_maskz_mov_ps(ka, _mm512_loadu_ps(dy + i)), va);
        __m512 ub = _mm512_sub_ps(_mm512_maskz_mov_ps(kb, _mm512_loadu_ps(dy + i + 16)), va);
        acc_pd(_mm512_add_ps(ua, ub), &u0, &u1);
        acc_pd(_mm512_fmadd_ps(ub, xb, _mm512_mul_ps(ua, xa)), &p0, &p1);
    }
    s[0] += _mm512_reduce_add_pd(_mm512_add_pd(u0, u1));
    s[1] += _mm512_reduce_add_pd(_mm512_add_pd(p0, p1));
    if (i < n) relu_sums_generic(n - i, dy + i, x + i, mean, ra, rb, 1, s);
}

__attribute__((target("avx2,fma"))) static double hsum4d(__m256d v)
{
    __m128d t = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(t, _mm_unpackhi_pd(t, t)));
}

/* As the AVX-512 version: two values (products) per lane added in float, then each
 * 8-lane partial widened into double accumulators; converting every element measured
 * half the copy bandwidth (the conversions' shuffle port was the limit). */
__attribute__((target("avx2,fma"))) static inline void acc_pd4(__m256 f, __m256d *lo, __m256d *hi)
{
    *lo = _mm256_add_pd(*lo, _mm256_cvtps_pd(_mm256_castps256_ps128(f)));
    *hi = _mm256_add_pd(*hi, _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)));
}

__attribute__((target("avx2,fma"), always_inline)) static inline void
uv_sums_avx2_t(const int same, size_t n, const float *a, float ash, const float *b, float bsh, double *s)
{
    __m256 va = _mm256_set1_ps(ash), vb = _mm256_set1_ps(bsh);
    __m256d u0 = _mm256_setzero_pd(), u1 = u0, p0 = u0, p1 = u0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm_prefetch((const char *)(a + i + BN_PF), _MM_HINT_T0);
        if (!same) _mm_prefetch((const char *)(b + i + BN_PF), _MM_HINT_T0);
        __m256 ua = _mm256_sub_ps(_mm256_loadu_ps(a + i), va), ub = _mm256_sub_ps(_mm256_loadu_ps(a + i + 8), va);
        __m256 xa = same ? ua : _mm256_sub_ps(_mm256_loadu_ps(b + i), vb);
        __m256 xb = same ? ub : _mm256_sub_ps(_mm256_loadu_ps(b + i + 8), vb);
        acc_pd4(_mm256_add_ps(ua, ub), &u0, &u1);
        acc_pd4(_mm256_fmadd_ps(ub, xb, _mm256_mul_ps(ua, xa)), &p0, &p1);
    }
    s[0] += hsum4d(_mm256_add_pd(u0, u1));
    s[1] += hsum4d(_mm256_add_pd(p0, p1));
    if (i < n) uv_sums_generic(n - i, a + i, ash, b + i, bsh, s);
}

/* stats2_avx512's AVX2 twin (uv_sums_avx2_t(1, ...)'s operations per plane). */
__attribute__((target("avx2,fma"))) static void stats2_avx2(size_t n, const float *a, float ash, const float *b,
                                                            float bsh, double *sa, double *sb)
{
    __m256 va = _mm256_set1_ps(ash), vb = _mm256_set1_ps(bsh);
    __m256d u0 = _mm256_setzero_pd(), u1 = u0, p0 = u0, p1 = u0, v0 = u0, v1 = u0, q0 = u0, q1 = u0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm_prefetch((const char *)(a + i + BN_PF), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + i + BN_PF), _MM_HINT_T0);
        __m256 ua = _mm256_sub_ps(_mm256_loadu_ps(a + i), va), ub = _mm256_sub_ps(_mm256_loadu_ps(a + i + 8), va);
        __m256 xa = _mm256_sub_ps(_mm256_loadu_ps(b + i), vb), xb = _mm256_sub_ps(_mm256_loadu_ps(b + i + 8), vb);
        acc_pd4(_mm256_add_ps(ua, ub), &u0, &u1);
        acc_pd4(_mm256_fmadd_ps(ub, ub, _mm256_mul_ps(ua, ua)), &p0, &p1);
        acc_pd4(_mm256_add_ps(xa, xb), &v0, &v1);
        acc_pd4(_mm256_fmadd_ps(xb, xb, _mm256_mul_ps(xa, xa)), &q0, &q1);
    }
    sa[0] += hsum4d(_mm256_add_pd(u0, u1));
    sa[1] += hsum4d(_mm256_add_pd(p0, p1));
    sb[0] += hsum4d(_mm256_add_pd(v0, v1));
    sb[1] += hsum4d(_mm256_add_pd(q0, q1));
    if (i < n) {
        uv_sums_generic(n - i, a + i, ash, a + i, ash, sa);
        uv_sums_generic(n - i, b + i, bsh, b + i, bsh, sb);
    }
}

__attribute__((target("avx2,fma"))) static void uv_sums_avx2(size_t n, const float *a, float ash,
                                                             const float *b, float bsh, double *s)
{
    if (a == b && ash == bsh) uv_sums_avx2_t(1, n, a, ash, b, bsh, s);
    else uv_sums_avx2_t(0, n, a, ash, b, bsh, s);
}
/* uv_sums_avx2_t(0, n, dy, 0, x, mean) with dy masked by ReLU's backward. */
__attribute__((target("avx2,fma"))) static void relu_sums_avx2(size_t n, const float *dy, const float *x,
                                                               float mean, float ra, float rb, double *s)
{
    __m256 va = _mm256_setzero_ps(), vb = _mm256_set1_ps(mean), vra = _mm256_set1_ps(ra), vrb = _mm256_set1_ps(rb);
    __m256 z = _mm256_setzero_ps();
    __m256d u0 = _mm256_setzero_pd(), u1 = u0, p0 = u0, p1 = u0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm_prefetch((const char *)(dy + i + BN_PF), _MM_HINT_T0);
        _mm_prefetch((const char *)(x + i + BN_PF), _MM_HINT_T0);
        __m256 xa = _mm256_sub_ps(_mm256_loadu_ps(x + i), vb), xb = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vb);
        __m256 ma = _mm256_cmp_ps(_mm256_fmadd_ps(xa, vra, vrb), z, _CMP_GT_OQ);
        __m256 mb = _mm256_cmp_ps(_mm256_fmadd_ps(xb, vra, vrb), z, _CMP_GT_OQ);
        __m256 ua = _mm256_sub_ps(_mm256_and_ps(ma, _mm256_loadu_ps(dy + i)), va);
        __m256 ub = _mm256_sub_ps(_mm256_and_ps(mb, _mm256_loadu_ps(dy + i + 8)), va);
        acc_pd4(_mm256_add_ps(ua, ub), &u0, &u1);
        acc_pd4(_mm256_fmadd_ps(ub, xb, _mm256_mul_ps(ua, xa)), &p0, &p1);
    }
    s[0] += hsum4d(_mm256_add_pd(u0, u1));
    s[1] += hsum4d(_mm256_add_pd(p0, p1));
    if (i < n) relu_sums_generic(n - i, dy + i, x + i, mean, ra, rb, 1, s);
}
#endif

static void uv_sums(size_t n, const float *a, float ash, const float *b, float bsh, double *s)
{
#ifdef K_BN_X86
    switch (k_isa_level()) {
    case K_ISA_AVX512: uv_sums_avx512(n, a, ash, b, bsh, s); return;
    case K_ISA_AVX2: uv_sums_avx2(n, a, ash, b, bsh, s); return;
    default: break;
    }
#endif
    uv_sums_generic(n, a, ash, b, bsh, s);
}

static void relu_sums(size_t n, const float *dy, const float *x, float mean, float ra, float rb, double *s)
{
#ifdef K_BN_X86
    switch (k_isa_level()) {
    case K_ISA_AVX512: relu_sums_avx512(n, dy, x, mean, ra, rb, s); return;
    case K_ISA_AVX2: relu_sums_avx2(n, dy, x, mean, ra, rb, s); return;
    default: break;
    }
#endif
    relu_sums_generic(n, dy, x, mean, ra, rb, 0, s);
}

/* The statistics (sums of u and u*u) of two planes: the same sums as two uv_sums calls. */
static void stats2(size_t n, const float *a, float ash, const float *b, float bsh, double *sa, double *sb)
{
#ifdef K_BN_X86
    switch (k_isa_level()) {
    case K_ISA_AVX512: stats2_avx512(n, a, ash, b, bsh, sa, sb); return;
    case K_ISA_AVX2: stats2_avx2(n, a, ash, b, bsh, sa, sb); return;
    default: break;
    }
#endif
    uv_sums(n, a, ash, a, ash, sa);
    uv_sums(n, b, bsh, b, bsh, sb);
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

/* BatchNorm's per-plane sums (k_bn.c), a template of rt/isa_each.h on k_kv.h's vectors:
 * uv_sums, relu_sums and stats2 per ISA level. On AVX2 and AVX-512 two vectors of
 * differences (or products) per step are added in float, then the KV_W-lane partial
 * goes into double accumulators: fewer instructions than converting every element
 * (converting each measured half the copy bandwidth on AVX2: the shuffle port), and a
 * float partial of two terms loses nothing that matters. The generic level (and every
 * tail) is k_bn.c's scalar code, each element in double. No header guard: included
 * once per level. */
#include "kernels/cpu/k_kv.h"
#define BF(x) ISA_FN(x)

#if ISA_X86 && ISA_VB >= 32
#if ISA_VB == 64
#define kd __m512d
#define kd_zero() _mm512_setzero_pd()
/* lo += the low 8 lanes in double, hi += the high 8 */
KT_INL void BF(acc_pd)(__m512 f, __m512d *lo, __m512d *hi)
{
    *lo = _mm512_add_pd(*lo, _mm512_cvtps_pd(_mm512_castps512_ps256(f)));
    *hi = _mm512_add_pd(*hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1))));
}
KT_INL double BF(kd_sum)(__m512d a, __m512d b) { return _mm512_reduce_add_pd(_mm512_add_pd(a, b)); }
#else
#define kd __m256d
#define kd_zero() _mm256_setzero_pd()
KT_INL void BF(acc_pd)(__m256 f, __m256d *lo, __m256d *hi)
{
    *lo = _mm256_add_pd(*lo, _mm256_cvtps_pd(_mm256_castps256_ps128(f)));
    *hi = _mm256_add_pd(*hi, _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)));
}
KT_INL double BF(kd_sum)(__m256d a, __m256d b)
{
    __m256d v = _mm256_add_pd(a, b);
    __m128d t = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(t, _mm_unpackhi_pd(t, t)));
}
#endif
/* a step's two vectors span 2 * KV_W floats: one prefetch per 64-byte line */
#define BN_PREFETCH(p)                                                                                          \
    do {                                                                                                          \
        for (int l_ = 0; l_ < 2 * KV_W; l_ += 16) _mm_prefetch((const char *)((p) + l_), _MM_HINT_T0);        \
    } while (0)

/* `same` (the statistics: v = u) is a constant in each instantiation, so the loop reads
 * x once. */
KT_INL void BF(uv_sums_t)(const int same, size_t n, const float *a, float ash, const float *b, float bsh, double *s)
{
    kv va = kv_set1(ash), vb = kv_set1(bsh);
    kd u0 = kd_zero(), u1 = u0, p0 = u0, p1 = u0;
    size_t i = 0;
    for (; i + 2 * KV_W <= n; i += 2 * KV_W) {
        BN_PREFETCH(a + i + BN_PF);
        if (!same) BN_PREFETCH(b + i + BN_PF);
        kv ua = kv_sub(kv_load(a + i), va), ub = kv_sub(kv_load(a + i + KV_W), va);
        kv xa = same ? ua : kv_sub(kv_load(b + i), vb);
        kv xb = same ? ub : kv_sub(kv_load(b + i + KV_W), vb);
        BF(acc_pd)(kv_add(ua, ub), &u0, &u1);
        BF(acc_pd)(kv_fma(ub, xb, kv_mul(ua, xa)), &p0, &p1);
    }
    s[0] += BF(kd_sum)(u0, u1);
    s[1] += BF(kd_sum)(p0, p1);
    if (i < n) uv_sums_scalar(n - i, a + i, ash, b + i, bsh, s);
}

static ISA_TARGET void BF(uv_sums)(size_t n, const float *a, float ash, const float *b, float bsh, double *s)
{
    if (a == b && ash == bsh) BF(uv_sums_t)(1, n, a, ash, b, bsh, s);
    else BF(uv_sums_t)(0, n, a, ash, b, bsh, s);
}

/* The statistics of two planes at once, each with its own accumulators and exactly
 * the operations of uv_sums_t(1, ...) on it: two read streams keep more memory in
 * flight than one (resnet18's BN statistics: ~75 -> ~90 % of the copy on AVX-512). */
static ISA_TARGET void BF(stats2)(size_t n, const float *a, float ash, const float *b, float bsh, double *sa,
                                  double *sb)
{
    kv va = kv_set1(ash), vb = kv_set1(bsh);
    kd u0 = kd_zero(), u1 = u0, p0 = u0, p1 = u0, v0 = u0, v1 = u0, q0 = u0, q1 = u0;
    size_t i = 0;
    for (; i + 2 * KV_W <= n; i += 2 * KV_W) {
        BN_PREFETCH(a + i + BN_PF);
        BN_PREFETCH(b + i + BN_PF);
        kv ua = kv_sub(kv_load(a + i), va), ub = kv_sub(kv_load(a + i + KV_W), va);
        kv xa = kv_sub(kv_load(b + i), vb), xb = kv_sub(kv_load(b + i + KV_W), vb);
        BF(acc_pd)(kv_add(ua, ub), &u0, &u1);
        BF(acc_pd)(kv_fma(ub, ub, kv_mul(ua, ua)), &p0, &p1);
        BF(acc_pd)(kv_add(xa, xb), &v0, &v1);
        BF(acc_pd)(kv_fma(xb, xb, kv_mul(xa, xa)), &q0, &q1);
    }
    sa[0] += BF(kd_sum)(u0, u1);
    sa[1] += BF(kd_sum)(p0, p1);
    sb[0] += BF(kd_sum)(v0, v1);
    sb[1] += BF(kd_sum)(q0, q1);
    if (i < n) {
        uv_sums_scalar(n - i, a + i, ash, a + i, ash, sa);
        uv_sums_scalar(n - i, b + i, bsh, b + i, bsh, sb);
    }
}

/* uv_sums_t(0, n, dy, 0, x, mean) with dy masked by ReLU's backward (relu_sums_scalar;
 * the BN output's affine step is an FMA here, so the tail asks for `fused`). */
static ISA_TARGET void BF(relu_sums)(size_t n, const float *dy, const float *x, float mean, float ra, float rb,
                                     double *s)
{
    kv va = kv_zero(), vb = kv_set1(mean), vra = kv_set1(ra), vrb = kv_set1(rb);
    kd u0 = kd_zero(), u1 = u0, p0 = u0, p1 = u0;
    size_t i = 0;
    for (; i + 2 * KV_W <= n; i += 2 * KV_W) {
        BN_PREFETCH(dy + i + BN_PF);
        BN_PREFETCH(x + i + BN_PF);
        kv xa = kv_sub(kv_load(x + i), vb), xb = kv_sub(kv_load(x + i + KV_W), vb);
        kv ua = kv_sub(kv_gtz_select(kv_fma(xa, vra, vrb), kv_load(dy + i)), va);
        kv ub = kv_sub(kv_gtz_select(kv_fma(xb, vra, vrb), kv_load(dy + i + KV_W)), va);
        BF(acc_pd)(kv_add(ua, ub), &u0, &u1);
        BF(acc_pd)(kv_fma(ub, xb, kv_mul(ua, xa)), &p0, &p1);
    }
    s[0] += BF(kd_sum)(u0, u1);
    s[1] += BF(kd_sum)(p0, p1);
    if (i < n) relu_sums_scalar(n - i, dy + i, x + i, mean, ra, rb, 1, s);
}
#undef kd
#undef kd_zero
#undef BN_PREFETCH

#else /* generic: every element in double (SSE2's float partials would change the bits) */
static void BF(uv_sums)(size_t n, const float *a, float ash, const float *b, float bsh, double *s)
{
    uv_sums_scalar(n, a, ash, b, bsh, s);
}
static void BF(stats2)(size_t n, const float *a, float ash, const float *b, float bsh, double *sa, double *sb)
{
    uv_sums_scalar(n, a, ash, a, ash, sa);
    uv_sums_scalar(n, b, bsh, b, bsh, sb);
}
static void BF(relu_sums)(size_t n, const float *dy, const float *x, float mean, float ra, float rb, double *s)
{
    relu_sums_scalar(n, dy, x, mean, ra, rb, 0, s);
}
#endif
#undef BF
#include "kernels/cpu/k_kv_undef.h"

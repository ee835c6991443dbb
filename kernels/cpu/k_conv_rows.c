/* The shifted-row layout for strided convs (k_conv.c): one plane per (channel c,
 * tap column s, tap-row phase rp = r % st),
 *   xs[c][s][rp][u][q] = x[c][st*u + rp - pad][st*q + s - pad]   (0 outside the image)
 * for u < hps = P + (R-1)/st. Tap (c, r, s) of output j = p*Q + q is then
 * xs[c][s][r % st] at offset (r / st)*Q + j: contiguous, as in the stride-1 layout,
 * so the same GEMMs read it through tap offsets. It holds about C*S*H*W/st floats
 * where im2col needs C*R*S*H*W/st^2, and wastes no output column. */
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"
#include <string.h>
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define K_ROWS_AVX512 1
#endif
/* Valid output columns [*lo, *hi) of tap column s: 0 <= st*q + s - pad < w. */
static void col_range(const k_im2col_geo *g, int s, int *lo, int *hi)
{
    int a = 0, b = g->q;
    while (a < b && a * g->stride + s - g->pad < 0) a++;
    while (b > a && (b - 1) * g->stride + s - g->pad >= g->w) b--;
    *lo = a;
    *hi = b;
}

#ifdef K_ROWS_AVX512
/* Stride 2, all hps rows of one (c, s, rp) plane (x0 = channel c's first row):
 * o[t] = src[2t] for t in [lo, hi), 0 elsewhere in [0, Q), 16 outputs per step from two
 * plain 16-float loads and an even-lane permute, the lane masks computed once per plane
 * (a call per row, as before, cost a quarter of ResNet-20's stride-2 convs on AVX-512).
 * The loads may run past the row (never past [xbeg, xend): checked, else scalar); whole
 * 16-float stores may run past Q into the next row of xs, which is written later (xs has
 * slack at its end). Masked loads instead measured 2x slower than scalar code on a Zen 5.
 * Returns 0 (nothing done) for rows over 512 wide. */
__attribute__((target("avx512f"))) static int plane_s2_avx512(float *o, const float *x0, const k_im2col_geo *g,
                                                              long hps, int rp, int s, int lo, int hi,
                                                              const float *xbeg, const float *xend)
{
    const int Q = g->q, nq = (Q + 15) / 16;
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    __mmask16 mk[32];
    if (nq > 32) return 0;
    for (int v = 0; v < nq; v++) {
        int l = lo - 16 * v, u = hi - 16 * v;
        l = l < 0 ? 0 : l > 16 ? 16 : l;
        u = u < 0 ? 0 : u > 16 ? 16 : u;
        mk[v] = l >= u ? 0 : (__mmask16)(((1u << u) - 1) & ~((1u << l) - 1));
    }
    for (long u = 0; u < hps; u++, o += Q) {
        long ih = 2 * u + rp - g->pad;
        if (ih < 0 || ih >= g->h || lo >= hi) {
            for (int v = 0; v < nq; v++) _mm512_storeu_ps(o + 16 * v, _mm512_setzero_ps());
            continue;
        }
        const float *src = x0 + ih * g->w + s - g->pad;
        for (int v = 0; v < nq; v++) {
            const float *p = src + 32 * v;
            if (p < xbeg || p + 32 > xend) {
                for (int i = 0; i < 16; i++) o[16 * v + i] = 16 * v + i >= lo && 16 * v + i < hi ? p[2 * i] : 0.0f;
                continue;
            }
            __m512 e = _mm512_permutex2var_ps(_mm512_loadu_ps(p), ev, _mm512_loadu_ps(p + 16));
            _mm512_storeu_ps(o + 16 * v, _mm512_maskz_mov_ps(mk[v], e));
        }
    }
    return 1;
}
/* The AVX2 twin: 8 outputs per step from two 8-float loads (even lanes: a shuffle in
 * each 128-bit half, then a cross-half permute), the lanes outside [lo, hi) zeroed by
 * an and-mask; no call per row, which cost more than the copies on the 14-wide rows of
 * ResNet's stride-2 convs. Returns 0 (nothing done) for rows over 512 wide. */
__attribute__((target("avx2"))) static int plane_s2_avx2(float *o, const float *x0, const k_im2col_geo *g, long hps,
                                                        int rp, int s, int lo, int hi, const float *xbeg,
                                                        const float *xend)
{
    const int Q = g->q, nq = (Q + 7) / 8;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i mk[64];
    if (nq > 64) return 0;
    for (int v = 0; v < nq; v++)
        mk[v] = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(lo - 8 * v), lane),
                                    _mm256_cmpgt_epi32(_mm256_set1_epi32(hi - 8 * v), lane));
    for (long u = 0; u < hps; u++, o += Q) {
        long ih = 2 * u + rp - g->pad;
        if (ih < 0 || ih >= g->h || lo >= hi) {
            for (int v = 0; v < nq; v++) _mm256_storeu_ps(o + 8 * v, _mm256_setzero_ps());
            continue;
        }
        const float *src = x0 + ih * g->w + s - g->pad;
        for (int v = 0; v < nq; v++) {
            const float *p = src + 16 * v;
            if (p < xbeg || p + 16 > xend) {
                for (int i = 0; i < 8; i++) o[8 * v + i] = 8 * v + i >= lo && 8 * v + i < hi ? p[2 * i] : 0.0f;
                continue;
            }
            __m256 e = _mm256_shuffle_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8), 0x88);
            e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xd8));
            _mm256_storeu_ps(o + 8 * v, _mm256_and_ps(e, _mm256_castsi256_ps(mk[v])));
        }
    }
    return 1;
}
#endif

void k_shift_rows_st(const k_im2col_geo *g, long hps, int rpn, const float *x, float *xs)
{
    const int st = g->stride, Q = g->q;
    const float *xend = x + (long)g->c * g->h * g->w;
#ifdef K_ROWS_AVX512
    int fast = st == 2 ? k_isa_level() : 0; /* K_ISA_AVX512 or K_ISA_AVX2: a vector row */
#else
    (void)xend;
#endif
    for (int c = 0; c < g->c; c++)
        for (int s = 0; s < g->s; s++) {
            int lo, hi;
            col_range(g, s, &lo, &hi);
            for (int rp = 0; rp < rpn; rp++) {
#ifdef K_ROWS_AVX512
                float *pl = xs + (((long)c * g->s + s) * rpn + rp) * hps * Q;
                const float *x0 = x + (long)c * g->h * g->w;
                if (fast == K_ISA_AVX2 && plane_s2_avx2(pl, x0, g, hps, rp, s, lo, hi, x, xend)) continue;
                if (fast == K_ISA_AVX512 && plane_s2_avx512(pl, x0, g, hps, rp, s, lo, hi, x, xend)) continue;
#endif
                for (long u = 0; u < hps; u++) {
                    float *o = xs + ((((long)c * g->s + s) * rpn + rp) * hps + u) * Q;
                    long ih = st * u + rp - g->pad;
                    if (ih < 0 || ih >= g->h || lo >= hi) {
                        memset(o, 0, sizeof(float) * Q);
                        continue;
                    }
                    const float *src = x + ((long)c * g->h + ih) * g->w + s - g->pad;
                    for (int t = 0; t < lo; t++) o[t] = 0.0f;
                    for (int t = lo; t < hi; t++) o[t] = src[(long)t * st];
                    for (int t = hi; t < Q; t++) o[t] = 0.0f;
                }
            }
        }
}

/* bf16 conversion (round to nearest even, as PyTorch's c10::BFloat16) and the
 * AVX512-BF16 GEMMs of k_bf16.h. vdpbf16ps multiplies pairs of bf16 and adds both
 * products to an fp32 lane, so K is consumed two at a time: the NN form packs A and B
 * with K pairs interleaved, the NT form needs no interleave (both operands run along
 * the reduction, and pair (l, l+1) lines up in both).
 * rt_f32_to_bf16 (rt/half.h) and k_bf16_from_f32_span round with integer operations
 * (PyTorch's rounding; a NaN keeps its payload, quieted, as vcvtneps2bf16 does); the
 * native GEMM operands use vcvtne(2)ps2bf16, which differs only in flushing subnormals
 * (vdpbf16ps ignores them anyway). */
#include "kernels/k.h"
#include "kernels/cpu/k_bf16.h"
#include "kernels/cpu/k_bf16_simd.h"
#include "kernels/cpu/k_int.h"
#include "kernels/cpu/k_gemm.h"
#include "rt/half.h"
#include <string.h>

#ifdef K_BF16_X86
/* bf16(v) in the high half of each 32-bit lane (the low half is garbage). */
BF_INL __m512i rne_hi(__m512 v)
{
    __m512i u = _mm512_castps_si512(v);
    __m512i one = _mm512_set1_epi32(1);
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                     _mm512_and_si512(_mm512_srli_epi32(u, 16), one)));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000)); /* NaN: quieted */
}

BF_TARGET static void from_f32_avx512(size_t n, const float *x, uint16_t *y)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(y + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(rne_hi(_mm512_loadu_ps(x + i)), 16)));
    for (; i < n; i++) y[i] = rt_f32_to_bf16(x[i]);
}
#endif

void k_bf16_from_f32_span(size_t n, const float *x, uint16_t *y)
{
#ifdef K_BF16_X86
    if (k_isa_level() == K_ISA_AVX512) { from_f32_avx512(n, x, y); return; }
#endif
    for (size_t i = 0; i < n; i++) y[i] = rt_f32_to_bf16(x[i]);
}

#ifdef K_BF16_X86
BF_TARGET static void round_avx512(size_t n, const float *x, float *y)
{
    size_t i = 0;
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_si512((void *)(y + i), _mm512_and_si512(rne_hi(_mm512_loadu_ps(x + i)), hi));
    for (; i < n; i++) y[i] = rt_bf16_to_f32(rt_f32_to_bf16(x[i]));
}
#endif

void k_bf16_round_span(size_t n, const float *x, float *y)
{
#ifdef K_BF16_X86
    if (k_isa_level() == K_ISA_AVX512) { round_avx512(n, x, y); return; }
#endif
    for (size_t i = 0; i < n; i++) y[i] = rt_bf16_to_f32(rt_f32_to_bf16(x[i]));
}

size_t k_bf16_panel_elems(int kk) { return (size_t)((kk + 1) / 2) * 64; }

#ifdef K_BF16_X86
/* GEMM operands: the same rounding as pack_panel; one masked step for the tail. */
BF_INL void operand_row(size_t n, const float *x, uint16_t *y)
{
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        _mm512_storeu_si512((void *)(y + i), (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i)));
    for (; i + 16 <= n; i += 16) _mm256_storeu_si256((__m256i *)(y + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
    if (i < n && n >= 16) { /* the last 16, overlapping back: masked ops are slow on Zen 5 */
        _mm256_storeu_si256((__m256i *)(y + n - 16), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + n - 16)));
    } else if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm256_mask_storeu_epi16(y + i, m, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

BF_TARGET static void operand_avx512bf16(size_t n, const float *x, uint16_t *y) { operand_row(n, x, y); }

BF_TARGET static void pad_image_avx512bf16(int c, int h, int w, int pad, int hp, int wp, const float *x, uint16_t *out)
{
    for (int ch = 0; ch < c; ch++)
        for (int r = 0; r < hp; r++) {
            uint16_t *o = out + ((long)ch * hp + r) * wp;
            int ih = r - pad;
            if (ih < 0 || ih >= h) { memset(o, 0, 2 * (size_t)wp); continue; }
            for (int t = 0; t < pad; t++) o[t] = 0;
            operand_row((size_t)w, x + ((long)ch * h + ih) * w, o + pad);
            for (int t = pad + w; t < wp; t++) o[t] = 0;
        }
}

/* dst row p at dst + p*wp gets src row p (q floats); the rest of each row is 0. */
BF_TARGET static void scatter_rows_avx512bf16(int rows, int q, long wp, const float *src, uint16_t *dst)
{
    for (int p = 0; p < rows; p++) {
        operand_row((size_t)q, src + (long)p * q, dst + p * wp);
        for (long t = q; t < wp; t++) dst[p * wp + t] = 0;
    }
}

#define BF_NN_CASE(M) case M: ukr_nn(M, nc, kp, apb, panel, boff, ci, ldc, bi, NULL, acc, wc); break;
/* All row blocks of A against one packed panel, or pair rows at panel + boff[p]
 * (columns [0, nc) of c). */
BF_TARGET static void panel_rows(int m, int nc, int kk, const uint16_t *ap, const uint16_t *panel,
                                 const long *boff, float *c, long ldc, const float *bias, int acc,
                                 const k_bf16_win *wc)
{
    int nmb = (m + K_BF16_MR - 1) / K_BF16_MR, kp = (kk + 1) / 2;
    for (int ib = 0; ib < nmb; ib++) {
        int i0 = (int)((long)ib * m / nmb), mr = (int)((long)(ib + 1) * m / nmb) - i0;
        const uint16_t *apb = ap + (size_t)ib * kp * K_BF16_MR * 2;
        float *ci = c + (long)i0 * ldc;
        const float *bi = bias ? bias + i0 : NULL;
        switch (mr) {
            BF_NN_CASE(1) BF_NN_CASE(2) BF_NN_CASE(3) BF_NN_CASE(4) BF_NN_CASE(5) BF_NN_CASE(6)
            BF_NN_CASE(7) BF_NN_CASE(8) BF_NN_CASE(9) BF_NN_CASE(10) BF_NN_CASE(11) BF_NN_CASE(12)
        default: break;
        }
    }
}

BF_TARGET static void gemm_nn_avx512bf16(int m, int n, int kk, const uint16_t *ap, const float *b, long ldb,
                                         const long *boff, float *c, long ldc, const float *bias, int acc,
                                         uint16_t *panel)
{
    for (int j0 = 0; j0 < n; j0 += 32) {
        int nc = n - j0 < 32 ? n - j0 : 32;
        pack_panel(kk, nc, b + j0, ldb, boff, panel);
        panel_rows(m, nc, kk, ap, panel, NULL, c + j0, ldc, bias, acc, NULL);
    }
}

BF_TARGET static void pairs_avx512bf16(long n, long dv, const uint16_t *in, uint32_t *pr)
{
    for (int img = 0; img < (dv ? 2 : 1); img++) {
        long d = img ? dv : 1;
        uint32_t *o = pr + img * n;
        for (long i = 0; i < n; i += 16) {
            __m512i a = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(in + i)));
            __m512i b = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(in + i + d)));
            _mm512_storeu_si512((void *)(o + i), _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
        }
    }
}

/* Lane t = the sum of the 16 lanes of v[t]: two 256/128-bit folds across vectors, then
 * two in-lane ones; the folds leave lane 4c+k holding vector 4k+c, so the inputs go
 * in transposed. */
BF_INL __m512 hsum16(const __m512 *in)
{
    __m512 v[16], t[8], u[4];
#pragma GCC unroll 16
    for (int m = 0; m < 16; m++) v[m] = in[(m % 4) * 4 + m / 4];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        t[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0xEE));
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        u[k] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * k], t[2 * k + 1], 0x88),
                             _mm512_shuffle_f32x4(t[2 * k], t[2 * k + 1], 0xDD));
    __m512 w0 = _mm512_add_ps(_mm512_unpacklo_ps(u[0], u[1]), _mm512_unpackhi_ps(u[0], u[1]));
    __m512 w1 = _mm512_add_ps(_mm512_unpacklo_ps(u[2], u[3]), _mm512_unpackhi_ps(u[2], u[3]));
    __m512d a = _mm512_castps_pd(w0), b = _mm512_castps_pd(w1);
    return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
}

BF_INL void ukr_nt(const int mr, const int nr, int l, int ng, const uint16_t *a, long lda, long a_img,
                   const uint16_t *const *brow, long b_img, float *c, long ldc, const float *bias, int acc)
{
    __m512 s[4][6];
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 6
        for (int j = 0; j < nr; j++) s[i][j] = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
        const uint16_t *ag = a + g * a_img;
        long bo = g * b_img;
        int x = 0;
        for (; x + 32 <= l; x += 32) {
            __m512i av[4];
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) av[i] = _mm512_loadu_si512((const void *)(ag + i * lda + x));
#pragma GCC unroll 6
            for (int j = 0; j < nr; j++) {
                __m512i bv = _mm512_loadu_si512((const void *)(brow[j] + bo + x));
#pragma GCC unroll 4
                for (int i = 0; i < mr; i++) s[i][j] = _mm512_dpbf16_ps(s[i][j], bh(av[i]), bh(bv));
            }
        }
        if (x < l) {
            __mmask32 mk = (__mmask32)((1u << (l - x)) - 1);
            __m512i av[4];
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) av[i] = _mm512_maskz_loadu_epi16(mk, ag + i * lda + x);
#pragma GCC unroll 6
            for (int j = 0; j < nr; j++) {
                __m512i bv = _mm512_maskz_loadu_epi16(mk, brow[j] + bo + x);
#pragma GCC unroll 4
                for (int i = 0; i < mr; i++) s[i][j] = _mm512_dpbf16_ps(s[i][j], bh(av[i]), bh(bv));
            }
        }
    }
    /* Horizontal sums 16 accumulators at a time (a reduce_add each cost as much as
     * the dot products on 7x7 planes). */
    float out[32];
    __m512 v[32];
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 6
        for (int j = 0; j < nr; j++) v[i * nr + j] = s[i][j];
    for (int t = mr * nr; t < (mr * nr > 16 ? 32 : 16); t++) v[t] = _mm512_setzero_ps();
    _mm512_storeu_ps(out, hsum16(v));
    if (mr * nr > 16) _mm512_storeu_ps(out + 16, hsum16(v + 16));
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 6
        for (int j = 0; j < nr; j++) {
            float x = out[i * nr + j];
            if (bias) x += bias[j];
            c[i * ldc + j] = acc ? c[i * ldc + j] + x : x;
        }
}

#define BF_NT_CASE(M, N) case M * 8 + N: ukr_nt(M, N, l, ng, ai, lda, a_img, br, b_img, cij, ldc, bs, acc); break;
#define BF_NT_ROW(M) BF_NT_CASE(M, 1) BF_NT_CASE(M, 2) BF_NT_CASE(M, 3) BF_NT_CASE(M, 4) BF_NT_CASE(M, 5) \
    BF_NT_CASE(M, 6)
BF_TARGET static void gemm_nt_avx512bf16(int m, int n, int l, int ng, const uint16_t *a, long lda, long a_img,
                                         const uint16_t *b, const long *boff, long ldb, long b_img, float *c,
                                         long ldc, const float *bias, int acc)
{
    int nmb = (m + 3) / 4, nnb = (n + 5) / 6;
    for (int ib = 0; ib < nmb; ib++) {
        int i0 = (int)((long)ib * m / nmb), mr = (int)((long)(ib + 1) * m / nmb) - i0;
        for (int jb = 0; jb < nnb; jb++) {
            int j0 = (int)((long)jb * n / nnb), nr = (int)((long)(jb + 1) * n / nnb) - j0;
            const uint16_t *br[6];
            for (int j = 0; j < nr; j++) br[j] = b + (boff ? boff[j0 + j] : (long)(j0 + j) * ldb);
            const uint16_t *ai = a + (long)i0 * lda;
            float *cij = c + (long)i0 * ldc + j0;
            const float *bs = bias ? bias + j0 : NULL;
            switch (mr * 8 + nr) {
                BF_NT_ROW(1) BF_NT_ROW(2) BF_NT_ROW(3) BF_NT_ROW(4)
            default: break;
            }
        }
    }
}
#endif /* K_BF16_X86 */

void k_bf16_operand_span(size_t n, const float *x, uint16_t *y)
{
#ifdef K_BF16_X86
    if (k_isa_bf16()) { operand_avx512bf16(n, x, y); return; }
#endif
    k_bf16_from_f32_span(n, x, y);
}

void k_bf16_gemm_nn(int m, int n, int kk, const uint16_t *ap, const float *b, long ldb, const long *boff,
                    float *c, long ldc, const float *bias, int acc, uint16_t *panel)
{
    if (m <= 0 || n <= 0) return;
#ifdef K_BF16_X86
    gemm_nn_avx512bf16(m, n, kk, ap, b, ldb, boff, c, ldc, bias, acc, panel);
#else
    (void)kk; (void)ap; (void)b; (void)ldb; (void)boff; (void)c; (void)ldc; (void)bias; (void)acc; (void)panel;
#endif
}

#ifdef K_BF16_X86
BF_TARGET static void compact_avx512(int m, int rows, int q, long wp, long ld, const float *src, float *dst)
{
    for (int k = 0; k < m; k++)
        for (int p = 0; p < rows; p++) {
            const float *s = src + k * ld + p * wp;
            float *d = dst + ((long)k * rows + p) * q;
            if (q < 16) {
                __mmask16 mk = (__mmask16)((1u << q) - 1);
                _mm512_mask_storeu_ps(d, mk, _mm512_maskz_loadu_ps(mk, s));
                continue;
            }
            int t = 0;
            for (; t + 16 <= q; t += 16) _mm512_storeu_ps(d + t, _mm512_loadu_ps(s + t));
            if (t < q) _mm512_storeu_ps(d + q - 16, _mm512_loadu_ps(s + q - 16)); /* overlaps back */
        }
}
#endif

void k_bf16_compact(int m, int rows, int q, long wp, long ld, const float *src, float *dst)
{
#ifdef K_BF16_X86
    if (k_isa_bf16()) { compact_avx512(m, rows, q, wp, ld, src, dst); return; }
#endif
    for (int k = 0; k < m; k++)
        for (int p = 0; p < rows; p++)
            memcpy(dst + ((long)k * rows + p) * q, src + k * ld + p * wp, sizeof(float) * (size_t)q);
}

void k_bf16_scatter_rows(int rows, int q, long wp, const float *src, uint16_t *dst)
{
#ifdef K_BF16_X86
    if (k_isa_bf16()) { scatter_rows_avx512bf16(rows, q, wp, src, dst); return; }
#endif
    for (int p = 0; p < rows; p++) {
        k_bf16_from_f32_span((size_t)q, src + (long)p * q, dst + p * wp);
        for (long t = q; t < wp; t++) dst[p * wp + t] = 0;
    }
}

void k_bf16_pad_image(int c, int h, int w, int pad, int hp, int wp, const float *x, uint16_t *out, long slack)
{
#ifdef K_BF16_X86
    if (k_isa_bf16()) {
        pad_image_avx512bf16(c, h, w, pad, hp, wp, x, out);
        memset(out + (long)c * hp * wp, 0, 2 * (size_t)slack);
        return;
    }
#endif
    for (int ch = 0; ch < c; ch++)
        for (int r = 0; r < hp; r++) {
            uint16_t *o = out + ((long)ch * hp + r) * wp;
            int ih = r - pad;
            if (ih < 0 || ih >= h) { memset(o, 0, 2 * (size_t)wp); continue; }
            memset(o, 0, 2 * (size_t)pad);
            k_bf16_operand_span((size_t)w, x + ((long)ch * h + ih) * w, o + pad);
            memset(o + pad + w, 0, 2 * (size_t)(wp - pad - w));
        }
    memset(out + (long)c * hp * wp, 0, 2 * (size_t)slack);
}

void k_bf16_pairs(long n, long dv, const uint16_t *in, uint32_t *pr)
{
#ifdef K_BF16_X86
    pairs_avx512bf16(n, dv, in, pr);
#else
    for (long i = 0; i < n; i++) pr[i] = in[i] | (uint32_t)in[i + 1] << 16;
    if (dv) for (long i = 0; i < n; i++) pr[n + i] = in[i] | (uint32_t)in[i + dv] << 16;
#endif
}

void k_bf16_gemm_pairs(int m, int n32, int npairs, const uint16_t *ap, const uint32_t *b, const long *boff, float *c,
                       long ldc, const float *bias, const k_bf16_win *wc)
{
#ifdef K_BF16_X86
    for (int j0 = 0; j0 < n32; j0 += 32)
        panel_rows(m, 32, 2 * npairs, ap, (const uint16_t *)(b + j0), boff, wc ? c : c + j0, ldc, bias, 0,
                   wc ? wc + j0 / 16 : NULL);
#else
    (void)m; (void)n32; (void)npairs; (void)ap; (void)b; (void)boff; (void)c; (void)ldc; (void)bias; (void)wc;
#endif
}

void k_bf16_pack_a_pairs(int m, int npairs, const float *a, long ars, long acs, const int *ta, const int *tb,
                         uint16_t *ap)
{
    int nmb = (m + K_BF16_MR - 1) / K_BF16_MR;
    for (int ib = 0; ib < nmb; ib++) {
        int i0 = (int)((long)ib * m / nmb), mr = (int)((long)(ib + 1) * m / nmb) - i0;
        uint16_t *o = ap + (size_t)ib * npairs * K_BF16_MR * 2;
        for (int p = 0; p < npairs; p++)
            for (int i = 0; i < K_BF16_MR; i++) {
                const float *ai = a + (long)(i0 + i) * ars;
                o[((size_t)p * K_BF16_MR + i) * 2] = i < mr ? rt_f32_to_bf16(ai[(long)ta[p] * acs]) : 0;
                o[((size_t)p * K_BF16_MR + i) * 2 + 1] = i < mr && tb[p] >= 0 ? rt_f32_to_bf16(ai[(long)tb[p] * acs]) : 0;
            }
    }
}

void k_bf16_gemm_nt(int m, int n, int l, int ng, const uint16_t *a, long lda, long a_img, const uint16_t *b,
                    const long *boff, long ldb, long b_img, float *c, long ldc, const float *bias, int acc)
{
    if (m <= 0 || n <= 0) return;
#ifdef K_BF16_X86
    gemm_nt_avx512bf16(m, n, l, ng, a, lda, a_img, b, boff, ldb, b_img, c, ldc, bias, acc);
#else
    (void)l; (void)ng; (void)a; (void)lda; (void)a_img; (void)b; (void)boff; (void)ldb; (void)b_img;
    (void)c; (void)ldc; (void)bias; (void)acc;
#endif
}

long k_bf16_pad_table(int c, int h, int w, int top, int left, long hp, long wp, long total, k_bf16_win *tab)
{
    long nwin = total / 32, e = 0, n = 0;
    for (long t = 0; t < nwin; t++) tab[t].mask = 0, tab[t].src = 0;
    for (int ch = 0; ch < c; ch++)
        for (long r = 0; r < hp; r++)
            for (long q = 0; q < wp; q++, e++) {
                if (e >= total) return nwin;
                if (e % 32 == 0) tab[e / 32].src = (int32_t)n;
                if (r < top || r >= top + h || q < left || q >= left + w) continue;
                tab[e / 32].mask |= 1u << (e % 32);
                n++;
            }
    for (; e < total; e++)
        if (e % 32 == 0) tab[e / 32].src = (int32_t)n;
    return nwin;
}

long k_bf16_compact_table(int rows, int q, long wp, long n32, k_bf16_win *tab)
{
    long nwin = n32 / 16, n = 0;
    for (long t = 0; t < nwin; t++) {
        tab[t].mask = 0, tab[t].src = (int32_t)n;
        for (long e = 16 * t; e < 16 * t + 16; e++)
            if (e < rows * wp && e % wp < q) tab[t].mask |= 1u << (e - 16 * t), n++;
    }
    return nwin;
}

#ifdef K_BF16_X86
BF_TARGET static void pad_expand_avx512(const k_bf16_win *tab, long nwin, const float *x, long nx, uint16_t *out)
{
    for (long t = 0; t < nwin; t++) {
        __m512i v = _mm512_setzero_si512();
        uint32_t m = tab[t].mask;
        if (m) {
            const float *s = x + tab[t].src;
            long left = nx - tab[t].src;
            if (left > 512) { /* the activations stream from memory: ask 2 KB ahead */
                _mm_prefetch((const char *)(s + 512), _MM_HINT_T0);
                _mm_prefetch((const char *)(s + 528), _MM_HINT_T0);
            }
            __m512 lo, hi;
            if (left >= 32) lo = _mm512_loadu_ps(s), hi = _mm512_loadu_ps(s + 16);
            else { /* the image's last window: never read past x + nx */
                lo = _mm512_maskz_loadu_ps(left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1), s);
                hi = left > 16 ? _mm512_maskz_loadu_ps((__mmask16)((1u << (left - 16)) - 1), s + 16)
                               : _mm512_setzero_ps();
            }
            v = _mm512_maskz_expand_epi16(m, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
        _mm512_storeu_si512((void *)(out + 32 * t), v);
    }
}

#endif

void k_bf16_pad_expand(const k_bf16_win *tab, long nwin, const float *x, long nx, uint16_t *out)
{
#ifdef K_BF16_X86
    pad_expand_avx512(tab, nwin, x, nx, out);
#else
    (void)tab; (void)nwin; (void)x; (void)nx; (void)out;
#endif
}


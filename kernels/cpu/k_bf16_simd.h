/* The AVX512-BF16 pieces that k_bf16.c (conv layouts) and k_bf16_gemm.c (the blocked
 * GEMM of the linear layers) share, and k_amx.c too: B panels of 32 columns with K pairs
 * interleaved (from B's rows, or from W^T's: pack_panel_t), the 12 x 32 micro-kernel
 * (vdpbf16ps, fp32 sums), a 16 x 16 transpose. Internal to kernels/cpu; only
 * for translation units that test k_isa_bf16() before calling. */
#ifndef K_BF16_SIMD_H
#define K_BF16_SIMD_H
#include "kernels/cpu/k_bf16.h"
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define K_BF16_X86 1
#endif

#ifdef K_BF16_X86
#define BF_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx512vbmi2")))
#define BF_INL static inline __attribute__((always_inline)) BF_TARGET

/* Rows k and k+1 of B, columns [j0, j0+nc), as 32 interleaved pairs (two vectors).
 * vcvtne2ps2bf16 rounds as rt_f32_to_bf16 except that it flushes subnormals to zero,
 * which vdpbf16ps does to its inputs anyway: the products are the same, at a third of
 * the instructions of the integer rounding. */
static const uint16_t pair_idx[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
BF_INL void pack_panel(int kk, int nc, const float *b, long ldb, const long *boff, uint16_t *panel)
{
    int c0 = nc > 16 ? 16 : nc, c1 = nc > 16 ? nc - 16 : 0;
    __mmask16 m[2] = {(__mmask16)((1u << c0) - 1), (__mmask16)((1u << c1) - 1)};
    const __m512i idx = _mm512_loadu_si512((const void *)pair_idx);
    int nv = c1 ? 2 : 1;
    for (int p = 0; p < (kk + 1) / 2; p++) {
        int k0 = 2 * p, k1 = k0 + 1;
        const float *r0 = b + (boff ? boff[k0] : k0 * ldb);
        const float *r1 = k1 < kk ? b + (boff ? boff[k1] : k1 * ldb) : NULL;
        if (nc == 32 && r1) { /* masked loads measured much slower on Zen 5: only for tails */
            for (int v = 0; v < 2; v++) {
                __m512i w = _mm512_permutexvar_epi16(
                    idx, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(r1 + 16 * v), _mm512_loadu_ps(r0 + 16 * v)));
                _mm512_storeu_si512((void *)(panel + (size_t)p * 64 + 32 * v), w);
            }
            continue;
        }
        for (int v = 0; v < nv; v++) {
            __m512 x0 = _mm512_maskz_loadu_ps(m[v], r0 + 16 * v);
            __m512 x1 = r1 ? _mm512_maskz_loadu_ps(m[v], r1 + 16 * v) : _mm512_setzero_ps();
            __m512i w = _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
            _mm512_storeu_si512((void *)(panel + (size_t)p * 64 + 32 * v), w);
        }
    }
}

BF_INL __m512bh bh(__m512i v) { return (__m512bh)v; }

/* Row i's two vectors compacted into c + i*ldc at the windows' counts (the caller's c
 * is the output image, ldc its plane): whole stores whose garbage tails later windows
 * of the same row overwrite; a store that would reach the next row is masked. */
BF_INL void store_compact(const int mr, __m512 (*s)[2], const k_bf16_win *wc, float *c, long ldc)
{
#pragma GCC unroll 2
    for (int v = 0; v < 2; v++) {
        __mmask16 mk = (__mmask16)wc[v].mask;
        if (!mk) continue;
        long d = wc[v].src;
        if (d + 16 <= ldc) {
#pragma GCC unroll 12
            for (int i = 0; i < mr; i++) _mm512_storeu_ps(c + i * ldc + d, _mm512_maskz_compress_ps(mk, s[i][v]));
        } else {
            __mmask16 head = (__mmask16)((1u << __builtin_popcount(mk)) - 1);
#pragma GCC unroll 12
            for (int i = 0; i < mr; i++)
                _mm512_mask_storeu_ps(c + i * ldc + d, head, _mm512_maskz_compress_ps(mk, s[i][v]));
        }
    }
}

BF_INL void ukr_nn(const int mr, int nc, int kp, const uint16_t *ap, const uint16_t *bp, const long *boff,
                   float *c, long ldc, const float *bias, const float *cbias, int acc, const k_bf16_win *wc)
{
    __m512 s[K_BF16_MR][2], cb[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    int c0 = nc > 16 ? 16 : nc, c1 = nc > 16 ? nc - 16 : 0;
    __mmask16 m0 = (__mmask16)((1u << c0) - 1), m1 = (__mmask16)((1u << c1) - 1);
    if (cbias && !acc) cb[0] = _mm512_maskz_loadu_ps(m0, cbias), cb[1] = _mm512_maskz_loadu_ps(m1, cbias + 16);
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) {
        if (acc && nc == 32) {
            s[i][0] = _mm512_loadu_ps(c + i * ldc);
            s[i][1] = _mm512_loadu_ps(c + i * ldc + 16);
        } else if (acc) {
            s[i][0] = _mm512_maskz_loadu_ps(m0, c + i * ldc);
            s[i][1] = _mm512_maskz_loadu_ps(m1, c + i * ldc + 16);
        } else if (cbias) {
            s[i][0] = cb[0];
            s[i][1] = cb[1];
        } else s[i][0] = s[i][1] = bias ? _mm512_set1_ps(bias[i]) : _mm512_setzero_ps();
    }
    const uint16_t *b0p = bp;
    for (int p = 0; p < kp; p++) {
        if (boff) bp = b0p + 2 * boff[p]; /* pair row p of a pair image (offsets in pairs) */
        __m512i b0 = _mm512_loadu_si512((const void *)bp), b1 = _mm512_loadu_si512((const void *)(bp + 32));
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++) {
            int32_t t;
            memcpy(&t, ap + 2 * i, sizeof t);
            __m512i a = _mm512_set1_epi32(t);
            s[i][0] = _mm512_dpbf16_ps(s[i][0], bh(a), bh(b0));
            s[i][1] = _mm512_dpbf16_ps(s[i][1], bh(a), bh(b1));
        }
        ap += 2 * K_BF16_MR;
        bp += 64;
    }
    if (wc) {
        store_compact(mr, s, wc, c, ldc);
        return;
    }
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) {
        if (nc == 32) {
            _mm512_storeu_ps(c + i * ldc, s[i][0]);
            _mm512_storeu_ps(c + i * ldc + 16, s[i][1]);
        } else {
            _mm512_mask_storeu_ps(c + i * ldc, m0, s[i][0]);
            if (m1) _mm512_mask_storeu_ps(c + i * ldc + 16, m1, s[i][1]);
        }
    }
}
/* 16 x 16 transpose of 32-bit lanes: r[i] lane j -> r[j] lane i. */
BF_INL void tr16(__m512i *r)
{
    __m512i t[16], u[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) { /* u[4i + c], 128-bit lane L: rows 4i..4i+3 of column 4L + c */
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        __m512i a0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88), a1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xDD);
        __m512i b0 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88), b1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xDD);
        r[c] = _mm512_shuffle_i32x4(a0, b0, 0x88);
        r[8 + c] = _mm512_shuffle_i32x4(a0, b0, 0xDD);
        r[4 + c] = _mm512_shuffle_i32x4(a1, b1, 0x88);
        r[12 + c] = _mm512_shuffle_i32x4(a1, b1, 0xDD);
    }
}
/* Up to 32 floats from x (cnt of them) as 16 bf16 pairs, pair p in 32-bit lane p. Full
 * loads unless at the tail (masked loads are slow on Zen 5). */
BF_INL __m512i pairs32(const float *x, int cnt)
{
    if (cnt >= 32) return (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x));
    __mmask16 m0 = (__mmask16)(cnt >= 16 ? 0xffff : (1u << cnt) - 1);
    __mmask16 m1 = (__mmask16)(cnt > 16 ? (1u << (cnt - 16)) - 1 : 0);
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, x + 16), _mm512_maskz_loadu_ps(m0, x));
}

/* B(k, j) = b[j*ldb + k] (W^T of nn.Linear's w[out][in]): 16 columns' runs of 32 K steps
 * transposed into 16 pair rows of the panel; lanes past nc left unset (never stored). */
BF_INL void pack_panel_t(int kk, int nc, const float *b, long ldb, uint16_t *panel)
{
    for (int h = 0; h < 2 && 16 * h < nc; h++) {
        int nr = nc - 16 * h < 16 ? nc - 16 * h : 16;
        const float *bh0 = b + (long)(16 * h) * ldb;
        for (int k = 0; k < kk; k += 32) {
            __m512i v[16];
            int cnt = kk - k;
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++) v[j] = j < nr ? pairs32(bh0 + (long)j * ldb + k, cnt) : _mm512_setzero_si512();
            tr16(v);
            int np = cnt >= 32 ? 16 : (cnt + 1) / 2;
            for (int q = 0; q < np; q++) _mm512_storeu_si512((void *)(panel + (size_t)(k / 2 + q) * 64 + 32 * h), v[q]);
        }
    }
}
#endif /* K_BF16_X86 */
#endif

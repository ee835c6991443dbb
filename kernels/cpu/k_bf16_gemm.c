/* The bf16 NN GEMM with cache blocking (k_bf16_gemm_blk) and the packing of A
 * (k_bf16_pack_a), for the linear layers under --amp bf16 (and the conv weights' A).
 * Blocking as k_gemm_simd.h's gemm_nn_pb: K chunks of BG_KC, N super-blocks of BG_NC
 * columns whose B is packed once per chunk (pair-interleaved 32-column panels, on the
 * stack), row groups of BG_GB blocks of A walked serpentine, N blocks of BG_NB columns
 * that the group's A slices (in L1) pass over. The unblocked form (k_bf16.c,
 * k_bf16_gemm_nn) streamed all of packed A from memory once per 32 columns.
 * Operands are rounded to bf16 as before (vcvtne2ps2bf16, round to nearest even) and
 * every C element is one fp32 sum in k order, stored and reloaded exactly between K
 * chunks: the bits do not depend on the blocking or on a caller's column split. */
#include "kernels/k.h"
#include "kernels/cpu/k_bf16.h"
#include "kernels/cpu/k_bf16_simd.h"
#include "kernels/cpu/k_int.h"
#include "rt/half.h"
#include <string.h>

size_t k_bf16_pack_a_elems(int m, int kk)
{
    size_t nmb = (size_t)(m + K_BF16_MR - 1) / K_BF16_MR;
    return nmb * K_BF16_MR * 2 * (size_t)((kk + 1) / 2);
}

static void pack_block_scalar(int mr, int kk, const float *a, long ars, long acs, uint16_t *o)
{
    for (int p = 0; p < (kk + 1) / 2; p++)
        for (int i = 0; i < K_BF16_MR; i++)
            for (int h = 0; h < 2; h++) {
                int k = 2 * p + h;
                o[((size_t)p * K_BF16_MR + i) * 2 + h] =
                    i < mr && k < kk ? rt_f32_to_bf16(a[(long)i * ars + (long)k * acs]) : 0;
            }
}

#ifdef K_BF16_X86
/* A block with rows contiguous along K (acs == 1): 32 K steps of the block's rows,
 * transposed so that pair p of all 12 rows is one vector (12 of its 16 lanes stored). */
BF_TARGET static void pack_block_rows(int mr, int kk, const float *a, long ars, uint16_t *o)
{
    for (int k = 0; k < kk; k += 32) {
        __m512i v[16];
        int cnt = kk - k;
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) v[i] = i < mr ? pairs32(a + (long)i * ars + k, cnt) : _mm512_setzero_si512();
        tr16(v);
        int np = cnt >= 32 ? 16 : (cnt + 1) / 2;
        for (int q = 0; q < np; q++) _mm512_mask_storeu_epi32(o + (size_t)(k / 2 + q) * K_BF16_MR * 2, 0x0fff, v[q]);
    }
}

/* A block with columns contiguous (ars == 1, e.g. dy^T or x^T for dW): rows 2p and
 * 2p+1 of the source interleaved into pair p. */
BF_TARGET static void pack_block_cols(int mr, int kk, int full, const float *a, long acs, uint16_t *o)
{
    const __m512i idx = _mm512_loadu_si512((const void *)pair_idx);
    __mmask16 mk = (__mmask16)((1u << mr) - 1);
    for (int p = 0; p < (kk + 1) / 2; p++) {
        const float *r0 = a + (long)(2 * p) * acs, *r1 = r0 + acs;
        __m512 x0, x1 = _mm512_setzero_ps();
        if (full) { /* whole loads, lanes past mr zeroed in registers (as the scalar pack) */
            x0 = _mm512_maskz_mov_ps(mk, _mm512_loadu_ps(r0));
            if (2 * p + 1 < kk) x1 = _mm512_maskz_mov_ps(mk, _mm512_loadu_ps(r1));
        } else {
            x0 = _mm512_maskz_loadu_ps(mk, r0);
            if (2 * p + 1 < kk) x1 = _mm512_maskz_loadu_ps(mk, r1);
        }
        __m512i w = _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
        _mm512_mask_storeu_epi32(o + (size_t)p * K_BF16_MR * 2, 0x0fff, w);
    }
}

#endif

void k_bf16_pack_a_blocks(int m, int kk, const float *a, long ars, long acs, int b0, int b1, uint16_t *ap)
{
    int nmb = (m + K_BF16_MR - 1) / K_BF16_MR, kp = (kk + 1) / 2;
    for (int ib = b0; ib < b1 && ib < nmb; ib++) {
        int i0 = (int)((long)ib * m / nmb), mr = (int)((long)(ib + 1) * m / nmb) - i0;
        uint16_t *o = ap + (size_t)ib * kp * K_BF16_MR * 2;
        const float *ai = a + (long)i0 * ars;
#ifdef K_BF16_X86
        if (k_isa_bf16() && acs == 1) { pack_block_rows(mr, kk, ai, ars, o); continue; }
        if (k_isa_bf16() && ars == 1) { pack_block_cols(mr, kk, i0 + 16 <= m, ai, acs, o); continue; }
#endif
        pack_block_scalar(mr, kk, ai, ars, acs, o);
    }
}

void k_bf16_pack_a(int m, int kk, const float *a, long ars, long acs, uint16_t *ap)
{
    k_bf16_pack_a_blocks(m, kk, a, ars, acs, 0, (m + K_BF16_MR - 1) / K_BF16_MR, ap);
}

#ifdef K_BF16_X86
#define BG_KC 512 /* K steps per chunk (even: chunks start on a pair) */
#define BG_NC 512
#define BG_NB 128
#define BG_GB 8
#define BG_CASE(M) case M: ukr_nn(M, nc, pc, apk, bpj, NULL, cij, ldc, NULL, cb, acc_k, NULL); break;
BF_TARGET static void ukr_any(int mr, int nc, int pc, const uint16_t *apk, const uint16_t *bpj, float *cij, long ldc,
                              const float *cb, int acc_k)
{
    switch (mr) {
        BG_CASE(1) BG_CASE(2) BG_CASE(3) BG_CASE(4) BG_CASE(5) BG_CASE(6)
        BG_CASE(7) BG_CASE(8) BG_CASE(9) BG_CASE(10) BG_CASE(11) BG_CASE(12)
    default: break;
    }
}

/* The B chunk buffer (BG_KC * BG_NC bf16, 512 KiB) lives in this frame, on the stack as
 * k_gemm_simd.h's gemm_nn_pb: no allocation, no static TLS. */
__attribute__((noinline)) BF_TARGET static void gemm_blk(int m, int n, int kk, const uint16_t *ap, const float *b,
                                                        long ldb, int bt, float *c, long ldc, const float *cbias,
                                                        int acc)
{
    _Alignas(64) uint16_t bp[BG_KC * BG_NC];
    int nmb = (m + K_BF16_MR - 1) / K_BF16_MR, ngr = (nmb + BG_GB - 1) / BG_GB, kp = (kk + 1) / 2;
    for (int k0 = 0; k0 < kk; k0 += BG_KC) {
        int kc = kk - k0 < BG_KC ? kk - k0 : BG_KC, pc = (kc + 1) / 2, acc_k = acc || k0 > 0;
        for (int js = 0; js < n; js += BG_NC) {
            int jn = n - js < BG_NC ? n - js : BG_NC;
            for (int j0 = 0; j0 < jn; j0 += 32) {
                int nc = jn - j0 < 32 ? jn - j0 : 32;
                uint16_t *pj = bp + (size_t)j0 * pc * 2;
                if (bt) pack_panel_t(kc, nc, b + (long)(js + j0) * ldb + k0, ldb, pj);
                else pack_panel(kc, nc, b + (long)k0 * ldb + js + j0, ldb, NULL, pj);
            }
            for (int gi = 0; gi < ngr; gi++) {
                /* every second super-block walks the groups backwards (A packed last still in L2) */
                int g0 = ((js / BG_NC) & 1 ? ngr - 1 - gi : gi) * BG_GB, g1 = nmb - g0 < BG_GB ? nmb : g0 + BG_GB;
                for (int jb = js; jb < js + jn; jb += BG_NB) {
                    int je = js + jn - jb < BG_NB ? js + jn : jb + BG_NB;
                    for (int ib = g0; ib < g1; ib++) {
                        int i0 = (int)((long)ib * m / nmb), mr = (int)((long)(ib + 1) * m / nmb) - i0;
                        const uint16_t *apk = ap + ((size_t)ib * kp + k0 / 2) * K_BF16_MR * 2;
                        for (int j0 = jb; j0 < je; j0 += 32)
                            ukr_any(mr, je - j0 < 32 ? je - j0 : 32, pc, apk, bp + (size_t)(j0 - js) * pc * 2,
                                    c + (long)i0 * ldc + j0, ldc, cbias && !acc_k ? cbias + j0 : NULL, acc_k);
                    }
                }
            }
        }
    }
}
#endif

void k_bf16_gemm_blk(int m, int n, int kk, const uint16_t *ap, const float *b, long ldb, int bt, float *c, long ldc,
                     const float *cbias, int acc)
{
    if (m <= 0 || n <= 0) return;
    if (kk <= 0) {
        if (!acc)
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) c[(long)i * ldc + j] = cbias ? cbias[j] : 0.0f;
        return;
    }
#ifdef K_BF16_X86
    gemm_blk(m, n, kk, ap, b, ldb, bt, c, ldc, cbias, acc);
#else
    (void)ap; (void)b; (void)ldb; (void)bt;
#endif
}

/* Conv dW with the taps broadcast (included from k_gemm_simd.h's template, once per ISA
 * level, with its tile macros in force). No header guard.
 *   C[t][k] (+)= sum over images g, columns j of B_g[boff[t] + j] * D_g[j][k]
 * B_g: an image's shifted rows (k_conv.c's xs, tap t's row at boff[t]), D_g: the
 * image's dy transposed (dy^T, j rows of k). The NN micro-kernel's shape with A's
 * elements broadcast straight from the tap rows (no packing: a tap row is contiguous
 * along j) and dy^T's rows as B: KT_MR taps x KT_NV vectors of filters, 12 sums on
 * AVX2, no horizontal sums and no tails along j (the NT form's dot products had both,
 * and each loaded vector served only 3-4 FMAs). Per C element: C (acc) or 0, then one
 * FMA per (g, j) in that order; j is cut into chunks whose dy^T rows stay in L1 while
 * every tap tile passes over them (C stored and reloaded exactly between chunks: the
 * bits do not depend on the chunking). */
KT_INL void ISA_FN(ukr_tb)(const int mr, const int full, int nc, int l, const float *b, const long *boff,
                           const float *d, long ldd, float *c, long ldc, int acc)
{
    kv s[12][2];
    const float *p[12];
    int cnt[2];
#pragma GCC unroll 2
    for (int v = 0; v < KT_NV; v++) {
        int r = nc - v * KV_W;
        cnt[v] = r < 0 ? 0 : r > KV_W ? KV_W : r;
    }
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) {
        p[i] = b + boff[i];
#pragma GCC unroll 2
        for (int v = 0; v < KT_NV; v++) {
            float *cp = c + i * ldc + v * KV_W;
            s[i][v] = !acc ? kv_zero() : full ? kv_load(cp) : kv_loadn(cp, cnt[v]);
        }
    }
#if ISA_X86 && ISA_VB == 32
#pragma GCC unroll 2
#endif
    for (int j = 0; j < l; j++, d += ldd) {
        kv bv[2];
#pragma GCC unroll 2
        for (int v = 0; v < KT_NV; v++) bv[v] = full ? kv_load(d + v * KV_W) : kv_loadn(d + v * KV_W, cnt[v]);
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++) {
            kv a = kv_set1(p[i][j]);
#pragma GCC unroll 2
            for (int v = 0; v < KT_NV; v++) s[i][v] = kv_fma(a, bv[v], s[i][v]);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) {
#pragma GCC unroll 2
        for (int v = 0; v < KT_NV; v++) {
            float *cp = c + i * ldc + v * KV_W;
            if (full) kv_store(cp, s[i][v]);
            else if (cnt[v]) kv_storen(cp, s[i][v], cnt[v]);
        }
    }
}

#define KT_TB_CASE(M)                                                                  \
    case M:                                                                            \
        if (full) ISA_FN(ukr_tb)(M, 1, nc, l, b, boff, d, ldd, c, ldc, acc);           \
        else ISA_FN(ukr_tb)(M, 0, nc, l, b, boff, d, ldd, c, ldc, acc);                \
        break;

ISA_TARGET static void ISA_FN(ukr_tb_any)(int mr, int nc, int l, const float *b, const long *boff, const float *d,
                                          long ldd, float *c, long ldc, int acc)
{
    int full = nc == KT_NV * KV_W;
    switch (mr) {
    KT_TB_CASE(1) KT_TB_CASE(2) KT_TB_CASE(3) KT_TB_CASE(4) KT_TB_CASE(5) KT_TB_CASE(6)
#if KT_MR > 6
    KT_TB_CASE(7) KT_TB_CASE(8) KT_TB_CASE(9) KT_TB_CASE(10) KT_TB_CASE(11) KT_TB_CASE(12)
#endif
    default: break;
    }
}

/* Floats of dy^T per chunk of j: 16 KiB, a third of L1, whatever the filter count. */
#define KT_TB_CH 4096
/* pf[2], pfn[2]: two regions to fetch into L2 (the conv's next x and dy, whose layouts
 * are built next and otherwise wait on these cold reads), a few lines per tile. */
ISA_TARGET static void ISA_FN(gemm_tb_off)(int m, int n, int l, int ng, const float *b, const long *boff, long b_img,
                                           const float *d, long ldd, float *c, long ldc, int acc,
                                           const void *const *pfp, const long *pfnp)
{
    const int cw = KT_NV * KV_W;
    int nmb = (m + KT_MR - 1) / KT_MR, jc = KT_TB_CH / (int)(ldd > 0 ? ldd : 1);
    if (jc < 8) jc = 8;
    long tiles = (long)ng * ((l + jc - 1) / jc) * nmb * ((n + cw - 1) / cw);
    const void *pf = pfp ? pfp[0] : NULL, *pf2 = pfp ? pfp[1] : NULL;
    long pfn = pfp ? pfnp[0] : 0, pfn2 = pfp ? pfnp[1] : 0;
    int per = (int)(((pfn + pfn2) / 64 + tiles) / tiles);
    for (int g = 0; g < ng; g++, b += b_img, d += (long)l * ldd)
        for (int j0 = 0; j0 < l; j0 += jc) {
            int nj = l - j0 < jc ? l - j0 : jc, acc_j = acc || g > 0 || j0 > 0;
            for (int ib = 0; ib < nmb; ib++) {
                int i0 = (int)((long)ib * m / nmb), mr = (int)((long)(ib + 1) * m / nmb) - i0;
                for (int k0 = 0; k0 < n; k0 += cw) {
                    KT_PF_STEP(per);
                    if (pfn <= 0 && pfn2 > 0) pf = pf2, pfn = pfn2, pfn2 = 0;
                    ISA_FN(ukr_tb_any)(mr, n - k0 < cw ? n - k0 : cw, nj, b + j0, boff + i0, d + (long)j0 * ldd + k0,
                                       ldd, c + (long)i0 * ldc + k0, ldc, acc_j);
                }
            }
        }
}

/* dst[j][i] = src[i][j] for i < rows, j < cols: 8x8 register transposes where the ISA
 * has them, the edges scalar (pure data movement: the bits of the scalar copy). */
ISA_TARGET static void ISA_FN(transpose)(int rows, int cols, const float *src, long lds, float *dst, long ldd)
{
    int i0 = 0;
#if ISA_X86 && ISA_VB >= 32 && defined(K_TR8)
    for (; i0 + 8 <= rows; i0 += 8) {
        int j0 = 0;
        for (; j0 + 8 <= cols; j0 += 8) {
            __m256 v[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) v[i] = _mm256_loadu_ps(src + (long)(i0 + i) * lds + j0);
            k_tr8(v);
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) _mm256_storeu_ps(dst + (long)(j0 + j) * ldd + i0, v[j]);
        }
        for (; j0 < cols; j0++)
            for (int i = 0; i < 8; i++) dst[(long)j0 * ldd + i0 + i] = src[(long)(i0 + i) * lds + j0];
    }
#endif
    for (; i0 < rows; i0++)
        for (int j = 0; j < cols; j++) dst[(long)j * ldd + i0] = src[(long)i0 * lds + j];
}

/* k_conv_wino.c's tile transforms, one template per ISA level (rt/isa_each.h). Tiles
 * of 2x2 outputs, tile tx covering padded columns 2tx..2tx+3, KVF_W tiles per vector:
 * lane l of a vector is tile tx + l. A plane's rows are first split into even and
 * odd columns, so that every tile column is a plain (unaligned) load. Vectors may run
 * past a row's last tile: stores there land in the next tile row's columns (written
 * after) or the region's slack, loads read the split rows' zeros or the slack (lanes
 * never stored to the output). Exact adds only, in one fixed
 * order per lane: the same bits whatever the vector width. */
#include "kernels/cpu/k_kv.h"
#include <string.h>

#define KW_(x) ISA_FN(x)
/* The first n (0..KVF_W) floats at p, zeros after; and the store of v's first n lanes:
 * the level's masked moves, which touch no memory past n. */
static inline __attribute__((always_inline)) ISA_TARGET kvf KW_(kw_ldn)(const float *p, int n)
{
#if ISA_X86 && ISA_VB == 64
    return (kvf)_mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
#elif ISA_X86 && ISA_VB == 32
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return (kvf)_mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), iota));
#else
    kvf v = {0};
    for (int l = 0; l < n; l++) v[l] = p[l];
    return v;
#endif
}
static inline __attribute__((always_inline)) ISA_TARGET void KW_(kw_stn)(float *p, kvf v, int n)
{
#if ISA_X86 && ISA_VB == 64
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), (__m512)v);
#elif ISA_X86 && ISA_VB == 32
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_maskstore_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), iota), (__m256)v);
#else
    for (int l = 0; l < n; l++) p[l] = v[l];
#endif
}
static inline int KW_(kw_clamp)(int n) { return n < 0 ? 0 : n > KVF_W ? KVF_W : n; }

/* Padded rows [pr0, pr1) of plane x (h x w; padded row pr is row pr - lpad, column
 * cl of it column cl - lpad; zero outside the plane), split into even columns
 * e[(pr - pr0)*ld + u] = column 2u and odd ones o[...] = column 2u + 1, u < ld; e
 * and o need KVF_W floats of slack after their last row. */
static ISA_TARGET void ISA_FN(k_wino_split)(const float *x, int h, int w, int lpad, int pr0, int pr1, long ld,
                                            float *e, float *o)
{
    const kvi ev = KVF_EV, od = KVF_OD;
    const kvf z = {0};
    for (int pr = pr0; pr < pr1; pr++) {
        float *er = e + (pr - pr0) * ld, *orow = o + (pr - pr0) * ld;
        int r = pr - lpad;
        long u = 0, ze = 0; /* e's zeros start at ze, o's at u */
        if (r >= 0 && r < h) {
            /* lpad 1: e[u + 1] = xr[2u + 1], o[u] = xr[2u]; lpad 0: e[u] = xr[2u], o[u] = xr[2u + 1] */
            const float *xr = x + (long)r * w;
            float *de = lpad ? orow : er, *dod = lpad ? er + 1 : orow;
            for (; 2 * u < w; u += KVF_W) {
                int n = w - 2 * (int)u;
                kvf a = KW_(kw_ldn)(xr + 2 * u, KW_(kw_clamp)(n)), b = KW_(kw_ldn)(xr + 2 * u + KVF_W, KW_(kw_clamp)(n - KVF_W));
                kvf_st(de + u, __builtin_shuffle(a, b, ev));
                kvf_st(dod + u, __builtin_shuffle(a, b, od));
            }
            if (lpad) er[0] = 0.0f;
            ze = u + lpad;
        }
        /* zeros past the row (KVF_W-wide: the caller leaves KVF_W floats of slack) */
        for (long zu = ze; zu < ld; zu += KVF_W) kvf_st(er + zu, z);
        for (long zu = u; zu < ld; zu += KVF_W) kvf_st(orow + zu, z);
    }
}

/* Input tiles of tile rows [0, nty) of split rows e, o (k_wino_split, lpad 1, from
 * padded row 2*ty0): v[xi*vs + ty*ntx + tx] = (B^T d B)[xi] for the 4x4 tile d at
 * padded rows 2ty.., columns 2tx..; B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]. */
static ISA_TARGET void ISA_FN(k_wino_in_tiles)(const float *e, const float *o, long ld, int nty, int ntx, float *v,
                                               long vs)
{
    for (int ty = 0; ty < nty; ty++)
        for (int t = 0; t < ntx; t += KVF_W)
            /* B^T's rows 0, 1 read tile rows 0..2, rows 2, 3 read 1..3: two halves of 8
             * live vectors each (all 16 at once spill on AVX2's 16 registers) */
            for (int half = 0; half < 2; half++) {
                kvf a[2][4]; /* (B^T d)[2*half + i][column j] */
                for (int j = 0; j < 4; j++) {
                    const float *src = (j & 1 ? o : e) + (2 * ty + half) * ld + t + (j >> 1);
                    kvf d0 = kvf_ld(src), d1 = kvf_ld(src + ld), d2 = kvf_ld(src + 2 * ld);
                    if (half == 0) { /* d0..d2: tile rows 0..2 */
                        a[0][j] = d0 - d2;
                        a[1][j] = d1 + d2;
                    } else { /* d0..d2: tile rows 1..3 */
                        a[0][j] = d1 - d0;
                        a[1][j] = d0 - d2;
                    }
                }
                float *out = v + (long)(8 * half) * vs + (long)ty * ntx + t;
                for (int i = 0; i < 2; i++) {
                    float *oi = out + (long)(4 * i) * vs;
                    kvf_st(oi, a[i][0] - a[i][2]);
                    kvf_st(oi + vs, a[i][1] + a[i][2]);
                    kvf_st(oi + 2 * vs, a[i][2] - a[i][1]);
                    kvf_st(oi + 3 * vs, a[i][1] - a[i][3]);
                }
            }
}

/* dW's output-gradient tiles of tile rows [0, nty) of split rows e, o (lpad 0):
 * v[xi*vs + ty*ntx + tx] = (A g A^T)[xi] for the 2x2 tile g at rows 2ty.., columns
 * 2tx..; A = [1 0; 1 1; 1 -1; 0 -1], the transpose of the output transform. */
static ISA_TARGET void ISA_FN(k_wino_dy_tiles)(const float *e, const float *o, long ld, int nty, int ntx, float *v,
                                               long vs)
{
    for (int ty = 0; ty < nty; ty++)
        for (int t = 0; t < ntx; t += KVF_W) {
            const float *e0p = e + (2 * ty) * ld + t, *o0p = o + (2 * ty) * ld + t;
            kvf e0 = kvf_ld(e0p), o0 = kvf_ld(o0p), e1 = kvf_ld(e0p + ld), o1 = kvf_ld(o0p + ld);
            kvf ue[4] = {e0, e0 + e1, e0 - e1, -e1}, uo[4] = {o0, o0 + o1, o0 - o1, -o1};
            float *out = v + (long)ty * ntx + t;
            for (int i = 0; i < 4; i++) {
                float *oi = out + (long)(4 * i) * vs;
                kvf_st(oi, ue[i]);
                kvf_st(oi + vs, ue[i] + uo[i]);
                kvf_st(oi + 2 * vs, ue[i] - uo[i]);
                kvf_st(oi + 3 * vs, -uo[i]);
            }
        }
}

/* Output tile row ty of plane y (p x q): y = A^T m A + bias, m[xi] at m + xi*ms + tx;
 * A^T = [1 1 1 0; 0 1 -1 -1]. */
static ISA_TARGET void ISA_FN(k_wino_out_row)(const float *m, long ms, float bias, float *y, int p, int q, int ty,
                                              int ntx)
{
    const kvi ilo = KVF_ILO, ihi = KVF_IHI;
    int two = 2 * ty + 1 < p; /* the tile row's second output row exists */
    float *y0 = y + (long)(2 * ty) * q, *y1 = y0 + q;
    for (int t = 0; t < ntx; t += KVF_W) {
        kvf s[4][2]; /* (A^T m)[row i of 2][column j of 4]: vertical pass first */
        for (int j = 0; j < 4; j++) {
            kvf m0 = kvf_ld(m + j * ms + t), m1 = kvf_ld(m + (4 + j) * ms + t);
            kvf m2 = kvf_ld(m + (8 + j) * ms + t), m3 = kvf_ld(m + (12 + j) * ms + t);
            s[j][0] = m0 + m1 + m2;
            s[j][1] = m1 - m2 - m3;
        }
        kvf rows[2][2];
        for (int i = 0; i < 2; i++) {
            kvf a = s[0][i] + s[1][i] + s[2][i] + bias, b = s[1][i] - s[2][i] - s[3][i] + bias;
            rows[i][0] = __builtin_shuffle(a, b, ilo); /* columns 2tx, 2tx+1 interleaved */
            rows[i][1] = __builtin_shuffle(a, b, ihi);
        }
        int c0 = 2 * t;
        for (int i = 0; i <= two; i++) {
            float *dst = i ? y1 : y0;
            if (c0 + 2 * KVF_W <= q) {
                kvf_st(dst + c0, rows[i][0]);
                kvf_st(dst + c0 + KVF_W, rows[i][1]);
            } else { /* the row's tail: only the plane's columns */
                KW_(kw_stn)(dst + c0, rows[i][0], KW_(kw_clamp)(q - c0));
                KW_(kw_stn)(dst + c0 + KVF_W, rows[i][1], KW_(kw_clamp)(q - c0 - KVF_W));
            }
        }
    }
}

#include "kernels/cpu/k_conv_wino4_simd.h"

#undef KW_
#include "kernels/cpu/k_kv_undef.h"

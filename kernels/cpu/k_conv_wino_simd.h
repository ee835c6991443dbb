/* k_conv_wino.c's tile transforms, one template per ISA level (rt/isa_each.h). Tiles
 * of 2x2 outputs, tile tx covering padded columns 2tx..2tx+3, KW tiles per vector:
 * lane l of a vector is tile tx + l. A plane's rows are first split into even and
 * odd columns, so that every tile column is a plain (unaligned) load. Vectors may run
 * past a row's last tile: stores there land in the next tile row's columns (written
 * after) or the region's slack, loads read the split rows' zeros or the slack (lanes
 * never stored to the output). Exact adds only, in one fixed
 * order per lane: the same bits whatever the vector width. */
#include <string.h>

#define KW_(x) ISA_FN(x)
#define KW (ISA_VB / 4)
typedef float KW_(kw_vf) __attribute__((vector_size(ISA_VB)));
typedef int32_t KW_(kw_vi) __attribute__((vector_size(ISA_VB)));

#if KW == 4
#define KW_EV {0, 2, 4, 6}
#define KW_OD {1, 3, 5, 7}
#define KW_ILO {0, 4, 1, 5}
#define KW_IHI {2, 6, 3, 7}
#elif KW == 8
#define KW_EV {0, 2, 4, 6, 8, 10, 12, 14}
#define KW_OD {1, 3, 5, 7, 9, 11, 13, 15}
#define KW_ILO {0, 8, 1, 9, 2, 10, 3, 11}
#define KW_IHI {4, 12, 5, 13, 6, 14, 7, 15}
#else
#define KW_EV {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30}
#define KW_OD {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}
#define KW_ILO {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23}
#define KW_IHI {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31}
#endif

static inline ISA_TARGET KW_(kw_vf) KW_(kw_ld)(const float *p)
{
    KW_(kw_vf) v;
    memcpy(&v, p, ISA_VB);
    return v;
}
static inline ISA_TARGET void KW_(kw_st)(float *p, KW_(kw_vf) v) { memcpy(p, &v, ISA_VB); }

/* The first n (0..KW) floats at p, zeros after; and the store of v's first n lanes:
 * the level's masked moves, which touch no memory past n. */
static inline __attribute__((always_inline)) ISA_TARGET KW_(kw_vf) KW_(kw_ldn)(const float *p, int n)
{
#if ISA_X86 && ISA_VB == 64
    return (KW_(kw_vf))_mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
#elif ISA_X86 && ISA_VB == 32
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return (KW_(kw_vf))_mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), iota));
#else
    KW_(kw_vf) v = {0};
    for (int l = 0; l < n; l++) v[l] = p[l];
    return v;
#endif
}
static inline __attribute__((always_inline)) ISA_TARGET void KW_(kw_stn)(float *p, KW_(kw_vf) v, int n)
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
static inline int KW_(kw_clamp)(int n) { return n < 0 ? 0 : n > KW ? KW : n; }

/* Padded rows [pr0, pr1) of plane x (h x w; padded row pr is row pr - lpad, column
 * cl of it column cl - lpad; zero outside the plane), split into even columns
 * e[(pr - pr0)*ld + u] = column 2u and odd ones o[...] = column 2u + 1, u < ld; e
 * and o need KW floats of slack after their last row. */
static ISA_TARGET void ISA_FN(k_wino_split)(const float *x, int h, int w, int lpad, int pr0, int pr1, long ld,
                                            float *e, float *o)
{
    const KW_(kw_vi) ev = KW_EV, od = KW_OD;
    const KW_(kw_vf) z = {0};
    for (int pr = pr0; pr < pr1; pr++) {
        float *er = e + (pr - pr0) * ld, *orow = o + (pr - pr0) * ld;
        int r = pr - lpad;
        long u = 0, ze = 0; /* e's zeros start at ze, o's at u */
        if (r >= 0 && r < h) {
            /* lpad 1: e[u + 1] = xr[2u + 1], o[u] = xr[2u]; lpad 0: e[u] = xr[2u], o[u] = xr[2u + 1] */
            const float *xr = x + (long)r * w;
            float *de = lpad ? orow : er, *dod = lpad ? er + 1 : orow;
            for (; 2 * u < w; u += KW) {
                int n = w - 2 * (int)u;
                KW_(kw_vf) a = KW_(kw_ldn)(xr + 2 * u, KW_(kw_clamp)(n)), b = KW_(kw_ldn)(xr + 2 * u + KW, KW_(kw_clamp)(n - KW));
                KW_(kw_st)(de + u, __builtin_shuffle(a, b, ev));
                KW_(kw_st)(dod + u, __builtin_shuffle(a, b, od));
            }
            if (lpad) er[0] = 0.0f;
            ze = u + lpad;
        }
        /* zeros past the row (KW-wide: the caller leaves KW floats of slack) */
        for (long zu = ze; zu < ld; zu += KW) KW_(kw_st)(er + zu, z);
        for (long zu = u; zu < ld; zu += KW) KW_(kw_st)(orow + zu, z);
    }
}

/* Input tiles of tile rows [0, nty) of split rows e, o (k_wino_split, lpad 1, from
 * padded row 2*ty0): v[xi*vs + ty*ntx + tx] = (B^T d B)[xi] for the 4x4 tile d at
 * padded rows 2ty.., columns 2tx..; B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]. */
static ISA_TARGET void ISA_FN(k_wino_in_tiles)(const float *e, const float *o, long ld, int nty, int ntx, float *v,
                                               long vs)
{
    for (int ty = 0; ty < nty; ty++)
        for (int t = 0; t < ntx; t += KW)
            /* B^T's rows 0, 1 read tile rows 0..2, rows 2, 3 read 1..3: two halves of 8
             * live vectors each (all 16 at once spill on AVX2's 16 registers) */
            for (int half = 0; half < 2; half++) {
                KW_(kw_vf) a[2][4]; /* (B^T d)[2*half + i][column j] */
                for (int j = 0; j < 4; j++) {
                    const float *src = (j & 1 ? o : e) + (2 * ty + half) * ld + t + (j >> 1);
                    KW_(kw_vf) d0 = KW_(kw_ld)(src), d1 = KW_(kw_ld)(src + ld), d2 = KW_(kw_ld)(src + 2 * ld);
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
                    KW_(kw_st)(oi, a[i][0] - a[i][2]);
                    KW_(kw_st)(oi + vs, a[i][1] + a[i][2]);
                    KW_(kw_st)(oi + 2 * vs, a[i][2] - a[i][1]);
                    KW_(kw_st)(oi + 3 * vs, a[i][1] - a[i][3]);
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
        for (int t = 0; t < ntx; t += KW) {
            const float *e0p = e + (2 * ty) * ld + t, *o0p = o + (2 * ty) * ld + t;
            KW_(kw_vf) e0 = KW_(kw_ld)(e0p), o0 = KW_(kw_ld)(o0p), e1 = KW_(kw_ld)(e0p + ld), o1 = KW_(kw_ld)(o0p + ld);
            KW_(kw_vf) ue[4] = {e0, e0 + e1, e0 - e1, -e1}, uo[4] = {o0, o0 + o1, o0 - o1, -o1};
            float *out = v + (long)ty * ntx + t;
            for (int i = 0; i < 4; i++) {
                float *oi = out + (long)(4 * i) * vs;
                KW_(kw_st)(oi, ue[i]);
                KW_(kw_st)(oi + vs, ue[i] + uo[i]);
                KW_(kw_st)(oi + 2 * vs, ue[i] - uo[i]);
                KW_(kw_st)(oi + 3 * vs, -uo[i]);
            }
        }
}

/* Output tile row ty of plane y (p x q): y = A^T m A + bias, m[xi] at m + xi*ms + tx;
 * A^T = [1 1 1 0; 0 1 -1 -1]. */
static ISA_TARGET void ISA_FN(k_wino_out_row)(const float *m, long ms, float bias, float *y, int p, int q, int ty,
                                              int ntx)
{
    const KW_(kw_vi) ilo = KW_ILO, ihi = KW_IHI;
    int two = 2 * ty + 1 < p; /* the tile row's second output row exists */
    float *y0 = y + (long)(2 * ty) * q, *y1 = y0 + q;
    for (int t = 0; t < ntx; t += KW) {
        KW_(kw_vf) s[4][2]; /* (A^T m)[row i of 2][column j of 4]: vertical pass first */
        for (int j = 0; j < 4; j++) {
            KW_(kw_vf) m0 = KW_(kw_ld)(m + j * ms + t), m1 = KW_(kw_ld)(m + (4 + j) * ms + t);
            KW_(kw_vf) m2 = KW_(kw_ld)(m + (8 + j) * ms + t), m3 = KW_(kw_ld)(m + (12 + j) * ms + t);
            s[j][0] = m0 + m1 + m2;
            s[j][1] = m1 - m2 - m3;
        }
        KW_(kw_vf) rows[2][2];
        for (int i = 0; i < 2; i++) {
            KW_(kw_vf) a = s[0][i] + s[1][i] + s[2][i] + bias, b = s[1][i] - s[2][i] - s[3][i] + bias;
            rows[i][0] = __builtin_shuffle(a, b, ilo); /* columns 2tx, 2tx+1 interleaved */
            rows[i][1] = __builtin_shuffle(a, b, ihi);
        }
        int c0 = 2 * t;
        for (int i = 0; i <= two; i++) {
            float *dst = i ? y1 : y0;
            if (c0 + 2 * KW <= q) {
                KW_(kw_st)(dst + c0, rows[i][0]);
                KW_(kw_st)(dst + c0 + KW, rows[i][1]);
            } else { /* the row's tail: only the plane's columns */
                KW_(kw_stn)(dst + c0, rows[i][0], KW_(kw_clamp)(q - c0));
                KW_(kw_stn)(dst + c0 + KW, rows[i][1], KW_(kw_clamp)(q - c0 - KW));
            }
        }
    }
}

#include "kernels/cpu/k_conv_wino4_simd.h"

#undef KW_
#undef KW
#undef KW_EV
#undef KW_OD
#undef KW_ILO
#undef KW_IHI

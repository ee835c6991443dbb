/* k_conv_winoc.c's F(4x4, 3x3) transforms on channels-last planes, one template per
 * ISA level (rt/isa_each.h): a vector holds KVF_W consecutive channels of one pixel, so
 * every lane is used whatever the plane's size (the planar kernels' vectors run along
 * a tile row: 2 of 8 lanes on a 7x7 plane). Channel counts are multiples of KVF_W. The
 * arithmetic is k_wino4_math.h's, per lane, as in k_conv_wino4_simd.h. */
#include "kernels/cpu/k_kv.h"
#include "kernels/cpu/k_wino4_math.h"
#include <string.h>

#define KC_(x) ISA_FN(x)
/* Planes <-> a frame of pixels: pixel (r, c) of an h x w image at x + ((r + pad) * pw + c +
 * pad) * ch, its ch channels contiguous; img: ch planes of h * w. to_frame: img -> x, else
 * x -> img (the frame's other pixels are neither read nor written). One pass, 8x8 register
 * transposes where the ISA has them (the transpose into a packed buffer, then row copies
 * into the frame, took two). Pure data movement: the bits of a scalar copy. */
static ISA_TARGET void ISA_FN(k_winoc_frame)(const int to_frame, int ch, int h, int w, float *img, float *x, int pw,
                                             int pad)
{
    const long hw = (long)h * w;
    int i0 = 0;
#if ISA_X86 && ISA_VB >= 32 && defined(K_TR8)
    for (; i0 + 8 <= ch; i0 += 8) {
        long j0 = 0;
        int r = 0, c = 0; /* pixel j0's row and column */
        float *pl = img + (long)i0 * hw;
        for (; j0 + 8 <= hw; j0 += 8) {
            float *px[8];
            __m256 v[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                px[j] = x + ((long)(r + pad) * pw + c + pad) * ch + i0;
                if (++c == w) c = 0, r++;
            }
            if (to_frame) {
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++) v[i] = _mm256_loadu_ps(pl + i * hw + j0);
                k_tr8(v);
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) _mm256_storeu_ps(px[j], v[j]);
            } else {
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) v[j] = _mm256_loadu_ps(px[j]);
                k_tr8(v);
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++) _mm256_storeu_ps(pl + i * hw + j0, v[i]);
            }
        }
        for (; j0 < hw; j0++) {
            float *p = x + ((long)(r + pad) * pw + c + pad) * ch + i0;
            for (int i = 0; i < 8; i++) {
                if (to_frame) p[i] = pl[i * hw + j0];
                else pl[i * hw + j0] = p[i];
            }
            if (++c == w) c = 0, r++;
        }
    }
#endif
    for (int r = 0; r < h; r++)
        for (int c = 0; c < w; c++) {
            float *p = x + ((long)(r + pad) * pw + c + pad) * ch;
            for (int i = i0; i < ch; i++) {
                if (to_frame) p[i] = img[i * hw + (long)r * w + c];
                else img[i * hw + (long)r * w + c] = p[i];
            }
        }
}

/* ---- The tile transforms, separable: T d T^T per tile for a 1-D transform T of NI
 * values into NO (wc_t1's kinds):
 *   0 K4_BT  6 -> 6  F(4x4)'s input (forward, dX; dW's input at F(4x4))
 *   1 K2_BT  4 -> 4  F(2x2)'s input (dW), B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
 *   2 K2_AG  2 -> 4  F(2x2) dW's output gradient, A = [1 0; 1 1; 1 -1; 0 -1] (k_winoc_dy2)
 *   3 K4_AG  4 -> 6  F(4x4) dW's output gradient, A = [1 0 0 0; 1 1 1 1; 1 -1 1 -1;
 *                    1 2 4 8; 1 -2 4 -8; 0 0 0 1] (the transpose of the output transform)
 * Per lane the planar kernels' arithmetic (k_conv_wino_simd.h, k_conv_wino4_simd.h). */
#define K2_BT(d, r)                                                                                                  \
    do {                                                                                                             \
        r[0] = d[0] - d[2];                                                                                          \
        r[1] = d[1] + d[2];                                                                                          \
        r[2] = d[2] - d[1];                                                                                          \
        r[3] = d[1] - d[3];                                                                                          \
    } while (0)
#define K2_AG(g, r)                                                                                                  \
    do {                                                                                                             \
        r[0] = g[0];                                                                                                 \
        r[1] = g[0] + g[1];                                                                                          \
        r[2] = g[0] - g[1];                                                                                          \
        r[3] = -g[1];                                                                                                \
    } while (0)
#define K4_AG(g, r)                                                                                                  \
    do {                                                                                                             \
        __typeof__(g[0]) e02 = g[0] + g[2], o13 = g[1] + g[3], e4 = g[0] + 4.0f * g[2], o8 = 2.0f * g[1] + 8.0f * g[3]; \
        r[0] = g[0];                                                                                                 \
        r[1] = e02 + o13;                                                                                            \
        r[2] = e02 - o13;                                                                                            \
        r[3] = e4 + o8;                                                                                              \
        r[4] = e4 - o8;                                                                                              \
        r[5] = g[3];                                                                                                 \
    } while (0)
static inline __attribute__((always_inline)) ISA_TARGET void KC_(wc_t1)(const int kind, const kvf *d,
                                                                        kvf *r)
{
    switch (kind) {
    case 0: K4_BT(d, r); break;
    case 1: K2_BT(d, r); break;
    case 2: K2_AG(d, r); break;
    default: K4_AG(d, r); break;
    }
}

/* nt tiles side by side: tile t's ni x ni block at x + step*t*c (pixels c floats apart,
 * rows xrow apart) -> v[xi*vs + t*c + channel] = (T d T^T)[xi], xi = no*i + j. The row
 * pass (T d, a column at a time) goes through tm (in L1: 16 ymm cannot hold 36 vectors);
 * where tiles overlap (step < ni) a tile's last ni - step columns are the next one's
 * first, passed once. */
static inline __attribute__((always_inline)) ISA_TARGET void KC_(wc_tiles)(const int kind, const int ni, const int no,
                                                                           const int step, const float *x, long xrow,
                                                                           int c, int nt, float *v, long vs)
{
    kvf tm[6][6];
    for (int c0 = 0; c0 < c; c0 += KVF_W)
        for (int t = 0; t < nt; t++) {
            const float *src = x + (long)(step * t) * c + c0;
            int j0 = t > 0 ? ni - step : 0;
#pragma GCC unroll 6
            for (int i = 0; i < no; i++)
#pragma GCC unroll 6
                for (int j = 0; j < j0; j++) tm[i][j] = tm[i][j + step];
#pragma GCC unroll 6
            for (int j = j0; j < ni; j++) {
                kvf d[6], r[6];
#pragma GCC unroll 6
                for (int i = 0; i < ni; i++) d[i] = kvf_ld(src + i * xrow + (long)j * c);
                KC_(wc_t1)(kind, d, r);
#pragma GCC unroll 6
                for (int i = 0; i < no; i++) tm[i][j] = r[i];
            }
            float *out = v + (long)t * c + c0;
#pragma GCC unroll 6
            for (int i = 0; i < no; i++) {
                kvf r[6];
                KC_(wc_t1)(kind, tm[i], r);
#pragma GCC unroll 6
                for (int j = 0; j < no; j++) kvf_st(out + (no * i + j) * vs, r[j]);
            }
        }
}

static ISA_TARGET void ISA_FN(k_winoc_in)(const float *x, long xrow, int c, int nt, float *v, long vs)
{
    KC_(wc_tiles)(0, 6, 6, 4, x, xrow, c, nt, v, vs);
}
static ISA_TARGET void ISA_FN(k_winoc_in2)(const float *x, long xrow, int c, int nt, float *v, long vs)
{
    KC_(wc_tiles)(1, 4, 4, 2, x, xrow, c, nt, v, vs);
}
/* (T: K2_AG; in registers, 2x2 in: faster than wc_tiles' staging, the same bits) */
static ISA_TARGET void ISA_FN(k_winoc_dy2)(const float *g, long grow, int k, int nt, float *d, long ds)
{
    for (int t = 0; t < nt; t++)
        for (int k0 = 0; k0 < k; k0 += KVF_W) {
            const float *src = g + (long)(2 * t) * k + k0;
            kvf c0[2] = {kvf_ld(src), kvf_ld(src + grow)};
            kvf c1[2] = {kvf_ld(src + k), kvf_ld(src + grow + k)}, ue[4], uo[4];
            K2_AG(c0, ue);
            K2_AG(c1, uo);
            float *out = d + (long)t * k + k0;
            for (int i = 0; i < 4; i++) {
                kvf pr[2] = {ue[i], uo[i]}, r[4];
                K2_AG(pr, r);
                for (int j = 0; j < 4; j++) kvf_st(out + (4 * i + j) * ds, r[j]);
            }
        }
}
static ISA_TARGET void ISA_FN(k_winoc_dy4)(const float *g, long grow, int k, int nt, float *d, long ds)
{
    KC_(wc_tiles)(3, 4, 6, 4, g, grow, k, nt, d, ds);
}

/* nt tiles side by side: m[xi*ms + t*k + channel] -> the 4x4 outputs A^T m A + bias
 * (bias: k floats or NULL) at y + 4t*k (pixels k floats apart, rows yrow apart). */
static ISA_TARGET void ISA_FN(k_winoc_out)(const float *m, long ms, int k, const float *bias, int nt, float *y,
                                           long yrow)
{
    kvf tm[4][6];
    for (int t = 0; t < nt; t++)
        for (int k0 = 0; k0 < k; k0 += KVF_W) {
            const float *src = m + (long)t * k + k0;
            kvf b = {0};
            if (bias) b = kvf_ld(bias + k0);
#pragma GCC unroll 6
            for (int j = 0; j < 6; j++) {
                kvf c6[6], o[4];
#pragma GCC unroll 6
                for (int i = 0; i < 6; i++) c6[i] = kvf_ld(src + (6 * i + j) * ms);
                K4_AT(c6, o);
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++) tm[i][j] = o[i];
            }
            float *dst = y + (long)(4 * t) * k + k0;
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                kvf o[4];
                K4_AT(tm[i], o);
#pragma GCC unroll 4
                for (int jj = 0; jj < 4; jj++) kvf_st(dst + i * yrow + (long)jj * k, o[jj] + b);
            }
        }
}


/* U[xi][c][k] = (G g G^T)[xi] at u + xi*ux + c*ko + k for the filters g (k, c) at w +
 * k*ks + c*cs (taps flipped when `flip`: the dX conv's W^T), KVF_W filters k a vector:
 * k_wino4_weights' arithmetic, a multiple of KVF_W filters k. */
static ISA_TARGET void ISA_FN(k_winoc_weights)(int ko, int ci, const float *w, long ks, long cs, int flip, float *u,
                                               long ux)
{
    static const float G[6][3] = K4_G_INIT;
    for (int c = 0; c < ci; c++)
        for (int k0 = 0; k0 < ko; k0 += KVF_W) {
            kvf g[9], t[6][3];
            for (int e = 0; e < 9; e++) {
                float lane[KVF_W];
                for (int l = 0; l < KVF_W; l++) lane[l] = w[(k0 + l) * ks + c * cs + (flip ? 8 - e : e)];
                g[e] = kvf_ld(lane);
            }
            for (int i = 0; i < 6; i++)
                for (int s = 0; s < 3; s++) t[i][s] = G[i][0] * g[s] + G[i][1] * g[3 + s] + G[i][2] * g[6 + s];
            float *o = u + (long)c * ko + k0;
            for (int i = 0; i < 6; i++)
                for (int j = 0; j < 6; j++)
                    kvf_st(o + (6 * i + j) * ux, t[i][0] * G[j][0] + t[i][1] * G[j][1] + t[i][2] * G[j][2]);
        }
}

/* ---- The GEMMs, on operands read in place (no packing: a packed copy cost more than
 * the FMAs at 16-64 channels). C[m x n] (acc: +=) A B with B and C row-major (n a
 * multiple of KV_W) and A(i, k) = a[i*lda + k] (tn 0: the forward's and dX's M[xi] =
 * V[xi] U[xi], A the tiles' rows) or a[k*lda + i] (tn 1: dW's S[xi] += D[xi]^T V[xi],
 * summed over the tiles k). Per element C (or 0), then one FMA per k in k order,
 * whatever the blocking. Micro-tile: WC_MR rows x WC_NV vectors (AVX2 6 x 2: 12 sums
 * of 16 ymm; AVX-512 12 x 2; generic 6 x 2). */
#if ISA_X86 && ISA_VB == 64
#define WC_MR 12
#else
#define WC_MR 6
#endif
KT_INL void ISA_FN(wc_ukr)(const int mr, const int nv, const int tn, int kk, const float *a, long lda, const float *b,
                           long ldb, float *c, long ldc, int acc)
{
    kv s[WC_MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) s[i][v] = acc ? kv_load(c + i * ldc + v * KV_W) : kv_zero();
    for (int k = 0; k < kk; k++, b += ldb) {
        kv b0 = kv_load(b), b1 = nv > 1 ? kv_load(b + KV_W) : b0;
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++) {
            kv ai = kv_set1(tn ? a[k * lda + i] : a[i * lda + k]);
            s[i][0] = kv_fma(ai, b0, s[i][0]);
            if (nv > 1) s[i][1] = kv_fma(ai, b1, s[i][1]);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) kv_store(c + i * ldc + v * KV_W, s[i][v]);
}

#define WC_CASE(M)                                                                                                   \
    case M:                                                                                                          \
        if (tn) {                                                                                                    \
            if (nv == 2) ISA_FN(wc_ukr)(M, 2, 1, kk, ai, lda, bj, ldb, ci, ldc, acc);                                \
            else ISA_FN(wc_ukr)(M, 1, 1, kk, ai, lda, bj, ldb, ci, ldc, acc);                                        \
        } else if (nv == 2) ISA_FN(wc_ukr)(M, 2, 0, kk, ai, lda, bj, ldb, ci, ldc, acc);                             \
        else ISA_FN(wc_ukr)(M, 1, 0, kk, ai, lda, bj, ldb, ci, ldc, acc);                                            \
        break;

static ISA_TARGET void ISA_FN(k_winoc_gemm)(int tn, int m, int n, int kk, const float *a, long lda, const float *b,
                                            long ldb, float *c, long ldc, int acc)
{
    for (int j0 = 0; j0 < n;) {
        int nv = n - j0 >= 2 * KV_W ? 2 : 1;
        for (int i0 = 0; i0 < m; i0 += WC_MR) {
            const float *ai = tn ? a + i0 : a + (long)i0 * lda, *bj = b + j0;
            float *ci = c + (long)i0 * ldc + j0;
            switch (m - i0 < WC_MR ? m - i0 : WC_MR) {
                WC_CASE(1) WC_CASE(2) WC_CASE(3) WC_CASE(4) WC_CASE(5) WC_CASE(6)
#if WC_MR > 6
                WC_CASE(7) WC_CASE(8) WC_CASE(9) WC_CASE(10) WC_CASE(11) WC_CASE(12)
#endif
            default: break;
            }
        }
        j0 += nv * KV_W;
    }
}

#undef K2_BT
#undef K2_AG
#undef K4_AG
#undef WC_CASE
#undef WC_MR
#undef KC_
#undef K4_BT
#undef K4_AT
#include "kernels/cpu/k_kv_undef.h"

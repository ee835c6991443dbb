/* k_conv_wino.c's F(4x4, 3x3) transforms, one template per ISA level (rt/isa_each.h),
 * included after k_conv_wino_simd.h's F(2x2) ones (whose helpers it uses: KW4_ names
 * here). Tiles of 4x4 outputs, tile tx covering padded columns 4tx..4tx+5; a row is
 * split into its 4 column phases (p_j[u] = column 4u + j), so every tile column is a
 * plain load: phases 0..3 at tx, phases 0, 1 at tx + 1. Vectors may run past a row's
 * last tile as in F(2x2). */
#include <string.h>

#define K4_(x) ISA_FN(x)
#define K4W (ISA_VB / 4)
typedef float K4_(k4_vf) __attribute__((vector_size(ISA_VB)));
typedef int32_t K4_(k4_vi) __attribute__((vector_size(ISA_VB)));

#if K4W == 4
#define K4_EV {0, 2, 4, 6}
#define K4_OD {1, 3, 5, 7}
#define K4_ILO {0, 4, 1, 5}
#define K4_IHI {2, 6, 3, 7}
#elif K4W == 8
#define K4_EV {0, 2, 4, 6, 8, 10, 12, 14}
#define K4_OD {1, 3, 5, 7, 9, 11, 13, 15}
#define K4_ILO {0, 8, 1, 9, 2, 10, 3, 11}
#define K4_IHI {4, 12, 5, 13, 6, 14, 7, 15}
#else
#define K4_EV {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30}
#define K4_OD {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}
#define K4_ILO {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23}
#define K4_IHI {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31}
#endif

/* Padded rows [pr0, pr1) of plane x (h x w; padded row pr is row pr - lpad, column cl
 * of it column cl - lpad; zero outside), split into phases p + j*pld: p[j*pld +
 * (pr - pr0)*ld + u] = column 4u + j, u < ld. Each phase needs K4W floats of slack
 * after its last row. */
static ISA_TARGET void ISA_FN(k_wino4_split)(const float *x, int h, int w, int lpad, int pr0, int pr1, long ld,
                                             float *p, long pld)
{
    const K4_(k4_vi) ev = K4_EV, od = K4_OD;
    const K4_(k4_vf) z = {0};
    for (int pr = pr0; pr < pr1; pr++) {
        float *ph[4];
        for (int j = 0; j < 4; j++) ph[j] = p + j * pld + (pr - pr0) * ld;
        int r = pr - lpad;
        long u = 0, ze = 0; /* phase 0's zeros start at ze, the others' at u */
        if (r >= 0 && r < h) {
            /* source column 4u + j is padded phase (j + lpad) % 4 at u (+1 for j = 3 if lpad) */
            const float *xr = x + (long)r * w;
            float *dst[4];
            for (int j = 0; j < 4; j++) dst[j] = lpad ? (j == 3 ? ph[0] + 1 : ph[j + 1]) : ph[j];
            for (; 4 * u < w; u += K4W) {
                int n = w - 4 * (int)u;
                K4_(k4_vf) a = KW_(kw_ldn)(xr + 4 * u, KW_(kw_clamp)(n)), b = KW_(kw_ldn)(xr + 4 * u + K4W, KW_(kw_clamp)(n - K4W));
                K4_(k4_vf) c = KW_(kw_ldn)(xr + 4 * u + 2 * K4W, KW_(kw_clamp)(n - 2 * K4W));
                K4_(k4_vf) d = KW_(kw_ldn)(xr + 4 * u + 3 * K4W, KW_(kw_clamp)(n - 3 * K4W));
                K4_(k4_vf) e0 = __builtin_shuffle(a, b, ev), o0 = __builtin_shuffle(a, b, od);
                K4_(k4_vf) e1 = __builtin_shuffle(c, d, ev), o1 = __builtin_shuffle(c, d, od);
                KW_(kw_st)(dst[0] + u, __builtin_shuffle(e0, e1, ev));
                KW_(kw_st)(dst[2] + u, __builtin_shuffle(e0, e1, od));
                KW_(kw_st)(dst[1] + u, __builtin_shuffle(o0, o1, ev));
                KW_(kw_st)(dst[3] + u, __builtin_shuffle(o0, o1, od));
            }
            if (lpad) ph[0][0] = 0.0f;
            ze = u + lpad;
        }
        for (long zu = ze; zu < ld; zu += K4W) KW_(kw_st)(ph[0] + zu, z);
        for (int j = 1; j < 4; j++)
            for (long zu = u; zu < ld; zu += K4W) KW_(kw_st)(ph[j] + zu, z);
    }
}

#include "kernels/cpu/k_wino4_math.h"

/* Input tiles of tile rows [0, nty) of split phases p (lpad 1, from padded row 4*ty0):
 * v[xi*vs + ty*ntx + tx] = (B^T d B)[xi], xi = 6i + j, for the 6x6 tile d at padded
 * rows 4ty.., columns 4tx... */
static ISA_TARGET void ISA_FN(k_wino4_in_tiles)(const float *p, long pld, long ld, int nty, int ntx, float *v,
                                                long vs)
{
    for (int ty = 0; ty < nty; ty++)
        for (int t = 0; t < ntx; t += K4W) {
            K4_(k4_vf) tm[6][6]; /* (B^T d)[i][column j] */
            for (int j = 0; j < 6; j++) {
                const float *src = p + (j & 3) * pld + (4 * ty) * ld + t + (j >> 2);
                K4_(k4_vf) d[6], r[6];
                for (int i = 0; i < 6; i++) d[i] = KW_(kw_ld)(src + i * ld);
                K4_BT(d, r);
                for (int i = 0; i < 6; i++) tm[i][j] = r[i];
            }
            float *out = v + (long)ty * ntx + t;
            for (int i = 0; i < 6; i++) {
                K4_(k4_vf) r[6];
                K4_BT(tm[i], r);
                for (int j = 0; j < 6; j++) KW_(kw_st)(out + (long)(6 * i + j) * vs, r[j]);
            }
        }
}

/* Output tile row ty of plane y (p x q): y = A^T m A + bias, m[xi] at m + xi*ms + tx. */
static ISA_TARGET void ISA_FN(k_wino4_out_row)(const float *m, long ms, float bias, float *y, int p, int q, int ty,
                                               int ntx)
{
    const K4_(k4_vi) ilo = K4_ILO, ihi = K4_IHI;
    for (int t = 0; t < ntx; t += K4W) {
        K4_(k4_vf) tm[4][6]; /* (A^T m)[row i][column j] */
        for (int j = 0; j < 6; j++) {
            K4_(k4_vf) c[6], o[4];
            for (int i = 0; i < 6; i++) c[i] = KW_(kw_ld)(m + (6 * i + j) * ms + t);
            K4_AT(c, o);
            for (int i = 0; i < 4; i++) tm[i][j] = o[i];
        }
        int c0 = 4 * t;
        for (int i = 0; i < 4 && 4 * ty + i < p; i++) {
            K4_(k4_vf) o[4];
            K4_AT(tm[i], o);
            for (int jj = 0; jj < 4; jj++) o[jj] += bias;
            K4_(k4_vf) xl = __builtin_shuffle(o[0], o[2], ilo), xh = __builtin_shuffle(o[0], o[2], ihi);
            K4_(k4_vf) yl = __builtin_shuffle(o[1], o[3], ilo), yh = __builtin_shuffle(o[1], o[3], ihi);
            K4_(k4_vf) row[4] = {__builtin_shuffle(xl, yl, ilo), __builtin_shuffle(xl, yl, ihi),
                                 __builtin_shuffle(xh, yh, ilo), __builtin_shuffle(xh, yh, ihi)};
            float *dst = y + (long)(4 * ty + i) * q + c0;
            if (c0 + 4 * K4W <= q)
                for (int vv = 0; vv < 4; vv++) KW_(kw_st)(dst + vv * K4W, row[vv]);
            else
                for (int vv = 0; vv < 4; vv++) KW_(kw_stn)(dst + vv * K4W, row[vv], KW_(kw_clamp)(q - c0 - vv * K4W));
        }
    }
}

#undef K4_
#undef K4W
#undef K4_EV
#undef K4_OD
#undef K4_ILO
#undef K4_IHI
#undef K4_BT
#undef K4_AT

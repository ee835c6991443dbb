/* k_conv_wino.c's F(4x4, 3x3) transforms, one template per ISA level (rt/isa_each.h),
 * included after k_conv_wino_simd.h's F(2x2) ones (whose helpers it uses, and k_kv.h's).
 * Tiles of 4x4 outputs, tile tx covering padded columns 4tx..4tx+5; a row is split
 * into its 4 column phases (p_j[u] = column 4u + j), so every tile column is a plain
 * load: phases 0..3 at tx, phases 0, 1 at tx + 1. Vectors may run past a row's last
 * tile as in F(2x2). */
#include <string.h>

#define K4_(x) ISA_FN(x)

/* Padded rows [pr0, pr1) of plane x (h x w; padded row pr is row pr - lpad, column cl
 * of it column cl - lpad; zero outside), split into phases p + j*pld: p[j*pld +
 * (pr - pr0)*ld + u] = column 4u + j, u < ld. Each phase needs KVF_W floats of slack
 * after its last row. */
static ISA_TARGET void ISA_FN(k_wino4_split)(const float *x, int h, int w, int lpad, int pr0, int pr1, long ld,
                                             float *p, long pld)
{
    const kvi ev = KVF_EV, od = KVF_OD;
    const kvf z = {0};
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
            for (; 4 * u < w; u += KVF_W) {
                int n = w - 4 * (int)u;
                kvf a = KW_(kw_ldn)(xr + 4 * u, KW_(kw_clamp)(n)), b = KW_(kw_ldn)(xr + 4 * u + KVF_W, KW_(kw_clamp)(n - KVF_W));
                kvf c = KW_(kw_ldn)(xr + 4 * u + 2 * KVF_W, KW_(kw_clamp)(n - 2 * KVF_W));
                kvf d = KW_(kw_ldn)(xr + 4 * u + 3 * KVF_W, KW_(kw_clamp)(n - 3 * KVF_W));
                kvf e0 = __builtin_shuffle(a, b, ev), o0 = __builtin_shuffle(a, b, od);
                kvf e1 = __builtin_shuffle(c, d, ev), o1 = __builtin_shuffle(c, d, od);
                kvf_st(dst[0] + u, __builtin_shuffle(e0, e1, ev));
                kvf_st(dst[2] + u, __builtin_shuffle(e0, e1, od));
                kvf_st(dst[1] + u, __builtin_shuffle(o0, o1, ev));
                kvf_st(dst[3] + u, __builtin_shuffle(o0, o1, od));
            }
            if (lpad) ph[0][0] = 0.0f;
            ze = u + lpad;
        }
        for (long zu = ze; zu < ld; zu += KVF_W) kvf_st(ph[0] + zu, z);
        for (int j = 1; j < 4; j++)
            for (long zu = u; zu < ld; zu += KVF_W) kvf_st(ph[j] + zu, z);
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
        for (int t = 0; t < ntx; t += KVF_W) {
            kvf tm[6][6]; /* (B^T d)[i][column j] */
            for (int j = 0; j < 6; j++) {
                const float *src = p + (j & 3) * pld + (4 * ty) * ld + t + (j >> 2);
                kvf d[6], r[6];
                for (int i = 0; i < 6; i++) d[i] = kvf_ld(src + i * ld);
                K4_BT(d, r);
                for (int i = 0; i < 6; i++) tm[i][j] = r[i];
            }
            float *out = v + (long)ty * ntx + t;
            for (int i = 0; i < 6; i++) {
                kvf r[6];
                K4_BT(tm[i], r);
                for (int j = 0; j < 6; j++) kvf_st(out + (long)(6 * i + j) * vs, r[j]);
            }
        }
}

/* Output tile row ty of plane y (p x q): y = A^T m A + bias, m[xi] at m + xi*ms + tx. */
static ISA_TARGET void ISA_FN(k_wino4_out_row)(const float *m, long ms, float bias, float *y, int p, int q, int ty,
                                               int ntx)
{
    const kvi ilo = KVF_ILO, ihi = KVF_IHI;
    for (int t = 0; t < ntx; t += KVF_W) {
        kvf tm[4][6]; /* (A^T m)[row i][column j] */
        for (int j = 0; j < 6; j++) {
            kvf c[6], o[4];
            for (int i = 0; i < 6; i++) c[i] = kvf_ld(m + (6 * i + j) * ms + t);
            K4_AT(c, o);
            for (int i = 0; i < 4; i++) tm[i][j] = o[i];
        }
        int c0 = 4 * t;
        for (int i = 0; i < 4 && 4 * ty + i < p; i++) {
            kvf o[4];
            K4_AT(tm[i], o);
            for (int jj = 0; jj < 4; jj++) o[jj] += bias;
            kvf xl = __builtin_shuffle(o[0], o[2], ilo), xh = __builtin_shuffle(o[0], o[2], ihi);
            kvf yl = __builtin_shuffle(o[1], o[3], ilo), yh = __builtin_shuffle(o[1], o[3], ihi);
            kvf row[4] = {__builtin_shuffle(xl, yl, ilo), __builtin_shuffle(xl, yl, ihi),
                                 __builtin_shuffle(xh, yh, ilo), __builtin_shuffle(xh, yh, ihi)};
            float *dst = y + (long)(4 * ty + i) * q + c0;
            if (c0 + 4 * KVF_W <= q)
                for (int vv = 0; vv < 4; vv++) kvf_st(dst + vv * KVF_W, row[vv]);
            else
                for (int vv = 0; vv < 4; vv++) KW_(kw_stn)(dst + vv * KVF_W, row[vv], KW_(kw_clamp)(q - c0 - vv * KVF_W));
        }
    }
}

#undef K4_
#undef K4_BT
#undef K4_AT

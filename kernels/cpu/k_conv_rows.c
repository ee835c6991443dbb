/* The shifted-row layout for strided convs (k_conv.c): one plane per (channel c,
 * tap column s, tap-row phase rp = r % st),
 *   xs[c][s][rp][u][q] = x[c][st*u + rp - pad][st*q + s - pad]   (0 outside the image)
 * for u < hps = P + (R-1)/st. Tap (c, r, s) of output j = p*Q + q is then
 * xs[c][s][r % st] at offset (r / st)*Q + j: contiguous, as in the stride-1 layout,
 * so the same GEMMs read it through tap offsets. It holds about C*S*H*W/st floats
 * where im2col needs C*R*S*H*W/st^2, and wastes no output column. */
#include "kernels/cpu/k_gemm.h"
#include <string.h>
/* Valid output columns [*lo, *hi) of tap column s: 0 <= st*q + s - pad < w. */
static void col_range(const k_im2col_geo *g, int s, int *lo, int *hi)
{
    int a = 0, b = g->q;
    while (a < b && a * g->stride + s - g->pad < 0) a++;
    while (b > a && (b - 1) * g->stride + s - g->pad >= g->w) b--;
    *lo = a;
    *hi = b;
}

/* Plain scalar copies: an AVX-512 version (two masked loads and an even-lane permute
 * per 16 outputs) measured 2x slower on this Zen 5 than this loop. */
void k_shift_rows_st(const k_im2col_geo *g, long hps, int rpn, const float *x, float *xs)
{
    const int st = g->stride, Q = g->q;
    for (int c = 0; c < g->c; c++)
        for (int s = 0; s < g->s; s++) {
            int lo, hi;
            col_range(g, s, &lo, &hi);
            for (int rp = 0; rp < rpn; rp++)
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

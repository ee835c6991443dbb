/* The resampler's loops are the hot part of decode + transform: let GCC vectorise
 * them fully (-O2 uses only its cheapest vectoriser). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include "nn/data/image.h"
#include <math.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double uni(uint64_t *s) { return (double)(mix(s) >> 11) * (1.0 / 9007199254740992.0); }
static int randint(uint64_t *s, int lo, int hi) { return lo + (int)(mix(s) % (uint64_t)(hi - lo)); } /* [lo, hi) */

uint64_t nn_tf_key(uint64_t seed, int epoch, int idx)
{
    uint64_t s = seed * 0x100000001b3ull ^ ((uint64_t)(uint32_t)epoch << 32 | (uint32_t)idx);
    mix(&s);
    return mix(&s);
}

void nn_tf_plan(int kind, uint64_t key, int W, int H, int out, float crop[4], int *flip)
{
    uint64_t s = key;
    *flip = 0;
    if (kind == NN_TF_RRC) {
        /* torchvision RandomResizedCrop.get_params: scale (0.08, 1), ratio (3/4, 4/3). */
        double area = (double)W * H, lr0 = log(3.0 / 4.0), lr1 = log(4.0 / 3.0);
        for (int i = 0; i < 10; i++) {
            double ta = area * (0.08 + 0.92 * uni(&s)), ar = exp(lr0 + (lr1 - lr0) * uni(&s));
            int w = (int)lround(sqrt(ta * ar)), h = (int)lround(sqrt(ta / ar));
            if (w > 0 && h > 0 && w <= W && h <= H) {
                int y = randint(&s, 0, H - h + 1), x = randint(&s, 0, W - w + 1);
                crop[0] = (float)x, crop[1] = (float)y, crop[2] = (float)w, crop[3] = (float)h;
                *flip = uni(&s) < 0.5;
                return;
            }
        }
        double r = (double)W / H;
        int w = W, h = H;
        if (r < 3.0 / 4.0) h = (int)lround(w / (3.0 / 4.0));
        else if (r > 4.0 / 3.0) w = (int)lround(h * (4.0 / 3.0));
        if (h > H) h = H;
        if (w > W) w = W;
        crop[0] = (float)((W - w) / 2), crop[1] = (float)((H - h) / 2), crop[2] = (float)w, crop[3] = (float)h;
        *flip = uni(&s) < 0.5;
        return;
    }
    /* Resize(short side to R) + CenterCrop(out), as one crop in source pixels. The
     * ImageNet eval recipe resizes to out * 256 / 224 first. */
    int R = kind == NN_TF_EVAL_IMAGENET ? out * 256 / 224 : out;
    int sh = W < H ? W : H;
    double sc = (double)sh / R; /* source pixels per resized pixel */
    double rw = W < H ? R : floor((double)R * W / H), rh = W < H ? floor((double)R * H / W) : R;
    double ox = rint((rw - out) / 2.0), oy = rint((rh - out) / 2.0);
    crop[0] = (float)(ox * sc), crop[1] = (float)(oy * sc), crop[2] = (float)(out * sc), crop[3] = (float)(out * sc);
    if (kind == NN_TF_PADCROP) {
        /* RandomCrop(out, padding=4) + RandomHorizontalFlip, in resized pixels. */
        int dy = randint(&s, 0, 9) - 4, dx = randint(&s, 0, 9) - 4;
        crop[0] += (float)(dx * sc), crop[1] += (float)(dy * sc);
        *flip = uni(&s) < 0.5;
    }
}

typedef struct span { int start, n; } span;

/* Triangle-filter taps (PIL's bilinear with antialiasing when shrinking). Output
 * pixels whose window is wholly outside [0, in) get n = 0 (read as 0: padding). */
static void coeffs(float x0, float w, int out, int in, int flip, int K, span *sp, float *wt)
{
    double scale = (double)w / out, support = scale > 1 ? scale : 1;
    for (int o = 0; o < out; o++) {
        int oo = flip ? out - 1 - o : o;
        double c = x0 + (o + 0.5) * scale;
        int lo = (int)floor(c - support), hi = (int)ceil(c + support);
        if (lo < 0) lo = 0;
        if (hi > in) hi = in;
        float *wp = wt + (size_t)oo * K, sum = 0;
        int n = 0, first = lo;
        for (int t = lo; t < hi && n < K; t++) {
            double v = 1.0 - fabs((t + 0.5 - c) / support);
            if (v <= 0) {
                if (!n) first = t + 1;
                continue;
            }
            wp[n++] = (float)v;
            sum += (float)v;
        }
        sp[oo].start = first;
        sp[oo].n = sum > 0 ? n : 0;
        for (int i = 0; i < n; i++) wp[i] /= sum;
    }
}

#if defined(__SSE2__)
/* Four RGB output pixels: one 4-float load per tap holds a pixel's R, G, B (the 4th
 * lane is unused); the four are transposed into R, G and B vectors. The same
 * operations in the same order as the scalar loop in nn_tf_resample: identical
 * results. n < 0: each pixel's own tap count. */
static inline __attribute__((always_inline)) void h4(const float *t, const span *spx, const float *wx, int Kx, int x,
                                                     int n, __m128 vsc, __m128 vsh, float *d0, float *d1, float *d2)
{
    __m128 a[4];
    for (int j = 0; j < 4; j++) {
        const float *w = wx + (size_t)(x + j) * Kx, *q = t + (ptrdiff_t)spx[x + j].start * 3;
        int nj = n < 0 ? spx[x + j].n : n;
        __m128 acc = _mm_setzero_ps();
        for (int k = 0; k < nj; k++, q += 3) acc = _mm_add_ps(acc, _mm_mul_ps(_mm_set1_ps(w[k]), _mm_loadu_ps(q)));
        a[j] = _mm_sub_ps(_mm_mul_ps(acc, vsc), vsh);
    }
    _MM_TRANSPOSE4_PS(a[0], a[1], a[2], a[3]);
    _mm_storeu_ps(d0 + x, a[0]), _mm_storeu_ps(d1 + x, a[1]), _mm_storeu_ps(d2 + x, a[2]);
}
#endif

int nn_tf_resample(const uint8_t *src, int W, int H, int C, ptrdiff_t cs, ptrdiff_t xs, ptrdiff_t ys,
                   const float crop[4], int flip, int out_h, int out_w, const float *mean, const float *std,
                   float *out, void *scratch, size_t scratch_bytes)
{
    double sx = (double)crop[2] / out_w, sy = (double)crop[3] / out_h;
    int Kx = 2 * (int)ceil(sx > 1 ? sx : 1) + 2, Ky = 2 * (int)ceil(sy > 1 ? sy : 1) + 2;
    size_t need = (size_t)out_w * (sizeof(span) + Kx * sizeof(float)) + (size_t)out_h * (sizeof(span) + Ky * sizeof(float));
    unsigned char *p = scratch;
    if (need > scratch_bytes) return -1;
    span *spx = (span *)p, *spy = spx + out_w;
    float *wx = (float *)(spy + out_h), *wy = wx + (size_t)out_w * Kx, *tmp = wy + (size_t)out_h * Ky;
    coeffs(crop[0], crop[2], out_w, W, flip, Kx, spx, wx);
    coeffs(crop[1], crop[3], out_h, H, 0, Ky, spy, wy);
    /* Vertical pass first, over the columns the horizontal taps read: out_h rows of
     * uint8 sums (contiguous runs: vectorised conversions and FMAs), then the
     * horizontal taps on floats for out_h rows only. */
    int xlo = W, xhi = 0;
    for (int o = 0; o < out_w; o++)
        if (spx[o].n) {
            if (spx[o].start < xlo) xlo = spx[o].start;
            if (spx[o].start + spx[o].n > xhi) xhi = spx[o].start + spx[o].n;
        }
    if (xhi < xlo) xhi = xlo;
    /* Every output pixel gets the same number of taps (zero weights added at the end,
     * or at the start near the band's right edge): fixed trip counts, no mispredicted
     * loop exits. Adding 0 * v to a sum that starts at 0 changes no result. */
    int nu = 0;
    for (int o = 0; o < out_w; o++) nu = spx[o].n > nu ? spx[o].n : nu;
    if (nu > xhi - xlo) nu = 0;
    for (int o = 0; o < out_w && nu; o++) {
        float *w = wx + (size_t)o * Kx;
        int n = spx[o].n, lead = 0;
        if (!n) spx[o].start = xlo;
        else if (spx[o].start + nu > xhi) lead = spx[o].start + nu - xhi;
        memmove(w + lead, w, (size_t)n * sizeof(float));
        for (int k = 0; k < lead; k++) w[k] = 0;
        for (int k = lead + n; k < nu; k++) w[k] = 0;
        spx[o].start -= lead, spx[o].n = nu;
    }
    int bw = xhi - xlo, packed = cs == 1 && xs == C; /* else planar: xs == 1 */
    if (!packed && xs != 1) return -1;
    size_t rowf = (size_t)bw * C; /* floats per tmp row: [x][c] packed, [c][x] planar */
    need += ((size_t)out_h * rowf + 4) * sizeof(float); /* + a pixel's 4-float load past the end */
    if (need > scratch_bytes) return -1;
    memset(tmp + (size_t)out_h * rowf, 0, 4 * sizeof(float));
    for (int o = 0; o < out_h; o++) {
        float *restrict t = tmp + (size_t)o * rowf;
        const float *w = wy + (size_t)o * Ky;
        int n = spy[o].n;
        for (int c = 0; c < (packed ? 1 : C); c++) {
            size_t len = packed ? rowf : (size_t)bw;
            float *restrict tc = t + (packed ? 0 : (size_t)c * bw);
            const uint8_t *q0 = src + (ptrdiff_t)spy[o].start * ys + (ptrdiff_t)xlo * xs + (packed ? 0 : c * cs);
            /* Taps two at a time: half the passes over the row buffer. */
            int k = 0;
            if (n == 0)
                for (size_t j = 0; j < len; j++) tc[j] = 0;
            else if (n == 1)
                for (size_t j = 0; j < len; j++) tc[j] = w[0] * (float)q0[j];
            else {
                const uint8_t *restrict a = q0, *restrict b = q0 + ys;
                float wa = w[0], wb = w[1];
                for (size_t j = 0; j < len; j++) tc[j] = wa * (float)a[j] + wb * (float)b[j];
                k = 2;
            }
            for (; k + 1 < n; k += 2) {
                const uint8_t *restrict a = q0 + (ptrdiff_t)k * ys, *restrict b = a + ys;
                float wa = w[k], wb = w[k + 1];
                for (size_t j = 0; j < len; j++) tc[j] += wa * (float)a[j] + wb * (float)b[j];
            }
            if (k < n && n > 1) {
                const uint8_t *restrict a = q0 + (ptrdiff_t)k * ys;
                float wa = w[k];
                for (size_t j = 0; j < len; j++) tc[j] += wa * (float)a[j];
            }
        }
    }
    ptrdiff_t ts = packed ? C : 1, tcs = packed ? 1 : bw; /* tmp strides: x, channel */
    float scale[4], shift[4];
    for (int c = 0; c < C && c < 4; c++) scale[c] = 1.0f / (255.0f * std[c]), shift[c] = mean[c] / std[c];
    for (int o = 0; o < out_h; o++) {
        const float *t = tmp + (size_t)o * rowf - (ptrdiff_t)xlo * ts;
        float *d0 = out + (size_t)o * out_w, *d1 = d0 + (size_t)out_h * out_w, *d2 = d1 + (size_t)out_h * out_w;
        if (C == 3 && packed && spy[o].n) { /* the common case: RGB, constant strides */
            int x = 0;
#if defined(__SSE2__)
            __m128 vsc = _mm_setr_ps(scale[0], scale[1], scale[2], 0), vsh = _mm_setr_ps(shift[0], shift[1], shift[2], 0);
            for (; x + 4 <= out_w; x += 4) switch (nu) { /* constant tap counts: unrolled */
                case 2: h4(t, spx, wx, Kx, x, 2, vsc, vsh, d0, d1, d2); break;
                case 3: h4(t, spx, wx, Kx, x, 3, vsc, vsh, d0, d1, d2); break;
                case 4: h4(t, spx, wx, Kx, x, 4, vsc, vsh, d0, d1, d2); break;
                case 5: h4(t, spx, wx, Kx, x, 5, vsc, vsh, d0, d1, d2); break;
                case 6: h4(t, spx, wx, Kx, x, 6, vsc, vsh, d0, d1, d2); break;
                default: h4(t, spx, wx, Kx, x, -1, vsc, vsh, d0, d1, d2);
                }
#endif
            for (; x < out_w; x++) {
                const float *w = wx + (size_t)x * Kx, *q = t + (ptrdiff_t)spx[x].start * 3;
                float a0 = 0, a1 = 0, a2 = 0;
                for (int k = 0; k < spx[x].n; k++, q += 3) a0 += w[k] * q[0], a1 += w[k] * q[1], a2 += w[k] * q[2];
                d0[x] = a0 * scale[0] - shift[0], d1[x] = a1 * scale[1] - shift[1], d2[x] = a2 * scale[2] - shift[2];
            }
        } else
            for (int c = 0; c < C; c++) {
                float *dst = out + ((size_t)c * out_h + o) * out_w, sc = scale[c < 4 ? c : 3], sh = shift[c < 4 ? c : 3];
                const float *tc = t + c * tcs;
                for (int x = 0; x < out_w; x++) {
                    const float *w = wx + (size_t)x * Kx, *q = tc + (ptrdiff_t)spx[x].start * ts;
                    float acc = 0;
                    for (int k = 0; spy[o].n && k < spx[x].n; k++) acc += w[k] * q[k * ts];
                    dst[x] = acc * sc - sh;
                }
            }
    }
    return 0;
}

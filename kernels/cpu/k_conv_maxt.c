/* Backward of conv2d -> relu -> max over time (TextCNN's branches) without the dense
 * conv backward. The conv's output has one row (p == 1: conv1d), so each (sample,
 * filter) has one argmax column q*; its gradient g = dmax where the max was > 0 (the
 * relu's mask there) and every other column's gradient is exactly 0. Hence
 *   dw[f,c,r,s] = sum_i g[i,f] * x[i, c, r-pad, q*(i,f)*stride + s-pad]
 *   db[f]       = sum_i g[i,f]
 *   dx[i, c, r-pad, q*stride + s-pad] += g[i,f] * w[f,c,r,s]
 * (out-of-range taps are the zero padding): n*k*c*r*s multiply-adds instead of q
 * times that. Rows of x and w are first transposed to channels-last so that every
 * tap is one contiguous row of c floats (k_axpy_rows).
 *
 * Determinism: dw/db are split by filter and sum the samples in order; dx is split by
 * sample and sums the filters in order; results do not depend on the thread count.
 * They equal the dense backward's up to summation order (the skipped terms are zeros). */
#include "kernels/k.h"
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"
#include "kernels/cpu/k_tr8.h"
#include <string.h>

static size_t al16(size_t f) { return (f + 15) & ~(size_t)15; }

/* Workspace layout in floats: xt [n][h*w][c], dxt [tasks <= n][h*w][c], wt and dwt [k][r*s][c],
 * g [n][k]. */
typedef struct mt_lay { size_t xt, dxt, wt, dwt, g, end; } mt_lay;

static mt_lay layout(const k_conv_shape *sh)
{
    mt_lay l;
    size_t img = (size_t)sh->h * sh->w * sh->c;
    l.xt = 0;
    l.dxt = l.xt + al16((size_t)sh->n * img);
    l.wt = l.dxt + al16((size_t)sh->n * img);
    l.dwt = l.wt + al16((size_t)sh->k * sh->r * sh->s * sh->c);
    l.g = l.dwt + al16((size_t)sh->k * sh->r * sh->s * sh->c);
    l.end = l.g + al16((size_t)sh->n * sh->k);
    return l;
}

size_t k_conv2d_maxt_workspace(const k_conv_shape *sh)
{
    if (sh->p != 1) return 0;
    return layout(sh).end * sizeof(float);
}

typedef struct mt_job {
    const k_conv_shape *sh;
    const float *x, *w, *gy, *ym;
    const int32_t *idx;
    float *dx, *dw, *db, *xt, *dxt, *wt, *dwt, *g;
    int parts_w, parts_x;
} mt_job;

/* [rows][cols] -> [cols][rows]: 8x8 register blocks where AVX2 is in use (pure data
 * movement: the same bits on every path), scalar at the edges. */
static void transpose_scalar(int r0, int r1, int c0, int c1, int rows, int cols, const float *a, float *b)
{
    for (int c = c0; c < c1; c++)
        for (int r = r0; r < r1; r++) b[(long)c * rows + r] = a[(long)r * cols + c];
}

#ifdef K_TR8
__attribute__((target("avx2"))) static void transpose_avx2(int rows, int cols, const float *a, float *b)
{
    int r8 = rows & ~7, c8 = cols & ~7;
    for (int r0 = 0; r0 < r8; r0 += 8)
        for (int c0 = 0; c0 < c8; c0 += 8) {
            __m256 v[8];
            #pragma GCC unroll 8
            for (int k = 0; k < 8; k++) v[k] = _mm256_loadu_ps(a + (long)(r0 + k) * cols + c0);
            k_tr8(v);
            #pragma GCC unroll 8
            for (int k = 0; k < 8; k++) _mm256_storeu_ps(b + (long)(c0 + k) * rows + r0, v[k]);
        }
    transpose_scalar(0, r8, c8, cols, rows, cols, a, b);
    transpose_scalar(r8, rows, 0, cols, rows, cols, a, b);
}
#endif

static void transpose(int rows, int cols, const float *a, float *b)
{
#ifdef K_TR8
    if (k_isa_level() >= K_ISA_AVX2) {
        transpose_avx2(rows, cols, a, b);
        return;
    }
#endif
    for (int r0 = 0; r0 < rows; r0 += 16)
        for (int c0 = 0; c0 < cols; c0 += 16)
            transpose_scalar(r0, r0 + 16 < rows ? r0 + 16 : rows, c0, c0 + 16 < cols ? c0 + 16 : cols, rows, cols, a, b);
}

/* Phase 1, by sample (and filters for wt): channels-last copies and the masked gradient. */
static void prep_task(void *ctx, int task)
{
    const mt_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    long hw = (long)sh->h * sh->w, lo, hi;
    k_split(sh->n, j->parts_x, task, &lo, &hi);
    for (long i = lo; i < hi; i++) {
        transpose(sh->c, (int)hw, j->x + i * sh->c * hw, j->xt + i * sh->c * hw);
        for (int f = 0; f < sh->k; f++) {
            long o = i * sh->k + f;
            j->g[o] = j->ym[o] > 0.0f ? j->gy[o] : 0.0f;
        }
    }
    k_split(sh->k, j->parts_x, task, &lo, &hi);
    int rs = sh->r * sh->s;
    for (long f = lo; f < hi; f++) transpose(sh->c, rs, j->w + f * sh->c * rs, j->wt + f * sh->c * rs);
}

/* Input offset (channels-last row) of tap (r, s) at output column q; -1 in the padding. */
static inline long tap(const k_conv_shape *sh, int q, int r, int s)
{
    int ih = r - sh->pad, iw = q * sh->stride + s - sh->pad;
    if (ih < 0 || ih >= sh->h || iw < 0 || iw >= sh->w) return -1;
    return ((long)ih * sh->w + iw) * sh->c;
}

/* Phase 2: tasks [0, parts_w) own filters (dw, db); the rest own samples (dx). */
static void grad_task(void *ctx, int task)
{
    const mt_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    int n = sh->n, K = sh->k, C = sh->c, rs = sh->r * sh->s;
    long img = (long)sh->h * sh->w * C, lo, hi;
    if (task < j->parts_w) {
        k_split(K, j->parts_w, task, &lo, &hi);
        enum { CH = 64 }; /* samples per pass: y goes through memory between passes,
                           * which changes no bits */
        const float *src[CH];
        float coef[CH], lg[CH];
        int li[CH], lq[CH];
        for (long f = lo; f < hi; f++) {
            float *dwt = j->dwt + f * rs * C, b = 0.0f;
            memset(dwt, 0, sizeof(float) * (size_t)rs * C);
            for (int i0 = 0; i0 < n; i0 += CH) {
                int m = 0;
                for (int i = i0; i < n && i < i0 + CH; i++) { /* the samples whose max passed */
                    float gv = j->g[(long)i * K + f];
                    if (gv == 0.0f) continue;
                    li[m] = i;
                    lg[m] = gv;
                    lq[m++] = j->idx[(long)i * K + f];
                }
                for (int r = 0; m && r < sh->r; r++)
                    for (int t = 0; t < sh->s; t++) {
                        int cnt = 0;
                        for (int k = 0; k < m; k++) {
                            long o = tap(sh, lq[k], r, t);
                            if (o < 0) continue;
                            src[cnt] = j->xt + li[k] * img + o;
                            coef[cnt++] = lg[k];
                        }
                        if (cnt) k_axpy_rows(cnt, coef, src, (size_t)C, dwt + ((long)r * sh->s + t) * C);
                    }
            }
            transpose(rs, C, dwt, j->dw + f * rs * C);
            for (int i = 0; i < n; i++) b += j->g[(long)i * K + f];
            if (j->db) j->db[f] = b;
        }
        return;
    }
    k_split(n, j->parts_x, task - j->parts_w, &lo, &hi);
    float *d = j->dxt + (long)(task - j->parts_w) * img; /* one per task: stays in cache */
    for (long i = lo; i < hi; i++) {
        memset(d, 0, sizeof(float) * (size_t)img);
        for (int f = 0; f < K; f++) {
            float gv = j->g[i * K + f];
            if (gv == 0.0f) continue;
            int q = j->idx[i * K + f];
            for (int r = 0; r < sh->r; r++)
                for (int t = 0; t < sh->s; t++) {
                    long o = tap(sh, q, r, t);
                    if (o < 0) continue;
                    const float *row = j->wt + ((long)f * rs + r * sh->s + t) * C;
                    k_axpy_rows(1, &gv, &row, (size_t)C, d + o);
                }
        }
        transpose((int)(img / C), C, d, j->dx + i * img);
    }
}

void k_conv2d_bwd_maxt(const k_conv_shape *sh, const float *x, const float *w, const float *gy,
                       const float *ym, const int32_t *idx, float *dx, float *dw, float *db, void *ws)
{
    mt_lay l = layout(sh);
    float *f = ws;
    mt_job j = {.sh = sh, .x = x, .w = w, .gy = gy, .ym = ym, .idx = idx, .dx = dx, .dw = dw, .db = db,
                .xt = f + l.xt, .dxt = f + l.dxt, .wt = f + l.wt, .dwt = f + l.dwt, .g = f + l.g};
    int t = k_threads();
    long macs = (long)sh->n * sh->k * sh->c * sh->r * sh->s;
    if (t > 1 && macs * 4 >= K_PAR_MIN_ELEMS) {
        j.parts_w = sh->k < t ? sh->k : t;
        j.parts_x = sh->n < t ? sh->n : t;
    } else {
        j.parts_w = j.parts_x = 1;
    }
    k_parallel_for(j.parts_x, prep_task, &j);
    k_parallel_for(j.parts_w + (dx ? j.parts_x : 0), grad_task, &j);
}

/* Max pooling (no padding, floor mode). PyTorch semantics: the first maximum in the
 * window wins ties (strict >), NaN propagates, idx is the offset in the input plane.
 * Backward zeroes dx then adds dy at idx (windows may overlap when st < ks). */
#include "kernels/k.h"
#include "kernels/cpu/k_int.h"
#include <math.h>
#include <string.h>

typedef struct pool_job {
    int planes, h, w, ks, st, p, q, parts;
    const float *x, *dy;
    float *y, *dx;
    const int32_t *idx_in;
    int32_t *idx;
} pool_job;

static void pool_fwd_plane(const pool_job *j, long pl)
{
    const float *x = j->x + pl * j->h * j->w;
    float *y = j->y + pl * j->p * j->q;
    int32_t *idx = j->idx + pl * j->p * j->q;
    if (j->ks == 2 && j->st == 2) { /* LeNet's case, unrolled */
        for (int oh = 0; oh < j->p; oh++) {
            const float *r0 = x + 2 * oh * j->w, *r1 = r0 + j->w;
            for (int ow = 0; ow < j->q; ow++) {
                int c0 = 2 * ow;
                float m = r0[c0];
                int32_t a = 2 * oh * j->w + c0;
                if (r0[c0 + 1] > m || isnan(r0[c0 + 1])) { m = r0[c0 + 1]; a = 2 * oh * j->w + c0 + 1; }
                if (r1[c0] > m || isnan(r1[c0])) { m = r1[c0]; a = (2 * oh + 1) * j->w + c0; }
                if (r1[c0 + 1] > m || isnan(r1[c0 + 1])) { m = r1[c0 + 1]; a = (2 * oh + 1) * j->w + c0 + 1; }
                y[oh * j->q + ow] = m;
                idx[oh * j->q + ow] = a;
            }
        }
        return;
    }
    for (int oh = 0; oh < j->p; oh++)
        for (int ow = 0; ow < j->q; ow++) {
            int h0 = oh * j->st, w0 = ow * j->st;
            float m = -INFINITY;
            int32_t a = h0 * j->w + w0;
            for (int dh = 0; dh < j->ks; dh++)
                for (int dw = 0; dw < j->ks; dw++) {
                    int off = (h0 + dh) * j->w + w0 + dw;
                    float v = x[off];
                    if (v > m || isnan(v)) { m = v; a = off; }
                    if (isnan(m)) goto done; /* the first NaN wins */
                }
        done:
            y[oh * j->q + ow] = m;
            idx[oh * j->q + ow] = a;
        }
}

static void pool_bwd_plane(const pool_job *j, long pl)
{
    float *dx = j->dx + pl * j->h * j->w;
    const float *dy = j->dy + pl * j->p * j->q;
    const int32_t *idx = j->idx_in + pl * j->p * j->q;
    memset(dx, 0, sizeof(float) * j->h * j->w);
    for (int o = 0; o < j->p * j->q; o++) dx[idx[o]] += dy[o];
}

static void pool_task_fwd(void *ctx, int task)
{
    const pool_job *j = ctx;
    long lo, hi;
    k_split(j->planes, j->parts, task, &lo, &hi);
    for (long pl = lo; pl < hi; pl++) pool_fwd_plane(j, pl);
}

static void pool_task_bwd(void *ctx, int task)
{
    const pool_job *j = ctx;
    long lo, hi;
    k_split(j->planes, j->parts, task, &lo, &hi);
    for (long pl = lo; pl < hi; pl++) pool_bwd_plane(j, pl);
}

static pool_job pool_setup(int n, int c, int h, int w, int ks, int st)
{
    pool_job j = {.planes = n * c, .h = h, .w = w, .ks = ks, .st = st};
    j.p = (h - ks) / st + 1;
    j.q = (w - ks) / st + 1;
    int t = k_threads();
    j.parts = (t > 1 && (long)j.planes * h * w >= K_PAR_MIN_ELEMS) ? t : 1;
    return j;
}

void k_maxpool2d_fwd(int n, int c, int h, int w, int ks, int st, const float *x, float *y,
                     int32_t *idx)
{
    pool_job j = pool_setup(n, c, h, w, ks, st);
    j.x = x; j.y = y; j.idx = idx;
    k_parallel_for(j.parts, pool_task_fwd, &j);
}

void k_maxpool2d_bwd(int n, int c, int h, int w, int ks, int st, const float *dy,
                     const int32_t *idx, float *dx)
{
    pool_job j = pool_setup(n, c, h, w, ks, st);
    j.dy = dy; j.idx_in = idx; j.dx = dx;
    k_parallel_for(j.parts, pool_task_bwd, &j);
}

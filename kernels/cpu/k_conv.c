/* Conv2d forward/backward on the SIMD GEMMs in k_gemm.c.
 *
 * Stride 1 (LeNet, and most convs) uses a "shifted-row" layout instead of im2col:
 * xs[c][s] holds the (padded) image rows shifted left by s and cut to the output
 * width Q, so tap (c, r, s) of output j = p*Q + q is xs[c][s][r*Q + j]: every row of
 * the column matrix is a contiguous slice of xs at a fixed offset. xs is S times the
 * image (im2col is R*S times) and no output column is wasted.
 *   forward: y_i = W [K x CRS] (xs at tap offsets) + b, written straight into y
 *   dW:      dW[k][tap] = sum_j dy[k][j] xs[tap + j], NT form, summed in registers
 *            over a group of images (one horizontal sum per group)
 *   dX:      dcol = W^T dy [CRS x PQ]; each dx row summed in registers (col2im_s1)
 * Other strides: im2col + GEMM, and the transposed forms for dW and dX.
 *
 * Work is cut into up to K_CONV_SLOTS "slots" of consecutive images. Each slot owns
 * its scratch and (backward) a partial dW/db; partials are added in slot order. The
 * slot count depends only on the batch size, so results are bitwise the same for any
 * thread count. */
#include "kernels/k.h"
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"
#include <string.h>

#define K_CONV_SLOTS 8
#define K_CONV_GROUP 8 /* images whose dW sums share one set of registers */
#define K_SLACK 16     /* floats of slack around the column buffer (masked loads) */

void k_conv_shape_init(k_conv_shape *sh)
{
    if (sh->stride < 1) sh->stride = 1;
    if (sh->pad < 0) sh->pad = 0;
    sh->p = (sh->h + 2 * sh->pad - sh->r) / sh->stride + 1;
    sh->q = (sh->w + 2 * sh->pad - sh->s) / sh->stride + 1;
}

/* Derived sizes, all in floats unless named otherwise. */
typedef struct conv_dims {
    long crs, pq, xsz, ysz;  /* taps per output, outputs per plane, per-image sizes */
    int s1;                  /* stride-1 path */
    long hp, xssz;           /* padded height, floats of one image's xs */
    long r_col, r_xs, r_dw, r_db, slot; /* slot region offsets (bytes) */
    long r_pack, r_off;      /* shared regions after the slots (bytes) */
    int slots;
} conv_dims;

static size_t round64(size_t b) { return (b + 63) & ~(size_t)63; }

static conv_dims conv_dims_of(const k_conv_shape *sh)
{
    conv_dims d;
    d.crs = (long)sh->c * sh->r * sh->s;
    d.pq = (long)sh->p * sh->q;
    d.xsz = (long)sh->c * sh->h * sh->w;
    d.ysz = (long)sh->k * d.pq;
    d.s1 = sh->stride == 1 && sh->s <= 32; /* col2im_s1 handles up to 32 tap columns */
    d.hp = sh->h + 2L * sh->pad;
    d.xssz = (long)sh->c * sh->s * d.hp * sh->q;
    d.slots = sh->n < K_CONV_SLOTS ? (sh->n > 0 ? sh->n : 1) : K_CONV_SLOTS;
    long xs = d.s1 ? d.xssz * K_CONV_GROUP + K_SLACK : 0;
    d.r_col = 0;
    d.r_xs = d.r_col + round64(sizeof(float) * (d.crs * d.pq + 2 * K_SLACK));
    d.r_dw = d.r_xs + round64(sizeof(float) * xs);
    d.r_db = d.r_dw + round64(sizeof(float) * sh->k * d.crs);
    d.slot = d.r_db + round64(sizeof(float) * sh->k);
    size_t pa = k_gemm_pack_floats(sh->k, (int)d.crs), pb = k_gemm_pack_floats((int)d.crs, sh->k);
    d.r_pack = d.slot * d.slots;
    d.r_off = d.r_pack + round64(sizeof(float) * (pa > pb ? pa : pb));
    return d;
}

size_t k_conv2d_workspace(const k_conv_shape *sh)
{
    conv_dims d = conv_dims_of(sh);
    return (size_t)d.r_off + round64(sizeof(long) * d.crs);
}

typedef struct conv_job {
    const k_conv_shape *sh;
    conv_dims d;
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw, *db;
    char *ws;
    const float *wpack;
    const long *boff;
} conv_job;

static k_im2col_geo conv_geo(const k_conv_shape *sh)
{
    k_im2col_geo g = {sh->c, sh->h, sh->w, sh->r, sh->s, sh->stride, sh->pad, sh->p, sh->q};
    return g;
}

static void conv_fwd_slot(void *ctx, int slot)
{
    const conv_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const conv_dims *d = &j->d;
    char *base = j->ws + (size_t)slot * d->slot;
    float *col = (float *)(base + d->r_col) + K_SLACK;
    float *xs = (float *)(base + d->r_xs);
    k_im2col_geo g = conv_geo(sh);
    long lo, hi;
    k_split(sh->n, d->slots, slot, &lo, &hi);
    for (long i = lo; i < hi; i++) {
        const float *xi = j->x + i * d->xsz;
        float *yi = j->y + i * d->ysz;
        if (d->s1) {
            k_shift_rows(&g, d->hp, xi, xs);
            k_gemm_nn_packed(sh->k, (int)d->pq, (int)d->crs, j->wpack, xs, 0, j->boff, yi, d->pq, j->b, 0);
        } else {
            k_im2col(&g, xi, col);
            k_gemm_nn_packed(sh->k, (int)d->pq, (int)d->crs, j->wpack, col, d->pq, NULL, yi, d->pq, j->b, 0);
        }
    }
}

/* Tap offsets into xs: tap (c, r, s) starts at row r of plane (c, s). */
static void conv_offsets(const k_conv_shape *sh, const conv_dims *d, long *off)
{
    long t = 0;
    for (int c = 0; c < sh->c; c++)
        for (int r = 0; r < sh->r; r++)
            for (int s = 0; s < sh->s; s++) off[t++] = ((long)c * sh->s + s) * d->hp * sh->q + (long)r * sh->q;
}

void k_conv2d_fwd(const k_conv_shape *sh, const float *x, const float *w, const float *b,
                  float *y, void *ws)
{
    conv_job j = {.sh = sh, .d = conv_dims_of(sh), .x = x, .w = w, .b = b, .y = y, .ws = ws};
    float *wpack = (float *)((char *)ws + j.d.r_pack);
    long *boff = (long *)((char *)ws + j.d.r_off);
    k_gemm_pack_a(sh->k, (int)j.d.crs, w, j.d.crs, 1, wpack);
    conv_offsets(sh, &j.d, boff);
    j.wpack = wpack;
    j.boff = boff;
    k_parallel_for(j.d.slots, conv_fwd_slot, &j);
}

/* General-stride dW: NN on transposed columns, or NT (one horizontal sum per dot
 * product) when the dots are long. */
static void conv_dw_general(const conv_job *j, const float *xi, const float *dyi, float *buf,
                            float *dwp, int acc)
{
    const k_conv_shape *sh = j->sh;
    const conv_dims *d = &j->d;
    k_im2col_geo g = conv_geo(sh);
    if (d->pq >= 256 || d->crs < 32) {
        k_im2col(&g, xi, buf);
        k_gemm_nt(sh->k, (int)d->crs, (int)d->pq, dyi, d->pq, buf, d->pq, dwp, d->crs, NULL, acc);
    } else {
        k_im2row(&g, xi, buf);
        k_gemm_nn(sh->k, (int)d->crs, (int)d->pq, dyi, d->pq, 1, buf, d->crs, dwp, d->crs, NULL, acc);
    }
}

/* Stride-1 dW for images [i0, i0+ng): their xs side by side, then one NT pass. */
static void conv_dw_s1(const conv_job *j, long i0, int ng, float *xs, float *dwp, int acc)
{
    const k_conv_shape *sh = j->sh;
    const conv_dims *d = &j->d;
    k_im2col_geo g = conv_geo(sh);
    for (int t = 0; t < ng; t++) k_shift_rows(&g, d->hp, j->x + (i0 + t) * d->xsz, xs + t * d->xssz);
    k_gemm_nt_off(sh->k, (int)d->crs, (int)d->pq, ng, j->dy + i0 * d->ysz, d->pq, d->ysz, xs,
                  j->boff, d->xssz, dwp, d->crs, acc);
}

static void conv_bwd_slot(void *ctx, int slot)
{
    const conv_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const conv_dims *d = &j->d;
    const int K = sh->k;
    char *base = j->ws + (size_t)slot * d->slot;
    float *col = (float *)(base + d->r_col) + K_SLACK;
    float *xs = (float *)(base + d->r_xs);
    float *dwp = slot == 0 ? j->dw : (float *)(base + d->r_dw);
    float *dbp = slot == 0 ? j->db : (float *)(base + d->r_db);
    k_im2col_geo g = conv_geo(sh);
    long lo, hi;
    k_split(sh->n, d->slots, slot, &lo, &hi);
    if (lo == hi) { /* an empty slot still owns a partial: make it zero */
        if (j->dw) memset(dwp, 0, sizeof(float) * K * d->crs);
        if (j->db) memset(dbp, 0, sizeof(float) * K);
    }
    /* Short rows (conv2: 64) share registers over a group of images; long ones
     * (conv1: 576) go one image at a time so the image's data stays in L1. */
    int group = d->pq >= 256 ? 1 : K_CONV_GROUP;
    if (j->dw && d->s1)
        for (long i = lo; i < hi; i += group) {
            int ng = hi - i < group ? (int)(hi - i) : group;
            conv_dw_s1(j, i, ng, xs, dwp, i > lo);
        }
    for (long i = lo; i < hi; i++) {
        const float *xi = j->x + i * d->xsz, *dyi = j->dy + i * d->ysz;
        int acc = i > lo;
        if (j->dw && !d->s1) conv_dw_general(j, xi, dyi, col, dwp, acc);
        if (j->db)
            for (int k = 0; k < K; k++) {
                float s = k_sum_span((size_t)d->pq, dyi + k * d->pq);
                dbp[k] = acc ? dbp[k] + s : s;
            }
        if (j->dx) {
            float *dxi = j->dx + i * d->xsz;
            k_gemm_nn_packed((int)d->crs, (int)d->pq, K, j->wpack, dyi, d->pq, NULL, col, d->pq, NULL, 0);
            if (d->s1) k_col2im_s1(&g, col, dxi);
            else k_col2im(&g, col, dxi);
        }
    }
}

void k_conv2d_bwd(const k_conv_shape *sh, const float *x, const float *w, const float *dy,
                  float *dx, float *dw, float *db, void *ws)
{
    conv_job j = {.sh = sh, .d = conv_dims_of(sh), .x = x, .w = w, .dy = dy, .dx = dx,
                  .dw = dw, .db = db, .ws = ws};
    float *wpack = (float *)((char *)ws + j.d.r_pack);
    long *boff = (long *)((char *)ws + j.d.r_off);
    if (dx) k_gemm_pack_a((int)j.d.crs, sh->k, w, 1, j.d.crs, wpack); /* W^T */
    conv_offsets(sh, &j.d, boff);
    j.wpack = wpack;
    j.boff = boff;
    k_parallel_for(j.d.slots, conv_bwd_slot, &j);
    /* Reduce the slot partials in slot order (the thread-count-independent part). */
    for (int s = 1; s < j.d.slots; s++) {
        char *base = (char *)ws + (size_t)s * j.d.slot;
        const float *dwp = (const float *)(base + j.d.r_dw), *dbp = (const float *)(base + j.d.r_db);
        if (dw) for (long t = 0; t < sh->k * j.d.crs; t++) dw[t] += dwp[t];
        if (db) for (int t = 0; t < sh->k; t++) db[t] += dbp[t];
    }
}

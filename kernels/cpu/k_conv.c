/* Conv2d forward/backward on the SIMD GEMMs in k_gemm.c.
 *
 * Stride 1 (LeNet, and most convs) uses the "wide" layout instead of im2col: with
 * the (padded) image flattened row-major with width Wp, output (p, q) at wide column
 * j = p*Wp + q reads input j + r*Wp + s for tap (c, r, s). So the column matrix is
 * just the image read at CRS offsets: no copy, at the price of computing Wp-Q
 * wrap-around columns per output row that are thrown away.
 *   forward: wide[K x nw] = W [K x CRS] (x at tap offsets) + b; y = compact(wide)
 *   dW:      dW[k][tap] = sum_j dyW[k][j] x[tap + j]  (dyW: dy in the wide layout with
 *            zeros in the wrap-around columns), summed over groups of images in
 *            registers (NT form, one horizontal sum per group)
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
    int wide;                /* stride-1 path */
    long hp, wp, xpsz, nw;   /* padded image, its size, wide columns */
    long r_col, r_wide, r_xpad, r_dw, r_db, slot; /* slot region offsets (bytes) */
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
    d.wide = sh->stride == 1;
    d.hp = sh->h + 2L * sh->pad;
    d.wp = sh->w + 2L * sh->pad;
    d.xpsz = sh->c * d.hp * d.wp;
    d.nw = (sh->p - 1) * d.wp + sh->q;
    d.slots = sh->n < K_CONV_SLOTS ? (sh->n > 0 ? sh->n : 1) : K_CONV_SLOTS;
    long wide = 0, xpad = 0;
    if (d.wide) {
        wide = sh->k * d.nw * K_CONV_GROUP + K_SLACK;
        if (sh->pad) xpad = d.xpsz * K_CONV_GROUP;
    }
    d.r_col = 0;
    d.r_wide = d.r_col + round64(sizeof(float) * (d.crs * d.pq + 2 * K_SLACK));
    d.r_xpad = d.r_wide + round64(sizeof(float) * wide);
    d.r_dw = d.r_xpad + round64(sizeof(float) * xpad);
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

/* The image, zero-padded into xp when pad > 0 (else x itself). */
static const float *conv_padded(const k_conv_shape *sh, const conv_dims *d, const float *x, float *xp)
{
    if (!sh->pad) return x;
    memset(xp, 0, sizeof(float) * d->xpsz);
    for (int c = 0; c < sh->c; c++)
        for (int h = 0; h < sh->h; h++)
            memcpy(xp + (c * d->hp + h + sh->pad) * d->wp + sh->pad, x + ((long)c * sh->h + h) * sh->w,
                   sizeof(float) * sh->w);
    return xp;
}

static void conv_fwd_slot(void *ctx, int slot)
{
    const conv_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const conv_dims *d = &j->d;
    char *base = j->ws + (size_t)slot * d->slot;
    float *col = (float *)(base + d->r_col) + K_SLACK;
    float *wide = (float *)(base + d->r_wide), *xp = (float *)(base + d->r_xpad);
    k_im2col_geo g = conv_geo(sh);
    long lo, hi;
    k_split(sh->n, d->slots, slot, &lo, &hi);
    for (long i = lo; i < hi; i++) {
        const float *xi = j->x + i * d->xsz;
        float *yi = j->y + i * d->ysz;
        if (d->wide) {
            const float *xs = conv_padded(sh, d, xi, xp);
            k_gemm_nn_packed(sh->k, (int)d->nw, (int)d->crs, j->wpack, xs, 0, j->boff, wide, d->nw, j->b, 0);
            k_compact_rows(sh->k, sh->p, sh->q, d->wp, d->nw, wide, yi);
        } else {
            k_im2col(&g, xi, col);
            k_gemm_nn_packed(sh->k, (int)d->pq, (int)d->crs, j->wpack, col, d->pq, NULL, yi, d->pq, j->b, 0);
        }
    }
}

/* Tap offsets into the (padded) image: tap (c, r, s) starts at c*Hp*Wp + r*Wp + s. */
static void conv_offsets(const k_conv_shape *sh, const conv_dims *d, long *off)
{
    long t = 0;
    for (int c = 0; c < sh->c; c++)
        for (int r = 0; r < sh->r; r++)
            for (int s = 0; s < sh->s; s++) off[t++] = (c * d->hp + r) * d->wp + s;
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

/* Wide-layout dW for images [i0, i0+ng): dy into the wide layout (zeros in the
 * wrap-around columns), images padded if needed, then one NT pass over the group. */
static void conv_dw_wide(const conv_job *j, long i0, int ng, float *wide, float *xp, float *dwp, int acc)
{
    const k_conv_shape *sh = j->sh;
    const conv_dims *d = &j->d;
    for (int g = 0; g < ng; g++) {
        const float *dyi = j->dy + (i0 + g) * d->ysz;
        k_widen_rows(sh->k, sh->p, sh->q, d->wp, d->nw, dyi, wide + g * sh->k * d->nw);
        if (sh->pad) conv_padded(sh, d, j->x + (i0 + g) * d->xsz, xp + g * d->xpsz);
    }
    const float *xb = sh->pad ? xp : j->x + i0 * d->xsz;
    long b_img = sh->pad ? d->xpsz : d->xsz;
    k_gemm_nt_off(sh->k, (int)d->crs, (int)d->nw, ng, wide, d->nw, sh->k * d->nw, xb, j->boff,
                  b_img, dwp, d->crs, acc);
}

static void conv_bwd_slot(void *ctx, int slot)
{
    const conv_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const conv_dims *d = &j->d;
    const int K = sh->k;
    char *base = j->ws + (size_t)slot * d->slot;
    float *col = (float *)(base + d->r_col) + K_SLACK;
    float *wide = (float *)(base + d->r_wide), *xp = (float *)(base + d->r_xpad);
    float *dwp = slot == 0 ? j->dw : (float *)(base + d->r_dw);
    float *dbp = slot == 0 ? j->db : (float *)(base + d->r_db);
    k_im2col_geo g = conv_geo(sh);
    long lo, hi;
    k_split(sh->n, d->slots, slot, &lo, &hi);
    if (lo == hi) { /* an empty slot still owns a partial: make it zero */
        if (j->dw) memset(dwp, 0, sizeof(float) * K * d->crs);
        if (j->db) memset(dbp, 0, sizeof(float) * K);
    }
    /* Short rows (conv2: 92) share registers over a group of images; long ones
     * (conv1: 668) go one image at a time so the image's data stays in L1. */
    int group = d->nw >= 256 ? 1 : K_CONV_GROUP;
    if (j->dw && d->wide)
        for (long i = lo; i < hi; i += group) {
            int ng = hi - i < group ? (int)(hi - i) : group;
            conv_dw_wide(j, i, ng, wide, xp, dwp, i > lo);
        }
    for (long i = lo; i < hi; i++) {
        const float *xi = j->x + i * d->xsz, *dyi = j->dy + i * d->ysz;
        int acc = i > lo;
        if (j->dw && !d->wide) conv_dw_general(j, xi, dyi, col, dwp, acc);
        if (j->db)
            for (int k = 0; k < K; k++) {
                float s = k_sum_span((size_t)d->pq, dyi + k * d->pq);
                dbp[k] = acc ? dbp[k] + s : s;
            }
        if (j->dx) {
            float *dxi = j->dx + i * d->xsz;
            k_gemm_nn_packed((int)d->crs, (int)d->pq, K, j->wpack, dyi, d->pq, NULL, col, d->pq, NULL, 0);
            if (d->wide) k_col2im_s1(&g, col, dxi);
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

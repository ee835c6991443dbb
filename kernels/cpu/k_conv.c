/* Conv2d forward/backward on the SIMD GEMMs in k_gemm.c.
 *
 * Stride 1 (LeNet, and most convs) uses a "shifted-row" layout instead of im2col:
 * xs[c][s] holds the (padded) image rows shifted left by s and cut to the output
 * width Q, so tap (c, r, s) of output j = p*Q + q is xs[c][s][r*Q + j]: every row of
 * the column matrix is a contiguous slice of xs at a fixed offset. xs is S times the
 * image (im2col is R*S times) and no output column is wasted.
 *   forward: y_i = W [K x CRS] (xs at tap offsets) + b, written straight into y
 *   dW:      dW[k][tap] = sum_j dy[k][j] xs[tap + j], NT form, summed in registers
 *            over a group of images (one horizontal sum per group); small planes
 *            with many channels (pq < 128 and k >= 128, or pq < 256 and k >= 256)
 *            use NN on im2row columns instead
 *   dX:      "same" convs (pad = (r-1)/2): dx = conv(dy, W flipped and transposed),
 *            i.e. the forward path again; others: dcol = W^T dy [CRS x PQ], then each
 *            dx row summed in registers (col2im_s1)
 * Strides > 1 use the same scheme on a phase-split layout (k_conv_rows.c): forward and
 * dW through tap offsets, dX through the general col2im; 1x1 strided forwards read
 * plain im2col columns (the subsampled image).
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
    int s1;                  /* stride 1: dX through col2im_s1 */
    int rpn, group;          /* tap-row phases in xs; images per dW pass */
    int dw_nn;               /* dW as NN GEMM on im2row columns */
    int dxc;                 /* dX as a stride-1 conv of dy with the flipped kernel */
    long hp, xssz;           /* rows per xs plane, floats of one image's xs */
    long dhp, dxssz;         /* the same for dX-as-conv (dy rows padded by r-1-pad) */
    long r_col, r_xs, r_dw, r_db, slot; /* slot region offsets (bytes) */
    long r_pack, r_off, r_off2, r_wt; /* shared regions after the slots (bytes) */
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
    d.rpn = sh->r < sh->stride ? sh->r : sh->stride;
    d.hp = sh->p + (sh->r - 1) / sh->stride; /* = h + 2*pad at stride 1 */
    d.xssz = (long)sh->c * sh->s * d.rpn * d.hp * sh->q;
    d.slots = sh->n < K_CONV_SLOTS ? (sh->n > 0 ? sh->n : 1) : K_CONV_SLOTS;
    /* Each slot keeps a partial dW: for large kernels (ResNet-18's layer4: 9 MiB each)
     * fewer slots keep the workspace (and peak memory) near 24 MiB of partials. Still
     * a function of the shape only. */
    long dwb = (long)sizeof(float) * sh->k * d.crs, cap = (24L << 20) / (dwb > 0 ? dwb : 1);
    if (cap < 2) cap = 2;
    if (d.slots > cap) d.slots = (int)cap;
    /* Short rows (LeNet's conv2: 64) share dW registers over a group of images; long
     * ones go one image at a time so the image's data stays in cache. In between
     * (ResNet-20's 14x14) a group of 4 keeps a tile's rows in L1 (measured ~15% over 8). */
    d.group = d.pq >= 256 ? 1 : d.pq >= 128 ? 4 : K_CONV_GROUP;
    /* Small planes with many channels (ResNet's last stages): dW's dot products of
     * length pq would be mostly tails; an NN GEMM over the im2row columns keeps full
     * vectors along crs instead (measured: 7x7 k512 75 -> 120, 14x14/2 k256 95 -> 125
     * GFLOP/s; at 14x14 k <= 256 stride 1 the two are even). */
    d.dw_nn = (d.pq < 128 && sh->k >= 128) || (d.pq < 256 && sh->k >= 256);
    long xs = d.xssz * (d.dw_nn ? 1 : d.group) + K_SLACK;
    /* "Same" convs (stride 1, square kernel, pad = (r-1)/2): dX = conv(dy padded by
     * r-1-pad, W flipped and transposed), the fast forward path, with no column
     * matrix or col2im. Smaller pads would pay for the zero border (LeNet's pad-0
     * conv2: 2.25x the work, measured 2x slower); fewer than 16 input channels leave
     * that GEMM's rows mostly empty (1 channel: 5x slower). */
    d.dxc = sh->stride == 1 && sh->r == sh->s && 2 * sh->pad == sh->r - 1 && sh->c >= 16;
    d.dhp = sh->p + 2L * (sh->r - 1 - sh->pad);
    d.dxssz = d.dxc ? (long)sh->k * sh->s * d.dhp * sh->w : 0;
    if (d.dxssz + K_SLACK > xs) xs = d.dxssz + K_SLACK;
    d.r_col = 0;
    d.r_xs = d.r_col + round64(sizeof(float) * ((d.dw_nn || !d.dxc ? d.crs * d.pq : 0) + 2 * K_SLACK));
    d.r_dw = d.r_xs + round64(sizeof(float) * xs);
    d.r_db = d.r_dw + round64(sizeof(float) * sh->k * d.crs);
    d.slot = d.r_db + round64(sizeof(float) * sh->k);
    size_t pa = k_gemm_pack_floats(sh->k, (int)d.crs), pb = k_gemm_pack_floats((int)d.crs, sh->k);
    size_t pc = k_gemm_pack_floats(sh->c, sh->k * sh->r * sh->s);
    pa = pa > pb ? pa : pb;
    pa = pa > pc ? pa : pc;
    d.r_pack = d.slot * d.slots;
    d.r_off = d.r_pack + round64(sizeof(float) * pa);
    d.r_off2 = d.r_off + round64(sizeof(long) * d.crs);
    d.r_wt = d.r_off2 + round64(sizeof(long) * (d.dxc ? sh->k * sh->r * sh->s : 0));
    return d;
}

size_t k_conv2d_workspace(const k_conv_shape *sh)
{
    conv_dims d = conv_dims_of(sh);
    return (size_t)d.r_wt + round64(sizeof(float) * (d.dxc ? sh->k * d.crs : 0));
}

typedef struct conv_job {
    const k_conv_shape *sh;
    conv_dims d;
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw, *db;
    float *ym;     /* k_conv2d_fwd_maxt: relu(max over q) per image and filter ... */
    int32_t *idx;  /* ... and its argmax; y is then one image's scratch per slot */
    char *ws;
    const float *wpack;
    const long *boff, *boff2;
} conv_job;

static k_im2col_geo conv_geo(const k_conv_shape *sh)
{
    k_im2col_geo g = {sh->c, sh->h, sh->w, sh->r, sh->s, sh->stride, sh->pad, sh->p, sh->q};
    return g;
}

/* One image's xs (the layout in the header comment). */
static void conv_rows(const k_im2col_geo *g, const conv_dims *d, const float *x, float *xs)
{
    if (g->stride == 1) k_shift_rows(g, d->hp, x, xs);
    else k_shift_rows_st(g, d->hp, d->rpn, x, xs);
}

static void conv_fwd_slot(void *ctx, int slot)
{
    const conv_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const conv_dims *d = &j->d;
    char *base = j->ws + (size_t)slot * d->slot;
    float *xs = (float *)(base + d->r_xs);
    k_im2col_geo g = conv_geo(sh);
    long lo, hi;
    k_split(sh->n, d->slots, slot, &lo, &hi);
    for (long i = lo; i < hi; i++) {
        float *yi = j->ym ? j->y + slot * d->ysz : j->y + i * d->ysz;
        if (sh->r == 1 && sh->s == 1 && sh->stride > 1) {
            /* 1x1 strided (ResNet's projections): the columns are just the subsampled
             * image; a plain-stride GEMM on them measured ~10% faster than tap offsets. */
            float *col = (float *)(j->ws + (size_t)slot * d->slot + d->r_col) + K_SLACK;
            k_im2col(&g, j->x + i * d->xsz, col);
            k_gemm_nn_packed(sh->k, (int)d->pq, (int)d->crs, j->wpack, col, d->pq, NULL, yi, d->pq, j->b, 0);
        } else {
            conv_rows(&g, d, j->x + i * d->xsz, xs);
            k_gemm_nn_packed(sh->k, (int)d->pq, (int)d->crs, j->wpack, xs, 0, j->boff, yi, d->pq, j->b, 0);
        }
        if (j->ym) k_max_time_relu_fwd(1, sh->k, (int)d->pq, yi, j->ym + i * sh->k, j->idx + i * sh->k);
    }
}

/* Tap offsets into xs: tap (c, r, s) starts at row r / st of plane (c, s, r % st). */
static void conv_offsets(const k_conv_shape *sh, const conv_dims *d, long *off)
{
    long t = 0;
    for (int c = 0; c < sh->c; c++)
        for (int r = 0; r < sh->r; r++)
            for (int s = 0; s < sh->s; s++)
                off[t++] = ((((long)c * sh->s + s) * d->rpn + r % sh->stride) * d->hp + r / sh->stride) * sh->q;
}

/* Packs W and the input offsets into the workspace, then runs the slots. */
static void conv_fwd_run(conv_job *j)
{
    float *wpack = (float *)((char *)j->ws + j->d.r_pack);
    long *boff = (long *)((char *)j->ws + j->d.r_off);
    k_gemm_pack_a(j->sh->k, (int)j->d.crs, j->w, j->d.crs, 1, wpack);
    conv_offsets(j->sh, &j->d, boff);
    j->wpack = wpack;
    j->boff = boff;
    k_parallel_for(j->d.slots, conv_fwd_slot, j);
}

void k_conv2d_fwd(const k_conv_shape *sh, const float *x, const float *w, const float *b,
                  float *y, void *ws)
{
    conv_job j = {.sh = sh, .d = conv_dims_of(sh), .x = x, .w = w, .b = b, .y = y, .ws = ws};
    conv_fwd_run(&j);
}

/* The conv's output only feeds relu -> max over time (p == 1; nn/plan.c): each image's
 * output goes to its slot's scratch, still in cache when the max is taken, and is
 * never written out. ym/idx are k_max_time_relu_fwd's of the output k_conv2d_fwd
 * would write (the same GEMM: the same bits). */
size_t k_conv2d_fwd_maxt_workspace(const k_conv_shape *sh)
{
    conv_dims d = conv_dims_of(sh);
    return k_conv2d_workspace(sh) + round64(sizeof(float) * (size_t)d.slots * d.ysz);
}

void k_conv2d_fwd_maxt(const k_conv_shape *sh, const float *x, const float *w, const float *b, float *ym,
                       int32_t *idx, void *ws)
{
    conv_job j = {.sh = sh, .d = conv_dims_of(sh), .x = x, .w = w, .b = b, .ym = ym, .idx = idx, .ws = ws};
    j.y = (float *)((char *)ws + k_conv2d_workspace(sh));
    conv_fwd_run(&j);
}

/* dW for images [i0, i0+ng): their xs side by side, then one NT pass. */
static void conv_dw(const conv_job *j, long i0, int ng, float *xs, float *dwp, int acc)
{
    const k_conv_shape *sh = j->sh;
    const conv_dims *d = &j->d;
    k_im2col_geo g = conv_geo(sh);
    for (int t = 0; t < ng; t++) conv_rows(&g, d, j->x + (i0 + t) * d->xsz, xs + t * d->xssz);
    k_gemm_nt_off(sh->k, (int)d->crs, (int)d->pq, ng, j->dy + i0 * d->ysz, d->pq, d->ysz, xs,
                  j->boff, d->xssz, dwp, d->crs, acc);
}

/* dX-as-conv geometry: input dy [k, p, q], output [c, h, w]. */
static k_im2col_geo dx_geo(const k_conv_shape *sh)
{
    k_im2col_geo g = {sh->k, sh->p, sh->q, sh->r, sh->s, 1, sh->r - 1 - sh->pad, sh->h, sh->w};
    return g;
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
    if (j->dw && d->dw_nn)
        for (long i = lo; i < hi; i++) {
            k_im2row(&g, j->x + i * d->xsz, col);
            k_gemm_nn(K, (int)d->crs, (int)d->pq, j->dy + i * d->ysz, d->pq, 1, col, d->crs, dwp,
                      d->crs, NULL, i > lo);
        }
    if (j->dw && !d->dw_nn)
        for (long i = lo; i < hi; i += d->group) {
            int ng = hi - i < d->group ? (int)(hi - i) : d->group;
            conv_dw(j, i, ng, xs, dwp, i > lo);
        }
    for (long i = lo; i < hi; i++) {
        const float *dyi = j->dy + i * d->ysz;
        int acc = i > lo;
        if (j->db)
            for (int k = 0; k < K; k++) {
                float s = k_sum_span((size_t)d->pq, dyi + k * d->pq);
                dbp[k] = acc ? dbp[k] + s : s;
            }
        if (j->dx && d->dxc) {
            k_im2col_geo gd = dx_geo(sh);
            k_shift_rows(&gd, d->dhp, dyi, xs);
            k_gemm_nn_packed(sh->c, sh->h * sh->w, K * sh->r * sh->s, j->wpack, xs, 0, j->boff2,
                             j->dx + i * d->xsz, (long)sh->h * sh->w, NULL, 0);
        } else if (j->dx) {
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
    long *boff = (long *)((char *)ws + j.d.r_off), *boff2 = (long *)((char *)ws + j.d.r_off2);
    if (dx && j.d.dxc) {
        /* wt[c][(k, r, s)] = w[k][c][R-1-r][S-1-s], packed as the A of the dX conv. */
        float *wt = (float *)((char *)ws + j.d.r_wt);
        const int C = sh->c, K = sh->k, RS = sh->r * sh->s;
        for (int c = 0; c < C; c++)
            for (int k = 0; k < K; k++)
                for (int t = 0; t < RS; t++)
                    wt[((long)c * K + k) * RS + t] = w[((long)k * C + c) * RS + RS - 1 - t];
        k_gemm_pack_a(C, K * RS, wt, (long)K * RS, 1, wpack);
        k_im2col_geo gd = dx_geo(sh);
        long t = 0; /* tap (k, r, s) of the dX conv: row r of dy's plane (k, s) */
        for (int k = 0; k < K; k++)
            for (int r = 0; r < sh->r; r++)
                for (int s = 0; s < sh->s; s++) boff2[t++] = ((long)k * gd.s + s) * j.d.dhp * gd.q + (long)r * gd.q;
    } else if (dx) k_gemm_pack_a((int)j.d.crs, sh->k, w, 1, j.d.crs, wpack); /* W^T */
    conv_offsets(sh, &j.d, boff);
    j.wpack = wpack;
    j.boff = boff;
    j.boff2 = boff2;
    k_parallel_for(j.d.slots, conv_bwd_slot, &j);
    /* Reduce the slot partials in slot order (the thread-count-independent part). */
    for (int s = 1; s < j.d.slots; s++) {
        char *base = (char *)ws + (size_t)s * j.d.slot;
        const float *dwp = (const float *)(base + j.d.r_dw), *dbp = (const float *)(base + j.d.r_db);
        if (dw) for (long t = 0; t < sh->k * j.d.crs; t++) dw[t] += dwp[t];
        if (db) for (int t = 0; t < sh->k; t++) db[t] += dbp[t];
    }
}

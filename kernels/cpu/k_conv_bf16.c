/* Conv2d with bf16 operands and fp32 accumulation (--amp bf16), on the layouts of
 * k_conv.c (read its header comment first).
 *
 * Native path (vdpbf16ps, k_bf16.c):
 *   forward: xs (fp32 shifted rows, or im2col columns for 1x1 strided) is read
 *            through the tap offsets and converted 32 columns at a time into a
 *            pair-interleaved bf16 panel; W is packed to bf16 once per call
 *   dX:      the same NN GEMM: "same" convs as a conv of dy with the flipped kernel,
 *            others dcol = W^T dy then col2im
 *   dW:      dy and xs converted to bf16 for a group of images, then dot products
 *            along the plane (NT form: no interleave needed)
 *   db:      fp32 sums of dy, as k_conv.c
 * Activations stay fp32 in memory (the other ops are unchanged); converting while
 * packing costs one pass over data the GEMM streams anyway.
 *
 * Portable path (no AVX512-BF16, or DDPRT_ISA below avx512bf16): x, w and dy are
 * rounded to bf16 values into fp32 copies and the fp32 kernels run on them: the same
 * operands, fp32 products and sums (exact products either way; only the summation
 * order differs).
 *
 * Slots of consecutive images as k_conv.c: results do not depend on the thread count. */
#include "kernels/k.h"
#include "kernels/cpu/k_bf16.h"
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"
#include <string.h>

#define CB_SLOTS 8
#define CB_SLACK 16

typedef struct cb_dims {
    long crs, pq, xsz, ysz, hp, xssz, dhp, dxssz, kkmax;
    int rpn, s1, dxc, group, slots;
    long r_xs, r_col, r_x16, r_dy16, r_panel, r_dw, r_db, slot; /* per-slot regions (bytes) */
    long r_pa, r_off, r_off2, r_wt, total;                      /* shared, after the slots */
    long p_x, p_w, p_dy, p_total;                               /* portable path */
} cb_dims;

static long r64(long b) { return (b + 63) & ~63L; }

static cb_dims cb_dims_of(const k_conv_shape *sh)
{
    cb_dims d;
    long rs = (long)sh->r * sh->s;
    d.crs = sh->c * rs;
    d.pq = (long)sh->p * sh->q;
    d.xsz = (long)sh->c * sh->h * sh->w;
    d.ysz = (long)sh->k * d.pq;
    d.s1 = sh->stride == 1 && sh->s <= 32;
    d.rpn = sh->r < sh->stride ? sh->r : sh->stride;
    d.hp = sh->p + (sh->r - 1) / sh->stride;
    d.xssz = (long)sh->c * sh->s * d.rpn * d.hp * sh->q;
    d.slots = sh->n < CB_SLOTS ? (sh->n > 0 ? sh->n : 1) : CB_SLOTS;
    d.group = d.pq >= 256 ? 1 : d.pq >= 128 ? 4 : 8;
    d.dxc = sh->stride == 1 && sh->r == sh->s && 2 * sh->pad == sh->r - 1 && sh->c >= 16;
    d.dhp = sh->p + 2L * (sh->r - 1 - sh->pad);
    d.dxssz = d.dxc ? (long)sh->k * sh->s * d.dhp * sh->w : 0;
    d.kkmax = d.crs > sh->k ? d.crs : sh->k;
    if (d.dxc && sh->k * rs > d.kkmax) d.kkmax = sh->k * rs;
    long xs = (d.xssz > d.dxssz ? d.xssz : d.dxssz) + CB_SLACK;
    d.r_xs = 0;
    d.r_col = r64(4 * xs);
    d.r_x16 = d.r_col + r64(4 * (d.crs * d.pq + 2 * CB_SLACK));
    d.r_dy16 = d.r_x16 + r64(2 * d.group * d.xssz);
    d.r_panel = d.r_dy16 + r64(2 * d.group * d.ysz);
    d.r_dw = d.r_panel + r64(2 * (long)k_bf16_panel_elems((int)d.kkmax));
    d.r_db = d.r_dw + r64(4 * sh->k * d.crs);
    d.slot = d.r_db + r64(4 * sh->k);
    long pa = (long)k_bf16_pack_a_elems(sh->k, (int)d.crs), pb = (long)k_bf16_pack_a_elems((int)d.crs, sh->k);
    long pc = (long)k_bf16_pack_a_elems(sh->c, (int)(sh->k * rs));
    pa = pa > pb ? pa : pb;
    pa = pa > pc ? pa : pc;
    d.r_pa = d.slot * d.slots;
    d.r_off = d.r_pa + r64(2 * pa);
    d.r_off2 = d.r_off + r64(8 * d.crs);
    d.r_wt = d.r_off2 + r64(8 * sh->k * rs);
    d.total = d.r_wt + r64(4 * (d.dxc ? sh->k * d.crs : 0));
    d.p_x = r64((long)k_conv2d_workspace(sh));
    d.p_w = d.p_x + r64(4 * sh->n * d.xsz);
    d.p_dy = d.p_w + r64(4 * sh->k * d.crs);
    d.p_total = d.p_dy + r64(4 * sh->n * d.ysz);
    return d;
}

size_t k_conv2d_bf16_workspace(const k_conv_shape *sh)
{
    cb_dims d = cb_dims_of(sh);
    return (size_t)(d.total > d.p_total ? d.total : d.p_total);
}

typedef struct cb_job {
    const k_conv_shape *sh;
    cb_dims d;
    const float *x, *b, *dy;
    float *y, *dx, *dw, *db;
    char *ws;
    const uint16_t *pa;
    const long *boff, *boff2;
} cb_job;

static k_im2col_geo cb_geo(const k_conv_shape *sh)
{
    k_im2col_geo g = {sh->c, sh->h, sh->w, sh->r, sh->s, sh->stride, sh->pad, sh->p, sh->q};
    return g;
}

static void cb_rows(const k_im2col_geo *g, const cb_dims *d, const float *x, float *xs)
{
    if (g->stride == 1) k_shift_rows(g, d->hp, x, xs);
    else k_shift_rows_st(g, d->hp, d->rpn, x, xs);
}

static void cb_offsets(const k_conv_shape *sh, const cb_dims *d, long *off)
{
    long t = 0;
    for (int c = 0; c < sh->c; c++)
        for (int r = 0; r < sh->r; r++)
            for (int s = 0; s < sh->s; s++)
                off[t++] = ((((long)c * sh->s + s) * d->rpn + r % sh->stride) * d->hp + r / sh->stride) * sh->q;
}

static void cb_fwd_slot(void *ctx, int slot)
{
    const cb_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const cb_dims *d = &j->d;
    char *base = j->ws + (size_t)slot * d->slot;
    float *xs = (float *)(base + d->r_xs), *col = (float *)(base + d->r_col) + CB_SLACK;
    uint16_t *panel = (uint16_t *)(base + d->r_panel);
    k_im2col_geo g = cb_geo(sh);
    long lo, hi;
    k_split(sh->n, d->slots, slot, &lo, &hi);
    for (long i = lo; i < hi; i++) {
        float *yi = j->y + i * d->ysz;
        if (sh->r == 1 && sh->s == 1 && sh->stride > 1) {
            k_im2col(&g, j->x + i * d->xsz, col);
            k_bf16_gemm_nn(sh->k, (int)d->pq, (int)d->crs, j->pa, col, d->pq, NULL, yi, d->pq, j->b, 0, panel);
            continue;
        }
        cb_rows(&g, d, j->x + i * d->xsz, xs);
        k_bf16_gemm_nn(sh->k, (int)d->pq, (int)d->crs, j->pa, xs, 0, j->boff, yi, d->pq, j->b, 0, panel);
    }
}

/* Portable path: operands rounded to bf16 into the tail of the workspace. */
static const float *cb_round(const cb_dims *d, void *ws, long off, size_t n, const float *src)
{
    float *dst = (float *)((char *)ws + off);
    (void)d;
    k_bf16_round_span(n, src, dst);
    return dst;
}

void k_conv2d_fwd_bf16(const k_conv_shape *sh, const float *x, const float *w, const float *b, float *y,
                       void *ws)
{
    cb_job j = {.sh = sh, .d = cb_dims_of(sh), .x = x, .b = b, .y = y, .ws = ws};
    if (!k_isa_bf16()) {
        const float *xr = cb_round(&j.d, ws, j.d.p_x, (size_t)(sh->n * j.d.xsz), x);
        const float *wr = cb_round(&j.d, ws, j.d.p_w, (size_t)(sh->k * j.d.crs), w);
        k_conv2d_fwd(sh, xr, wr, b, y, ws);
        return;
    }
    uint16_t *pa = (uint16_t *)((char *)ws + j.d.r_pa);
    long *boff = (long *)((char *)ws + j.d.r_off);
    k_bf16_pack_a(sh->k, (int)j.d.crs, w, j.d.crs, 1, pa);
    cb_offsets(sh, &j.d, boff);
    j.pa = pa;
    j.boff = boff;
    k_parallel_for(j.d.slots, cb_fwd_slot, &j);
}

static void cb_bwd_slot(void *ctx, int slot)
{
    const cb_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const cb_dims *d = &j->d;
    const int K = sh->k;
    char *base = j->ws + (size_t)slot * d->slot;
    float *xs = (float *)(base + d->r_xs), *col = (float *)(base + d->r_col) + CB_SLACK;
    uint16_t *x16 = (uint16_t *)(base + d->r_x16), *dy16 = (uint16_t *)(base + d->r_dy16);
    uint16_t *panel = (uint16_t *)(base + d->r_panel);
    float *dwp = slot == 0 ? j->dw : (float *)(base + d->r_dw);
    float *dbp = slot == 0 ? j->db : (float *)(base + d->r_db);
    k_im2col_geo g = cb_geo(sh);
    long lo, hi;
    k_split(sh->n, d->slots, slot, &lo, &hi);
    if (lo == hi) {
        if (j->dw) memset(dwp, 0, sizeof(float) * K * d->crs);
        if (j->db) memset(dbp, 0, sizeof(float) * K);
    }
    if (j->dw)
        for (long i = lo; i < hi; i += d->group) {
            int ng = hi - i < d->group ? (int)(hi - i) : d->group;
            for (int t = 0; t < ng; t++) {
                cb_rows(&g, d, j->x + (i + t) * d->xsz, xs);
                k_bf16_operand_span((size_t)d->xssz, xs, x16 + t * d->xssz);
                k_bf16_operand_span((size_t)d->ysz, j->dy + (i + t) * d->ysz, dy16 + t * d->ysz);
            }
            k_bf16_gemm_nt(K, (int)d->crs, (int)d->pq, ng, dy16, d->pq, d->ysz, x16, j->boff, 0, d->xssz, dwp,
                           d->crs, NULL, i > lo);
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
            k_im2col_geo gd = {sh->k, sh->p, sh->q, sh->r, sh->s, 1, sh->r - 1 - sh->pad, sh->h, sh->w};
            k_shift_rows(&gd, d->dhp, dyi, xs);
            k_bf16_gemm_nn(sh->c, sh->h * sh->w, K * sh->r * sh->s, j->pa, xs, 0, j->boff2, j->dx + i * d->xsz,
                           (long)sh->h * sh->w, NULL, 0, panel);
        } else if (j->dx) {
            float *dxi = j->dx + i * d->xsz;
            k_bf16_gemm_nn((int)d->crs, (int)d->pq, K, j->pa, dyi, d->pq, NULL, col, d->pq, NULL, 0, panel);
            if (d->s1) k_col2im_s1(&g, col, dxi);
            else k_col2im(&g, col, dxi);
        }
    }
}

void k_conv2d_bwd_bf16(const k_conv_shape *sh, const float *x, const float *w, const float *dy, float *dx,
                       float *dw, float *db, void *ws)
{
    cb_job j = {.sh = sh, .d = cb_dims_of(sh), .x = x, .dy = dy, .dx = dx, .dw = dw, .db = db, .ws = ws};
    if (!k_isa_bf16()) {
        const float *xr = cb_round(&j.d, ws, j.d.p_x, (size_t)(sh->n * j.d.xsz), x);
        const float *wr = cb_round(&j.d, ws, j.d.p_w, (size_t)(sh->k * j.d.crs), w);
        const float *dyr = cb_round(&j.d, ws, j.d.p_dy, (size_t)(sh->n * j.d.ysz), dy);
        k_conv2d_bwd(sh, xr, wr, dyr, dx, dw, db, ws);
        return;
    }
    uint16_t *pa = (uint16_t *)((char *)ws + j.d.r_pa);
    long *boff = (long *)((char *)ws + j.d.r_off), *boff2 = (long *)((char *)ws + j.d.r_off2);
    if (dx && j.d.dxc) {
        /* wt[c][(k, r, s)] = w[k][c][R-1-r][S-1-s]: the A of the dX conv. */
        float *wt = (float *)((char *)ws + j.d.r_wt);
        const int C = sh->c, K = sh->k, RS = sh->r * sh->s;
        for (int c = 0; c < C; c++)
            for (int k = 0; k < K; k++)
                for (int t = 0; t < RS; t++) wt[((long)c * K + k) * RS + t] = w[((long)k * C + c) * RS + RS - 1 - t];
        k_bf16_pack_a(C, K * RS, wt, (long)K * RS, 1, pa);
        long dq = sh->w, t = 0;
        for (int k = 0; k < K; k++)
            for (int r = 0; r < sh->r; r++)
                for (int s = 0; s < sh->s; s++) boff2[t++] = ((long)k * sh->s + s) * j.d.dhp * dq + (long)r * dq;
    } else if (dx) k_bf16_pack_a((int)j.d.crs, sh->k, w, 1, j.d.crs, pa); /* W^T */
    cb_offsets(sh, &j.d, boff);
    j.pa = pa;
    j.boff = boff;
    j.boff2 = boff2;
    k_parallel_for(j.d.slots, cb_bwd_slot, &j);
    for (int s = 1; s < j.d.slots; s++) {
        char *base = (char *)ws + (size_t)s * j.d.slot;
        const float *dwp = (const float *)(base + j.d.r_dw), *dbp = (const float *)(base + j.d.r_db);
        if (dw) for (long t = 0; t < sh->k * j.d.crs; t++) dw[t] += dwp[t];
        if (db) for (int t = 0; t < sh->k; t++) db[t] += dbp[t];
    }
}

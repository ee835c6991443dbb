/* Conv2d with bf16 operands and fp32 accumulation (--amp bf16), on the layouts of
 * k_conv.c (read its header comment first).
 *
 * Native path (vdpbf16ps, k_bf16.c), stride 1 ("padded width"): the image is
 * zero-padded to hp x wp in bf16 once; output (p, q) is computed at extended column
 * i = p*wp + q (q < wp; columns q >= Q are computed and dropped: wp/Q more work), so
 * tap (c, r, s) of every output is element i + c*hp*wp + r*wp + s of the padded
 * image: one copy serves all taps, with no shifted rows. vdpbf16ps wants taps in
 * pairs, and the pair (s, s+1) of a row is (in[i], in[i+1]): a "pair image" built
 * once per image is then read directly as the GEMM's B (no panel packing). Odd S
 * leave one tap per row, paired vertically (in[i], in[i+wp]); an odd one out gets a
 * zero weight. The extended output goes through a scratch and is compacted into y.
 *   forward and "same" dX (conv of dy with the flipped kernel): as above
 *   dW: dy scattered to extended columns (zeros at q >= Q), dot products against
 *       the padded image at tap offsets (NT form), summed over a group of images
 * Strided convs:
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
 * Portable path (k_bf16_conv_dot() false: no AVX512-BF16, DDPRT_ISA below avx512bf16,
 * or an Intel CPU, where this is faster): x, w and dy are rounded to bf16 values into
 * fp32 copies and the fp32 kernels run on them: the same operands, fp32 products and
 * sums (exact products either way; only the summation order differs). db is summed
 * from dy as it is on both paths (it was of the rounded dy on this one: 1e-3 apart).
 *
 * The geometry, the shifted rows and the slots of consecutive images (results do not
 * depend on the thread count) are k_conv_drv.c's, shared with k_conv.c. */
#include "kernels/k.h"
#include "kernels/cpu/k_bf16.h"
#include "kernels/cpu/k_conv_drv.h"
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"
#include <string.h>

#define CB_SLACK 16
/* Output elements of one extended image (m * n32) up to which the GEMM stores compacted
 * results itself; larger outputs (resnet18's 64x56x56, 128x28x28) measured faster
 * through an extended scratch and one streaming compaction. */
#define S1_FUSED_MAX 65536L

/* One stride-1 geometry of the padded-width layout (sizes in elements). */
typedef struct s1_geo {
    int c, h, w, r, s, pad, p, q, needv, npairs;
    long hp, wp, plane, npix, n32, padsz, prsz;
} s1_geo;

static s1_geo s1_of(int c, int h, int w, int r, int s, int pad)
{
    s1_geo g = {.c = c, .h = h, .w = w, .r = r, .s = s, .pad = pad};
    g.hp = h + 2L * pad;
    g.wp = w + 2L * pad;
    g.p = (int)g.hp - r + 1;
    g.q = (int)g.wp - s + 1;
    g.plane = g.hp * g.wp;
    g.npix = c * g.plane;
    g.n32 = (g.p * g.wp + 31) / 32 * 32;
    g.padsz = (g.npix + g.wp + 128 + 31) / 32 * 32;
    g.needv = (s & 1) && r >= 2;
    g.prsz = (g.needv ? 2 : 1) * (g.npix + 64) + 64;
    g.npairs = c * (r * (s / 2) + (s & 1) * ((r + 1) / 2)); /* as s1_pair_list */
    return g;
}

/* Pairs of taps t = (c*R + r)*S + s: (s, s+1) horizontally, the odd column's taps
 * (r, r+1) vertically (at voff), a last odd one with a zero partner. */
static int s1_pair_list(const s1_geo *g, long voff, int *ta, int *tb, long *boff)
{
    int n = 0, R = g->r, S = g->s;
    for (int c = 0; c < g->c; c++) {
        for (int r = 0; r < R; r++)
            for (int s = 0; s + 1 < S; s += 2) {
                ta[n] = (c * R + r) * S + s, tb[n] = ta[n] + 1;
                boff[n++] = c * g->plane + r * g->wp + s;
            }
        if (!(S & 1)) continue;
        int r = 0;
        for (; r + 1 < R; r += 2) {
            ta[n] = (c * R + r) * S + S - 1, tb[n] = ta[n] + S;
            boff[n++] = voff + c * g->plane + r * g->wp + S - 1;
        }
        if (r < R) {
            ta[n] = (c * R + r) * S + S - 1, tb[n] = -1;
            boff[n++] = c * g->plane + r * g->wp + S - 1;
        }
    }
    return n;
}

/* The driver's geometry (g) plus this kernel's choices and scratch regions. */
typedef struct cb_dims {
    k_conv_geo g;
    long crs, pq, xsz, ysz, hp, xssz, dhp, dxssz, kkmax; /* copies of g's, for brevity */
    int rpn, s1, dxc, group, slots;
    int pw;                   /* forward and dW on the padded-width layout */
    int share;                /* bwd: dW reads dy from the dX conv's padded copy */
    s1_geo fg, dg;            /* stride 1: forward (and dW) and dX-as-conv geometries */
    long r_pad, r_pr, r_tmp, r_dyx; /* stride-1 slot regions (bytes) */
    long r_ta, r_tb, r_poff;  /* stride-1 shared: the pair list */
    long r_wpf, r_wpd, r_wcf, r_wcd; /* stride-1 shared: expand/compress windows (fg, dg) */
    long r_xs, r_col, r_x16, r_dy16, r_panel, r_dw, r_db, slot; /* per-slot regions (bytes) */
    long r_pa, r_off, r_off2, r_wt, total;                      /* shared, after the slots */
    long p_x, p_w, p_dy, p_total;                               /* portable path */
} cb_dims;

static long r64(long b) { return (b + 63) & ~63L; }

static cb_dims cb_dims_of(const k_conv_shape *sh)
{
    cb_dims d;
    long rs = (long)sh->r * sh->s;
    d.g = k_conv_geo_of(sh);
    d.crs = d.g.crs, d.pq = d.g.pq, d.xsz = d.g.xsz, d.ysz = d.g.ysz, d.hp = d.g.hp, d.xssz = d.g.xssz;
    d.dhp = d.g.dhp, d.dxssz = d.g.dxssz, d.s1 = d.g.s1, d.rpn = d.g.rpn, d.slots = d.g.slots, d.dxc = d.g.dxc;
    /* Padded width computes wp/Q times the outputs: worth it while that stays small
     * (LeNet's pad-0 conv2, 8 of 12 columns, keeps the shifted rows). */
    d.pw = sh->stride == 1 && 4L * sh->q >= 3L * (sh->w + 2L * sh->pad);
    d.share = d.pw && d.dxc;
    d.group = d.pq >= 256 ? 1 : d.pq >= 128 ? 4 : 8;
    if (sh->stride == 1) {
        d.fg = s1_of(sh->c, sh->h, sh->w, sh->r, sh->s, sh->pad);
        d.dg = s1_of(sh->k, sh->p, sh->q, sh->r, sh->s, sh->r - 1 - sh->pad);
    }
    if (d.pw) { /* up to 8 images share the dW horizontal sums, in about 1.5 MB of bf16 images */
        long per = 2 * (d.fg.padsz + (d.share ? d.dg.padsz : sh->k * d.fg.n32));
        d.group = (int)(1536 * 1024 / per);
        d.group = d.group < 1 ? 1 : d.group > 8 ? 8 : d.group;
    }
    d.kkmax = d.crs > sh->k ? d.crs : sh->k;
    if (d.dxc && sh->k * rs > d.kkmax) d.kkmax = sh->k * rs;
    long xs = (d.xssz > d.dxssz ? d.xssz : d.dxssz) + CB_SLACK;
    d.r_xs = 0;
    d.r_col = r64(4 * xs);
    d.r_x16 = d.r_col + r64(4 * (d.crs * d.pq + 2 * CB_SLACK));
    int g16 = d.pw ? 0 : d.group; /* the shifted-row dW's bf16 copies */
    long l32 = (d.pq + 31) / 32 * 32;
    d.r_dy16 = d.r_x16 + r64(2 * (g16 * d.xssz + 32));
    d.r_panel = d.r_dy16 + r64(2 * g16 * sh->k * l32);
    d.r_dw = d.r_panel + r64(2 * (long)k_bf16_panel_elems((int)d.kkmax));
    d.r_db = d.r_dw + r64(4 * sh->k * d.crs);
    d.r_pad = d.r_db + r64(4 * sh->k);
    d.r_pr = d.r_pad;
    d.r_tmp = d.r_dyx = d.r_pad;
    if (sh->stride == 1) {
        long pads = d.group * d.fg.padsz > d.dg.padsz ? d.group * d.fg.padsz : d.dg.padsz;
        if (d.share) pads = d.group * (d.fg.padsz + d.dg.padsz);
        long prs = d.fg.prsz > d.dg.prsz ? d.fg.prsz : d.dg.prsz;
        long tf = sh->k * d.fg.n32, td = sh->c * d.dg.n32; /* the extended scratch, if used */
        long tmp = (tf > S1_FUSED_MAX ? tf : 0) > (td > S1_FUSED_MAX ? td : 0) ? tf : td > S1_FUSED_MAX ? td : 0;
        d.r_pr = d.r_pad + r64(2 * pads);
        d.r_tmp = d.r_pr + r64(4 * prs);
        d.r_dyx = d.r_tmp + r64(4 * tmp);
        d.slot = d.r_dyx + r64(2 * d.group * sh->k * d.fg.n32);
    } else d.slot = d.r_pad;
    long pa = (long)k_bf16_pack_a_elems(sh->k, (int)d.crs), pb = (long)k_bf16_pack_a_elems((int)d.crs, sh->k);
    long pc = (long)k_bf16_pack_a_elems(sh->c, (int)(sh->k * rs));
    pa = pa > pb ? pa : pb;
    pa = pa > pc ? pa : pc;
    if (sh->stride == 1) {
        long pf = (long)k_bf16_pack_a_elems(sh->k, 2 * d.fg.npairs), pd = (long)k_bf16_pack_a_elems(sh->c, 2 * d.dg.npairs);
        pa = pa > pf ? pa : pf;
        pa = pa > pd ? pa : pd;
    }
    d.r_pa = d.slot * d.slots;
    d.r_off = d.r_pa + r64(2 * pa);
    d.r_off2 = d.r_off + r64(8 * d.crs);
    d.r_wt = d.r_off2 + r64(8 * sh->k * rs);
    d.r_ta = d.r_wt + r64(4 * (d.dxc ? sh->k * d.crs : 0));
    d.r_tb = d.r_ta + r64(4 * d.kkmax);
    d.r_poff = d.r_tb + r64(4 * d.kkmax);
    d.r_wpf = d.r_poff + r64(8 * d.kkmax);
    d.r_wpd = d.r_wpf + (sh->stride == 1 ? r64(8 * (d.fg.padsz / 32)) : 0);
    d.r_wcf = d.r_wpd + (sh->stride == 1 ? r64(8 * (d.dg.padsz / 32)) : 0);
    d.r_wcd = d.r_wcf + (sh->stride == 1 ? r64(8 * (d.fg.n32 / 16)) : 0);
    d.total = d.r_wcd + (sh->stride == 1 ? r64(8 * (d.dg.n32 / 16)) : 0);
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
    const long *boff, *boff2, *poff;
    int npairs;
    const k_bf16_win *wpf, *wpd, *wcf, *wcd; /* pad and compact windows of fg, dg */
} cb_job;

/* The expand/compress windows of a stride-1 geometry (pad: zero-padded image; compact:
 * the extended output rows back to [m][p][q]). */
static void s1_windows(const s1_geo *g, k_bf16_win *pad, k_bf16_win *compact)
{
    k_bf16_pad_table(g->c, g->h, g->w, g->pad, g->pad, g->hp, g->wp, g->padsz, pad);
    k_bf16_compact_table(g->p, g->q, g->wp, g->n32, compact);
}

/* Stride 1: one padded bf16 image through the pair image into out [m, g->p, g->q]. */
static void s1_conv_padded(const cb_job *j, const s1_geo *g, const k_bf16_win *wc, int m, const uint16_t *pad16,
                           float *out, const float *bias, char *base)
{
    uint32_t *pr = (uint32_t *)(base + j->d.r_pr);
    k_bf16_pairs(g->npix + 64, g->needv ? g->wp : 0, pad16, pr);
    if (m * g->n32 <= S1_FUSED_MAX) {
        k_bf16_gemm_pairs(m, (int)g->n32, j->npairs, j->pa, pr, j->poff, out, (long)g->p * g->q, bias, wc);
        return;
    }
    float *tmp = (float *)(base + j->d.r_tmp);
    k_bf16_gemm_pairs(m, (int)g->n32, j->npairs, j->pa, pr, j->poff, tmp, g->n32, bias, NULL);
    k_bf16_compact(m, g->p, g->q, g->wp, g->n32, tmp, out);
}

static void s1_conv_image(const cb_job *j, const s1_geo *g, const k_bf16_win *wp, const k_bf16_win *wc, int m,
                          const float *x, float *out, const float *bias, char *base)
{
    uint16_t *pad16 = (uint16_t *)(base + j->d.r_pad);
    k_bf16_pad_expand(wp, g->padsz / 32, x, (long)g->c * g->h * g->w, pad16);
    s1_conv_padded(j, g, wc, m, pad16, out, bias, base);
}

/* dW and dX for images [i, i+ng) of a "same" stride-1 conv: dy padded once for the dX
 * conv is also dW's dy at extended columns (row p at p*wp: the dX padding is dW's zero
 * gap, as both layouts share wp), read in place. */
static void s1_bwd_shared(const cb_job *j, long i, int ng, char *base, float *dwp, int acc)
{
    const k_conv_shape *sh = j->sh;
    const cb_dims *d = &j->d;
    const s1_geo *f = &d->fg, *g = &d->dg;
    uint16_t *padx = (uint16_t *)(base + d->r_pad), *pady = padx + (long)d->group * f->padsz;
    for (int t = 0; t < ng; t++) {
        if (j->dw) k_bf16_pad_expand(j->wpf, f->padsz / 32, j->x + (i + t) * d->xsz, d->xsz, padx + t * f->padsz);
        k_bf16_pad_expand(j->wpd, g->padsz / 32, j->dy + (i + t) * d->ysz, d->ysz, pady + t * g->padsz);
    }
    if (j->dw) {
        /* Extended columns past p*wp read zeros up to the next channel's data. */
        long dplane = g->hp * g->wp, l = f->n32 <= dplane ? f->n32 : (long)f->p * f->wp;
        k_bf16_gemm_nt(sh->k, (int)d->crs, (int)l, ng, pady + g->pad * g->wp + g->pad, dplane, g->padsz, padx,
                       j->boff, 0, f->padsz, dwp, d->crs, NULL, acc);
    }
    if (j->dx)
        for (int t = 0; t < ng; t++)
            s1_conv_padded(j, g, j->wcd, sh->c, pady + t * g->padsz, j->dx + (i + t) * d->xsz, NULL, base);
}

/* Stride 1 dW for images [i, i+ng): padded images side by side, dy at extended
 * columns (zero at q >= Q and past p*wp), dot products at tap offsets. */
static void s1_dw(const cb_job *j, long i, int ng, char *base, float *dwp, int acc)
{
    const k_conv_shape *sh = j->sh;
    const cb_dims *d = &j->d;
    const s1_geo *g = &d->fg;
    uint16_t *pad16 = (uint16_t *)(base + d->r_pad), *dyx = (uint16_t *)(base + d->r_dyx);
    for (int t = 0; t < ng; t++) {
        k_bf16_pad_expand(j->wpf, g->padsz / 32, j->x + (i + t) * d->xsz, d->xsz, pad16 + t * g->padsz);
        uint16_t *o = dyx + (long)t * sh->k * g->n32;
        long used = g->p * g->wp;
        for (int k = 0; k < sh->k; k++) {
            k_bf16_scatter_rows(g->p, g->q, g->wp, j->dy + (i + t) * d->ysz + (long)k * d->pq, o + k * g->n32);
            memset(o + k * g->n32 + used, 0, 2 * (size_t)(g->n32 - used));
        }
    }
    k_bf16_gemm_nt(sh->k, (int)d->crs, (int)g->n32, ng, dyx, g->n32, sh->k * g->n32, pad16, j->boff, 0, g->padsz,
                   dwp, d->crs, NULL, acc);
}

static void cb_fwd_image(void *ctx, int slot, char *base, long i)
{
    const cb_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const cb_dims *d = &j->d;
    float *xs = (float *)(base + d->r_xs), *col = (float *)(base + d->r_col) + CB_SLACK;
    uint16_t *panel = (uint16_t *)(base + d->r_panel);
    k_im2col_geo g = k_conv_im2col(sh);
    float *yi = j->y + i * d->ysz;
    (void)slot;
    if (sh->r == 1 && sh->s == 1 && sh->stride > 1) {
        k_im2col(&g, j->x + i * d->xsz, col);
        k_bf16_gemm_nn(sh->k, (int)d->pq, (int)d->crs, j->pa, col, d->pq, NULL, yi, d->pq, j->b, 0, panel);
        return;
    }
    if (d->pw) {
        s1_conv_image(j, &d->fg, j->wpf, j->wcf, sh->k, j->x + i * d->xsz, yi, j->b, base);
        return;
    }
    k_conv_rows(&g, &d->g, j->x + i * d->xsz, xs);
    k_bf16_gemm_nn(sh->k, (int)d->pq, (int)d->crs, j->pa, xs, 0, j->boff, yi, d->pq, j->b, 0, panel);
}

static k_conv_slots cb_slots(cb_job *j)
{
    k_conv_slots s = {.sh = j->sh, .slots = j->d.slots, .ws = j->ws, .slot_bytes = j->d.slot, .r_dw = j->d.r_dw,
                      .r_db = j->d.r_db, .group = j->d.group, .ysz = j->d.ysz, .pq = j->d.pq, .dy = j->dy,
                      .dw = j->dw, .db = j->db, .job = j};
    return s;
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
    if (!k_bf16_conv_dot()) {
        const float *xr = cb_round(&j.d, ws, j.d.p_x, (size_t)(sh->n * j.d.xsz), x);
        const float *wr = cb_round(&j.d, ws, j.d.p_w, (size_t)(sh->k * j.d.crs), w);
        k_conv2d_fwd(sh, xr, wr, b, y, ws);
        return;
    }
    uint16_t *pa = (uint16_t *)((char *)ws + j.d.r_pa);
    long *boff = (long *)((char *)ws + j.d.r_off);
    if (j.d.pw) {
        int *ta = (int *)((char *)ws + j.d.r_ta), *tb = (int *)((char *)ws + j.d.r_tb);
        long *poff = (long *)((char *)ws + j.d.r_poff);
        j.npairs = s1_pair_list(&j.d.fg, j.d.fg.npix + 64, ta, tb, poff);
        k_bf16_pack_a_pairs(sh->k, j.npairs, w, j.d.crs, 1, ta, tb, pa);
        j.poff = poff;
        k_bf16_win *wpf = (k_bf16_win *)((char *)ws + j.d.r_wpf), *wcf = (k_bf16_win *)((char *)ws + j.d.r_wcf);
        s1_windows(&j.d.fg, wpf, wcf);
        j.wpf = wpf, j.wcf = wcf;
    } else k_bf16_pack_a(sh->k, (int)j.d.crs, w, j.d.crs, 1, pa);
    k_conv_tap_offsets(sh, &j.d.g, boff);
    j.pa = pa;
    j.boff = boff;
    k_conv_slots s = cb_slots(&j);
    s.fwd = cb_fwd_image;
    k_conv_slots_fwd(&s);
}

/* The dW passes over images [i, i+ng): stride 1 "same" convs do dW and dX together
 * (s1_bwd_shared), other stride-1 ones on the padded width (s1_dw), strided ones on
 * bf16 copies of the shifted rows. */
static void cb_pass_shared(void *ctx, char *base, long i, int ng, float *dwp, int acc)
{
    s1_bwd_shared(ctx, i, ng, base, dwp, acc);
}

static void cb_pass_s1(void *ctx, char *base, long i, int ng, float *dwp, int acc)
{
    s1_dw(ctx, i, ng, base, dwp, acc);
}

static void cb_pass_rows(void *ctx, char *base, long i, int ng, float *dwp, int acc)
{
    const cb_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const cb_dims *d = &j->d;
    const int K = sh->k;
    float *xs = (float *)(base + d->r_xs);
    uint16_t *x16 = (uint16_t *)(base + d->r_x16), *dy16 = (uint16_t *)(base + d->r_dy16);
    k_im2col_geo g = k_conv_im2col(sh);
    /* dy rows padded with zeros to a multiple of 32 (no masked tails: slow on Zen 5);
     * x16 past the rows is finite (next image, or zeroed slack). */
    long l32 = (d->pq + 31) / 32 * 32;
    for (int t = 0; t < ng; t++) {
        k_conv_rows(&g, &d->g, j->x + (i + t) * d->xsz, xs);
        k_bf16_operand_span((size_t)d->xssz, xs, x16 + t * d->xssz);
        k_bf16_scatter_rows(K, (int)d->pq, l32, j->dy + (i + t) * d->ysz, dy16 + t * K * l32);
    }
    memset(x16 + ng * d->xssz, 0, 2 * 32);
    k_bf16_gemm_nt(K, (int)d->crs, (int)l32, ng, dy16, l32, K * l32, x16, j->boff, 0, d->xssz, dwp, d->crs, NULL,
                   acc);
}

static void cb_dx_image(void *ctx, char *base, long i)
{
    const cb_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const cb_dims *d = &j->d;
    const float *dyi = j->dy + i * d->ysz;
    if (d->dxc) { /* shared: done by the dW pass */
        if (!d->share) s1_conv_image(j, &d->dg, j->wpd, j->wcd, sh->c, dyi, j->dx + i * d->xsz, NULL, base);
        return;
    }
    float *col = (float *)(base + d->r_col) + CB_SLACK, *dxi = j->dx + i * d->xsz;
    uint16_t *panel = (uint16_t *)(base + d->r_panel);
    k_im2col_geo g = k_conv_im2col(sh);
    k_bf16_gemm_nn((int)d->crs, (int)d->pq, sh->k, j->pa, dyi, d->pq, NULL, col, d->pq, NULL, 0, panel);
    if (d->s1) k_col2im_s1(&g, col, dxi);
    else k_col2im(&g, col, dxi);
}

/* db[k]: the fp32 sum of dy's channel k in a fixed order (double partials). */
static void cb_bias_grad(const k_conv_shape *sh, const float *dy, float *db)
{
    const long pq = (long)sh->p * sh->q;
    for (int k = 0; k < sh->k; k++) {
        double s = 0.0;
        for (int n = 0; n < sh->n; n++) {
            const float *row = dy + ((long)n * sh->k + k) * pq;
            for (long i = 0; i < pq; i++) s += row[i];
        }
        db[k] = (float)s;
    }
}

void k_conv2d_bwd_bf16(const k_conv_shape *sh, const float *x, const float *w, const float *dy, float *dx,
                       float *dw, float *db, void *ws)
{
    cb_job j = {.sh = sh, .d = cb_dims_of(sh), .x = x, .dy = dy, .dx = dx, .dw = dw, .db = db, .ws = ws};
    if (!k_bf16_conv_dot()) {
        const float *xr = cb_round(&j.d, ws, j.d.p_x, (size_t)(sh->n * j.d.xsz), x);
        const float *wr = cb_round(&j.d, ws, j.d.p_w, (size_t)(sh->k * j.d.crs), w);
        const float *dyr = cb_round(&j.d, ws, j.d.p_dy, (size_t)(sh->n * j.d.ysz), dy);
        k_conv2d_bwd(sh, xr, wr, dyr, dx, dw, NULL, ws);
        if (db) cb_bias_grad(sh, dy, db); /* of dy as it is, as the dot path (not of dyr) */
        return;
    }
    uint16_t *pa = (uint16_t *)((char *)ws + j.d.r_pa);
    long *boff = (long *)((char *)ws + j.d.r_off), *boff2 = (long *)((char *)ws + j.d.r_off2);
    if (dx && j.d.dxc) {
        float *wt = (float *)((char *)ws + j.d.r_wt);
        const int C = sh->c, K = sh->k, RS = sh->r * sh->s;
        k_conv_flip_weights(sh, w, wt);
        int *ta = (int *)((char *)ws + j.d.r_ta), *tb = (int *)((char *)ws + j.d.r_tb);
        long *poff = (long *)((char *)ws + j.d.r_poff);
        j.npairs = s1_pair_list(&j.d.dg, j.d.dg.npix + 64, ta, tb, poff);
        k_bf16_pack_a_pairs(C, j.npairs, wt, (long)K * RS, 1, ta, tb, pa);
        j.poff = poff;
    } else if (dx) k_bf16_pack_a((int)j.d.crs, sh->k, w, 1, j.d.crs, pa); /* W^T */
    k_conv_tap_offsets(sh, &j.d.g, boff);
    if (j.d.pw) /* dW taps in the padded image */
        for (int c = 0, t = 0; c < sh->c; c++)
            for (int r = 0; r < sh->r; r++)
                for (int s = 0; s < sh->s; s++) boff[t++] = c * j.d.fg.plane + r * j.d.fg.wp + s;
    if (sh->stride == 1) {
        k_bf16_win *wpf = (k_bf16_win *)((char *)ws + j.d.r_wpf), *wcf = (k_bf16_win *)((char *)ws + j.d.r_wcf);
        k_bf16_win *wpd = (k_bf16_win *)((char *)ws + j.d.r_wpd), *wcd = (k_bf16_win *)((char *)ws + j.d.r_wcd);
        if (j.d.pw && dw) s1_windows(&j.d.fg, wpf, wcf);
        if (j.d.dxc && (dx || j.d.share)) s1_windows(&j.d.dg, wpd, wcd);
        j.wpf = wpf, j.wcf = wcf, j.wpd = wpd, j.wcd = wcd;
    }
    j.pa = pa;
    j.boff = boff;
    j.boff2 = boff2;
    k_conv_slots s = cb_slots(&j);
    if (j.d.share && (dw || dx)) s.dw_pass = cb_pass_shared;
    else if (dw) s.dw_pass = j.d.pw ? cb_pass_s1 : cb_pass_rows;
    if (dx) s.dx = cb_dx_image;
    k_conv_slots_bwd(&s);
}

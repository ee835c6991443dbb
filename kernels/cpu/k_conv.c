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
 *            use NN on im2row columns instead; on AVX2 (32+ taps) the taps are
 *            broadcast against dy^T's rows instead (k_conv_dw_tb)
 *   dX:      "same" convs (pad = (r-1)/2): dx = conv(dy, W flipped and transposed),
 *            i.e. the forward path again; others: dcol = W^T dy [CRS x PQ], then each
 *            dx row summed in registers (col2im_s1)
 * Strides > 1 use the same scheme on a phase-split layout (k_conv_rows.c): forward and
 * dW through tap offsets, dX through the general col2im (on AVX2, stride 2 on even
 * planes: 4 phase convs of dy, k_conv_dx_ph); 1x1 strided forwards read plain im2col
 * columns (the subsampled image).
 *
 * The geometry, the layouts' builders and the slots of consecutive images (results
 * bitwise the same for any thread count) are k_conv_drv.c's, shared with the bf16
 * kernels. */
#include "kernels/k.h"
#include "kernels/cpu/k_conv_int.h"
#include "kernels/cpu/k_conv_wino.h"
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"
#include <string.h>

void k_conv_shape_init(k_conv_shape *sh)
{
    if (sh->stride < 1) sh->stride = 1;
    if (sh->pad < 0) sh->pad = 0;
    sh->p = (sh->h + 2 * sh->pad - sh->r) / sh->stride + 1;
    sh->q = (sh->w + 2 * sh->pad - sh->s) / sh->stride + 1;
}

static k_conv_dims k_conv_dims_of(const k_conv_shape *sh)
{
    k_conv_dims d;
    d.g = k_conv_geo_of(sh);
    const k_conv_geo *g = &d.g;
    /* Each slot keeps a partial dW: for large kernels (ResNet-18's layer4: 9 MiB each)
     * fewer slots keep the workspace (and peak memory) near 24 MiB of partials. Still
     * a function of the shape only. */
    long dwb = (long)sizeof(float) * sh->k * g->crs, cap = (24L << 20) / (dwb > 0 ? dwb : 1);
    if (cap < 2) cap = 2;
    if (d.g.slots > cap) d.g.slots = (int)cap;
    /* Short rows (LeNet's conv2: 64) share dW registers over a group of images; long
     * ones go one image at a time so the image's data stays in cache. In between
     * (ResNet-20's 14x14) a group of 4 keeps a tile's rows in L1 (measured ~15% over 8). */
    d.group = g->pq >= 256 ? 1 : g->pq >= 128 ? 4 : K_CONV_GROUP;
    /* Small planes with many channels (ResNet's last stages): dW's dot products of
     * length pq would be mostly tails; an NN GEMM over the im2row columns keeps full
     * vectors along crs instead (measured: 7x7 k512 75 -> 120, 14x14/2 k256 95 -> 125
     * GFLOP/s; at 14x14 k <= 256 stride 1 the two are even). */
    d.dw_nn = (g->pq < 128 && sh->k >= 128) || (g->pq < 256 && sh->k >= 256);
    /* One NN GEMM over several images' columns (K = images x pq, the images' steps in
     * order: each dW element the same FMAs as image by image) rather than one per
     * image, where dW is large: a K of 49 (7x7 planes) read and wrote all of dW per
     * image (ResNet-18's layer4: 9 MiB). Up to 8 MiB of columns over all slots. */
    long colb = (long)sizeof(float) * g->crs * g->pq;
    d.nn_group = 1;
    if (d.dw_nn && (long)sizeof(float) * sh->k * g->crs > (2L << 20)) {
        long ng = (8L << 20) / ((long)g->slots * colb);
        d.nn_group = ng < 1 ? 1 : ng > K_CONV_GROUP ? K_CONV_GROUP : (int)ng;
    }
    long xs = g->xssz * (d.dw_nn ? 1 : d.group) + K_SLACK;
    if (g->dxssz + K_SLACK > xs) xs = g->dxssz + K_SLACK;
    /* Small planes on AVX2 and AVX-512 (conv_ilv_use): ng = group images interleaved by row, one
     * wide GEMM instead of ng with mostly-empty last column tiles (7x7: 49 outputs in
     * 4 tiles of 16). The regions exist whatever the ISA: the workspace size is a
     * function of the shape only. */
    long tiles = (g->pq + 15) / 16 * 16; /* conv_ilv_use's rule, a function of the shape */
    d.ilv = sh->stride == 1 && d.group > 1 && 8 * tiles > 9 * g->pq;
    long tmp = 0, dyg = 0, offi = 0;
    if (d.ilv) {
        long big = g->xssz > g->dxssz ? g->xssz : g->dxssz;
        if (d.group * big + K_SLACK > xs) xs = d.group * big + K_SLACK;
        tmp = d.group * (g->ysz > g->xsz ? g->ysz : g->xsz);
        dyg = d.group * g->ysz;
        offi = g->crs > (long)sh->k * sh->r * sh->s ? g->crs : (long)sh->k * sh->r * sh->s;
    }
    if (d.nn_group > 1 && d.nn_group * g->ysz > dyg) dyg = d.nn_group * g->ysz;
    /* Stride 2, 3x3 pad 1 or 1x1 pad 0, even planes (ResNet's downsampling convs): dX
     * row/column parity (a, b) takes the taps r = a + pad (mod 2), s = b + pad (mod 2),
     * each at dy row u + (a + pad - r)/2, column v + (b + pad - s)/2: a stride-1 conv of
     * dy's "same" shifted rows (offsets -1..1). 3x3: d.group images interleaved by row
     * (k_shift_rows_ilv), one wide GEMM per phase (14x14 outputs in groups of 4: 6296 vs
     * 6433 us a batch, 7x7 in groups of 8). */
    d.ph = sh->stride == 2 && sh->r == sh->s && (sh->r == 1 || sh->r == 3) && 2 * sh->pad == sh->r - 1 &&
           sh->h == 2 * sh->p && sh->w == 2 * sh->q && (sh->r == 3 || sh->q >= 8) && sh->k <= 128;
    d.ph_ng = d.ph && sh->r == 3 && d.group > 1 ? d.group : 1;
    long phx = 0, phw = 0;
    for (int ph = 0; ph < 4; ph++) {
        int nr = 0, ns = 0;
        for (int r = 0; r < sh->r; r++) nr += (ph / 2 + sh->pad - r) % 2 == 0;
        for (int t = 0; t < sh->s; t++) ns += (ph % 2 + sh->pad - t) % 2 == 0;
        d.ph_nt[ph] = d.ph ? nr * ns : 0;
        if (d.ph_nt[ph]) phw += k_round64(sizeof(float) * k_gemm_pack_floats(sh->c, sh->k * d.ph_nt[ph]));
    }
    if (d.ph) {
        phx = (long)d.ph_ng * sh->k * 3 * (sh->p + 2) * sh->q + K_SLACK;
        if (phx > xs) xs = phx;
        if (sh->k * 9 > offi) offi = sh->k * 9;
    }
    d.r_col = 0;
    d.r_xs = d.r_col + k_round64(sizeof(float) * ((d.dw_nn || !g->dxc ? d.nn_group * g->crs * g->pq : 0) + 2 * K_SLACK));
    d.r_dw = d.r_xs + k_round64(sizeof(float) * xs);
    d.r_db = d.r_dw + k_round64(sizeof(float) * sh->k * g->crs);
    d.r_tmp = d.r_db + k_round64(sizeof(float) * sh->k);
    d.r_dyg = d.r_tmp + k_round64(sizeof(float) * tmp);
    d.r_offi = d.r_dyg + k_round64(sizeof(float) * dyg);
    /* dW with the taps broadcast (k_conv_dw_tb): a group's dy^T and the slot's dW^T */
    d.r_dyt = d.r_offi + k_round64(sizeof(long) * offi);
    d.r_dwt = d.r_dyt + k_round64(sizeof(float) * (d.dw_nn ? 0 : d.group * g->ysz));
    d.r_ph = d.r_dwt + k_round64(sizeof(float) * (d.dw_nn ? 0 : sh->k * g->crs));
    d.slot = d.r_ph + k_round64(sizeof(float) * (d.ph ? d.ph_ng * g->xsz : 0));
    size_t pa = k_gemm_pack_floats(sh->k, (int)g->crs), pb = k_gemm_pack_floats((int)g->crs, sh->k);
    size_t pc = k_gemm_pack_floats(sh->c, sh->k * sh->r * sh->s);
    pa = pa > pb ? pa : pb;
    pa = pa > pc ? pa : pc;
    d.r_pack = d.slot * g->slots;
    d.r_off = d.r_pack + k_round64(sizeof(float) * pa);
    d.r_off2 = d.r_off + k_round64(sizeof(long) * g->crs);
    d.r_wt = d.r_off2 + k_round64(sizeof(long) * (g->dxc ? sh->k * sh->r * sh->s : 0));
    d.r_wph = d.r_wt + k_round64(sizeof(float) * (g->dxc ? sh->k * g->crs : 0));
    d.r_wtmp = d.r_wph + phw;
    d.end = d.r_wtmp + k_round64(sizeof(float) * (d.ph ? sh->k * g->crs : 0));
    return d;
}

/* The direct path's bytes; the Winograd path (k_conv_wino.c) may need more. */
static size_t direct_workspace(const k_conv_shape *sh)
{
    return (size_t)k_conv_dims_of(sh).end;
}

size_t k_conv2d_workspace(const k_conv_shape *sh)
{
    size_t a = direct_workspace(sh), b = k_conv_wino_workspace(sh);
    return a > b ? a : b;
}

static void conv_fwd_image(void *ctx, int slot, char *base, long i)
{
    const k_conv_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const k_conv_geo *d = &j->d.g;
    float *xs = (float *)(base + j->d.r_xs);
    k_im2col_geo g = k_conv_im2col(sh);
    float *yi = j->ym ? j->y + slot * d->ysz : j->y + i * d->ysz;
    if (sh->r == 1 && sh->s == 1 && sh->stride > 1) {
        /* 1x1 strided (ResNet's projections): the columns are just the subsampled
         * image; a plain-stride GEMM on them measured ~10% faster than tap offsets. */
        float *col = (float *)(base + j->d.r_col) + K_SLACK;
        k_im2col(&g, j->x + i * d->xsz, col);
        /* The next x only where the GEMM is long enough to hide it (ResNet-18's k >= 128:
         * fwd 5-25 % faster; ResNet-20's k 32-64: up to 15 % slower on AVX-512). */
        k_gemm_nn_packed_pf(sh->k, (int)d->pq, (int)d->crs, j->wpack, col, d->pq, NULL, yi, d->pq, j->b, 0,
                            j->x + (i + 1) * d->xsz, sh->k >= 128 ? k_next_bytes(sh, i + 1, 1, d->xsz) : 0);
    } else {
        k_conv_rows(&g, d, j->x + i * d->xsz, xs);
        k_gemm_nn_packed_pf(sh->k, (int)d->pq, (int)d->crs, j->wpack, xs, 0, j->boff, yi, d->pq, j->b, 0,
                            j->x + (i + 1) * d->xsz, k_next_bytes(sh, i + 1, 1, d->xsz));
    }
    if (j->ym) k_max_time_relu_fwd(1, sh->k, (int)d->pq, yi, j->ym + i * sh->k, j->idx + i * sh->k);
}

/* ---- the interleaved layout (k_shift_rows_ilv), AVX2 and AVX-512: where 16-column
 * tiles are few per image. Per-element sums as per image (one GEMM row per output), only
 * the columns of several images share tiles. */
static int conv_ilv_use(const k_conv_job *j)
{
    /* d.ilv: only where a plane wastes over 1/8 of its 16-column tiles (7x7: 64 for
     * 49): the row-by-row interleaving costs more than it saves elsewhere (measured,
     * avx2 on Sapphire Rapids: 7x7 fwd 72 -> 80, bwd 62 -> 76 GFLOP/s; 14x14 fwd
     * 82 -> 75; LeNet's 8x8, whole tiles: fwd 109 -> 88). AVX-512 too (32-column tiles:
     * 7x7 puts 49 outputs in 64): ResNet-18's layer4 7x7 c512 fwd 52.0 -> 45.3 ms, bwd
     * 104.9 -> 96.1 a batch of 32; the generic path keeps its per-image GEMMs. */
    return j->d.ilv && !j->ym && k_isa_level() >= K_ISA_AVX2;
}

/* Tap (c, r, s) at ((c*S + s)*hp + r)*pitch. */
static void ilv_offsets(int c, int r, int s, long hp, long pitch, long *off)
{
    long t = 0;
    for (int cc = 0; cc < c; cc++)
        for (int rr = 0; rr < r; rr++)
            for (int ss = 0; ss < s; ss++) off[t++] = (((long)cc * s + ss) * hp + rr) * pitch;
}

/* tmp[k][(row*ng + t)*q + col] -> out[t*img + k*rows*q + row*q + col]. */
static void ilv_scatter(int m, int rows, int q, int ng, const float *tmp, float *out, long img)
{
    long n = (long)rows * ng * q;
    for (int k = 0; k < m; k++)
        for (int p = 0; p < rows; p++)
            for (int t = 0; t < ng; t++) {
                const float *a = tmp + k * n + ((long)p * ng + t) * q;
                float *b = out + t * img + ((long)k * rows + p) * q;
                for (int u = 0; u < q; u++) b[u] = a[u];
            }
}

static void conv_fwd_ilv(void *ctx, int slot, char *base, long i0, int ng)
{
    const k_conv_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const k_conv_geo *d = &j->d.g;
    float *xs = (float *)(base + j->d.r_xs), *tmp = (float *)(base + j->d.r_tmp);
    long *off = (long *)(base + j->d.r_offi), n = (long)sh->p * ng * sh->q;
    k_im2col_geo g = k_conv_im2col(sh);
    (void)slot;
    k_shift_rows_ilv(&g, d->hp, ng, j->x + i0 * d->xsz, d->xsz, xs);
    ilv_offsets(sh->c, sh->r, sh->s, d->hp, (long)ng * sh->q, off);
    k_gemm_nn_packed(sh->k, (int)n, (int)d->crs, j->wpack, xs, 0, off, tmp, n, j->b, 0);
    ilv_scatter(sh->k, sh->p, sh->q, ng, tmp, j->y + i0 * d->ysz, d->ysz);
}

/* dX of a "same" conv for images [i0, i0+ng): the dX conv on interleaved dy rows. */
static void conv_dx_ilv(void *ctx, char *base, long i0, int ng)
{
    const k_conv_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const k_conv_geo *d = &j->d.g;
    float *xs = (float *)(base + j->d.r_xs), *tmp = (float *)(base + j->d.r_tmp);
    long *off = (long *)(base + j->d.r_offi), n = (long)sh->h * ng * sh->w;
    k_im2col_geo gd = k_conv_dx_im2col(sh);
    k_shift_rows_ilv(&gd, d->dhp, ng, j->dy + i0 * d->ysz, d->ysz, xs);
    ilv_offsets(sh->k, sh->r, sh->s, d->dhp, (long)ng * sh->w, off);
    k_gemm_nn_packed(sh->c, (int)n, sh->k * sh->r * sh->s, j->wpack, xs, 0, off, tmp, n, NULL, 0);
    ilv_scatter(sh->c, sh->h, sh->w, ng, tmp, j->dx + i0 * d->xsz, d->xsz);
}

/* dW for images [i0, i0+ng): dy interleaved the same way, one NT pass of length
 * p*ng*q (whole vectors where each image alone had a tail). */
static void conv_dw_ilv(void *ctx, char *base, long i0, int ng, float *dwp, int acc)
{
    const k_conv_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const k_conv_geo *d = &j->d.g;
    float *xs = (float *)(base + j->d.r_xs), *dyg = (float *)(base + j->d.r_dyg);
    long *off = (long *)(base + j->d.r_offi), n = (long)sh->p * ng * sh->q;
    k_im2col_geo g = k_conv_im2col(sh);
    k_shift_rows_ilv(&g, d->hp, ng, j->x + i0 * d->xsz, d->xsz, xs);
    ilv_offsets(sh->c, sh->r, sh->s, d->hp, (long)ng * sh->q, off);
    for (int k = 0; k < sh->k; k++)
        for (int p = 0; p < sh->p; p++)
            for (int t = 0; t < ng; t++) {
                const float *a = j->dy + (i0 + t) * d->ysz + ((long)k * sh->p + p) * sh->q;
                float *b = dyg + k * n + ((long)p * ng + t) * sh->q;
                for (int u = 0; u < sh->q; u++) b[u] = a[u];
            }
    k_gemm_nt_off(sh->k, (int)d->crs, (int)n, 1, dyg, n, 0, xs, off, 0, dwp, d->crs, acc);
}

static k_conv_slots conv_slots(k_conv_job *j)
{
    k_conv_slots s = {.sh = j->sh, .slots = j->d.g.slots, .ws = j->ws, .slot_bytes = j->d.slot,
                      .r_dw = j->d.r_dw, .r_db = j->d.r_db, .group = j->d.group, .ysz = j->d.g.ysz,
                      .pq = j->d.g.pq, .dy = j->dy, .dw = j->dw, .db = j->db, .job = j};
    return s;
}

/* Packs W and the input offsets into the workspace, then runs the slots. */
static void conv_fwd_run(k_conv_job *j)
{
    float *wpack = (float *)((char *)j->ws + j->d.r_pack);
    long *boff = (long *)((char *)j->ws + j->d.r_off);
    k_gemm_pack_a(j->sh->k, (int)j->d.g.crs, j->w, j->d.g.crs, 1, wpack);
    k_conv_tap_offsets(j->sh, &j->d.g, boff);
    j->wpack = wpack;
    j->boff = boff;
    k_conv_slots s = conv_slots(j);
    s.fwd = conv_fwd_image;
    if (conv_ilv_use(j)) s.fwd_n = conv_fwd_ilv, s.ng_fwd = j->d.group;
    k_conv_slots_fwd(&s);
}

void k_conv2d_fwd(const k_conv_shape *sh, const float *x, const float *w, const float *b,
                  float *y, void *ws)
{
    if (k_conv_wino_use(sh, K_WINO_FWD)) {
        k_conv_wino_fwd(sh, x, w, b, y, ws);
        return;
    }
    k_conv_job j = {.sh = sh, .d = k_conv_dims_of(sh), .x = x, .w = w, .b = b, .y = y, .ws = ws};
    conv_fwd_run(&j);
}

int k_conv2d_winograd_parts(const k_conv_shape *sh)
{
    int p = k_conv_wino_use(sh, K_WINO_FWD) | k_conv_wino_use(sh, K_WINO_DX) << 1 | k_conv_wino_use(sh, K_WINO_DW) << 2;
    if (p & 3 && k_conv_winoc_use(sh)) p |= 16;
    return p & 3 && k_conv_wino_tile(sh) == 4 ? p | 8 : p;
}

/* The conv's output only feeds relu -> max over time (p == 1; nn/plan.c): each image's
 * output goes to its slot's scratch, still in cache when the max is taken, and is
 * never written out. ym/idx are k_max_time_relu_fwd's of the output k_conv2d_fwd
 * would write (the same GEMM: the same bits). */
size_t k_conv2d_fwd_maxt_workspace(const k_conv_shape *sh)
{
    k_conv_dims d = k_conv_dims_of(sh);
    return direct_workspace(sh) + k_round64(sizeof(float) * (size_t)d.g.slots * d.g.ysz);
}

void k_conv2d_fwd_maxt(const k_conv_shape *sh, const float *x, const float *w, const float *b, float *ym,
                       int32_t *idx, void *ws)
{
    k_conv_job j = {.sh = sh, .d = k_conv_dims_of(sh), .x = x, .w = w, .b = b, .ym = ym, .idx = idx, .ws = ws};
    j.y = (float *)((char *)ws + direct_workspace(sh));
    conv_fwd_run(&j);
}

/* dW for images [i0, i0+ng): their xs side by side, then one NT pass. */
static void conv_dw_nt(void *ctx, char *base, long i0, int ng, float *dwp, int acc)
{
    const k_conv_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const k_conv_geo *d = &j->d.g;
    float *xs = (float *)(base + j->d.r_xs);
    k_im2col_geo g = k_conv_im2col(sh);
    for (int t = 0; t < ng; t++) k_conv_rows(&g, d, j->x + (i0 + t) * d->xsz, xs + t * d->xssz);
    k_gemm_nt_off_pf(sh->k, (int)d->crs, (int)d->pq, ng, j->dy + i0 * d->ysz, d->pq, d->ysz, xs, j->boff, d->xssz,
                     dwp, d->crs, acc, j->x + (i0 + ng) * d->xsz, k_next_bytes(sh, i0 + ng, ng, d->xsz));
}

/* dW for images [i, i+ng) (ng <= nn_group) as one NN GEMM on their im2row columns
 * stacked (j->d.dw_nn), dy's rows of the images side by side. */
static void conv_dw_nn(void *ctx, char *base, long i, int ng, float *dwp, int acc)
{
    const k_conv_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const k_conv_geo *d = &j->d.g;
    float *col = (float *)(base + j->d.r_col) + K_SLACK;
    const float *a = j->dy + i * d->ysz;
    long pq = d->pq, lda = ng * pq;
    k_im2col_geo g = k_conv_im2col(sh);
    for (int t = 0; t < ng; t++) k_im2row(&g, j->x + (i + t) * d->xsz, col + t * pq * d->crs);
    if (ng > 1) {
        float *dyg = (float *)(base + j->d.r_dyg);
        for (int k = 0; k < sh->k; k++)
            for (int t = 0; t < ng; t++)
                memcpy(dyg + k * lda + t * pq, a + t * d->ysz + k * pq, sizeof(float) * (size_t)pq);
        a = dyg;
    }
    k_gemm_nn(sh->k, (int)d->crs, (int)lda, a, lda, 1, col, d->crs, dwp, d->crs, NULL, acc);
}

static void conv_dx_image(void *ctx, char *base, long i)
{
    const k_conv_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const k_conv_geo *d = &j->d.g;
    const float *dyi = j->dy + i * d->ysz;
    if (d->dxc) {
        float *xs = (float *)(base + j->d.r_xs);
        k_im2col_geo gd = k_conv_dx_im2col(sh);
        k_shift_rows(&gd, d->dhp, dyi, xs);
        k_gemm_nn_packed(sh->c, sh->h * sh->w, sh->k * sh->r * sh->s, j->wpack, xs, 0, j->boff2,
                         j->dx + i * d->xsz, (long)sh->h * sh->w, NULL, 0);
        return;
    }
    float *col = (float *)(base + j->d.r_col) + K_SLACK, *dxi = j->dx + i * d->xsz;
    k_im2col_geo g = k_conv_im2col(sh);
    k_gemm_nn_packed((int)d->crs, (int)d->pq, sh->k, j->wpack, dyi, d->pq, NULL, col, d->pq, NULL, 0);
    if (d->s1) k_col2im_s1(&g, col, dxi);
    else k_col2im(&g, col, dxi);
}

void k_conv2d_bwd(const k_conv_shape *sh, const float *x, const float *w, const float *dy,
                  float *dx, float *dw, float *db, void *ws)
{
    int wx = dx && k_conv_wino_use(sh, K_WINO_DX), ww = dw && k_conv_wino_use(sh, K_WINO_DW);
    if (wx || ww) {
        /* the Winograd parts first, then what is left by the direct path (the same
         * workspace, one after the other) */
        k_conv_wino_bwd(sh, x, w, dy, wx ? dx : NULL, ww ? dw : NULL, ww ? db : NULL, ws);
        if (wx) dx = NULL;
        if (ww) dw = NULL, db = NULL;
        if (!dx && !dw && !db) return;
    }
    k_conv_job j = {.sh = sh, .d = k_conv_dims_of(sh), .x = x, .w = w, .dy = dy, .dx = dx,
                  .dw = dw, .db = db, .ws = ws};
    const k_conv_geo *d = &j.d.g;
    float *wpack = (float *)((char *)ws + j.d.r_pack);
    long *boff = (long *)((char *)ws + j.d.r_off), *boff2 = (long *)((char *)ws + j.d.r_off2);
    if (dx && d->dxc) {
        float *wt = (float *)((char *)ws + j.d.r_wt);
        k_conv_flip_weights(sh, w, wt);
        k_gemm_pack_a(sh->c, sh->k * sh->r * sh->s, wt, (long)sh->k * sh->r * sh->s, 1, wpack);
        k_conv_dx_offsets(sh, d, boff2);
    } else if (dx && k_conv_ph_use(&j)) k_conv_ph_pack(&j, ws);
    else if (dx) k_gemm_pack_a((int)d->crs, sh->k, w, 1, d->crs, wpack); /* W^T */
    k_conv_tap_offsets(sh, d, boff);
    j.wpack = wpack;
    j.boff = boff;
    j.boff2 = boff2;
    k_conv_slots s = conv_slots(&j);
    if (dw) s.dw_pass = j.d.dw_nn ? conv_dw_nn : k_conv_tb_use(&j) ? k_conv_dw_tb : conv_ilv_use(&j) ? conv_dw_ilv : conv_dw_nt;
    if (j.d.dw_nn) s.group = j.d.nn_group;
    if (s.dw_pass == k_conv_dw_tb) s.group = sh->n; /* one pass per slot: dW^T transposed once */
    if (dx) s.dx = conv_dx_image;
    if (dx && d->dxc && conv_ilv_use(&j)) s.dx_n = conv_dx_ilv, s.ng_dx = j.d.group;
    if (dx && k_conv_ph_use(&j)) s.dx_n = k_conv_dx_ph, s.ng_dx = j.d.ph_ng;
    k_conv_slots_bwd(&s);
}

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
 *            broadcast against dy^T's rows instead (conv_dw_tb)
 *   dX:      "same" convs (pad = (r-1)/2): dx = conv(dy, W flipped and transposed),
 *            i.e. the forward path again; others: dcol = W^T dy [CRS x PQ], then each
 *            dx row summed in registers (col2im_s1)
 * Strides > 1 use the same scheme on a phase-split layout (k_conv_rows.c): forward and
 * dW through tap offsets, dX through the general col2im (on AVX2, stride 2 on even
 * planes: 4 phase convs of dy, conv_dx_ph); 1x1 strided forwards read plain im2col
 * columns (the subsampled image).
 *
 * The geometry, the layouts' builders and the slots of consecutive images (results
 * bitwise the same for any thread count) are k_conv_drv.c's, shared with the bf16
 * kernels. */
#include "kernels/k.h"
#include "kernels/cpu/k_conv_drv.h"
#include "kernels/cpu/k_conv_wino.h"
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"
#include <string.h>

#define K_CONV_GROUP 8 /* images whose dW sums share one set of registers */
#define K_SLACK 16     /* floats of slack around the column buffer (masked loads) */

void k_conv_shape_init(k_conv_shape *sh)
{
    if (sh->stride < 1) sh->stride = 1;
    if (sh->pad < 0) sh->pad = 0;
    sh->p = (sh->h + 2 * sh->pad - sh->r) / sh->stride + 1;
    sh->q = (sh->w + 2 * sh->pad - sh->s) / sh->stride + 1;
}

/* The driver's geometry plus this kernel's choices and scratch regions. */
typedef struct conv_dims {
    k_conv_geo g;
    int group;                /* images per dW pass */
    int dw_nn;                /* dW as NN GEMM on im2row columns ... */
    int nn_group;             /* ... of this many images at once */
    int ilv;                  /* stride 1, group > 1: the interleaved layout may be used */
    int ph, ph_ng;            /* stride 2: dX as 4 phase convs (conv_dx_ph), ph_ng images a group */
    int ph_nt[4];             /* taps per phase (a, b) = (row, column) parity of dX */
    long r_ph, r_wph, r_wtmp; /* its phase outputs (slot); packed and unpacked phase weights */
    long r_col, r_xs, r_dw, r_db, r_tmp, r_dyg, r_offi, r_dyt, r_dwt, slot; /* slot region offsets (bytes) */
    long r_pack, r_off, r_off2, r_wt, end; /* shared regions after the slots (bytes) */
} conv_dims;

static size_t round64(size_t b) { return (b + 63) & ~(size_t)63; }

static conv_dims conv_dims_of(const k_conv_shape *sh)
{
    conv_dims d;
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
    /* Small planes on AVX2 (conv_ilv_use): ng = group images interleaved by row, one
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
        if (d.ph_nt[ph]) phw += round64(sizeof(float) * k_gemm_pack_floats(sh->c, sh->k * d.ph_nt[ph]));
    }
    if (d.ph) {
        phx = (long)d.ph_ng * sh->k * 3 * (sh->p + 2) * sh->q + K_SLACK;
        if (phx > xs) xs = phx;
        if (sh->k * 9 > offi) offi = sh->k * 9;
    }
    d.r_col = 0;
    d.r_xs = d.r_col + round64(sizeof(float) * ((d.dw_nn || !g->dxc ? d.nn_group * g->crs * g->pq : 0) + 2 * K_SLACK));
    d.r_dw = d.r_xs + round64(sizeof(float) * xs);
    d.r_db = d.r_dw + round64(sizeof(float) * sh->k * g->crs);
    d.r_tmp = d.r_db + round64(sizeof(float) * sh->k);
    d.r_dyg = d.r_tmp + round64(sizeof(float) * tmp);
    d.r_offi = d.r_dyg + round64(sizeof(float) * dyg);
    /* dW with the taps broadcast (conv_dw_tb): a group's dy^T and the slot's dW^T */
    d.r_dyt = d.r_offi + round64(sizeof(long) * offi);
    d.r_dwt = d.r_dyt + round64(sizeof(float) * (d.dw_nn ? 0 : d.group * g->ysz));
    d.r_ph = d.r_dwt + round64(sizeof(float) * (d.dw_nn ? 0 : sh->k * g->crs));
    d.slot = d.r_ph + round64(sizeof(float) * (d.ph ? d.ph_ng * g->xsz : 0));
    size_t pa = k_gemm_pack_floats(sh->k, (int)g->crs), pb = k_gemm_pack_floats((int)g->crs, sh->k);
    size_t pc = k_gemm_pack_floats(sh->c, sh->k * sh->r * sh->s);
    pa = pa > pb ? pa : pb;
    pa = pa > pc ? pa : pc;
    d.r_pack = d.slot * g->slots;
    d.r_off = d.r_pack + round64(sizeof(float) * pa);
    d.r_off2 = d.r_off + round64(sizeof(long) * g->crs);
    d.r_wt = d.r_off2 + round64(sizeof(long) * (g->dxc ? sh->k * sh->r * sh->s : 0));
    d.r_wph = d.r_wt + round64(sizeof(float) * (g->dxc ? sh->k * g->crs : 0));
    d.r_wtmp = d.r_wph + phw;
    d.end = d.r_wtmp + round64(sizeof(float) * (d.ph ? sh->k * g->crs : 0));
    return d;
}

/* The direct path's bytes; the Winograd path (k_conv_wino.c) may need more. */
static size_t direct_workspace(const k_conv_shape *sh)
{
    return (size_t)conv_dims_of(sh).end;
}

size_t k_conv2d_workspace(const k_conv_shape *sh)
{
    size_t a = direct_workspace(sh), b = k_conv_wino_workspace(sh);
    return a > b ? a : b;
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
    const float *wph[4]; /* conv_dx_ph: the phases' packed weights */
} conv_job;

/* Bytes of images [i, i + ng) of a batch-major tensor (sz floats an image) clipped to
 * the batch: what a GEMM fetches for the next step (k_gemm_nn_packed_pf). The layouts'
 * builders otherwise wait on these cold reads (x was last touched a whole batch ago). */
static long next_bytes(const k_conv_shape *sh, long i, int ng, long sz)
{
    long e = i + ng < sh->n ? i + ng : sh->n;
    return e > i ? (e - i) * sz * (long)sizeof(float) : 0;
}

static void conv_fwd_image(void *ctx, int slot, char *base, long i)
{
    const conv_job *j = ctx;
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
                            j->x + (i + 1) * d->xsz, sh->k >= 128 ? next_bytes(sh, i + 1, 1, d->xsz) : 0);
    } else {
        k_conv_rows(&g, d, j->x + i * d->xsz, xs);
        k_gemm_nn_packed_pf(sh->k, (int)d->pq, (int)d->crs, j->wpack, xs, 0, j->boff, yi, d->pq, j->b, 0,
                            j->x + (i + 1) * d->xsz, next_bytes(sh, i + 1, 1, d->xsz));
    }
    if (j->ym) k_max_time_relu_fwd(1, sh->k, (int)d->pq, yi, j->ym + i * sh->k, j->idx + i * sh->k);
}

/* ---- the interleaved layout (k_shift_rows_ilv), AVX2 only: where 16-column tiles
 * are few per image. Per-element sums as per image (one GEMM row per output), only
 * the columns of several images share tiles. */
static int conv_ilv_use(const conv_job *j)
{
    /* d.ilv: only where a plane wastes over 1/8 of its 16-column tiles (7x7: 64 for
     * 49): the row-by-row interleaving costs more than it saves elsewhere (measured,
     * avx2 on Sapphire Rapids: 7x7 fwd 72 -> 80, bwd 62 -> 76 GFLOP/s; 14x14 fwd
     * 82 -> 75; LeNet's 8x8, whole tiles: fwd 109 -> 88). */
    return j->d.ilv && !j->ym && k_isa_level() == K_ISA_AVX2;
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
    const conv_job *j = ctx;
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
    const conv_job *j = ctx;
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
    const conv_job *j = ctx;
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

static k_conv_slots conv_slots(conv_job *j)
{
    k_conv_slots s = {.sh = j->sh, .slots = j->d.g.slots, .ws = j->ws, .slot_bytes = j->d.slot,
                      .r_dw = j->d.r_dw, .r_db = j->d.r_db, .group = j->d.group, .ysz = j->d.g.ysz,
                      .pq = j->d.g.pq, .dy = j->dy, .dw = j->dw, .db = j->db, .job = j};
    return s;
}

/* Packs W and the input offsets into the workspace, then runs the slots. */
static void conv_fwd_run(conv_job *j)
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
    conv_job j = {.sh = sh, .d = conv_dims_of(sh), .x = x, .w = w, .b = b, .y = y, .ws = ws};
    conv_fwd_run(&j);
}

int k_conv2d_winograd_parts(const k_conv_shape *sh)
{
    int p = k_conv_wino_use(sh, K_WINO_FWD) | k_conv_wino_use(sh, K_WINO_DX) << 1 | k_conv_wino_use(sh, K_WINO_DW) << 2;
    return p & 3 && k_conv_wino_tile(sh) == 4 ? p | 8 : p;
}

/* The conv's output only feeds relu -> max over time (p == 1; nn/plan.c): each image's
 * output goes to its slot's scratch, still in cache when the max is taken, and is
 * never written out. ym/idx are k_max_time_relu_fwd's of the output k_conv2d_fwd
 * would write (the same GEMM: the same bits). */
size_t k_conv2d_fwd_maxt_workspace(const k_conv_shape *sh)
{
    conv_dims d = conv_dims_of(sh);
    return direct_workspace(sh) + round64(sizeof(float) * (size_t)d.g.slots * d.g.ysz);
}

void k_conv2d_fwd_maxt(const k_conv_shape *sh, const float *x, const float *w, const float *b, float *ym,
                       int32_t *idx, void *ws)
{
    conv_job j = {.sh = sh, .d = conv_dims_of(sh), .x = x, .w = w, .b = b, .ym = ym, .idx = idx, .ws = ws};
    j.y = (float *)((char *)ws + direct_workspace(sh));
    conv_fwd_run(&j);
}

/* dW for images [i0, i0+ng): their xs side by side, then one NT pass. */
static void conv_dw_nt(void *ctx, char *base, long i0, int ng, float *dwp, int acc)
{
    const conv_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const k_conv_geo *d = &j->d.g;
    float *xs = (float *)(base + j->d.r_xs);
    k_im2col_geo g = k_conv_im2col(sh);
    for (int t = 0; t < ng; t++) k_conv_rows(&g, d, j->x + (i0 + t) * d->xsz, xs + t * d->xssz);
    k_gemm_nt_off_pf(sh->k, (int)d->crs, (int)d->pq, ng, j->dy + i0 * d->ysz, d->pq, d->ysz, xs, j->boff, d->xssz,
                     dwp, d->crs, acc, j->x + (i0 + ng) * d->xsz, next_bytes(sh, i0 + ng, ng, d->xsz));
}

/* dW for images [i0, i0+ng) (the whole slot: j->d.group images at a time) with the
 * taps broadcast (k_gemm_tb_off): each group's xs and dy^T, the sums in dW^T [crs x K],
 * transposed into dwp at the end. Per dW element one FMA chain over the slot's images
 * and columns in order (the NT form's per-lane sums and horizontal adds: other bits).
 * Measured on AVX2 where the NT tiles ran at 64-68 % of the FMA peak (see
 * conv_tb_use). */
static void conv_dw_tb(void *ctx, char *base, long i0, int ng, float *dwp, int acc)
{
    const conv_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const k_conv_geo *d = &j->d.g;
    float *xs = (float *)(base + j->d.r_xs), *dyt = (float *)(base + j->d.r_dyt), *dwt = (float *)(base + j->d.r_dwt);
    k_im2col_geo g = k_conv_im2col(sh);
    for (long i = i0; i < i0 + ng; i += j->d.group) {
        int n = i0 + ng - i < j->d.group ? (int)(i0 + ng - i) : j->d.group;
        for (int t = 0; t < n; t++) {
            k_conv_rows(&g, d, j->x + (i + t) * d->xsz, xs + t * d->xssz);
            k_transpose_ld(sh->k, (int)d->pq, j->dy + (i + t) * d->ysz, d->pq, dyt + t * d->ysz, sh->k);
        }
        long e = i + n, nn = i0 + ng - e < j->d.group ? i0 + ng - e : j->d.group; /* the next group, in this slot */
        const void *pf[2] = {j->x + e * d->xsz, j->dy + e * d->ysz};
        long pfn[2] = {(long)sizeof(float) * nn * d->xsz, (long)sizeof(float) * nn * d->ysz};
        k_gemm_tb_off_pf((int)d->crs, sh->k, (int)d->pq, n, xs, j->boff, d->xssz, dyt, sh->k, dwt, sh->k, i > i0, pf,
                         pfn);
    }
    if (!acc) k_transpose_ld((int)d->crs, sh->k, dwt, sh->k, dwp, d->crs);
    else
        for (int k = 0; k < sh->k; k++)
            for (long t = 0; t < d->crs; t++) dwp[k * d->crs + t] += dwt[t * sh->k + k];
}

/* The broadcast-tap dW (conv_dw_tb) where there are 32 taps or more and the filters
 * fill whole tiles (2 vectors: 16 on AVX2, 32 on AVX-512). dy's transpose costs as much
 * as 1/crs of the FMAs, and a few taps fill few tiles (ResNet-20's stem, 9 taps: 2x
 * slower; its 1x1 stride-2 projection with 16 taps: 5-8 % slower); a part tile
 * computes its masked lanes all the same (LeNet's conv2, 20 filters on AVX2: bwd 25 %
 * slower; ResNet-20's layer1, 16 filters on AVX-512: 30 %). Measured faster, batch 128,
 * Sapphire Rapids: AVX2 ResNet-20's 3x3 and 1x1 s2 (32+ taps) dW 5-20 %; AVX-512
 * layer2/layer3 bwd 13-27 %, but ResNet-18's 1x1 64 -> 128 18 % slower (12-row tiles
 * of 12 tap pointers; AVX-512 only up to 64 filters). */
static int conv_tb_use(const conv_job *j)
{
    int lvl = k_isa_level(), k = j->sh->k;
    /* Many filters make dy^T's chunks short (256 filters: 16 columns between C's loads
     * and stores: ResNet-18's layer3.0 3x3 s2 bwd 8 % slower); long rows are
     * gemm_nt_off's column-chunked case (ResNet-18's stem: 12544 columns, tb 42 %
     * slower). */
    if (j->d.dw_nn || j->d.g.crs < 32 || k > 128 || j->d.g.pq >= 2048) return 0;
    return lvl == K_ISA_AVX2 ? k % 16 == 0 : lvl >= K_ISA_AVX512 && k % 32 == 0 && k <= 64;
}

/* dW for images [i, i+ng) (ng <= nn_group) as one NN GEMM on their im2row columns
 * stacked (j->d.dw_nn), dy's rows of the images side by side. */
static void conv_dw_nn(void *ctx, char *base, long i, int ng, float *dwp, int acc)
{
    const conv_job *j = ctx;
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
    const conv_job *j = ctx;
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

/* ---- stride-2 dX as 4 phase convs (d.ph): phase ph = (a, b) holds dx rows 2u + a,
 * columns 2v + b. Its taps (k, r, s) in this order, each at dy row u + dr, column
 * v + ds (|dr|, |ds| <= 1). */
static int ph_taps(const k_conv_shape *sh, int ph, int *dr, int *ds, int *rr, int *ss)
{
    int n = 0;
    for (int r = 0; r < sh->r; r++)
        for (int t = 0; t < sh->s; t++)
            if ((ph / 2 + sh->pad - r) % 2 == 0 && (ph % 2 + sh->pad - t) % 2 == 0) {
                dr[n] = (ph / 2 + sh->pad - r) / 2, ds[n] = (ph % 2 + sh->pad - t) / 2;
                rr[n] = r, ss[n++] = t;
            }
    return n;
}

/* The phases' A: wt[c][(k, tap)] = w[k][c][r][s], packed per phase. */
static void ph_pack(conv_job *j, char *ws)
{
    const k_conv_shape *sh = j->sh;
    float *wt = (float *)(ws + j->d.r_wtmp), *wp = (float *)(ws + j->d.r_wph);
    int dr[9], ds[9], rr[9], ss[9];
    for (int ph = 0; ph < 4; ph++) {
        int nt = ph_taps(sh, ph, dr, ds, rr, ss);
        j->wph[ph] = wp;
        if (!nt) continue;
        long kk = (long)sh->k * nt;
        for (int c = 0; c < sh->c; c++)
            for (int k = 0; k < sh->k; k++)
                for (int t = 0; t < nt; t++)
                    wt[c * kk + k * nt + t] = j->w[(((long)k * sh->c + c) * sh->r + rr[t]) * sh->s + ss[t]];
        k_gemm_pack_a(sh->c, (int)kk, wt, kk, 1, wp);
        wp += round64(sizeof(float) * k_gemm_pack_floats(sh->c, (int)kk)) / sizeof(float);
    }
}

/* o[2v] = e[v], o[2v + 1] = f[v] for v < q (NULL: zeros). */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx2"))) static void interleave2_avx2(float *o, const float *e, const float *f, int q)
{
    int v = 0;
    for (; v + 8 <= q; v += 8) {
        __m256 a = e ? _mm256_loadu_ps(e + v) : _mm256_setzero_ps(), b = f ? _mm256_loadu_ps(f + v) : _mm256_setzero_ps();
        __m256 lo = _mm256_unpacklo_ps(a, b), hi = _mm256_unpackhi_ps(a, b);
        _mm256_storeu_ps(o + 2 * v, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(o + 2 * v + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
    if (v < q) {
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        int t = q - v;
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(t), lane);
        __m256 a = e ? _mm256_maskload_ps(e + v, m) : _mm256_setzero_ps();
        __m256 b = f ? _mm256_maskload_ps(f + v, m) : _mm256_setzero_ps();
        __m256 lo = _mm256_unpacklo_ps(a, b), hi = _mm256_unpackhi_ps(a, b);
        _mm256_maskstore_ps(o + 2 * v, _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * t), lane),
                            _mm256_permute2f128_ps(lo, hi, 0x20));
        if (t > 4)
            _mm256_maskstore_ps(o + 2 * v + 8, _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * t - 8), lane),
                                _mm256_permute2f128_ps(lo, hi, 0x31));
    }
}
#define K_CONV_IL2 1
#endif

/* dX of images [i0, i0+ng): dy's shifted rows (ng images interleaved by row), one GEMM
 * per phase into o[ph][c][(u*ng + t)*Q + v], then every dx element from its phase. No
 * column matrix and no col2im (which read 9 columns per dx element). */
static void conv_dx_ph(void *ctx, char *base, long i0, int ng)
{
    const conv_job *j = ctx;
    const k_conv_shape *sh = j->sh;
    const k_conv_geo *d = &j->d.g;
    float *xs = (float *)(base + j->d.r_xs), *o = (float *)(base + j->d.r_ph);
    long *off = (long *)(base + j->d.r_offi), hp = sh->p + 2, n = (long)sh->p * ng * sh->q, row = (long)ng * sh->q;
    int dr[9], ds[9], rr[9], ss[9];
    if (sh->r == 3) {
        k_im2col_geo gd = {sh->k, sh->p, sh->q, 3, 3, 1, 1, sh->p, sh->q};
        if (ng == 1) k_shift_rows(&gd, hp, j->dy + i0 * d->ysz, xs);
        else k_shift_rows_ilv(&gd, hp, ng, j->dy + i0 * d->ysz, d->ysz, xs);
    }
    for (int ph = 0; ph < 4; ph++) {
        int nt = ph_taps(sh, ph, dr, ds, rr, ss);
        float *oph = o + ph * sh->c * n;
        if (!nt) continue;
        if (sh->r == 1) { /* 1x1 pad 0: phase (0, 0) reads dy itself (ng == 1) */
            k_gemm_nn_packed(sh->c, (int)n, sh->k, j->wph[ph], j->dy + i0 * d->ysz, d->pq, NULL, oph, n, NULL, 0);
            continue;
        }
        for (int k = 0; k < sh->k; k++)
            for (int t = 0; t < nt; t++) off[k * nt + t] = (((long)k * 3 + ds[t] + 1) * hp + dr[t] + 1) * row;
        k_gemm_nn_packed(sh->c, (int)n, sh->k * nt, j->wph[ph], xs, 0, off, oph, n, NULL, 0);
    }
    for (int t = 0; t < ng; t++)
        for (int c = 0; c < sh->c; c++)
            for (int a = 0; a < 2; a++) {
                const float *e = j->d.ph_nt[2 * a] ? o + ((long)(2 * a) * sh->c + c) * n + t * sh->q : NULL;
                const float *f = j->d.ph_nt[2 * a + 1] ? o + ((long)(2 * a + 1) * sh->c + c) * n + t * sh->q : NULL;
                float *dxr = j->dx + (i0 + t) * d->xsz + ((long)c * sh->h + a) * sh->w;
                for (int u = 0; u < sh->p; u++, dxr += 2 * sh->w) {
                    long at = (long)u * row;
#ifdef K_CONV_IL2
                    interleave2_avx2(dxr, e ? e + at : NULL, f ? f + at : NULL, sh->q); /* conv_ph_use: AVX2 */
                    continue;
#endif
                    for (int v = 0; v < sh->q; v++) {
                        dxr[2 * v] = e ? e[at + v] : 0.0f;
                        dxr[2 * v + 1] = f ? f[at + v] : 0.0f;
                    }
                }
            }
}

/* The phase dX on AVX2, measured against the column matrix and col2im (ResNet-20,
 * batch 128, Sapphire Rapids, bwd = dW + dX): 3x3 14x14 -> 7x7 6218 -> 5746 us, 28x28
 * -> 14x14 6576 -> 6295; 1x1 28x28 -> 14x14 1303 -> 1229, but 1x1 14x14 -> 7x7 (dX
 * alone) 15 % slower (d.ph: the 1x1 ones only with 8+ output columns); ResNet-18
 * (batch 32): 64 -> 128 filters 86.4 -> 82.4 ms, but 256 and 512 filters 4-9 % slower
 * (dy's rows past L2: d.ph only up to 128 filters). */
static int conv_ph_use(const conv_job *j) { return j->d.ph && k_isa_level() == K_ISA_AVX2; }

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
    conv_job j = {.sh = sh, .d = conv_dims_of(sh), .x = x, .w = w, .dy = dy, .dx = dx,
                  .dw = dw, .db = db, .ws = ws};
    const k_conv_geo *d = &j.d.g;
    float *wpack = (float *)((char *)ws + j.d.r_pack);
    long *boff = (long *)((char *)ws + j.d.r_off), *boff2 = (long *)((char *)ws + j.d.r_off2);
    if (dx && d->dxc) {
        float *wt = (float *)((char *)ws + j.d.r_wt);
        k_conv_flip_weights(sh, w, wt);
        k_gemm_pack_a(sh->c, sh->k * sh->r * sh->s, wt, (long)sh->k * sh->r * sh->s, 1, wpack);
        k_conv_dx_offsets(sh, d, boff2);
    } else if (dx && conv_ph_use(&j)) ph_pack(&j, ws);
    else if (dx) k_gemm_pack_a((int)d->crs, sh->k, w, 1, d->crs, wpack); /* W^T */
    k_conv_tap_offsets(sh, d, boff);
    j.wpack = wpack;
    j.boff = boff;
    j.boff2 = boff2;
    k_conv_slots s = conv_slots(&j);
    if (dw) s.dw_pass = j.d.dw_nn ? conv_dw_nn : conv_tb_use(&j) ? conv_dw_tb : conv_ilv_use(&j) ? conv_dw_ilv : conv_dw_nt;
    if (j.d.dw_nn) s.group = j.d.nn_group;
    if (s.dw_pass == conv_dw_tb) s.group = sh->n; /* one pass per slot: dW^T transposed once */
    if (dx) s.dx = conv_dx_image;
    if (dx && d->dxc && conv_ilv_use(&j)) s.dx_n = conv_dx_ilv, s.ng_dx = j.d.group;
    if (dx && conv_ph_use(&j)) s.dx_n = conv_dx_ph, s.ng_dx = j.d.ph_ng;
    k_conv_slots_bwd(&s);
}

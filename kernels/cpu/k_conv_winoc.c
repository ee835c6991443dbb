/* Channels-last Winograd for 3x3 stride-1 pad-1 convs: F(4x4, 3x3) forward and dX,
 * F(2x2, 3x3) dW (its section at the end), for those
 * convs whose channel counts are multiples of the ISA level's vector (ResNet-20's 16,
 * 32, 64 channels on 28x28, 14x14, 7x7 planes). k_conv_wino.c's planar kernels run a
 * vector along a tile row (2 of 8 lanes on 7x7) and split every row per channel; here
 * an image is transposed once into pixels of c channels, and the transforms run on
 * vectors of channels:
 *   X   = the image channels-last, zero-padded to (4*ty + 2) x (4*tx + 2) pixels
 *   V   = B^T d B per tile: V[xi][tile][c], a GEMM's A with rows of c floats
 *   M   = V[xi] U[xi] (36 GEMMs [tiles x c] x [c x k], U[xi][c][k] = G w G^T)
 *   Y   = A^T M A (+ bias) per tile, channels-last, then transposed into the planes
 * A block is a run of tiles of the images of one group (ng images: ng*tiles fill
 * about WC_BLOCK_FLOATS of V + M); every GEMM row is computed alone in a fixed order,
 * so each image's bits are its own, whatever the group, the slot or the thread count.
 * The transforms' arithmetic is the planar F(4x4)'s (k_wino4_math.h); only the
 * summation of the GEMMs may group differently, so the bits differ from it. */
#include "kernels/k.h"
#include "kernels/cpu/k_conv_drv.h"
#include "kernels/cpu/k_conv_wino.h"
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"
#include "kernels/cpu/k_tr8.h"
#include <string.h>

#define RT_ISA_TEMPLATE "kernels/cpu/k_conv_winoc_simd.h"
#include "rt/isa_each.h"

#define WC_BLOCK_FLOATS (96L << 10) /* V + M of a block: 384 KiB */
#define WC_MIN_TILES 16
#define WD_BLOCK_FLOATS (96L << 10) /* dW: V + D of a block */

static size_t k_conv_winoc_dw_workspace(const k_conv_shape *sh);

typedef struct wc_dims {
    int ty, tx;            /* tile rows and columns of a plane */
    int ph, pw;            /* X's padded rows and pixels a row */
    int ng;                /* images per group */
    long rows;             /* tiles per block (GEMM rows) */
    long xsz, ysz;         /* floats of one image's X and Y */
    int slots;
    long r_x, r_y, r_v, r_m, slot; /* slot regions (bytes) */
    long r_u, end;                 /* U after the slots */
} wc_dims;

static long round64(long b) { return (b + 63) & ~63L; }

/* The geometry of a conv of ci -> ko channels on h x w planes (the forward: c -> k; dX:
 * k -> c). The workspace covers both directions: wc_dims_of(sh) takes the larger. */
static wc_dims wc_dims_dir(const k_conv_shape *sh, int ci, int ko)
{
    wc_dims d;
    int h = sh->h, w = sh->w;
    d.ty = (h + 3) / 4, d.tx = (w + 3) / 4;
    d.ph = 4 * d.ty + 2, d.pw = 4 * d.tx + 2;
    long t = (long)d.ty * d.tx, want = WC_BLOCK_FLOATS / (36L * (ci + ko));
    if (want < WC_MIN_TILES) want = WC_MIN_TILES;
    /* whole images covering a block (rounded up: ResNet-20's 14x14 c32 3 images, 2 blocks
     * of 24 tiles, fwd 3.4 -> 3.0 ms on AVX2; 7x7 c64 6 images, 2 x 12: 2.4 -> 2.25) */
    d.ng = t >= want ? 1 : (int)((want + t - 1) / t);
    if (d.ng > sh->n) d.ng = sh->n < 1 ? 1 : sh->n;
    long nb = (d.ng * t + want - 1) / want; /* blocks of a group, of even length */
    d.rows = (d.ng * t + nb - 1) / nb;
    d.xsz = (long)d.ph * d.pw * ci;
    d.ysz = 16L * t * ko;
    k_conv_geo g = k_conv_geo_of(sh);
    d.slots = g.slots;
    d.r_x = 0;
    d.r_y = d.r_x + round64(4L * d.ng * d.xsz);
    d.r_v = d.r_y + round64(4L * d.ng * d.ysz);
    d.r_m = d.r_v + round64(4L * 36 * d.rows * ci);
    d.slot = d.r_m + round64(4L * 36 * d.rows * ko);
    long cap = (48L << 20) / d.slot; /* the workspace stays near 48 MiB */
    if (d.slots > cap) d.slots = (int)(cap < 1 ? 1 : cap);
    d.r_u = d.slot * d.slots;
    d.end = d.r_u + round64(4L * 36 * ci * ko);
    return d;
}

static int kc_of_level(int lvl) { return lvl >= K_ISA_AVX512 ? 16 : lvl >= K_ISA_AVX2 ? 8 : 4; }

/* Channel counts a multiple of the level's vector, and at most 256 (beyond, even
 * winograd4c leaves them to the other kernels: their 36 K x C matrices alone would
 * take 38 MiB at 512 channels, the workspace of every conv). */
int k_conv_winoc_fits(const k_conv_shape *sh)
{
    int kc = kc_of_level(k_isa_level());
    return k_conv_wino_shape(sh) && sh->c % kc == 0 && sh->k % kc == 0 && sh->c <= 256 && sh->k <= 256;
}

size_t k_conv_winoc_workspace(const k_conv_shape *sh)
{
    /* any level may run it (the smallest vector: 4 channels) */
    if (!k_conv_wino_shape(sh) || sh->c % 4 || sh->k % 4 || sh->c > 256 || sh->k > 256) return 0;
    long a = wc_dims_dir(sh, sh->c, sh->k).end, b = wc_dims_dir(sh, sh->k, sh->c).end;
    long c = (long)k_conv_winoc_dw_workspace(sh);
    a = a > b ? a : b;
    return (size_t)(a > c ? a : c);
}

typedef struct wc_job {
    const k_conv_shape *sh;
    wc_dims d;
    int ci, ko;
    const float *in, *bias, *u;
    float *out;
    char *ws;
} wc_job;

/* An image's planes (ch x h x w) into x: a frame of ph x pw pixels with the image at
 * (pad, pad), whose border is zeroed (the workspace is shared with other kernels). */
static void wc_load(const float *img, int ch, int h, int w, int pad, int ph, int pw, float *x)
{
    long prow = (long)pw * ch;
    RT_ISA_CALL(k_isa_level(), k_winoc_frame, 1, ch, h, w, (float *)img, x, pw, pad);
    memset(x, 0, sizeof(float) * pad * prow);
    for (int r = 0; r < h; r++) {
        float *xr = x + (r + pad) * prow;
        memset(xr, 0, sizeof(float) * pad * ch);
        memset(xr + (long)(w + pad) * ch, 0, sizeof(float) * (pw - w - pad) * ch);
    }
    memset(x + (h + pad) * prow, 0, sizeof(float) * (ph - h - pad) * prow);
}

/* Y (4*ty x 4*tx pixels of ko channels) -> the image's planes ko x p x q. */
static void wc_store(const wc_job *j, float *y, float *img)
{
    RT_ISA_CALL(k_isa_level(), k_winoc_frame, 0, j->ko, j->sh->p, j->sh->q, img, y, 4 * j->d.tx, 0);
}

static void wc_group(void *ctx, char *base, long i0, int ng)
{
    const wc_job *j = ctx;
    const wc_dims *d = &j->d;
    const int ci = j->ci, ko = j->ko, lvl = k_isa_level();
    float *x = (float *)(base + d->r_x), *y = (float *)(base + d->r_y);
    float *v = (float *)(base + d->r_v), *m = (float *)(base + d->r_m);
    long isz = (long)ci * j->sh->h * j->sh->w, osz = (long)ko * j->sh->p * j->sh->q;
    long per = (long)d->ty * d->tx, total = per * ng, xrow = (long)d->pw * ci, yrow = 4L * d->tx * ko;
    long vs = d->rows * ci, ms = d->rows * ko;
    for (int g = 0; g < ng; g++)
        wc_load(j->in + (i0 + g) * isz, ci, j->sh->h, j->sh->w, 1, d->ph, d->pw, x + g * d->xsz);
    for (long b0 = 0; b0 < total; b0 += d->rows) {
        long nr = total - b0 < d->rows ? total - b0 : d->rows;
        /* input tiles: runs along a tile row */
        for (long e = b0; e < b0 + nr;) {
            long g = e / per, r = e % per;
            int ty = (int)(r / d->tx), tx = (int)(r % d->tx), n = d->tx - tx;
            if (n > b0 + nr - e) n = (int)(b0 + nr - e);
            const float *xp = x + g * d->xsz + (4L * ty) * xrow + (4L * tx) * ci;
            RT_ISA_CALL(lvl, k_winoc_in, xp, xrow, ci, n, v + (e - b0) * ci, vs);
            e += n;
        }
        for (int xi = 0; xi < 36; xi++)
            RT_ISA_CALL(lvl, k_winoc_gemm, 0, (int)nr, ko, ci, v + xi * vs, ci, j->u + (long)xi * ci * ko, ko,
                        m + xi * ms, ko, 0);
        for (long e = b0; e < b0 + nr;) {
            long g = e / per, r = e % per;
            int ty = (int)(r / d->tx), tx = (int)(r % d->tx), n = d->tx - tx;
            if (n > b0 + nr - e) n = (int)(b0 + nr - e);
            float *yp = y + g * d->ysz + (4L * ty) * yrow + (4L * tx) * ko;
            RT_ISA_CALL(lvl, k_winoc_out, m + (e - b0) * ko, ms, ko, j->bias, n, yp, yrow);
            e += n;
        }
    }
    for (int g = 0; g < ng; g++) wc_store(j, y + g * d->ysz, j->out + (i0 + g) * osz);
}

static void wc_fwd_n(void *ctx, int slot, char *base, long i0, int ng)
{
    (void)slot;
    wc_group(ctx, base, i0, ng);
}

static k_conv_slots wc_slots(wc_job *j)
{
    k_conv_slots s = {.sh = j->sh, .slots = j->d.slots, .ws = j->ws, .slot_bytes = j->d.slot, .group = j->d.ng,
                      .ysz = (long)j->sh->k * j->sh->p * j->sh->q, .pq = (long)j->sh->p * j->sh->q, .job = j};
    return s;
}

void k_conv_winoc_fwd(const k_conv_shape *sh, const float *x, const float *w, const float *b, float *y, void *ws)
{
    wc_job j = {.sh = sh, .d = wc_dims_dir(sh, sh->c, sh->k), .ci = sh->c, .ko = sh->k, .in = x, .bias = b, .out = y,
                .ws = ws};
    float *u = (float *)((char *)ws + j.d.r_u);
    RT_ISA_CALL(k_isa_level(), k_winoc_weights, sh->k, sh->c, w, (long)sh->c * 9, 9, 0, u, (long)sh->c * sh->k);
    j.u = u;
    k_conv_slots s = wc_slots(&j);
    s.fwd_n = wc_fwd_n;
    s.ng_fwd = j.d.ng;
    k_conv_slots_fwd(&s);
}

/* dX = conv(dy, W flipped and transposed): the forward's kernels on k -> c channels. */
void k_conv_winoc_dx(const k_conv_shape *sh, const float *w, const float *dy, float *dx, void *ws)
{
    wc_job j = {.sh = sh, .d = wc_dims_dir(sh, sh->k, sh->c), .ci = sh->k, .ko = sh->c, .in = dy, .out = dx,
                .ws = ws};
    float *u = (float *)((char *)ws + j.d.r_u);
    RT_ISA_CALL(k_isa_level(), k_winoc_weights, sh->c, sh->k, w, 9, (long)sh->c * 9, 1, u, (long)sh->c * sh->k);
    j.u = u;
    k_conv_slots s = wc_slots(&j);
    s.dy = dy;
    s.dx_n = wc_group;
    s.ng_dx = j.d.ng;
    k_conv_slots_bwd(&s);
}

/* ---- dW: F(2x2,3x3) or F(4x4,3x3) channels-last (wd_tile). Per slot (the driver's
 * images of one slot at once): S[xi][k][c] = sum over the slot's tiles of
 * D[xi][tile][k] V[xi][tile][c] (D = A g A^T of a tile's m x m dy, V = B^T d B of its
 * (m+2) x (m+2) input), summed block by block in tile order, then dW = G^T S G
 * (k_wino_dw_out). F(2x2): the planar F(2x2) dW's transforms per lane; its
 * sums run over the same tiles in another grouping. */
typedef struct wd_dims {
    int m, nxi;         /* tile: m x m outputs (2 or 4), (m + 2)^2 positions */
    int ty, tx, ph, pw; /* tiles of a plane; X's frame (pad 1) */
    int ng;             /* images per group (X and DY) */
    long rows;          /* tiles per block */
    long xsz, dsz;
    int slots;
    long r_x, r_dy, r_v, r_d, r_s, r_dw, r_db, slot, end;
} wd_dims;

static wd_dims wd_dims_of(const k_conv_shape *sh, int m)
{
    wd_dims d;
    const int C = sh->c, K = sh->k;
    d.m = m, d.nxi = (m + 2) * (m + 2);
    d.ty = (sh->p + m - 1) / m, d.tx = (sh->q + m - 1) / m;
    d.ph = m * d.ty + 2, d.pw = m * d.tx + 2;
    long t = (long)d.ty * d.tx, want = WD_BLOCK_FLOATS / (d.nxi * (long)(C + K));
    if (want < WC_MIN_TILES) want = WC_MIN_TILES;
    d.ng = t >= want ? 1 : (int)(want / t);
    if (d.ng > sh->n) d.ng = sh->n < 1 ? 1 : sh->n;
    long nb = (d.ng * t + want - 1) / want;
    d.rows = (d.ng * t + nb - 1) / nb;
    d.xsz = (long)d.ph * d.pw * C;
    d.dsz = (long)m * m * t * K;
    d.slots = k_conv_geo_of(sh).slots;
    d.r_x = 0;
    d.r_dy = d.r_x + round64(4L * d.ng * d.xsz);
    d.r_v = d.r_dy + round64(4L * d.ng * d.dsz);
    d.r_d = d.r_v + round64(4L * d.nxi * d.rows * C);
    d.r_s = d.r_d + round64(4L * d.nxi * d.rows * K);
    d.r_dw = d.r_s + round64(4L * d.nxi * K * C);
    d.r_db = d.r_dw + round64(4L * 9 * K * C);
    d.slot = d.r_db + round64(4L * K);
    long cap = (48L << 20) / d.slot;
    if (d.slots > cap) d.slots = (int)(cap < 2 ? 2 : cap);
    d.end = d.slot * d.slots;
    return d;
}

typedef struct wd_job {
    const k_conv_shape *sh;
    wd_dims d;
    const float *x, *dy;
} wd_job;

/* dW's tile: F(4x4) (36 positions per 16 outputs) on planes of 28x28 and up with up
 * to 64 channels (Sapphire Rapids, dX + dW per conv: ResNet-20's 28x28 c16 8.1 -> 7.2 ms
 * on AVX2 (the direct dW before), 6.3 -> 6.0 on AVX-512; ResNet-18's 56x56 c64 84 -> 78
 * / 59 -> 59); else F(2x2): smaller planes waste more of the 4x4 tiles (14x14 c32 6.5 ->
 * 7.8, 7x7 c64 7.1 -> 7.8 ms), and at 128 channels the 36 sums S outgrow the caches
 * (28x28 c128 85 -> 91). Its error is the F(4x4) forward's class (test_kernels_wino.c:
 * 1.6e-6 and 5.4e-6 of the largest at c32 14x14 and c64 28x28, F(2x2) 3e-7 and 5e-7). */
static int wd_tile(const k_conv_shape *sh)
{
    int hi = sh->c > sh->k ? sh->c : sh->k;
    return sh->p >= 28 && sh->q >= 28 && hi <= 64 ? 4 : 2;
}

static void wd_pass(void *ctx, char *base, long i0, int n, float *dwp, int acc)
{
    const wd_job *j = ctx;
    const wd_dims *d = &j->d;
    const k_conv_shape *sh = j->sh;
    const int C = sh->c, K = sh->k, lvl = k_isa_level();
    float *x = (float *)(base + d->r_x), *g = (float *)(base + d->r_dy);
    float *v = (float *)(base + d->r_v), *dd = (float *)(base + d->r_d), *s = (float *)(base + d->r_s);
    long isz = (long)C * sh->h * sh->w, osz = (long)K * sh->p * sh->q, per = (long)d->ty * d->tx;
    const int m = d->m;
    long xrow = (long)d->pw * C, grow = (long)m * d->tx * K, vs = d->rows * C, ds = d->rows * K;
    int first = 1;
    for (long i = i0; i < i0 + n; i += d->ng) {
        int ng = i0 + n - i < d->ng ? (int)(i0 + n - i) : d->ng;
        for (int e = 0; e < ng; e++) {
            wc_load(j->x + (i + e) * isz, C, sh->h, sh->w, 1, d->ph, d->pw, x + e * d->xsz);
            wc_load(j->dy + (i + e) * osz, K, sh->p, sh->q, 0, m * d->ty, m * d->tx, g + e * d->dsz);
        }
        long total = per * ng;
        for (long b0 = 0; b0 < total; b0 += d->rows, first = 0) {
            long nr = total - b0 < d->rows ? total - b0 : d->rows;
            for (long e = b0; e < b0 + nr;) {
                long im = e / per, r = e % per;
                int ty = (int)(r / d->tx), tx = (int)(r % d->tx), cnt = d->tx - tx;
                if (cnt > b0 + nr - e) cnt = (int)(b0 + nr - e);
                const float *xp = x + im * d->xsz + ((long)m * ty) * xrow + ((long)m * tx) * C;
                const float *gp = g + im * d->dsz + ((long)m * ty) * grow + ((long)m * tx) * K;
                if (m == 4) {
                    RT_ISA_CALL(lvl, k_winoc_in, xp, xrow, C, cnt, v + (e - b0) * C, vs);
                    RT_ISA_CALL(lvl, k_winoc_dy4, gp, grow, K, cnt, dd + (e - b0) * K, ds);
                } else {
                    RT_ISA_CALL(lvl, k_winoc_in2, xp, xrow, C, cnt, v + (e - b0) * C, vs);
                    RT_ISA_CALL(lvl, k_winoc_dy2, gp, grow, K, cnt, dd + (e - b0) * K, ds);
                }
                e += cnt;
            }
            for (int xi = 0; xi < d->nxi; xi++)
                RT_ISA_CALL(lvl, k_winoc_gemm, 1, K, C, (int)nr, dd + xi * ds, K, v + xi * vs, C,
                            s + (long)xi * K * C, C, !first);
        }
    }
    k_wino_dw_out(m, K, C, s, dwp, acc);
}

static size_t k_conv_winoc_dw_workspace(const k_conv_shape *sh)
{
    if (!k_conv_wino_shape(sh) || sh->c % 4 || sh->k % 4 || sh->c > 256 || sh->k > 256) return 0;
    return (size_t)wd_dims_of(sh, wd_tile(sh)).end;
}

void k_conv_winoc_dw(const k_conv_shape *sh, const float *x, const float *dy, float *dw, float *db, void *ws)
{
    wd_job j = {.sh = sh, .d = wd_dims_of(sh, wd_tile(sh)), .x = x, .dy = dy};
    k_conv_slots s = {.sh = sh, .slots = j.d.slots, .ws = ws, .slot_bytes = j.d.slot, .r_dw = j.d.r_dw,
                      .r_db = j.d.r_db, .group = sh->n < 1 ? 1 : sh->n, .ysz = (long)sh->k * sh->p * sh->q,
                      .pq = (long)sh->p * sh->q, .dy = dy, .dw = dw, .db = db, .job = &j, .dw_pass = wd_pass};
    k_conv_slots_bwd(&s);
}

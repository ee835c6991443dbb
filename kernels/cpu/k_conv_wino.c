/* Winograd F(2x2, 3x3) for 3x3 stride-1 pad-1 convs (ResNet's): 16 multiplies per
 * 2x2 outputs and channel pair instead of 36; the forward and dX also as F(4x4, 3x3)
 * (36 per 4x4 outputs, 6x6 tiles: wino_m).
 *   forward: per tile, V = B^T d B (4x4 input tile d), M[xi] = U[xi] V[xi] for the
 *            16 positions xi (U = G w G^T per filter and channel), y = A^T M A;
 *            the 16 products are GEMMs [K x C] x [C x tiles] over a block of tiles
 *   dX:      a "same" conv: dx = conv(dy, W flipped and transposed), the forward again
 *   dW:      the transpose of the forward's bilinear form: dW = G^T S G with
 *            S[xi] = sum over tiles of (A g A^T)[xi] (B^T d B)[xi] (g: the tile's 2x2
 *            dy), i.e. 16 NT GEMMs [K x tiles] x [tiles x C]
 * A block is a run of whole tile rows of the images of one group (ng images, cut into
 * blocks of `rows` tile rows): both depend on the shape only, and every output column
 * of a GEMM is computed alone, so the forward's and dX's bits are each image's own;
 * dW takes a whole slot of images at once, sums S over its blocks in order (longer
 * blocks: the NT GEMMs' sums run over the tiles), then transforms back once per
 * chunk of filters (k_conv_drv.h's slots: any thread count, the same bits). The
 * transforms are k_conv_wino_simd.h's (and k_conv_wino4_simd.h's), per ISA level.
 * Measured error (max error / max value vs double, ResNet shapes, fwd and dX): F(2x2)
 * 2-7e-7, F(4x4) 3e-6 (c32) to 1.2e-5 (c256), the direct path 6e-7 to 2.6e-6. */
#include "kernels/k.h"
#include "kernels/cpu/k_conv_drv.h"
#include "kernels/cpu/k_conv_wino.h"
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"
#include "rt/env.h"
#include <string.h>

#define RT_ISA_TEMPLATE "kernels/cpu/k_conv_wino_simd.h"
#include "rt/isa_each.h"

#ifndef WT_P
#define WT_P 14
#endif
#ifndef WT_C
#define WT_C 64
#endif
#define WINO_BLOCK_FLOATS (96L << 10) /* V + M of a block: 384 KiB */
#define WINO_MIN_COLS 32               /* fewer tiles leave the GEMMs' columns short */
#define WINO_DW_FLOATS (1L << 20)      /* dW's blocks: up to 4 MiB, */
#define WINO_DW_COLS 512               /* up to 512 tiles: its NT GEMMs sum over them */
#define WINO_S_FLOATS (1L << 20)       /* dW's sums S: up to 4 MiB a slot */

/* ---- which convs: kernels/cpu/k_settings.c (auto, direct, winograd, winograd4, winograd4c) */
static int algo(void) { return k_conv_algo_now(); }

int k_conv_wino_shape(const k_conv_shape *sh)
{
    return sh->stride == 1 && sh->r == 3 && sh->s == 3 && sh->pad == 1 && sh->c >= 4 && sh->k >= 4;
}

/* The shapes auto may run (on some ISA level; k_conv_wino_use): 14x14 planes and up,
 * 32 channels each way and up (dW: 64). Only their blocks are sized for speed; the
 * others' are small, keeping the workspace near the direct path's. */
static int wino_tuned(const k_conv_shape *sh, int part)
{
    int ch = sh->c < sh->k ? sh->c : sh->k;
    return k_conv_wino_shape(sh) && sh->p >= WT_P && sh->q >= WT_P && ch >= (part == K_WINO_DW ? WT_C : 32 * WT_C / 64);
}

/* auto's channels-last F(4x4): up to 64 channels each way, on AVX2 and AVX-512
 * (Sapphire Rapids, fwd per conv vs what auto ran before: ResNet-20's 28x28 c16 4.45 ->
 * 3.4 ms on AVX2 and 3.1 -> 2.9 on AVX-512, 14x14 c32 3.95 -> 3.5 / 2.95 -> 2.55, 7x7
 * c64 4.5 -> 2.7 / 3.4 -> 1.95; ResNet-18's 56x56 c64 41 -> 36.5 / 27.3 -> 26.6). At
 * 128+ channels U[xi] (c x k) outgrows the caches for the few tiles of a block: 14x14
 * c256 54 vs the planar 40.5 ms, 7x7 c512 149 vs the direct 70. */
static int winoc_auto(const k_conv_shape *sh)
{
    return k_isa_level() >= K_ISA_AVX2 && sh->c <= 64 && sh->k <= 64;
}

/* The channels-last F(4x4) (k_conv_winoc.c) for the forward and dX: winograd4c, or
 * auto where measured faster (WINOC_AUTO). */
int k_conv_winoc_use(const k_conv_shape *sh)
{
    if (!k_conv_winoc_fits(sh)) return 0;
    int a = algo();
    return a == 4 || (a == 0 && winoc_auto(sh));
}

/* And its dW (k_conv_winoc.c, F(4x4) or F(2x2): its wd_tile): winograd4c, or auto
 * where measured faster (Sapphire Rapids, dX + dW per conv vs the planar F(2x2) dW or
 * the direct one: ResNet-18's 56x56 c64 113 -> 78 ms on AVX2, 79.5 -> 59 on AVX-512;
 * 28x28 c128 111 -> 84 / 81 -> 63; 14x14 c256 112 -> 118 / 95 -> 89; ResNet-20's 28x28
 * c16 8.1 -> 7.2 / 6.3 -> 6.0, 14x14 c32 8.0 -> 6.85 / 5.4 -> 5.1). Not on 7x7 planes
 * (16 tiles for 49 outputs: 148 -> 190 ms at c512, 7.0 -> 7.4 at c64), nor at 16
 * channels on smaller planes (the transforms cost what the GEMMs save). */
static int winoc_dw_auto(const k_conv_shape *sh)
{
    int lo = sh->c < sh->k ? sh->c : sh->k, hi = sh->c > sh->k ? sh->c : sh->k, lvl = k_isa_level();
    if (lvl < K_ISA_AVX2 || sh->p < 14 || sh->q < 14) return 0;
    if (sh->p >= 28 && sh->q >= 28 && hi <= 64) return 1; /* F(4x4) */
    return lo >= 32 && (hi <= 128 || lvl >= K_ISA_AVX512);
}

int k_conv_winoc_dw_use(const k_conv_shape *sh)
{
    if (!k_conv_winoc_fits(sh)) return 0;
    int a = algo();
    return a == 4 || (a == 0 && winoc_dw_auto(sh));
}

int k_conv_wino_use(const k_conv_shape *sh, int part)
{
    if (!k_conv_wino_shape(sh)) return 0;
    if (part != K_WINO_DW ? k_conv_winoc_use(sh) : k_conv_winoc_dw_use(sh)) return 1;
    int a = algo();
    if (a != 0) return a >= 2;
    /* auto: where measured faster than the direct convs (k_conv.c), Sapphire Rapids,
     * batch 128 / 32: ResNet-18's 56x56 c64, 28x28 c128, 14x14 c256 (fwd 1.1-1.45x,
     * dW 1.1-1.4x on both levels); on AVX2 also ResNet-20's 14x14 c32 fwd and dX
     * (~1.1x). Not 7x7 planes (16 tiles for 49 outputs, vectors half empty), nor 16
     * channels (the transforms cost as much as the GEMMs save), nor generic C. */
    int lvl = k_isa_level(), ch = sh->c < sh->k ? sh->c : sh->k;
    if (lvl < K_ISA_AVX2 || !wino_tuned(sh, part)) return 0;
    return ch >= 64 || (lvl == K_ISA_AVX2 && part != K_WINO_DW);
}

/* ---- geometry and workspace */
typedef struct wino_dims {
    int m, nxi;           /* tile: m x m outputs (2 or 4), (m + 2)^2 positions xi */
    int ty, tx;           /* tile rows and columns of a plane */
    int ng, rows;         /* images per group; tile rows per block */
    int rows_dw;          /* dW's tile rows per block (across a slot's images): longer sums */
    int kc;               /* dW's filters per pass (its S: 16 kc x C matrices) */
    long ldv;             /* stride of a (xi, channel) row of V, M: a block's columns + slack */
    long ld;              /* floats of one split row (k_wino_split) */
    int slots;
    long r_v, r_m, r_s, r_tmp, r_dw, r_db, slot; /* slot regions (bytes) */
    long r_u, r_up, pu, r_boff, end;            /* shared regions after the slots (bytes) */
} wino_dims;

static long round64(long b) { return (b + 63) & ~63L; }
static long roundn(long v, long n) { return (v + n - 1) / n * n; }

static wino_dims wino_dims_of(const k_conv_shape *sh, int m)
{
    wino_dims d;
    k_conv_geo g = k_conv_geo_of(sh);
    int mc = sh->c > sh->k ? sh->c : sh->k;
    d.m = m;
    d.nxi = (m + 2) * (m + 2);
    d.ty = (sh->p + m - 1) / m;
    d.tx = (sh->q + m - 1) / m;
    /* dW partials as k_conv.c's: fewer slots where they are large */
    long dwb = 4L * sh->k * sh->c * 9, cap = (24L << 20) / dwb;
    d.slots = g.slots < cap ? g.slots : (int)(cap < 2 ? 2 : cap);
    long t = (long)d.ty * d.tx, want = wino_tuned(sh, K_WINO_FWD) ? WINO_BLOCK_FLOATS / (2L * d.nxi * mc) : 0;
    long slot_tiles = (sh->n + d.slots - 1) / d.slots * t; /* no block longer than a slot's tiles */
    if (want < WINO_MIN_COLS) want = WINO_MIN_COLS;
    if (want > slot_tiles) want = slot_tiles;
    if (t >= want) {
        d.ng = 1;
        d.rows = (int)(want / d.tx > 0 ? want / d.tx : 1);
        if (d.rows > d.ty) d.rows = d.ty;
    } else {
        d.ng = (int)(want / t);
        d.rows = d.ng * d.ty;
    }
    long cols = (long)d.rows * d.tx, cdw = wino_tuned(sh, K_WINO_DW) ? WINO_DW_FLOATS / (32L * mc) : 0;
    if (cdw > WINO_DW_COLS) cdw = WINO_DW_COLS;
    if (cdw > slot_tiles) cdw = slot_tiles;
    d.rows_dw = (int)(cdw / d.tx > d.rows ? cdw / d.tx : d.rows);
    if (cols < (long)d.rows_dw * d.tx) cols = (long)d.rows_dw * d.tx;
    d.ldv = roundn(cols + roundn(d.tx, 16), 16);
    d.ld = roundn(d.tx, 16) + 16; /* the tiles load up to column roundn(tx, KW) */
    /* dW's S in chunks of filters where it is large (16 K x C matrices) */
    d.kc = 16L * sh->k * sh->c <= WINO_S_FLOATS ? sh->k : (int)(WINO_S_FLOATS / (16L * sh->c));
    if (d.kc < 1) d.kc = 1;
    long vm = 4L * ((long)d.nxi * mc * d.ldv + 16);
    d.r_v = 0;
    d.r_m = d.r_v + round64(vm);
    d.r_s = d.r_m + round64(vm);
    d.r_tmp = d.r_s + round64(4L * 16 * d.kc * sh->c);
    d.r_dw = d.r_tmp + round64(4L * m * ((m * d.ty + 2) * d.ld + 16));
    d.r_db = d.r_dw + round64(dwb);
    d.slot = d.r_db + round64(4L * sh->k);
    /* and fewer slots where they are large: the workspace stays near 48 MiB */
    long scap = (48L << 20) / d.slot;
    if (d.slots > scap) d.slots = (int)(scap < 2 ? 2 : scap);
    size_t p1 = k_gemm_pack_floats(sh->k, sh->c), p2 = k_gemm_pack_floats(sh->c, sh->k);
    d.pu = (long)(p1 > p2 ? p1 : p2);
    /* U before packing: in the slots' regions (not in use yet) where they hold it */
    long ub = round64(4L * d.nxi * sh->k * sh->c), sl = d.slot * d.slots;
    d.r_u = ub <= sl ? 0 : sl;
    d.r_up = ub <= sl ? sl : sl + ub;
    d.r_boff = d.r_up + round64(4L * d.nxi * d.pu);
    d.end = d.r_boff + round64((long)sizeof(long) * mc);
    return d;
}

/* The tile of the forward and dX (dW: always 2x2): 4x4 (F(4x4,3x3): 36 multiplies per
 * 16 outputs, transforms of 6x6 tiles) where measured faster than 2x2: AVX2 on
 * ResNet-18's 56x56 c64, 28x28 c128, 14x14 c256 (fwd 1.6-1.7x the direct convs, F(2x2)
 * 1.2x); AVX-512 on 56x56 c64 (46 vs 54 ms, batch 32) and 14x14 c256 (47-51 vs 52-55),
 * not 28x28 c128 (7 tiles a row fill 7 of 16 lanes: 54-57 vs 46-53). */
static int wino_m(const k_conv_shape *sh)
{
    if (!wino_tuned(sh, K_WINO_DW)) return 2; /* nor does the workspace cover F(4x4) there */
    int a = algo();
    if (a >= 2) return a >= 3 ? 4 : 2;
    if (k_isa_level() == K_ISA_AVX2) return 4;
    int tx = (sh->q + 3) / 4, ch = sh->c < sh->k ? sh->c : sh->k;
    return ch >= 256 || 4 * tx >= 3 * ((tx + 15) / 16 * 16) ? 4 : 2;
}

int k_conv_wino_tile(const k_conv_shape *sh) { return k_conv_winoc_use(sh) ? 4 : wino_m(sh); }

size_t k_conv_wino_workspace(const k_conv_shape *sh)
{
    if (!k_conv_wino_shape(sh)) return 0;
    long a = wino_dims_of(sh, 2).end, b = wino_tuned(sh, K_WINO_DW) ? wino_dims_of(sh, 4).end : 0;
    long c = (long)k_conv_winoc_workspace(sh);
    return (size_t)(a > b ? (a > c ? a : c) : (b > c ? b : c));
}

/* F(4x4)'s U[xi][k][c] = (G w G^T)[xi] at u + xi*ux + k*uk + c*uc for the ko x ci
 * filters at w (k_conv_wino.h). */
void k_wino4_weights(int ko, int ci, const float *w, long ks, long cs, int flip, float *u, long ux, long uk, long uc)
{
    static const float G[6][3] = K4_G_INIT;
    for (int k = 0; k < ko; k++)
        for (int c = 0; c < ci; c++) {
            const float *f = w + k * ks + c * cs;
            float g[9], t[6][3];
            for (int e = 0; e < 9; e++) g[e] = f[flip ? 8 - e : e];
            for (int i = 0; i < 6; i++)
                for (int s = 0; s < 3; s++) t[i][s] = G[i][0] * g[s] + G[i][1] * g[3 + s] + G[i][2] * g[6 + s];
            float *o = u + k * uk + c * uc;
            for (int i = 0; i < 6; i++)
                for (int j = 0; j < 6; j++) o[(6 * i + j) * ux] = t[i][0] * G[j][0] + t[i][1] * G[j][1] + t[i][2] * G[j][2];
        }
}

/* U[xi][ko][ci] = (G w G^T)[xi] for the ko x ci matrix of 3x3 filters at w (filter
 * (ko, ci) at w + ko*ks + ci*cs, taps flipped when `flip`: the dX conv's W^T),
 * G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1] (F(4x4): k_wino4_weights); then each U[xi]
 * packed as a GEMM's A. */
static void wino_weights(int m, int ko, int ci, const float *w, long ks, long cs, int flip, float *u, float *up,
                         long pu)
{
    if (m == 4) {
        long kc = (long)ko * ci;
        k_wino4_weights(ko, ci, w, ks, cs, flip, u, kc, ci, 1);
        for (int xi = 0; xi < 36; xi++) k_gemm_pack_a(ko, ci, u + xi * kc, ci, 1, up + xi * pu);
        return;
    }
    long kc = (long)ko * ci;
    for (int k = 0; k < ko; k++)
        for (int c = 0; c < ci; c++) {
            const float *f = w + k * ks + c * cs;
            float g[9], t[4][3];
            for (int e = 0; e < 9; e++) g[e] = f[flip ? 8 - e : e];
            for (int s = 0; s < 3; s++) { /* G g: rows */
                t[0][s] = g[s];
                t[1][s] = 0.5f * (g[s] + g[3 + s] + g[6 + s]);
                t[2][s] = 0.5f * (g[s] - g[3 + s] + g[6 + s]);
                t[3][s] = g[6 + s];
            }
            float *o = u + (long)k * ci + c;
            for (int i = 0; i < 4; i++) { /* (G g) G^T: columns */
                o[(4 * i + 0) * kc] = t[i][0];
                o[(4 * i + 1) * kc] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);
                o[(4 * i + 2) * kc] = 0.5f * (t[i][0] - t[i][1] + t[i][2]);
                o[(4 * i + 3) * kc] = t[i][2];
            }
        }
    for (int xi = 0; xi < 16; xi++) k_gemm_pack_a(ko, ci, u + xi * kc, ci, 1, up + xi * pu);
}

typedef struct wino_job {
    const k_conv_shape *sh;
    wino_dims d;
    char *ws;
    const float *x, *b, *dy;
    float *y, *dx, *dw;
    const float *up; /* the packed U of the forward or of the dX conv */
    const long *boff;
} wino_job;

/* Tiles of tile rows [r0, r0 + nr) (counted over images i0, i0 + 1, ...) of channel c
 * of planes h x w (ch channels an image) into v + (r - r0)*tx (xi stride vs): the
 * input transform (dy 0) or dW's dy transform (dy 1). */
static void wino_tiles(const wino_dims *d, const float *in, int ch, int c, int h, int w, long i0, long r0, long nr,
                       int dy, float *tmp, float *v, long vs)
{
    const int lvl = k_isa_level();
    long pld = (d->m * d->ty + 2) * d->ld + 16; /* 16: k_wino_split's slack */
    float *e = tmp, *o = tmp + pld;
    for (long r = r0; r < r0 + nr;) {
        long img = i0 + r / d->ty;
        int ty0 = (int)(r % d->ty), n = d->ty - ty0;
        if (n > r0 + nr - r) n = (int)(r0 + nr - r);
        const float *xp = in + (img * ch + c) * (long)h * w;
        float *vp = v + (r - r0) * d->tx;
        if (d->m == 4) {
            RT_ISA_CALL(lvl, k_wino4_split, xp, h, w, 1, 4 * ty0, 4 * (ty0 + n) + 2, d->ld, e, pld);
            RT_ISA_CALL(lvl, k_wino4_in_tiles, e, pld, d->ld, n, d->tx, vp, vs);
        } else if (dy) {
            RT_ISA_CALL(lvl, k_wino_split, xp, h, w, 0, 2 * ty0, 2 * (ty0 + n), d->ld, e, o);
            RT_ISA_CALL(lvl, k_wino_dy_tiles, e, o, d->ld, n, d->tx, vp, vs);
        } else {
            RT_ISA_CALL(lvl, k_wino_split, xp, h, w, 1, 2 * ty0, 2 * (ty0 + n) + 2, d->ld, e, o);
            RT_ISA_CALL(lvl, k_wino_in_tiles, e, o, d->ld, n, d->tx, vp, vs);
        }
        r += n;
    }
}

/* One forward (or dX) pass over images [i0, i0 + ng): ci planes of h x w in -> ko
 * planes out, the same size; block by block. */
static void wino_conv(const wino_job *j, char *base, int ci, int ko, const float *in, float *out, const float *bias,
                      long i0, int ng)
{
    const wino_dims *d = &j->d;
    const int h = j->sh->h, w = j->sh->w, lvl = k_isa_level();
    float *v = (float *)(base + d->r_v), *m = (float *)(base + d->r_m), *tmp = (float *)(base + d->r_tmp);
    long ldv = d->ldv, plane = (long)h * w, total = (long)ng * d->ty;
    for (long r0 = 0; r0 < total; r0 += d->rows) {
        long nr = total - r0 < d->rows ? total - r0 : d->rows, cols = nr * d->tx;
        for (int c = 0; c < ci; c++) wino_tiles(d, in, ci, c, h, w, i0, r0, nr, 0, tmp, v + c * ldv, ci * ldv);
        for (int xi = 0; xi < d->nxi; xi++)
            k_gemm_nn_packed(ko, (int)cols, ci, j->up + xi * d->pu, v + xi * ci * ldv, ldv, NULL, m + xi * ko * ldv,
                             ldv, NULL, 0);
        for (int k = 0; k < ko; k++)
            for (long r = r0; r < r0 + nr; r++) {
                float *yp = out + ((i0 + r / d->ty) * ko + k) * plane;
                if (d->m == 4)
                    RT_ISA_CALL(lvl, k_wino4_out_row, m + k * ldv + (r - r0) * d->tx, ko * ldv, bias ? bias[k] : 0.0f,
                                yp, h, w, (int)(r % d->ty), d->tx);
                else
                    RT_ISA_CALL(lvl, k_wino_out_row, m + k * ldv + (r - r0) * d->tx, ko * ldv, bias ? bias[k] : 0.0f,
                                yp, h, w, (int)(r % d->ty), d->tx);
            }
    }
}

static void wino_fwd_n(void *ctx, int slot, char *base, long i0, int ng)
{
    const wino_job *j = ctx;
    (void)slot;
    wino_conv(j, base, j->sh->c, j->sh->k, j->x, j->y, j->b, i0, ng);
}

static void wino_dx_n(void *ctx, char *base, long i0, int ng)
{
    const wino_job *j = ctx;
    wino_conv(j, base, j->sh->k, j->sh->c, j->dy, j->dx, NULL, i0, ng);
}

/* One filter pair's 3x3 dW o = G^T S G from its S[xi] at s + xi*kc: F(2x2), G^T = [1 .5
 * .5 0; 0 .5 -.5 0; 0 .5 .5 1]; F(4x4), G = K4_G_INIT. */
static void dw_back2(const float *s, long kc, float o[9])
{
    float a[4][4], t[3][4];
    for (int xi = 0; xi < 16; xi++) a[xi / 4][xi % 4] = s[xi * kc];
    for (int j = 0; j < 4; j++) {
        t[0][j] = a[0][j] + 0.5f * (a[1][j] + a[2][j]);
        t[1][j] = 0.5f * (a[1][j] - a[2][j]);
        t[2][j] = a[3][j] + 0.5f * (a[1][j] + a[2][j]);
    }
    for (int i = 0; i < 3; i++) {
        o[3 * i + 0] = t[i][0] + 0.5f * (t[i][1] + t[i][2]);
        o[3 * i + 1] = 0.5f * (t[i][1] - t[i][2]);
        o[3 * i + 2] = t[i][3] + 0.5f * (t[i][1] + t[i][2]);
    }
}

static void dw_back4(const float *s, long kc, float o[9])
{
    static const float G[6][3] = K4_G_INIT;
    float t[3][6];
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < 6; b++) {
            float v = 0.0f;
            for (int a = 0; a < 6; a++) v += G[a][i] * s[(6 * a + b) * kc];
            t[i][b] = v;
        }
    for (int i = 0; i < 3; i++)
        for (int jj = 0; jj < 3; jj++) {
            float v = 0.0f;
            for (int b = 0; b < 6; b++) v += t[i][b] * G[b][jj];
            o[3 * i + jj] = v;
        }
}

void k_wino_dw_out(int m, int K, int C, const float *s, float *dwp, int acc)
{
    long kc = (long)K * C;
    for (long e = 0; e < kc; e++) {
        float o[9];
        if (m == 4) dw_back4(s + e, kc, o);
        else dw_back2(s + e, kc, o);
        float *dst = dwp + e * 9;
        if (acc)
            for (int q = 0; q < 9; q++) dst[q] += o[q];
        else
            memcpy(dst, o, sizeof o);
    }
}

/* dW of a whole slot (images [i0, i0 + ng): the driver's group is the batch): per chunk
 * of kc filters, S summed over all its tiles, block by block, then one back-transform. */
static void wino_dw_pass(void *ctx, char *base, long i0, int ng, float *dwp, int acc)
{
    const wino_job *j = ctx;
    const wino_dims *d = &j->d;
    const k_conv_shape *sh = j->sh;
    const int C = sh->c, K = sh->k, h = sh->h, w = sh->w;
    float *v = (float *)(base + d->r_v), *g = (float *)(base + d->r_m), *s = (float *)(base + d->r_s);
    float *tmp = (float *)(base + d->r_tmp);
    long ldv = d->ldv, total = (long)ng * d->ty;
    for (int k0 = 0; k0 < K; k0 += d->kc) {
        int kc = K - k0 < d->kc ? K - k0 : d->kc;
        for (long r0 = 0; r0 < total; r0 += d->rows_dw) {
            long nr = total - r0 < d->rows_dw ? total - r0 : d->rows_dw, cols = nr * d->tx;
            for (int c = 0; c < C; c++) wino_tiles(d, j->x, C, c, h, w, i0, r0, nr, 0, tmp, v + c * ldv, C * ldv);
            for (int k = 0; k < kc; k++)
                wino_tiles(d, j->dy, K, k0 + k, h, w, i0, r0, nr, 1, tmp, g + k * ldv, kc * ldv);
            for (int xi = 0; xi < 16; xi++)
                k_gemm_nt_off(kc, C, (int)cols, 1, g + xi * kc * ldv, ldv, 0, v + xi * C * ldv, j->boff, 0,
                              s + (long)xi * kc * C, C, r0 > 0);
        }
        k_wino_dw_out(2, kc, C, s, dwp + (long)k0 * C * 9, acc);
    }
}

static k_conv_slots wino_slots(wino_job *j)
{
    k_conv_slots s = {.sh = j->sh, .slots = j->d.slots, .ws = j->ws, .slot_bytes = j->d.slot, .r_dw = j->d.r_dw,
                      .r_db = j->d.r_db, .group = j->d.ng, .ysz = (long)j->sh->k * j->sh->p * j->sh->q,
                      .pq = (long)j->sh->p * j->sh->q, .dy = j->dy, .job = j};
    return s;
}

void k_conv_wino_fwd(const k_conv_shape *sh, const float *x, const float *w, const float *b, float *y, void *ws)
{
    if (k_conv_winoc_use(sh)) {
        k_conv_winoc_fwd(sh, x, w, b, y, ws);
        return;
    }
    wino_job j = {.sh = sh, .d = wino_dims_of(sh, wino_m(sh)), .ws = ws, .x = x, .b = b, .y = y};
    float *u = (float *)((char *)ws + j.d.r_u), *up = (float *)((char *)ws + j.d.r_up);
    wino_weights(j.d.m, sh->k, sh->c, w, (long)sh->c * 9, 9, 0, u, up, j.d.pu);
    j.up = up;
    k_conv_slots s = wino_slots(&j);
    s.fwd_n = wino_fwd_n;
    s.ng_fwd = j.d.ng;
    k_conv_slots_fwd(&s);
}

/* dW (F(2x2)) and dX (the forward's tile), one after the other where the tiles differ. */
void k_conv_wino_bwd(const k_conv_shape *sh, const float *x, const float *w, const float *dy, float *dx, float *dw,
                     float *db, void *ws)
{
    if (dw && k_conv_winoc_dw_use(sh)) {
        k_conv_winoc_dw(sh, x, dy, dw, db, ws);
        dw = NULL, db = NULL;
        if (!dx) return;
    }
    if (dx && k_conv_winoc_use(sh)) {
        if (dw) k_conv_wino_bwd(sh, x, w, dy, NULL, dw, db, ws);
        k_conv_winoc_dx(sh, w, dy, dx, ws);
        return;
    }
    int mx = wino_m(sh);
    if (dx && dw && mx != 2) {
        k_conv_wino_bwd(sh, x, w, dy, NULL, dw, db, ws);
        dw = NULL, db = NULL;
    }
    wino_job j = {.sh = sh, .d = wino_dims_of(sh, dx ? mx : 2), .ws = ws, .x = x, .dy = dy, .dx = dx, .dw = dw};
    float *u = (float *)((char *)ws + j.d.r_u), *up = (float *)((char *)ws + j.d.r_up);
    long *boff = (long *)((char *)ws + j.d.r_boff);
    if (dx) { /* the dX conv's filters: W^T (c x k), taps flipped */
        wino_weights(j.d.m, sh->c, sh->k, w, 9, (long)sh->c * 9, 1, u, up, j.d.pu);
        j.up = up;
    }
    for (int c = 0; c < sh->c; c++) boff[c] = c * j.d.ldv;
    j.boff = boff;
    k_conv_slots s = wino_slots(&j);
    s.dw = dw;
    s.db = db;
    if (dw) s.dw_pass = wino_dw_pass, s.group = (int)(sh->n < 1 ? 1 : sh->n); /* a slot at once */
    if (dx) s.dx_n = wino_dx_n, s.ng_dx = j.d.ng;
    k_conv_slots_bwd(&s);
}

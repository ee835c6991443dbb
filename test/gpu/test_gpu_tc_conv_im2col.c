/* Convs other than 1x1 stride-1 unpadded ones on TMA's im2col mode (k_cuda_conv.cu's
 * conv_i2c: A the im2col boxes of NHWC 16-bit x, B the weights, on wt_gemm): y, dw (A the
 * im2col boxes 64 pixels deep, M-major, B dy) and, at stride 1, dx (a conv of dy by the
 * flipped taps) bitwise equal to the geometry loaders' (k_cuda_conv2d_set_im2col(0)),
 * bf16 and f16, 3x3 stride 1 and 2 with padding and ResNet's 1x1 stride-2 downsample,
 * output pixels not a multiple of 64 (the last tile's or stage's pixels past the batch
 * are TMA's zero fill), split over k and not, wt_gemm's 128 x 128 and 128 x 256 tiles. On the
 * executor the TMA copies are counted: exactly the im2col product's boxes, none with the
 * switch off, none where the conv must fall back (C % 64 != 0) or TMA is off. And the
 * device graph: ResNet-18's basic blocks train to the same losses either way. Bitwise on
 * the executor; on a GPU within g_ndiff_tc's bound (where K or C is 64 the geometry path
 * is mma.sync's, whose unit may round its k16 sums otherwise than wgmma's). */
#include "test/gpu/g.h"
#include "nn/graph_cuda.h"
#include "nn/models/models.h"
#include "ports/cuda/port_cuda.h"
#include "test/gpu/gpu_models.h"
#include "test/t_data.h"
#include <limits.h>
#include <math.h>

int k_cuda_conv2d_set_im2col(int on); /* kernels/cuda/k_cuda_conv.cu */
int k_cuda_tma_set_fill(int tiles);    /* kernels/cuda/k_cuda_tc_tma.cuh */
unsigned long long k_cuda_conv2d_phase_groups(void); /* kernels/cuda/k_cuda_conv.cu */

#if DDPRT_SIMT
/* The geometry product's split count (k_cuda_gemm_splits: M x N x K). */
static long long i2c_split(long long M, long long N, long long K)
{
    int t = N >= 128 && M >= 128 ? 128 : 64;
    long long tiles = ((N + t - 1) / t) * ((M + t - 1) / t), sp = (t == 128 ? 264 : 528) / tiles, maxk = K / 128;
    sp = sp < maxk ? sp : maxk;
    return sp < 1 ? 1 : sp > 128 ? 128 : sp;
}
/* An im2col product's TMA boxes: M x N x K, split (sp > 1) on 128 x 128 tiles, else bn
 * wide (wt_tile_n's 128 x 64 for N <= 64 in both cases, but for bn 256: always wide); a
 * 64-deep stage and tile: the conv's (M pixels, K = r s c) two boxes (A's im2col, B's
 * weights), the weight grad's (dw: M = r s c, K = the pixels) two im2col boxes of 64 rows
 * and bn / 64 of dy's. */
static unsigned long long i2c_boxes_sp(long long M, long long N, long long K, int bn, int dw, long long sp)
{
    if (sp > 1 || bn != 256) bn = N <= 64 ? 64 : 128;
    return (dw ? 2ull + (unsigned)bn / 64 : 2ull) * (unsigned long long)((M + 127) / 128) *
           (unsigned long long)((N + bn - 1) / bn) * (unsigned long long)((K + 63) / 64);
}
/* ... split as the geometry product (N x M) splits. */
static unsigned long long i2c_boxes(long long M, long long N, long long K, int bn, int dw)
{
    return i2c_boxes_sp(M, N, K, bn, dw, i2c_split(N, M, K));
}

static int cdiv(int a, int b) { return a > 0 ? (a + b - 1) / b : 0; }
/* A strided input grad's phase products (k_cuda_conv_phase.cuh), M = n Ha Wb, N = c, K =
 * Rt St k, each phase's 64-deep stages grouped by the geometry's split chunk (C x NHW x
 * RSK) they fall in: 0 where some phase's runs are uneven (the geometry path then). The
 * tap phases go four a launch (conv_phase_gemm), on a split product's tile where one of
 * the four splits. */
static unsigned long long i2c_phases(const k_conv_shape *sh, int bn)
{
    const int st = sh->stride, K = sh->k;
    const long long rsk = (long long)sh->r * sh->s * K, sp = i2c_split(sh->c, (long long)sh->n * sh->h * sh->w, rsk);
    const long long kc = sp == 1 ? rsk : ((rsk + sp - 1) / sp + 63) / 64 * 64;
    unsigned long long sum = 0;
    long long M[64], Kp[64];
    int spl[64], np = 0;
    for (int ph = 0; ph < st; ph++)
        for (int pw = 0; pw < st; pw++) {
            const int r0 = (ph + sh->pad) % st, s0 = (pw + sh->pad) % st, Rt = cdiv(sh->r - r0, st),
                      St = cdiv(sh->s - s0, st), Ha = cdiv(sh->h - ph, st), Wb = cdiv(sh->w - pw, st);
            if (!Rt || !St || !Ha || !Wb) continue;
            int runs = 0, len = 0, n = 0;
            long long last = -1;
            for (int t = 0; t < Rt; t++)
                for (int u = 0; u < St; u++)
                    for (int kb = 0; kb < K; kb += 64) {
                        long long z = (((long long)(r0 + st * t) * sh->s + s0 + st * u) * K + kb) / kc;
                        if (z != last && last >= 0) {
                            if (runs++ == 0) len = n;
                            else if (n != len) return 0;
                            n = 0;
                        }
                        last = z, n++;
                    }
            if (runs && n > len) return 0;
            M[np] = (long long)sh->n * Ha * Wb, Kp[np] = (long long)Rt * St * K, spl[np++] = runs ? 2 : 1;
        }
    for (int g0 = 0; g0 < np; g0 += 4) { /* a launch's four phases: its tile a split product's where one splits */
        int gbn = bn;
        for (int i = g0; i < np && i < g0 + 4; i++) gbn = spl[i] > 1 ? 128 : gbn;
        for (int i = g0; i < np && i < g0 + 4; i++) sum += i2c_boxes_sp(M[i], sh->c, Kp[i], gbn, 0, spl[i]);
    }
    return sum;
}

/* The forward's (M = n p q, N = k, K = r s c; c in 64s) and the weight grad's (M = r s c,
 * N = k, K = n p q) and, with k in 64s, the input grad's: at stride 1 on a square filter
 * one product (M = n h w, N = c, K = r s k), strided one a phase (i2c_phases). */
static unsigned long long i2c_want(const k_conv_shape *sh, int bn)
{
    const long long npq = (long long)sh->n * sh->p * sh->q, rsc = (long long)sh->r * sh->s * sh->c;
    unsigned long long f = sh->c % 64 ? 0 : i2c_boxes(npq, sh->k, rsc, bn, 0) + i2c_boxes(rsc, sh->k, npq, bn, 1);
    if (sh->k % 64) return f;
    if (sh->stride > 1) return f + i2c_phases(sh, bn);
    if (sh->r != sh->s || (sh->r == 1 && sh->pad == 0)) return f;
    return f + i2c_boxes((long long)sh->n * sh->h * sh->w, sh->c, (long long)sh->r * sh->s * sh->k, bn, 0);
}
#endif

/* d: n c h w k r s stride pad; tma: the path (1 wt_gemm's TMA, 0 wg_gemm); nhwc: x 16-bit
 * channels last with the weight block (the device graph's --amp), else fp32 NCHW; bn:
 * wt_gemm's tile N (256: k_cuda_tma_set_fill(1)); want: TMA boxes expected (-1: the
 * im2col product's, i2c_boxes). */
static void i2c_case(int t, const int *d, int tma, int nhwc, int bn, long long want)
{
    k_conv_shape sh = {.n = d[0], .c = d[1], .h = d[2], .w = d[3], .k = d[4], .r = d[5], .s = d[6], .stride = d[7],
                       .pad = d[8]};
    k_conv_shape_init(&sh);
    size_t nx = (size_t)sh.n * sh.c * sh.h * sh.w, nw = (size_t)sh.k * sh.c * sh.r * sh.s;
    size_t ny = (size_t)sh.n * sh.k * sh.p * sh.q;
    float *hx = g_rand(nx, 41), *hw = g_rand(nw, 42), *hb = g_rand(sh.k, 43), *hdy = g_rand(ny, 44);
    float *w = g_up(hw, nw * 4), *b = g_up(hb, (size_t)sh.k * 4), *dy = g_up(hdy, ny * 4);
    float *out[3] = {g_dev(ny * 4), g_dev(nx * 4), g_dev(nw * 4)}; /* y dx dw */
    size_t n[3] = {ny, nx, nw};
    int mm = t;
    void *x;
    uint16_t *blk = NULL;
    if (nhwc) { /* the values as [n, h, w, c] 16-bit */
        uint16_t *h16 = malloc(nx * 2);
        for (size_t i = 0; i < nx; i++) h16[i] = g_to16(t, hx[i]);
        x = g_up(h16, nx * 2);
        free(h16);
        blk = g_dev(k_cuda_conv2d_w16_elems(t, &sh) * 2);
        g_need(k_cuda_conv2d_w16_prep(t, &sh, w, blk, NULL) == 0, "prep");
        mm |= K_CUDA_MM_XNHWC | K_CUDA_MM_YNHWC | K_CUDA_MM_X16 | K_CUDA_MM_W16P;
    } else {
        x = g_up(hx, nx * 4);
    }
    void *ws = g_dev(k_cuda_conv2d_workspace_mm(mm, &sh) + 16);
    char why[300];
    setenv("DDPRT_WGMMA", "1", 1);
    setenv("DDPRT_TMA", tma ? "1" : "0", 1);
    CHECKF(k_cuda_wgmma_setup(why, sizeof why) == 1 && k_cuda_tma_on() == tma, "%s", why);
    int fill = k_cuda_tma_set_fill(bn == 256 ? 1 : INT_MAX);
    float *o[2][3];
    unsigned long long got[2];
    for (int on = 0; on < 2; on++) { /* the geometry loaders first: the reference */
        int was = k_cuda_conv2d_set_im2col(on);
        unsigned long long t0 = g_tma_count();
        g_need(k_cuda_conv2d_fwd_mm(mm, &sh, x, w, blk, b, out[0], ws, NULL) == 0 &&
                   k_cuda_conv2d_bwd_mm(mm, &sh, x, w, blk, dy, out[1], out[2], NULL, ws, NULL) == 0 &&
                   port_dev_sync("conv im2col") == 0,
               "conv");
        got[on] = g_tma_count() - t0;
        for (int i = 0; i < 3; i++) o[on][i] = g_result(out[i], n[i]);
        k_cuda_conv2d_set_im2col(was);
    }
    static const char *const nm[] = {"y", "dx", "dw"};
    for (int i = 0; i < 3; i++) {
        size_t bad = g_ndiff_tc(o[1][i], o[0][i], n[i]); /* (the geometry's 64 tiles are mma.sync's) */
        CHECKF(bad == 0, "%s n=%d c=%d %dx%d k=%d %dx%d st=%d pad=%d (x %s, tma %d, bn %d): %s differs from the "
               "geometry path's in %zu of %zu", g_tn(t), sh.n, sh.c, sh.h, sh.w, sh.k, sh.r, sh.s, sh.stride, sh.pad,
               nhwc ? "NHWC 16-bit" : "NCHW fp32", tma, bn, nm[i], bad, n[i]);
        free(o[0][i]), free(o[1][i]);
    }
#if DDPRT_SIMT
    unsigned long long w1 = want < 0 ? i2c_want(&sh, bn) : (unsigned long long)want;
    CHECKF(got[0] == 0 && got[1] == w1, "%s n=%d c=%d k=%d %dx%d st=%d pad=%d: %llu TMA copies (im2col off), %llu on, "
           "expected 0 and %llu", g_tn(t), sh.n, sh.c, sh.k, sh.r, sh.s, sh.stride, sh.pad, got[0], got[1], w1);
#else
    (void)got, (void)want;
#endif
    k_cuda_tma_set_fill(fill);
    unsetenv("DDPRT_TMA");
    g_wgmma_off();
    for (int i = 0; i < 3; i++) port_dev_free(out[i]);
    port_dev_free(x), port_dev_free(w), port_dev_free(b), port_dev_free(dy), port_dev_free(ws);
    if (blk) port_dev_free(blk);
    free(hx), free(hw), free(hb), free(hdy);
}

/* 3x3 stride 1 pad 1: 324 output pixels (three tiles, the last mostly past the batch),
 * k = 128 (the geometry's 128 tiles, wg_gemm), split over k in three; dx alike (c = 64:
 * the geometry's 64 tiles, nine chunks); dw's 576 = 4.5 x 128 rows (the last tile's
 * second box re-reads a valid tap), split over the pixels in two (192 + 132: the second
 * chunk starts inside image 2 at p = q = 3, its last stage 4 pixels, the rest zero fill). */
TEST(gpu_tc_conv_im2col_3x3_bitwise)
{
    if (!g_sm90()) return;
    static const int d[9] = {4, 64, 9, 9, 128, 3, 3, 1, 1};
    i2c_case(K_CUDA_MM_BF16, d, 1, 1, 128, -1);
    i2c_case(K_CUDA_MM_F16, d, 1, 1, 128, -1);
    i2c_case(K_CUDA_MM_BF16, d, 1, 0, 128, -1); /* fp32 NCHW x: the call's own NHWC copy */
}

/* 3x3 stride 2 pad 1 (72 pixels, k = 64: the geometry's 64 tiles on mma.sync's kernel,
 * split over k; dw unsplit, a stage's walk leaving the last image) and ResNet's 1x1
 * stride-2 downsample (50 pixels: dw one stage; unsplit; 128 x 128 and 128 x 256 tiles),
 * c = 128: two 64-channel chunks a tap. dx by output phase (odd 11 x 11: phases of 6 and
 * 5 rows, upper corners -1; the taps 1, 2, 2, 4, the geometry's four chunks of three taps
 * a phase's runs of 1 or 2 taps; the downsample's three tapless phases written zero). */
TEST(gpu_tc_conv_im2col_strided_bitwise)
{
    if (!g_sm90()) return;
    static const int s2[9] = {2, 64, 11, 11, 64, 3, 3, 2, 1}, ds[9] = {2, 128, 10, 10, 128, 1, 1, 2, 0};
    i2c_case(K_CUDA_MM_BF16, s2, 1, 1, 128, -1);
    i2c_case(K_CUDA_MM_F16, s2, 1, 1, 128, -1);
    i2c_case(K_CUDA_MM_BF16, ds, 1, 1, 128, -1);
    i2c_case(K_CUDA_MM_F16, ds, 1, 1, 256, -1);
}

/* The strided input grad's phases: 3x3 stride 2 even (8 x 8, k = 128: a tap two stages, the
 * geometry's nine chunks one tap each, so the 4-tap phase splits in four), fp32 NCHW x
 * (the call's own copies: the phases' weights copied from wh); 3x3 stride 3 pad 1 (one
 * tap a phase, lower corners +1 where dh > Rt - 1, 3 x 2 and 2 x 2 phase grids); 5x5
 * stride 2 pad 2, whose geometry chunks (three stages) cut the phases' taps unevenly: the
 * geometry path for all of dx (no phase boxes), the same bits. */
TEST(gpu_tc_conv_im2col_strided_dx_phases)
{
    if (!g_sm90()) return;
    static const int e2[9] = {2, 64, 8, 8, 128, 3, 3, 2, 1}, s3[9] = {1, 64, 8, 8, 64, 3, 3, 3, 1},
                     f5[9] = {1, 64, 7, 7, 64, 5, 5, 2, 2};
    i2c_case(K_CUDA_MM_BF16, e2, 1, 0, 128, -1);
    i2c_case(K_CUDA_MM_F16, s3, 1, 1, 128, -1);
    i2c_case(K_CUDA_MM_BF16, s3, 1, 1, 256, -1);
    i2c_case(K_CUDA_MM_F16, f5, 1, 1, 128, -1);
#if DDPRT_SIMT
    k_conv_shape sh = {.n = 1, .c = 64, .h = 7, .w = 7, .k = 64, .r = 5, .s = 5, .stride = 2, .pad = 2};
    k_conv_shape_init(&sh);
    CHECKF(i2c_phases(&sh, 128) == 0, "the 5x5 stride-2 case is meant to fall back (its phases' runs uneven)");
#endif
}

/* The tap phases' products go four a launch (conv_phase_gemm: the persistent tile loop
 * over their tile spaces one after another, a map, store and split per phase): as many
 * launches as that, the same bits as the geometry path, the phases' boxes. */
static void i2c_grouped(int t, const int *d, int bn, unsigned long long want)
{
    unsigned long long g0 = k_cuda_conv2d_phase_groups();
    i2c_case(t, d, 1, 1, bn, -1);
    unsigned long long got = k_cuda_conv2d_phase_groups() - g0;
    CHECKF(got == want, "%s n=%d c=%d %dx%d k=%d %dx%d st=%d pad=%d (bn %d): %llu grouped phase products, expected %llu",
           g_tn(t), d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], bn, got, want);
}
/* ResNet-18's strided convs at a small batch: 3x3 stride 2 pad 1 (8 x 8, k = 64: the 1-
 * and 2-tap phases unsplit, two split ones, so one launch mixes stores into dx and
 * partials, then one finish), on a block a tile (128 x 128) and on one block for all
 * tiles (k_cuda_tma_set_fill(1): the walk crosses every phase's tiles); the 1x1 stride-2
 * downsample (one tap phase, three zero); 3x3 stride 3 pad 1 (nine 1-tap phases, lower
 * corners +1: 4 + 4 + 1 a launch). */
TEST(gpu_tc_conv_im2col_strided_dx_grouped)
{
    if (!g_sm90()) return;
    static const int s2[9] = {2, 64, 8, 8, 64, 3, 3, 2, 1}, ds[9] = {2, 128, 10, 10, 128, 1, 1, 2, 0},
                     s3[9] = {1, 64, 8, 8, 64, 3, 3, 3, 1};
    i2c_grouped(K_CUDA_MM_BF16, s2, 128, 1);
    i2c_grouped(K_CUDA_MM_F16, s2, 256, 1);
    i2c_grouped(K_CUDA_MM_BF16, ds, 256, 1);
    i2c_grouped(K_CUDA_MM_F16, s3, 128, 3);
    i2c_grouped(K_CUDA_MM_BF16, s3, 256, 3);
}

/* Products that must fall back to the geometry loaders: c = 48 (not in 64s: the forward;
 * its dx, k = 128, still on im2col), c = k = 48 (both), and TMA off (wg_gemm): no TMA
 * copies for them, the same bits. */
TEST(gpu_tc_conv_im2col_falls_back)
{
    if (!g_sm90()) return;
    static const int c48[9] = {2, 48, 9, 9, 128, 3, 3, 1, 1}, k48[9] = {2, 48, 9, 9, 48, 3, 3, 1, 1},
                     d[9] = {2, 64, 9, 9, 128, 3, 3, 1, 1};
    i2c_case(K_CUDA_MM_BF16, c48, 1, 1, 128, -1);
    i2c_case(K_CUDA_MM_BF16, k48, 1, 1, 128, 0);
    i2c_case(K_CUDA_MM_BF16, d, 0, 1, 128, 0);
}

/* ---- the device graph: ResNet-18's basic blocks (3x3 stride 1, 3x3 stride 2 and the
 * 1x1 stride-2 downsample, c = 64 and 128) trained with --amp bf16, 16-bit channels-last
 * activations and the weights' blocks, as the trainer sets them: the same losses bit for
 * bit with the im2col convs on and off, and TMA copies only with them on. */
static const char basic_net[] = "[conv2d] name=conv1 filters=64 size=3 pad=1 bias=0 init=kaiming\n"
                                "[batchnorm] name=bn1\n[relu]\n"
                                "[basic_block] name=layer1.0 filters=64 stride=1\n"
                                "[basic_block] name=layer2.0 filters=128 stride=2\n"
                                "[avgpool]\n[flatten]\n[linear] name=fc out=classes\n";


/* Three steps on the device; the losses in l, TMA copies in *tma (executor). */
static void basic_train(const char *path, int on, double *l, unsigned long long *tma)
{
    int was = k_cuda_conv2d_set_im2col(on), nhwc, wg;
    unsigned long long t0 = g_tma_count();
    g_need(gm_train_amp16(path, l, &nhwc, &wg) == 0, "train");
    *tma = g_tma_count() - t0;
    k_cuda_conv2d_set_im2col(was);
}

TEST(gpu_tc_conv_im2col_basic_blocks_train_bitwise)
{
    if (!g_sm90()) return;
    static char path[600];
    const char *dir = t_tmpdir("gpui2c");
    t_write_file(dir, "basic.cfg", basic_net, sizeof basic_net - 1, 0);
    snprintf(path, sizeof path, "%s/basic.cfg", dir);
    setenv("DDPRT_WGMMA", "1", 1);
    setenv("DDPRT_TMA", "1", 1);
    double on[3], off[3];
    unsigned long long ton, toff;
    basic_train(path, 1, on, &ton);
    basic_train(path, 0, off, &toff);
    unsetenv("DDPRT_TMA");
    g_wgmma_off();
    /* the same bits on the executor; on a GPU, where the 64-channel convs' geometry path
     * (mma.sync) may round its k16 sums otherwise than wgmma, within 2^-12 */
    for (int i = 0; i < 3; i++)
        CHECKF((G_SIMT ? memcmp(&on[i], &off[i], sizeof on[i]) == 0 : fabs(on[i] - off[i]) <= 0x1p-12 * fabs(off[i])) &&
                   isfinite(on[i]),
               "step %d: loss %.17g with the im2col convs, %.17g without", i, on[i], off[i]);
#if DDPRT_SIMT
    CHECKF(ton > 0 && toff == 0, "TMA copies: %llu with the im2col convs, %llu without", ton, toff);
#else
    (void)ton, (void)toff;
#endif
}

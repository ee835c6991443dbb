// The start-up probes of the sm_90a paths that are not plain GEMMs (k_cuda.h,
// k_cuda_path_probes): the wgmma attention forward (fw_fwd) against fa_fwd, 1x1 convs as
// plain products (wt_gemm / wg_gemm on the arrays) against the geometry loaders, and the
// TF32 products on wgmma (wgtf_gemm) against mma.sync's tf_gemm.
// Each runs the same inputs both ways on the device. The two differ only in how the
// tensor cores group the fp32 sums (bitwise equal on the executor), well inside the
// bounds here; a wrong layout, swizzle, fragment or barrier phase differs by the values
// themselves. A path that disagrees is turned off alone (the GEMMs stay on wgmma); a probe
// that does not finish ends the job (k_cuda_wgmma_setup), as the GEMM probes do.
#include "kernels/cuda/k_cuda.h"
#include "kernels/cuda/k_cuda_probe.h"
#include "ports/cuda/port_cuda.h"
#include "rt/fdiff.h"
#include "rt/half.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DDPRT_SIMT
#define PROBE_WAIT_S 900
#else
#define PROBE_WAIT_S 30
#endif

namespace {
// Deterministic values in [-2, 2) on a 1/32 grid (exact in bf16).
float probe_val(size_t i, unsigned salt) { return (float)((int)((i * 2654435761u + salt) >> 7 & 127) - 64) / 32.0f; }

// max |a - b| over max |b|, and whether it is within rel
bool close(const float *a, const float *b, size_t n, double rel, double *err)
{
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs((double)a[i] - b[i])), m = fmax(m, fabs((double)b[i]));
    *err = m > 0 ? e / m : e;
    return *err <= rel; // (NaN fails)
}

int sync_back(void *h, const void *d, size_t bytes, const char *what)
{
    return port_dev_sync_within(PROBE_WAIT_S, what) || port_memcpy_d2h(h, d, bytes, NULL, what) ||
           port_dev_sync_within(PROBE_WAIT_S, what);
}
} // namespace

// Causal attention, b 1, t 130 (a partial, masked last tile), 2 heads of 64 and of 128,
// bf16 qkv by cp.async, forward and backward (dO rounded into the workspace). y within
// 2^-6 of the largest |y| (a P rounded the other way moves y by one bf16 step of one
// term), lse within 2^-16 (1 + |lse|), dqkv within 2^-5 of its largest (dS rounds too).
int k_cuda_attention_probe(char *why, size_t len)
{
    enum { T = 130, H = 2, HDMAX = 128 };
    const size_t nq = (size_t)T * 3 * H * HDMAX, ny = (size_t)T * H * HDMAX, nl = (size_t)H * T;
    const size_t no = ny + nl + nq, wsb = k_cuda_attention_workspace(1, T, H, HDMAX); // y, lse, dqkv
    uint16_t *q = (uint16_t *)malloc(nq * 2);
    float *hy = (float *)malloc(sizeof(float) * (2 * no + ny));
    void *d = NULL;
    int rc = -1, was = k_cuda_attention_set_wgmma(1);
    if (!q || !hy || port_dev_malloc(&d, nq * 2 + sizeof(float) * (no + ny) + wsb, "attention probe")) {
        snprintf(why, len, "the attention probe could not start (%s)", port_cuda_errmsg());
        goto out;
    }
    for (int hd = 64; hd <= HDMAX; hd += 64) {
        const size_t n3 = (size_t)T * 3 * H * hd, n1 = (size_t)T * H * hd;
        float *y = (float *)(void *)((char *)d + nq * 2), *lse = y + ny, *dq = lse + nl, *dy = dq + nq;
        float *hdy = hy + 2 * no;
        for (size_t i = 0; i < n3; i++) q[i] = rt_f32_to_bf16(probe_val(i, 17u * hd));
        for (size_t i = 0; i < n1; i++) hdy[i] = probe_val(i, 5u * hd) / 4.0f;
        if (port_memcpy_h2d(d, q, n3 * 2, NULL, "attention probe") ||
            port_memcpy_h2d(dy, hdy, sizeof(float) * n1, NULL, "attention probe")) {
            snprintf(why, len, "the attention probe could not start (%s)", port_cuda_errmsg());
            goto out;
        }
        const int mm = K_CUDA_MM_BF16 | K_CUDA_MM_X16;
        for (int pass = 0; pass < 2; pass++) { // mma.sync's kernels, then wgmma's
            k_cuda_attention_set_wgmma(pass);
            float *o = hy + pass * no;
            if (k_cuda_attention_fwd_mm(mm, 1, T, H, hd, (const float *)d, y, lse, NULL) ||
                k_cuda_attention_bwd_mm(mm, 1, T, H, hd, (const float *)d, y, lse, dy, dq, dy + ny, NULL) ||
                sync_back(o, y, sizeof(float) * n1, "attention probe") ||
                sync_back(o + ny, lse, sizeof(float) * nl, "attention probe") ||
                sync_back(o + ny + nl, dq, sizeof(float) * n3, "attention probe")) {
                snprintf(why, len, "the attention probe failed on %s, hd %d (%s)", pass ? "wgmma" : "mma.sync", hd,
                         port_cuda_errmsg());
                goto out;
            }
        }
        double ey, eg, el = 0;
        const float *l0 = hy + ny, *l1 = hy + no + ny;
        for (size_t i = 0; i < nl; i++) el = fmax(el, fabs((double)l1[i] - l0[i]) / (1 + fabs((double)l0[i])));
        bool yok = close(hy + no, hy, n1, 0x1p-6, &ey), gok = close(hy + no + ny + nl, hy + ny + nl, n3, 0x1p-5, &eg);
        if (!yok || !gok || !(el <= 0x1p-16)) { // where, said in full (and dumped: DDPRT_PROBE_DUMP)
            char f[48];
            snprintf(f, sizeof f, "attention-probe-hd%d-y", hd);
            rt_fdiff_report(f, hy + no, hy, T, (size_t)H * hd, 0x1p-6, NULL, 0);
            snprintf(f, sizeof f, "attention-probe-hd%d-dqkv", hd);
            rt_fdiff_report(f, hy + no + ny + nl, hy + ny + nl, T, (size_t)3 * H * hd, 0x1p-5, NULL, 0);
            snprintf(why, len, "the wgmma attention (hd %d) differs from mma.sync's: y by %.3g of the largest, lse by "
                     "%.3g, dqkv by %.3g", hd, ey, el, eg);
            goto out;
        }
    }
    snprintf(why, len, "the probe agrees with mma.sync (hd 64, 128; forward and backward)");
    rc = 1;
out:
    k_cuda_attention_set_wgmma(rc == 1 ? was : 0);
    if (d) port_dev_free(d);
    free(q);
    free(hy);
    return rc;
}

// One conv, bf16 products on the call's own NHWC copies, with a path's switch off (the
// geometry loaders) then on: y, dx, dw, db within 2^-12 of their largest. 1 when they
// agree, else -1 with why (the path called `what`).
static int conv_probe(k_conv_shape sh, int (*set)(int), const char *what, char *why, size_t len)
{
    k_conv_shape_init(&sh);
    const size_t nx = (size_t)sh.n * sh.c * sh.h * sh.w, nw = (size_t)sh.k * sh.c * sh.r * sh.s;
    const size_t ny = (size_t)sh.n * sh.k * sh.p * sh.q, nall = 2 * nx + 2 * nw + 2 * ny + 2 * (size_t)sh.k;
    const size_t wsb = k_cuda_conv2d_workspace_mm(K_CUDA_MM_BF16, &sh);
    float *h = (float *)malloc(sizeof(float) * 3 * nall);
    void *d = NULL;
    int rc = -1;
    char shp[64];
    snprintf(shp, sizeof shp, "%dx%d/%d conv, %d -> %d channels", sh.r, sh.s, sh.stride, sh.c, sh.k);
    if (!h || port_dev_malloc(&d, sizeof(float) * nall + wsb + 16, "conv probe")) {
        snprintf(why, len, "the %s probe could not start (%s)", what, port_cuda_errmsg());
        goto out;
    }
    {
        // inputs x, w, b, dy; outputs y, dx, dw, db (the layout of h and d alike)
        float *x = (float *)d, *w = x + nx, *b = w + nw, *dy = b + sh.k, *y = dy + ny, *dx = y + ny, *dw = dx + nx;
        float *db = dw + nw;
        void *ws = (void *)(((uintptr_t)(db + sh.k) + 15) & ~(uintptr_t)15);
        const size_t nin = nx + nw + sh.k + ny, nout = nall - nin;
        for (size_t i = 0; i < nin; i++) h[i] = probe_val(i, 91);
        if (port_memcpy_h2d(d, h, sizeof(float) * nin, NULL, "conv probe")) {
            snprintf(why, len, "the %s probe could not start (%s)", what, port_cuda_errmsg());
            goto out;
        }
        for (int pass = 0; pass < 2; pass++) { // the geometry loaders, then the path
            set(pass);
            if (k_cuda_conv2d_fwd_mm(K_CUDA_MM_BF16, &sh, x, w, NULL, b, y, ws, NULL) ||
                k_cuda_conv2d_bwd_mm(K_CUDA_MM_BF16, &sh, x, w, NULL, dy, dx, dw, db, ws, NULL) ||
                sync_back(h + nall * (1 + pass), y, sizeof(float) * nout, "conv probe")) {
                snprintf(why, len, "the %s probe failed on the %s (%s)", what, pass ? what : "geometry path",
                         port_cuda_errmsg());
                goto out;
            }
        }
        const float *r0 = h + nall, *r1 = h + 2 * nall;
        const size_t off[4] = {0, ny, ny + nx, ny + nx + nw}, n[4] = {ny, nx, nw, (size_t)sh.k};
        static const char *name[4] = {"y", "dx", "dw", "db"};
        // each as a matrix (rows x columns) for rt_fdiff_report: y [n k][p q], dx [n c][h w], dw [k][c r s], db
        const size_t rows[4] = {(size_t)sh.n * sh.k, (size_t)sh.n * sh.c, (size_t)sh.k, 1};
        for (int i = 0; i < 4; i++) {
            double e;
            if (!close(r1 + off[i], r0 + off[i], n[i], 0x1p-12, &e)) {
                char f[64];
                int m = snprintf(f, sizeof f, "conv-probe-%dx%d-s%d-", sh.r, sh.s, sh.stride);
                for (const char *c = what; *c && m < 50; c++) f[m++] = *c == ' ' ? '-' : *c;
                snprintf(f + m, sizeof f - m, "-%s", name[i]);
                rt_fdiff_report(f, r1 + off[i], r0 + off[i], rows[i], n[i] / rows[i], 0x1p-12, NULL, 0);
                snprintf(why, len, "the %s differs from the geometry path on a %s: %s by %.3g of the largest", what,
                         shp, name[i], e);
                goto out;
            }
        }
        rc = 1;
    }
out:
    if (d) port_dev_free(d);
    free(h);
    return rc;
}

// A 1x1 conv, n 2, 128 -> 136 channels, 9 x 9 (162 rows: partial tiles; TMA where on).
int k_cuda_conv1x1_probe(char *why, size_t len)
{
    k_conv_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.n = 2, sh.c = 128, sh.h = 9, sh.w = 9, sh.k = 136, sh.r = 1, sh.s = 1, sh.stride = 1, sh.pad = 0;
    int was = k_cuda_conv2d_set_1x1(1);
    int rc = conv_probe(sh, k_cuda_conv2d_set_1x1, "1x1 plain path", why, len);
    if (rc == 1) snprintf(why, len, "the probe agrees with the geometry path (y, dx, dw, db)");
    k_cuda_conv2d_set_1x1(rc == 1 ? was : 0);
    return rc;
}

// A 3x3 conv, n 2, 64 -> 128 channels, 9 x 9, stride 1, padding 1 (y, dx and dw on TMA's
// im2col where it is on: 162 pixels, partial tiles, y and dx split over k; dw's 576 rows,
// its last stage's walk past the batch), then stride 2 (y and dw; dx by output phase: 5
// and 4 rows a phase, 1 to 4 taps, split as the geometry's chunks: the four phases in one
// grouped product, the 1-tap one stored into dx, the others' partials then finished).
int k_cuda_conv_im2col_probe(char *why, size_t len)
{
    k_conv_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.n = 2, sh.c = 64, sh.h = 9, sh.w = 9, sh.k = 128, sh.r = 3, sh.s = 3, sh.stride = 1, sh.pad = 1;
    int was = k_cuda_conv2d_set_im2col(1);
    int rc = conv_probe(sh, k_cuda_conv2d_set_im2col, "im2col convs", why, len);
    if (rc == 1) sh.stride = 2, rc = conv_probe(sh, k_cuda_conv2d_set_im2col, "im2col convs", why, len);
    if (rc == 1) snprintf(why, len, "the probe agrees with the geometry path (stride 1 and 2; y, dx, dw, db)");
    k_cuda_conv2d_set_im2col(rc == 1 ? was : 0);
    return rc;
}

// ---- TF32 on wgmma (wgtf_gemm, k_cuda_tc_wgtf.cuh): its switch, read by every launch.
static int wgtf_on = 1;
extern "C" int k_cuda_tf32_set_wgmma(int on) { return __atomic_exchange_n(&wgtf_on, on ? 1 : 0, __ATOMIC_RELAXED); }
extern "C" int k_cuda_tf32_wgmma_on(void) { return __atomic_load_n(&wgtf_on, __ATOMIC_RELAXED); }

// linear at --matmul-precision high, n 260, 136 -> 130 (edge tiles in m, n and k; dW split
// over k in 2), forward and backward, on tf_gemm then wgtf_gemm: y (A k-contiguous, B =
// w k-contiguous), dx (B = w n-contiguous: stored transposed), dw (both M/N-contiguous).
// The same tf32 operands, so they differ only in how the two units round inside their
// fp32 sums (bitwise equal on the executor): within 2^-12 of the largest value here; a
// wrong layout, swizzle or rounding differs by the values themselves. The inputs are
// tf32 values already (rounded here as k_tf32 rounds): the forward's TMA path (two fp32
// arrays, where TMA is on) hands wgmma the fp32 bits, which it truncates, where tf_gemm
// rounds; on tf32-exact values both are the values themselves.
int k_cuda_tf32_wgmma_probe(char *why, size_t len)
{
    enum { NB = 260, IN = 136, OUT = 130 };
    const size_t nx = (size_t)NB * IN, nw = (size_t)IN * OUT, ny = (size_t)NB * OUT, nb = OUT;
    const size_t nin = nx + nw + nb + ny, nout = ny + nx + nw + nb, nall = nin + nout;
    const size_t wsb = k_cuda_linear_workspace_mm(K_CUDA_MM_TF32, NB, IN, OUT);
    float *h = (float *)malloc(sizeof(float) * (nin + 2 * nout));
    void *d = NULL;
    int rc = -1, was = k_cuda_tf32_set_wgmma(1);
    if (!h || port_dev_malloc(&d, sizeof(float) * nall + wsb + 16, "tf32 wgmma probe")) {
        snprintf(why, len, "the tf32 wgmma probe could not start (%s)", port_cuda_errmsg());
        goto out;
    }
    {
        // inputs x, w, b, dy; outputs y, dx, dw, db (h: the inputs, then each pass's outputs)
        float *x = (float *)d, *w = x + nx, *b = w + nw, *dy = b + nb, *y = dy + ny, *dx = y + ny, *dw = dx + nx;
        float *db = dw + nw;
        void *ws = (void *)(((uintptr_t)(db + nb) + 15) & ~(uintptr_t)15);
        for (size_t i = 0; i < nin; i++) {
            float v = probe_val(i, 23) * (1.0f + 0x1p-12f * (float)(i % 7));
            uint32_t u;
            memcpy(&u, &v, 4);
            u = (u + 0x1000u) & 0xffffe000u; // k_tf32's rounding (finite values)
            memcpy(&h[i], &u, 4);
        }
        if (port_memcpy_h2d(d, h, sizeof(float) * nin, NULL, "tf32 wgmma probe")) {
            snprintf(why, len, "the tf32 wgmma probe could not start (%s)", port_cuda_errmsg());
            goto out;
        }
        for (int pass = 0; pass < 2; pass++) { // tf_gemm, then wgtf_gemm
            k_cuda_tf32_set_wgmma(pass);
            if (k_cuda_linear_fwd_mm(K_CUDA_MM_TF32, NB, IN, OUT, x, w, NULL, b, y, ws, NULL) ||
                k_cuda_linear_bwd_mm(K_CUDA_MM_TF32, NB, IN, OUT, x, w, NULL, dy, dx, dw, db, ws, NULL) ||
                sync_back(h + nin + pass * nout, y, sizeof(float) * nout, "tf32 wgmma probe")) {
                snprintf(why, len, "the tf32 wgmma probe failed on %s (%s)", pass ? "wgmma" : "mma.sync",
                         port_cuda_errmsg());
                goto out;
            }
        }
        const float *r0 = h + nin, *r1 = r0 + nout;
        const size_t off[3] = {0, ny, ny + nx}, n[3] = {ny, nx, nw};
        const size_t rows[3] = {NB, NB, OUT}; // y [n][out], dx [n][in], dw [out][in]
        static const char *name[3] = {"y", "dx", "dw"}, *dump[3] = {"tf32-probe-y", "tf32-probe-dx", "tf32-probe-dw"};
        double worst = 0;
        for (int i = 0; i < 3; i++) {
            double e;
            if (!close(r1 + off[i], r0 + off[i], n[i], 0x1p-12, &e)) {
                // where they differ, as a warning (and both dumped where DDPRT_PROBE_DUMP asks)
                rt_fdiff_report(dump[i], r1 + off[i], r0 + off[i], rows[i], n[i] / rows[i], 0x1p-12, NULL, 0);
                snprintf(why, len, "tf32 on wgmma differs from mma.sync's on a linear 260 x 136 -> 130: %s by %.3g of "
                         "the largest", name[i], e);
                goto out;
            }
            worst = fmax(worst, e);
        }
        snprintf(why, len, "the probe agrees with mma.sync to %.2g of the largest value (y, dx, dw)", worst);
        rc = 1;
    }
out:
    k_cuda_tf32_set_wgmma(rc == 1 ? was : 0);
    if (d) port_dev_free(d);
    free(h);
    return rc;
}

// After the GEMM probes (k_cuda_wgmma_setup, wgmma on): each path's probe, what it said
// appended to why as far as it fits.
int k_cuda_path_probes(char *why, size_t len)
{
    static const struct {
        const char *name;
        int (*probe)(char *, size_t);
    } p[] = {{"attention", k_cuda_attention_probe},
             {"conv 1x1", k_cuda_conv1x1_probe},
             {"conv im2col", k_cuda_conv_im2col_probe},
             {"tf32", k_cuda_tf32_wgmma_probe}};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) {
        char b[200];
        if (p[i].probe(b, sizeof b) != 1 && port_cuda_timed_out()) {
            snprintf(why, len, "the %s probe did not finish within %d s (%s); rerun with DDPRT_WGMMA=0", p[i].name,
                     PROBE_WAIT_S, port_cuda_errmsg());
            return -2;
        }
        size_t n = strlen(why);
        if (n + 1 < len) snprintf(why + n, len - n, "; %s: %s", p[i].name, b);
    }
    return 1;
}

// k_cuda_tc_gemm: the tensor-core GEMM (k_cuda_tc_gemm.cuh) on 16-bit arrays, with a
// bias + ReLU epilogue; the entry the device tests and ddprt-bench-kernels time.
#include "kernels/cuda/k_cuda_tc_gemm.cuh"
#include "kernels/cuda/k_cuda_probe.h"
#include "rt/env.h"
#include "rt/fdiff.h"
#include "rt/half.h"
#include <stdio.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

namespace {
struct TcStore {
    float *c;
    const float *bias;
    int ldc, relu;
    __host__ __device__ void operator()(int, int m, int n, float v) const
    {
        v += bias ? bias[n] : 0.0f;
        c[(size_t)m * ldc + n] = relu && v < 0.0f ? 0.0f : v;
    }
};

int aligned16(const void *p, int ld) { return !((uintptr_t)p & 15) && ld % 8 == 0; }
} // namespace
static int wg_state, tma_state; // 1: on (k_cuda_wgmma_setup, k_cuda_tma_setup)

// sm_90: wg_gemm (k_cuda_tc_wgmma.cuh), the 16-bit arrays by cp.async into wgmma's layout.

int k_cuda_tc_gemm_sm90(const k_tc_gemm *g, port_stream s)
{
    if (g->m <= 0 || g->n <= 0 || g->k <= 0 || (g->type != K_CUDA_MM_BF16 && g->type != K_CUDA_MM_F16) ||
        !g->a_kfast || !g->b_kfast || !aligned16(g->a, g->lda) || !aligned16(g->b, g->ldb)) {
        port_cuda_fail("k_cuda_tc_gemm_sm90: m=%d n=%d k=%d type %d: wgmma needs bf16/f16 operands, both k-contiguous "
                       "with 16-byte aligned rows", g->m, g->n, g->k, g->type);
        return -1;
    }
    TcRawK a, b;
    a.p = g->a, a.ld = g->lda, a.vec = 1, b.p = g->b, b.ld = g->ldb, b.vec = 1;
    TcStore st = {g->c, g->bias, g->ldc, g->relu};
    if (k_cuda_tma_on()) { // wt_gemm (k_cuda_tc_tma.cuh); wg_gemm where the maps are refused
        const char *why;
        int rc = g->type == K_CUDA_MM_BF16
                     ? wt_launch<K_CUDA_MM_BF16, true, true>(g->m, g->n, g->k, g->a, g->lda, g->b, g->ldb, st,
                                                             (cudaStream_t)s, &why)
                     : wt_launch<K_CUDA_MM_F16, true, true>(g->m, g->n, g->k, g->a, g->lda, g->b, g->ldb, st,
                                                            (cudaStream_t)s, &why);
        if (!rc) return k_cuda_check_launch("k_cuda_tc_gemm_sm90", "m=%d n=%d k=%d (TMA)", g->m, g->n, g->k);
    }
    dim3 grid((unsigned)((g->n + WGG_T - 1) / WGG_T), (unsigned)((g->m + WGG_T - 1) / WGG_T));
    if (g->type == K_CUDA_MM_BF16)
        K_LAUNCH((wg_gemm<K_CUDA_MM_BF16, TcRawK, TcRawK, TcStore>), grid, 256, 0, (cudaStream_t)s)(g->m, g->n, g->k,
                                                                                                 g->k, a, b, st);
    else
        K_LAUNCH((wg_gemm<K_CUDA_MM_F16, TcRawK, TcRawK, TcStore>), grid, 256, 0, (cudaStream_t)s)(g->m, g->n, g->k,
                                                                                                g->k, a, b, st);
    return k_cuda_check_launch("k_cuda_tc_gemm_sm90", "m=%d n=%d k=%d (wgmma)", g->m, g->n, g->k);
}

int k_cuda_tc_gemm(const k_tc_gemm *g, port_stream s)
{
    char shp[128];
    snprintf(shp, sizeof shp, "%s m=%d n=%d k=%d a %s lda=%d, b %s ldb=%d", g->type == K_CUDA_MM_BF16 ? "bf16" : "f16",
             g->m, g->n, g->k, g->a_kfast ? "k-contiguous" : "m-contiguous", g->lda,
             g->b_kfast ? "k-contiguous" : "n-contiguous", g->ldb);
    if (g->m <= 0 || g->n <= 0 || g->k <= 0 || (g->type != K_CUDA_MM_BF16 && g->type != K_CUDA_MM_F16)) {
        port_cuda_fail("k_cuda_tc_gemm: %s: an empty product or a type %d that is not bf16 or f16", shp, g->type);
        return -1;
    }
    // sm_90 (k_cuda_wgmma_on): the wgmma kernel; k-contiguous aligned operands here, the
    // M/N-contiguous aligned ones reach it (M/N-major tiles) through k_cuda_gemm_mm below
    if (k_cuda_wgmma_on() && g->a_kfast && g->b_kfast && aligned16(g->a, g->lda) && aligned16(g->b, g->ldb))
        return k_cuda_tc_gemm_sm90(g, s);
    TcStore st = {g->c, g->bias, g->ldc, g->relu};
    cudaStream_t cs = (cudaStream_t)s;
    TcRawK ak, bk;
    TcRawMN am, bm;
    ak.p = am.p = g->a, ak.ld = am.ld = g->lda, ak.vec = am.vec = aligned16(g->a, g->lda);
    bk.p = bm.p = g->b, bk.ld = bm.ld = g->ldb, bk.vec = bm.vec = aligned16(g->b, g->ldb);
    const char *k = "k_cuda_tc_gemm";
    if (g->a_kfast && g->b_kfast) return k_cuda_gemm_mm(g->type, k, shp, g->m, g->n, g->k, ak, bk, st, NULL, cs);
    if (g->a_kfast) return k_cuda_gemm_mm(g->type, k, shp, g->m, g->n, g->k, ak, bm, st, NULL, cs);
    if (g->b_kfast) return k_cuda_gemm_mm(g->type, k, shp, g->m, g->n, g->k, am, bk, st, NULL, cs);
    return k_cuda_gemm_mm(g->type, k, shp, g->m, g->n, g->k, am, bm, st, NULL, cs);
}

// How long the start-up probes may take: microseconds of work on a GPU, so a probe that
// has not finished in 30 s has hung. The executor runs them on the CPU (under make tsan too).
#ifdef DDPRT_SIMT
#define K_CUDA_PROBE_WAIT_S 900
#else
#define K_CUDA_PROBE_WAIT_S 30
#endif

// A probe's disagreement said in full (rt_fdiff_report: where the elements differ, as a
// warning; both results where DDPRT_PROBE_DUMP asks): the one GPU run tells a layout bug
// from a rounding. Columns [0, cols) of rows ld apart.
static void probe_said(const char *name, const float *got, const float *want, int rows, int cols, int ld, double tol)
{
    float *g = (float *)malloc(sizeof(float) * 2 * rows * cols), *w = g + rows * cols;
    if (!g) return;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) g[r * cols + c] = got[r * ld + c], w[r * cols + c] = want[r * ld + c];
    rt_fdiff_report(name, g, w, (size_t)rows, (size_t)cols, tol, NULL, 0);
    free(g);
}

// ---- The wgmma decision (k_cuda.h). The probe: a 200 x 136 x 72 product (edge tiles in m, n
// and k) on the gathering kernels, wgmma against mma.sync: the same rounded operands, so
// they differ only by the order of the fp32 sums (under 1e-4 of the largest value here); a
// wrong layout or fragment differs by the values themselves (its B is n-contiguous: the
// register kernel's N-major tile). Then the same sizes from two M/N-contiguous bf16 arrays
// (the inputs rounded, read as [k x m] and [k x n]): wg_gemm's M/N-major tiles by cp.async
// (conv's weight gradient) against mma.sync's.

int k_cuda_wgmma_on(void) { return wg_state == 1; }

int k_cuda_wgmma_probe(char *why, size_t len)
{
    enum { PM = 200, PN = 136, PK = 72 };
    float *h = (float *)malloc(sizeof(float) * (PM * PK + PK * PN + 2 * PM * PN)), *a = h, *b = a + PM * PK;
    float *c0 = b + PK * PN, *c1 = c0 + PM * PN;
    void *d = NULL, *d16 = NULL;
    int rc = -1;
    for (int i = 0; i < PM * PK + PK * PN; i++) h[i] = (float)((i * 37 % 101) - 50) / 32.0f;
    if (port_dev_malloc(&d, sizeof(float) * (PM * PK + PK * PN + PM * PN), "wgmma probe") ||
        port_dev_malloc(&d16, sizeof(uint16_t) * (PM * PK + PK * PN), "wgmma probe") ||
        port_memcpy_h2d(d, h, sizeof(float) * (PM * PK + PK * PN), NULL, "wgmma probe") ||
        k_cuda_f32_to_bf16(PM * PK + PK * PN, (const float *)d, (uint16_t *)d16, NULL)) {
        snprintf(why, len, "the probe could not start (%s)", port_cuda_errmsg());
        goto out;
    }
    {
        float *da = (float *)d, *db = da + PM * PK, *dc = db + PK * PN;
        KgRowA la = {da, PK};
        KgRowB lb = {db, PN};
        TcRawMN am, bm; // M/N-contiguous, rows 16-byte aligned: wg_gemm by cp.async
        am.p = (const unsigned short *)d16, am.ld = PM, am.vec = 1;
        bm.p = am.p + PM * PK, bm.ld = PN, bm.vec = 1;
        TcStore st = {dc, NULL, PN, 0};
        double big = 0, diff = 0, worst = 0;
        for (int mn = 0; mn < 2; mn++) {
            for (int pass = 0; pass < 2; pass++) {
                wg_state = pass;
                int r = mn ? k_cuda_gemm_mm16(K_CUDA_MM_BF16, "wgmma probe", "200x136x72 m/n-major", PM, PN, PK, am, bm,
                                              st, NULL, NULL)
                           : k_cuda_gemm_mm16(K_CUDA_MM_BF16, "wgmma probe", "200x136x72", PM, PN, PK, la, lb, st, NULL,
                                              NULL);
                if (r || port_dev_sync_within(K_CUDA_PROBE_WAIT_S, "wgmma probe") ||
                    port_memcpy_d2h(pass ? c1 : c0, dc, sizeof(float) * PM * PN, NULL, "wgmma probe") ||
                    port_dev_sync_within(K_CUDA_PROBE_WAIT_S, "wgmma probe")) {
                    snprintf(why, len, "the probe failed on %s%s (%s)", pass ? "wgmma" : "mma.sync",
                             mn ? " (m/n-major operands)" : "", port_cuda_errmsg());
                    goto out;
                }
            }
            big = diff = 0;
            for (int i = 0; i < PM * PN; i++) {
                big = fmax(big, fabs(c0[i]));
                diff = fmax(diff, fabs((double)c0[i] - c1[i]));
            }
            if (!(diff <= 1e-4 * big)) {
                probe_said(mn ? "wgmma-probe-mn" : "wgmma-probe", c1, c0, PM, PN, PN, 1e-4);
                snprintf(why, len, "the probe's wgmma result%s differs from mma.sync's by %.3g (largest value %.3g)",
                         mn ? " on m/n-major operands" : "", diff, big);
                goto out;
            }
            worst = fmax(worst, big > 0 ? diff / big : 0.0);
        }
        snprintf(why, len, "the probe agrees with mma.sync to %.2g of the largest value (k- and m/n-major operands)",
                 worst);
        rc = 1;
    }
out:
    wg_state = 0;
    if (d) port_dev_free(d);
    if (d16) port_dev_free(d16);
    free(h);
    return rc;
}

// A probe kernel that never ended (a hang, say a register hand-off the card does not
// honour) holds the device: nothing can go on, so the job ends with this line rather than
// falling back as it does on a wrong result.
static int probe_hung(char *why, size_t len, const char *probe, const char *off)
{
    snprintf(why, len, "the %s probe did not finish within %d s (%s); rerun with %s", probe, K_CUDA_PROBE_WAIT_S,
             port_cuda_errmsg(), off);
    return -2;
}

int k_cuda_wgmma_setup(char *why, size_t len)
{
    int mode = rt_env_choice(RT_ENV_WGMMA, 0); // auto, 0, 1
    int sm90 = strstr(port_cuda_device_desc(), "(sm_90,") != NULL;
#ifdef DDPRT_SIMT
    int forced_here = mode == 2; // the executor runs wgmma when asked (make test)
#else
    int forced_here = 0;
#endif
    wg_state = 0;
    if (mode == 1) return snprintf(why, len, "DDPRT_WGMMA=0"), 0;
    if (!sm90 && !forced_here) return snprintf(why, len, "not an sm_90 GPU"), 0;
    int rc = 1;
    if (mode == 2) snprintf(why, len, "DDPRT_WGMMA=1");
    else rc = k_cuda_wgmma_probe(why, len);
    wg_state = rc == 1;
    if (rc != 1 && port_cuda_timed_out()) return probe_hung(why, len, "wgmma", "DDPRT_WGMMA=0");
    if (wg_state) { // TMA's decision, said after wgmma's
        size_t n = strlen(why);
        if (n + 8 < len) {
            snprintf(why + n, len - n, "; TMA: ");
            if (k_cuda_tma_setup(why + n + 7, len - n - 7) == -2) {
                wg_state = 0;
                return probe_hung(why, len, "TMA", "DDPRT_TMA=0");
            }
        }
        if (mode == 0 && k_cuda_path_probes(why, len) == -2) { // the attention's and 1x1 convs' own
            wg_state = tma_state = 0;
            return -2;
        }
    } else tma_state = 0;
    return rc;
}

// ---- The TMA decision (k_cuda.h). The probe: a 200 x 264 x 72 product of two bf16 arrays
// (edge tiles in m, n and k; k past one stage; n past one 256 tile) on wt_gemm's two tiles
// against wg_gemm, then the same buffers read as M/N-contiguous arrays ([72 x 200],
// [72 x 264]) on wt_gemm's M/N-major boxes against wg_gemm's, then B's first 40 columns
// alone (wt_gemm's 128 x 64 tile, m64n64k16; k-contiguous: M/N-contiguous products under
// 128 columns take mma.sync's 64 tiles): the same k16 steps in the same
// order, so the same sums; a wrong box, swizzle, descriptor or barrier phase differs by
// the values themselves.
int k_cuda_tma_on(void) { return wg_state == 1 && tma_state == 1; }

#define TMA_FILL_SMS 132 // the SMs of an H100 / H200 (SXM) until k_cuda_tma_setup reads the card's
static int tma_fill = TMA_FILL_SMS;
int k_cuda_tma_fill(void) { return tma_fill; }
int k_cuda_tma_set_fill(int tiles)
{
    int old = tma_fill;
    tma_fill = tiles > 0 ? tiles : TMA_FILL_SMS;
    return old;
}
static int tma_tile;
int k_cuda_tma_tile(void) { return tma_tile; }
int k_cuda_tma_set_tile(int bn)
{
    int old = tma_tile;
    tma_tile = bn == 64 || bn == 128 || bn == 256 ? bn : 0;
    return old;
}
int k_cuda_tma_rule_tile(int m, int n)
{
    int old = tma_tile;
    tma_tile = 0;
    int bn = wt_tile_n(m, n);
    tma_tile = old;
    return bn;
}

// Split-K on wt_gemm (the tiles' k chunks to their partials) against wg_gemm's partials:
// 128 x 136 x 1000, six chunks of 192 and one of 40 (k_cuda_gemm_splits), the same sums.
static int tma_probe_split(char *why, size_t len)
{
    enum { SM = 128, SN = 136, SK = 1000 };
    const size_t ops = sizeof(uint16_t) * (SM + SN) * SK, ws_b = k_cuda_gemm_ws_bytes(SM, SN, SK);
    uint16_t *h = (uint16_t *)malloc(ops);
    float *c = (float *)malloc(sizeof(float) * 2 * SM * SN);
    void *d = NULL;
    int rc = -1;
    for (int i = 0; i < (SM + SN) * SK; i++) h[i] = rt_f32_to_bf16((float)((i * 53 % 97) - 48) / 32.0f);
    if (port_dev_malloc(&d, ops + sizeof(float) * SM * SN + ws_b, "TMA probe") ||
        port_memcpy_h2d(d, h, ops, NULL, "TMA probe")) {
        snprintf(why, len, "the split-K probe could not start (%s)", port_cuda_errmsg());
        goto out;
    }
    {
        TcRawK a, b;
        a.p = (const unsigned short *)d, a.ld = SK, a.vec = 1;
        b.p = a.p + SM * SK, b.ld = SK, b.vec = 1;
        float *dc = (float *)(void *)((char *)d + ops);
        TcStore st = {dc, NULL, SN, 0};
        double big = 0, diff = 0;
        for (int pass = 0; pass < 2; pass++) {
            tma_state = pass;
            if (k_cuda_gemm_mm16(K_CUDA_MM_BF16, "TMA probe", "128x136x1000 split-K", SM, SN, SK, a, b, st,
                                 (char *)dc + sizeof(float) * SM * SN, NULL) ||
                port_dev_sync_within(K_CUDA_PROBE_WAIT_S, "TMA probe") ||
                port_memcpy_d2h(c + pass * SM * SN, dc, sizeof(float) * SM * SN, NULL, "TMA probe") ||
                port_dev_sync_within(K_CUDA_PROBE_WAIT_S, "TMA probe")) {
                snprintf(why, len, "the probe failed on %s split-K (%s)", pass ? "wt_gemm" : "wg_gemm",
                         port_cuda_errmsg());
                goto out;
            }
        }
        for (int i = 0; i < SM * SN; i++) {
            big = fmax(big, fabs(c[i]));
            diff = fmax(diff, fabs((double)c[i] - c[SM * SN + i]));
        }
        if (!(diff <= 1e-5 * big)) {
            probe_said("tma-probe-split", c + SM * SN, c, SM, SN, SN, 1e-5);
            snprintf(why, len, "the probe's split-K TMA result differs from wg_gemm's by %.3g (largest value %.3g)", diff,
                     big);
            goto out;
        }
        rc = 1;
    }
out:
    if (d) port_dev_free(d);
    free(h);
    free(c);
    return rc;
}

int k_cuda_tma_probe(char *why, size_t len)
{
    enum { PM = 200, PN = 264, PK = 72 };
    uint16_t *h = (uint16_t *)malloc(sizeof(uint16_t) * (PM * PK + PN * PK));
    enum { PN64 = 40, PASSES = 6 };
    float *c = (float *)malloc(sizeof(float) * PASSES * PM * PN);
    void *d = NULL;
    int rc = -1, keep = tma_state, fill = tma_fill;
    for (int i = 0; i < PM * PK + PN * PK; i++) h[i] = rt_f32_to_bf16((float)((i * 37 % 101) - 50) / 32.0f);
    if (!wg_state) {
        snprintf(why, len, "wgmma is off");
        goto out;
    }
    if (port_dev_malloc(&d, sizeof(uint16_t) * (PM * PK + PN * PK) + sizeof(float) * PM * PN, "TMA probe") ||
        port_memcpy_h2d(d, h, sizeof(uint16_t) * (PM * PK + PN * PK), NULL, "TMA probe")) {
        snprintf(why, len, "the probe could not start (%s)", port_cuda_errmsg());
        goto out;
    }
    {
        const uint16_t *da = (const uint16_t *)d, *db = da + PM * PK;
        float *dc = (float *)(void *)((char *)d + sizeof(uint16_t) * (PM * PK + PN * PK));
        k_tc_gemm g = {K_CUDA_MM_BF16, PM, PN, PK, da, db, PK, PK, 1, 1, dc, PN, 0, NULL};
        static const char *name[] = {"wg_gemm", "wt_gemm 128x128", "wt_gemm 128x256", "wg_gemm (M/N-major)",
                                     "wt_gemm (M/N-major)", "wt_gemm 128x64"};
        double big = 0, diff = 0, bigm = 0, diffm = 0;
        // wg_gemm, wt_gemm's 128 and 256 tiles; then both operands M/N-contiguous: wg_gemm, wt_gemm 128x256;
        // then n = 40 (C's first columns, ldc kept) on wt_gemm's 128 x 64 tile
        for (int pass = 0; pass < PASSES; pass++) {
            const int mn = pass == 3 || pass == 4;
            tma_state = pass != 0 && pass != 3;
            tma_fill = pass == 2 || pass == 4 ? 1 : INT_MAX;
            g.a_kfast = g.b_kfast = !mn;
            g.lda = mn ? PM : PK, g.ldb = mn ? PN : PK;
            g.n = pass >= 5 ? (int)PN64 : (int)PN;
            if (k_cuda_tc_gemm(&g, NULL) || port_dev_sync_within(K_CUDA_PROBE_WAIT_S, "TMA probe") ||
                port_memcpy_d2h(c + pass * PM * PN, dc, sizeof(float) * PM * PN, NULL, "TMA probe") ||
                port_dev_sync_within(K_CUDA_PROBE_WAIT_S, "TMA probe")) {
                snprintf(why, len, "the probe failed on %s (%s)", name[pass], port_cuda_errmsg());
                goto out;
            }
        }
        for (int i = 0; i < PM * PN; i++) {
            big = fmax(big, fabs(c[i]));
            diff = fmax(diff, fmax(fabs((double)c[i] - c[PM * PN + i]), fabs((double)c[i] - c[2 * PM * PN + i])));
            bigm = fmax(bigm, fabs(c[3 * PM * PN + i]));
            diffm = fmax(diffm, fabs((double)c[3 * PM * PN + i] - c[4 * PM * PN + i]));
            if (i % PN < PN64) diff = fmax(diff, fabs((double)c[i] - c[5 * PM * PN + i]));
        }
        if (!(diff <= 1e-5 * big) || !(diffm <= 1e-5 * bigm)) {
            static const char *file[] = {"", "tma-probe-128", "tma-probe-256", "", "tma-probe-mn", "tma-probe-64"};
            for (int pass = 1; pass < PASSES; pass++)
                if (pass != 3)
                    probe_said(file[pass], c + pass * PM * PN, c + (pass == 4 ? 3 : 0) * PM * PN, PM,
                               pass == 5 ? (int)PN64 : (int)PN, PN, 1e-5);
            snprintf(why, len, "the probe's TMA result differs from wg_gemm's by %.3g (largest value %.3g)%s",
                     diff > 1e-5 * big ? diff : diffm, diff > 1e-5 * big ? big : bigm,
                     diff > 1e-5 * big ? "" : " with M/N-contiguous operands");
            goto out;
        }
        if (tma_probe_split(why, len) != 1) goto out;
        snprintf(why, len, "the probe (the three tiles, K- and M/N-major, split-K) agrees with wg_gemm to %.2g of the "
                 "largest value", fmax(big > 0 ? diff / big : 0.0, bigm > 0 ? diffm / bigm : 0.0));
        rc = 1;
    }
out:
    tma_state = keep;
    tma_fill = fill;
    if (d) port_dev_free(d);
    free(h);
    free(c);
    return rc;
}

int k_cuda_tma_setup(char *why, size_t len)
{
    int mode = rt_env_choice(RT_ENV_TMA, 0); // auto, 0, 1
    int sm90 = strstr(port_cuda_device_desc(), "(sm_90,") != NULL;
    tma_state = 0;
    if (!wg_state) return snprintf(why, len, "off with wgmma"), 0;
    if (mode == 1) return snprintf(why, len, "DDPRT_TMA=0"), 0;
    if (mode == 2) return snprintf(why, len, "DDPRT_TMA=1"), tma_state = 1; // (the executor too)
    if (!sm90) return snprintf(why, len, "not an sm_90 GPU"), 0;
    struct cudaDeviceProp p; // wide tiles from one full wave of this card's SMs (114 on a PCIe H100)
    int dev;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&p, dev) == cudaSuccess &&
        p.multiProcessorCount > 0)
        tma_fill = p.multiProcessorCount;
    int rc = k_cuda_tma_probe(why, len);
    tma_state = rc == 1;
    return rc != 1 && port_cuda_timed_out() ? -2 : rc;
}

// k_cuda_tc_gemm: the tensor-core GEMM (k_cuda_tc_gemm.cuh) on 16-bit arrays, with a
// bias + ReLU epilogue; the entry the device tests and ddprt-bench-kernels time.
#include "kernels/cuda/k_cuda_tc_gemm.cuh"
#include "rt/env.h"
#include <stdio.h>
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

// ---- sm_90: wgmma. Two warpgroups, each 64 rows x 128 columns of a 128x128 tile
// (m64n128k16, 64 fp32 accumulators a thread); k in 32-deep slices through 3 cp.async
// stages (48 KiB). The tiles are in wgmma's K-major, no-swizzle layout: core matrices of
// 8 rows x 16 bytes (one cp.async each), the next 8 rows 128 bytes on (SBO), the next 8 k
// R * 16 bytes on (LBO).
#define WG_T WGG_T // the header's wgmma tile, layout (wgg_off) and slice (wgg_slice)
#define WG_BK TC_BK
#define WG_STAGES 3
struct WgArgs {
    int m, n, k, lda, ldb, ldc, relu;
    const unsigned short *a, *b;
    float *c;
    const float *bias;
};


__device__ __forceinline__ void wg_load(unsigned short *ta, unsigned short *tb, const WgArgs &g, int m0, int n0, int k0)
{
    for (int q = threadIdx.x; q < 2 * WG_T * 4; q += 256) { // 4 chunks of 8 k a row
        int isb = q >= WG_T * 4, qq = q - isb * WG_T * 4, r = qq >> 2, kb = qq & 3, k = k0 + kb * 8;
        int gr = (isb ? n0 : m0) + r, ld = isb ? g.ldb : g.lda;
        const unsigned short *src = isb ? g.b : g.a;
        int valid = gr < (isb ? g.n : g.m) ? max(min(8, g.k - k), 0) : 0;
        K_CP_ASYNC16((isb ? tb : ta) + wgg_off<WG_T>(r, kb), valid ? src + (size_t)gr * ld + k : src, valid * 2);
    }
}

template <int TY> __global__ void __launch_bounds__(256) wg_gemm(WgArgs g)
{
    struct alignas(128) Smem {
        unsigned short a[WG_STAGES][WG_T * WG_BK], b[WG_STAGES][WG_T * WG_BK];
    };
    __shared__ Smem sm;
    const int wg = threadIdx.x >> 7, m0 = blockIdx.y * WG_T, n0 = blockIdx.x * WG_T, kt_n = (g.k + WG_BK - 1) / WG_BK;
    float acc[64];
#pragma unroll
    for (int e = 0; e < 64; e++) acc[e] = 0.0f;
    for (int s = 0; s < WG_STAGES - 1; s++) {
        if (s < kt_n) wg_load(sm.a[s], sm.b[s], g, m0, n0, s * WG_BK);
        K_CP_ASYNC_COMMIT();
    }
    for (int kt = 0; kt < kt_n; kt++) {
        K_CP_ASYNC_WAIT(WG_STAGES - 2);
        K_FENCE_PROXY_ASYNC(); // cp.async's writes, for the async proxy wgmma reads through
        __syncthreads();
        const unsigned short *ta = sm.a[kt % WG_STAGES], *tb = sm.b[kt % WG_STAGES];
        K_WGMMA_FENCE(); // the accumulators were the threads' own since the last wait
        wgg_slice<TY>(acc, ta, tb, wg);
        K_WGMMA_COMMIT();
        int nx = kt + WG_STAGES - 1; // its stage was read by the wgmma waited for last iteration
        if (nx < kt_n) wg_load(sm.a[nx % WG_STAGES], sm.b[nx % WG_STAGES], g, m0, n0, nx * WG_BK);
        K_CP_ASYNC_COMMIT();
        K_WGMMA_WAIT(0);
    }
    K_CP_ASYNC_WAIT(0);
    wgg_store(acc, TcStore{g.c, g.bias, g.ldc, g.relu}, g.m, g.n, m0, n0, wg, 0);
}
} // namespace

int k_cuda_tc_gemm_sm90(const k_tc_gemm *g, port_stream s)
{
    if (g->m <= 0 || g->n <= 0 || g->k <= 0 || (g->type != K_CUDA_MM_BF16 && g->type != K_CUDA_MM_F16) ||
        !g->a_kfast || !g->b_kfast || !aligned16(g->a, g->lda) || !aligned16(g->b, g->ldb)) {
        port_cuda_fail("k_cuda_tc_gemm_sm90: m=%d n=%d k=%d type %d: wgmma needs bf16/f16 operands, both k-contiguous "
                       "with 16-byte aligned rows", g->m, g->n, g->k, g->type);
        return -1;
    }
    WgArgs a = {g->m, g->n, g->k, g->lda, g->ldb, g->ldc, g->relu, g->a, g->b, g->c, g->bias};
    dim3 grid((unsigned)((g->n + WG_T - 1) / WG_T), (unsigned)((g->m + WG_T - 1) / WG_T));
    if (g->type == K_CUDA_MM_BF16) K_LAUNCH(wg_gemm<K_CUDA_MM_BF16>, grid, 256, 0, (cudaStream_t)s)(a);
    else K_LAUNCH(wg_gemm<K_CUDA_MM_F16>, grid, 256, 0, (cudaStream_t)s)(a);
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
    // sm_90 (k_cuda_wgmma_on): the wgmma kernel (k-contiguous aligned operands only)
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

// ---- The wgmma decision (k_cuda.h). The probe: a 200 x 136 x 72 product (edge tiles in m, n
// and k) on the gathering kernels, wgmma against mma.sync: the same rounded operands, so
// they differ only by the order of the fp32 sums (under 1e-4 of the largest value here); a
// wrong layout or fragment differs by the values themselves.
static int wg_state; // 1: on

int k_cuda_wgmma_on(void) { return wg_state == 1; }

int k_cuda_wgmma_probe(char *why, size_t len)
{
    enum { PM = 200, PN = 136, PK = 72 };
    float *h = (float *)malloc(sizeof(float) * (PM * PK + PK * PN + 2 * PM * PN)), *a = h, *b = a + PM * PK;
    float *c0 = b + PK * PN, *c1 = c0 + PM * PN;
    void *d = NULL;
    int rc = -1;
    for (int i = 0; i < PM * PK + PK * PN; i++) h[i] = (float)((i * 37 % 101) - 50) / 32.0f;
    if (port_dev_malloc(&d, sizeof(float) * (PM * PK + PK * PN + PM * PN), "wgmma probe") ||
        port_memcpy_h2d(d, h, sizeof(float) * (PM * PK + PK * PN), NULL, "wgmma probe")) {
        snprintf(why, len, "the probe could not start (%s)", port_cuda_errmsg());
        goto out;
    }
    {
        float *da = (float *)d, *db = da + PM * PK, *dc = db + PK * PN;
        KgRowA la = {da, PK};
        KgRowB lb = {db, PN};
        TcStore st = {dc, NULL, PN, 0};
        double big = 0, diff = 0;
        for (int pass = 0; pass < 2; pass++) {
            wg_state = pass;
            if (k_cuda_gemm_mm16(K_CUDA_MM_BF16, "wgmma probe", "200x136x72", PM, PN, PK, la, lb, st, NULL, NULL) ||
                port_dev_sync("wgmma probe") || port_memcpy_d2h(pass ? c1 : c0, dc, sizeof(float) * PM * PN, NULL,
                                                                "wgmma probe") || port_dev_sync("wgmma probe")) {
                snprintf(why, len, "the probe failed on %s (%s)", pass ? "wgmma" : "mma.sync", port_cuda_errmsg());
                goto out;
            }
        }
        for (int i = 0; i < PM * PN; i++) {
            big = fmax(big, fabs(c0[i]));
            diff = fmax(diff, fabs((double)c0[i] - c1[i]));
        }
        if (!(diff <= 1e-4 * big)) {
            snprintf(why, len, "the probe's wgmma result differs from mma.sync's by %.3g (largest value %.3g)", diff,
                     big);
            goto out;
        }
        snprintf(why, len, "the probe agrees with mma.sync to %.2g of the largest value", big > 0 ? diff / big : 0.0);
        rc = 1;
    }
out:
    wg_state = 0;
    if (d) port_dev_free(d);
    free(h);
    return rc;
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
    if (mode == 2) return snprintf(why, len, "DDPRT_WGMMA=1"), wg_state = 1;
    int rc = k_cuda_wgmma_probe(why, len);
    wg_state = rc == 1;
    return rc;
}

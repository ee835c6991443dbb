// k_cuda_tc_gemm: the tensor-core GEMM (k_cuda_tc_gemm.cuh) on 16-bit arrays, with a
// bias + ReLU epilogue; the entry the device tests and ddprt-bench-kernels time.
#include "kernels/cuda/k_cuda_tc_gemm.cuh"
#include <stdio.h>

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

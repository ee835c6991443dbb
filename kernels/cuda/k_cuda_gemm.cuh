// One tiled SGEMM that conv and linear (forward and both backwards) are all written
// in: C[m][n] = sum_k A(m, k) * B(k, n). The operands are functors, so the im2col
// gather of an implicit-GEMM convolution happens while the tile is loaded into shared
// memory (no im2col buffer), and the epilogue functor writes the result in the
// layout the caller wants (adding a bias, scattering to NCHW).
//
// Tiles: 64x64 outputs per 256-thread block, 16-deep k slices in shared memory, each
// thread accumulating a 4x4 register block (rows ty + 16i, columns tx + 16j: the
// shared-memory reads are broadcasts for A and consecutive words for B).
//
// Split-K: when the output has too few tiles to fill the GPU and k is long (the
// weight gradients: k = batch * pixels), blockIdx.z takes a slice of k and writes its
// partial sums to a workspace; k_cuda_gemm_finish then adds the slices in order.
// The split count depends only on the shapes (k_cuda_gemm_splits), so results are
// deterministic and the same on every GPU.
#pragma once
#include "kernels/cuda/k_cuda_common.cuh"

#define KG_BM 64
#define KG_BN 64
#define KG_BK 16
#define KG_THREADS 256

// Loaders declare which index is contiguous in memory (k_fast) so that consecutive
// threads read consecutive addresses when the tile is loaded. The dense ones, named
// for where an element lies (row: the second index is contiguous; col: the transpose).
// In an unnamed namespace: each file that uses them instantiates its own kernels, as
// with loaders of its own (the SIMT build links each file's kernels as its own).
namespace {
struct KgRowA { // a(m, k) = a[m * ld + k]
    static constexpr bool k_fast = true;
    const float *a; int ld;
    __host__ __device__ float operator()(int m, int k) const { return a[(size_t)m * ld + k]; }
};
struct KgColA { // a(m, k) = a[k * ld + m]
    static constexpr bool k_fast = false;
    const float *a; int ld;
    __host__ __device__ float operator()(int m, int k) const { return a[(size_t)k * ld + m]; }
};
struct KgRowB { // b(k, n) = b[k * ld + n]
    static constexpr bool k_fast = false;
    const float *b; int ld;
    __host__ __device__ float operator()(int k, int n) const { return b[(size_t)k * ld + n]; }
};
struct KgColB { // b(k, n) = b[n * ld + k]
    static constexpr bool k_fast = true;
    const float *b; int ld;
    __host__ __device__ float operator()(int k, int n) const { return b[(size_t)n * ld + k]; }
};
} // namespace

template <class LA, class LB, class ST>
__global__ void __launch_bounds__(KG_THREADS)
k_cuda_gemm_kernel(int M, int N, int K, int kchunk, LA la, LB lb, ST st)
{
    __shared__ float As[KG_BK][KG_BM + 4];
    __shared__ float Bs[KG_BK][KG_BN + 4];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * KG_BM, n0 = blockIdx.x * KG_BN;
    const int kbeg = blockIdx.z * kchunk, kend = min(K, kbeg + kchunk);
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;

    for (int k0 = kbeg; k0 < kend; k0 += KG_BK) {
#pragma unroll
        for (int i = 0; i < KG_BM * KG_BK / KG_THREADS; i++) {
            int e = tid + i * KG_THREADS, mm, kk;
            if (LA::k_fast) { kk = e % KG_BK; mm = e / KG_BK; }
            else { mm = e % KG_BM; kk = e / KG_BM; }
            int gm = m0 + mm, gk = k0 + kk;
            As[kk][mm] = (gm < M && gk < kend) ? la(gm, gk) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < KG_BN * KG_BK / KG_THREADS; i++) {
            int e = tid + i * KG_THREADS, nn, kk;
            if (LB::k_fast) { kk = e % KG_BK; nn = e / KG_BK; }
            else { nn = e % KG_BN; kk = e / KG_BN; }
            int gn = n0 + nn, gk = k0 + kk;
            Bs[kk][nn] = (gn < N && gk < kend) ? lb(gk, gn) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < KG_BK; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = As[kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; j++) b[j] = Bs[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int gm = m0 + ty + 16 * i, gn = n0 + tx + 16 * j;
            if (gm < M && gn < N) st(blockIdx.z, gm, gn, acc[i][j]);
        }
}

// Split-K partials: ws[split][m][n].
struct KgPartial {
    float *ws;
    int M, N;
    __host__ __device__ void operator()(int split, int m, int n, float v) const
    {
        ws[((size_t)split * M + m) * N + n] = v;
    }
};

template <class ST>
__global__ void k_cuda_gemm_finish(int M, int N, int splits, const float *ws, ST st)
{
    size_t mn = (size_t)M * N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < mn; i += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int z = 0; z < splits; z++) s += ws[z * mn + i];
        st(0, (int)(i / N), (int)(i % N), s);
    }
}

// How many k slices: enough blocks for a large GPU (~2 waves of 132 SMs), each slice
// at least 8 tiles of k deep, at most 32 slices. Shapes only: deterministic.
static inline int k_cuda_gemm_splits(int M, int N, int K)
{
    long tiles = (long)((M + KG_BM - 1) / KG_BM) * ((N + KG_BN - 1) / KG_BN);
    long want = 264 / tiles, maxk = K / (8 * KG_BK);
    long s = want < maxk ? want : maxk;
    return s < 1 ? 1 : s > 32 ? 32 : (int)s;
}

static inline size_t k_cuda_gemm_ws_bytes(int M, int N, int K)
{
    int s = k_cuda_gemm_splits(M, N, K);
    return s > 1 ? (size_t)s * M * N * sizeof(float) : 0;
}

// Runs C = A B through st; ws must hold k_cuda_gemm_ws_bytes(M, N, K) (may be NULL
// when that is 0). Returns 0 or -1 (the launch check names `kernel` and `shapes`).
template <class LA, class LB, class ST>
static int k_cuda_gemm(const char *kernel, const char *shapes, int M, int N, int K, LA la, LB lb, ST st,
                       void *ws, cudaStream_t s)
{
    int splits = k_cuda_gemm_splits(M, N, K);
    dim3 grid((N + KG_BN - 1) / KG_BN, (M + KG_BM - 1) / KG_BM, splits);
    if (splits == 1) {
        K_LAUNCH((k_cuda_gemm_kernel<LA, LB, ST>), grid, KG_THREADS, 0, s)(M, N, K, K, la, lb, st);
        return k_cuda_check_launch(kernel, "%s", shapes);
    }
    if (!ws) {
        port_cuda_fail("%s(%s): needs %zu bytes of workspace, got none", kernel, shapes,
                       k_cuda_gemm_ws_bytes(M, N, K));
        return -1;
    }
    // Each slice a whole number of k tiles, so slices never share a tile.
    int kchunk = ((K + splits - 1) / splits + KG_BK - 1) / KG_BK * KG_BK;
    grid.z = (K + kchunk - 1) / kchunk;
    KgPartial part = {(float *)ws, M, N};
    K_LAUNCH((k_cuda_gemm_kernel<LA, LB, KgPartial>), grid, KG_THREADS, 0, s)(M, N, K, kchunk, la, lb, part);
    if (k_cuda_check_launch(kernel, "%s (split-K %u)", shapes, grid.z)) return -1;
    K_LAUNCH((k_cuda_gemm_finish<ST>), k_cuda_blocks((size_t)M * N), K_CUDA_THREADS, 0, s)(M, N, (int)grid.z,
                                                                                        (const float *)ws, st);
    return k_cuda_check_launch(kernel, "%s (split-K finish)", shapes);
}

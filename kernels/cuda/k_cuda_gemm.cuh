// One tiled SGEMM that conv and linear (forward and both backwards) are all written
// in: C[m][n] = sum_k A(m, k) * B(k, n). The operands are functors, so the im2col
// gather of an implicit-GEMM convolution happens while the tile is loaded into shared
// memory (no im2col buffer), and the epilogue functor writes the result in the
// layout the caller wants (adding a bias, scattering to NCHW).
//
// Tiles: BM x BN outputs per 256-thread block, 16-deep k slices in shared memory, each
// thread accumulating a (BM/16) x (BN/16) register block (rows ty + 16i, columns
// tx + 16j: the shared-memory reads are broadcasts for A and consecutive words for B).
// 128x128 (8x8 a thread: 4 FMAs per shared-memory read) where both sides have 128, else
// 64x64 (4x4: half that; the ResNet-20 and LeNet shapes, whose 16-64 rows would leave
// most of a 128-row tile idle). On an H200 the 64x64 kernel ran ResNet's 3x3 convolutions
// at about half cuDNN's FP32 rate.
//
// Split-K: when the output has too few tiles to fill the GPU and k is long (the
// weight gradients: k = batch * pixels), blockIdx.z takes a slice of k and writes its
// partial sums to a workspace; k_cuda_gemm_finish then adds the slices in order.
// The tile and the split count depend only on the shapes (k_cuda_gemm_tile,
// k_cuda_gemm_splits), so results are deterministic and the same on every GPU.
#pragma once
#include "kernels/cuda/k_cuda_common.cuh"

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
// The same on an activation of element type t (fp32, or 16 bits: k_act_ld, K_CUDA_MM_X16).
struct KgActRowA { // a(m, k) = a[m * ld + k]
    static constexpr bool k_fast = true;
    const void *a; int ld, t;
    __host__ __device__ float operator()(int m, int k) const { return k_act_ld(a, t, (size_t)m * ld + k); }
};
struct KgActColA { // a(m, k) = a[k * ld + m]
    static constexpr bool k_fast = false;
    const void *a; int ld, t;
    __host__ __device__ float operator()(int m, int k) const { return k_act_ld(a, t, (size_t)k * ld + m); }
};
struct KgActRowB { // b(k, n) = b[k * ld + n]
    static constexpr bool k_fast = false;
    const void *b; int ld, t;
    __host__ __device__ float operator()(int k, int n) const { return k_act_ld(b, t, (size_t)k * ld + n); }
};
} // namespace

template <int BM, int BN, class LA, class LB, class ST>
__global__ void __launch_bounds__(KG_THREADS)
k_cuda_gemm_kernel(int M, int N, int K, int kchunk, LA la, LB lb, ST st)
{
    constexpr int TM = BM / 16, TN = BN / 16;
    __shared__ float As[KG_BK][BM + 4];
    __shared__ float Bs[KG_BK][BN + 4];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int kbeg = blockIdx.z * kchunk, kend = min(K, kbeg + kchunk);
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;

    for (int k0 = kbeg; k0 < kend; k0 += KG_BK) {
#pragma unroll
        for (int i = 0; i < BM * KG_BK / KG_THREADS; i++) {
            int e = tid + i * KG_THREADS, mm, kk;
            if (LA::k_fast) { kk = e % KG_BK; mm = e / KG_BK; }
            else { mm = e % BM; kk = e / BM; }
            int gm = m0 + mm, gk = k0 + kk;
            As[kk][mm] = (gm < M && gk < kend) ? la(gm, gk) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < BN * KG_BK / KG_THREADS; i++) {
            int e = tid + i * KG_THREADS, nn, kk;
            if (LB::k_fast) { kk = e % KG_BK; nn = e / KG_BK; }
            else { nn = e % BN; kk = e / BN; }
            int gn = n0 + nn, gk = k0 + kk;
            Bs[kk][nn] = (gn < N && gk < kend) ? lb(gk, gn) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < KG_BK; kk++) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; i++) a[i] = As[kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < TN; j++) b[j] = Bs[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) {
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

// The tile's side: 128 where both M and N have 128, else 64.
static inline int k_cuda_gemm_tile(int M, int N) { return M >= 128 && N >= 128 ? 128 : 64; }

// How many k slices: enough blocks to fill a large GPU's 132 SMs (2 blocks each of the
// 128 tile, whose 8x8 accumulators take about 128 registers a thread; 4 of the 64), each
// slice at least 8 tiles of k deep, at most 128 slices (ResNet-20's weight gradients:
// 16 x 144 outputs, k = 100352). Shapes only: deterministic.
static inline int k_cuda_gemm_splits(int M, int N, int K)
{
    int t = k_cuda_gemm_tile(M, N);
    long tiles = (long)((M + t - 1) / t) * ((N + t - 1) / t);
    long want = (t == 128 ? 264 : 528) / tiles, maxk = K / (8 * KG_BK);
    long s = want < maxk ? want : maxk;
    return s < 1 ? 1 : s > 128 ? 128 : (int)s;
}

static inline size_t k_cuda_gemm_ws_bytes(int M, int N, int K)
{
    int s = k_cuda_gemm_splits(M, N, K);
    return s > 1 ? (size_t)s * M * N * sizeof(float) : 0;
}

template <int T, class LA, class LB, class ST>
static int k_cuda_gemm_t(const char *kernel, const char *shapes, int M, int N, int K, LA la, LB lb, ST st,
                         void *ws, cudaStream_t s)
{
    int splits = k_cuda_gemm_splits(M, N, K);
    dim3 grid((N + T - 1) / T, (M + T - 1) / T, splits);
    if (splits == 1) {
        K_LAUNCH((k_cuda_gemm_kernel<T, T, LA, LB, ST>), grid, KG_THREADS, 0, s)(M, N, K, K, la, lb, st);
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
    K_LAUNCH((k_cuda_gemm_kernel<T, T, LA, LB, KgPartial>), grid, KG_THREADS, 0, s)(M, N, K, kchunk, la, lb, part);
    if (k_cuda_check_launch(kernel, "%s (split-K %u)", shapes, grid.z)) return -1;
    K_LAUNCH((k_cuda_gemm_finish<ST>), k_cuda_blocks((size_t)M * N), K_CUDA_THREADS, 0, s)(M, N, (int)grid.z,
                                                                                        (const float *)ws, st);
    return k_cuda_check_launch(kernel, "%s (split-K finish)", shapes);
}

// Runs C = A B through st; ws must hold k_cuda_gemm_ws_bytes(M, N, K) (may be NULL
// when that is 0). Returns 0 or -1 (the launch check names `kernel` and `shapes`).
template <class LA, class LB, class ST>
static int k_cuda_gemm(const char *kernel, const char *shapes, int M, int N, int K, LA la, LB lb, ST st, void *ws,
                       cudaStream_t s)
{
    if (k_cuda_gemm_tile(M, N) == 128) return k_cuda_gemm_t<128>(kernel, shapes, M, N, K, la, lb, st, ws, s);
    return k_cuda_gemm_t<64>(kernel, shapes, M, N, K, la, lb, st, ws, s);
}

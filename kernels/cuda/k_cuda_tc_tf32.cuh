// The TF32 tensor-core GEMM (mma.sync m16n8k8): --matmul-precision high on the device,
// PyTorch's allow_tf32 meaning. fp32 operands rounded to tf32 (cvt.rna: 10-bit mantissa)
// as tiles load, fp32 accumulation, through the SGEMM's loader and epilogue functors
// (k_cuda_gemm.cuh). Included by k_cuda_tc_gemm.cuh, whose shapes and pipeline it shares:
// 256 threads as 2 x 4 warps, BM x BN tiles, 3 stages of 16-deep k slices (64-byte rows
// of fp32, the same XOR swizzle), fragments by ldmatrix (32-bit elements as b16 pairs:
// lane l gets row l/4, word l%4, which is m16n8k8's layout). The tiles are always
// k-contiguous in shared memory: an M/N-contiguous loader's values are stored transposed
// (ldmatrix.trans has no 32-bit form). On sm_90 (k_cuda_wgmma_on) the 128-tile products
// take wgmma's wgtf_gemm instead (k_cuda_tc_wgtf.cuh: these tiles, the same sums).
#pragma once

#define TF_BK 16

namespace {
template <int R> __device__ __forceinline__ int tf_off(int r, int k)
{
    return r * TF_BK + (((k >> 2) ^ ((r >> 1) & 3)) << 2) + (k & 3);
}

// Slice [k0, min(k0 + 16, kend)) of rows [r0, r0 + R) into a tile, as tf32 bits.
template <int R, bool IS_B, class L>
__device__ __forceinline__ void tf_load(unsigned *tile, const L &l, int rows, int r0, int kend, int k0)
{
#pragma unroll
    for (int i = 0; i < R * TF_BK / TC_THREADS; i++) {
        int e = threadIdx.x + i * TC_THREADS, r, k;
        if (L::k_fast) k = e % TF_BK, r = e / TF_BK; // consecutive threads: consecutive k
        else r = e % R, k = e / R;
        int gr = r0 + r, gk = k0 + k;
        float v = gr < rows && gk < kend ? (IS_B ? l(gk, gr) : l(gr, gk)) : 0.0f;
        tile[tf_off<R>(r, k)] = k_tf32(v);
    }
}

template <int BM, int BN, class LA, class LB, class ST>
__global__ void __launch_bounds__(TC_THREADS) tf_gemm(int M, int N, int K, int kchunk, LA la, LB lb, ST st)
{
    struct alignas(16) Smem {
        unsigned a[TC_STAGES][BM * TF_BK], b[TC_STAGES][BN * TF_BK];
    };
    __shared__ Smem sm;
    constexpr int WM = BM / 2, WN = BN / 4, MT = WM / 16, NT = WN / 8;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = warp >> 2, wn = warp & 3;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int kbeg = blockIdx.z * kchunk, kend = min(K, kbeg + kchunk), kt_n = (kend - kbeg + TF_BK - 1) / TF_BK;
    float acc[MT][NT][4];
    tc_zero(acc);
    for (int s = 0; s < TC_STAGES - 1 && s < kt_n; s++) {
        tf_load<BM, false>(sm.a[s], la, M, m0, kend, kbeg + s * TF_BK);
        tf_load<BN, true>(sm.b[s], lb, N, n0, kend, kbeg + s * TF_BK);
    }
    for (int kt = 0; kt < kt_n; kt++) {
        __syncthreads(); // slice kt stored; every warp done with the stage loaded next
        int nx = kt + TC_STAGES - 1;
        if (nx < kt_n) {
            tf_load<BM, false>(sm.a[nx % TC_STAGES], la, M, m0, kend, kbeg + nx * TF_BK);
            tf_load<BN, true>(sm.b[nx % TC_STAGES], lb, N, n0, kend, kbeg + nx * TF_BK);
        }
        const unsigned *ta = sm.a[kt % TC_STAGES], *tb = sm.b[kt % TC_STAGES];
#pragma unroll
        for (int kk = 0; kk < TF_BK; kk += 8) {
            unsigned af[MT][4], bf[NT][2];
#pragma unroll
            for (int i = 0; i < MT; i++) // (m 0-7, k 0-3), (m 8-15, k 0-3), (m 0-7, k 4-7), (m 8-15, k 4-7)
                K_LDMATRIX_X4(af[i], ta + tf_off<BM>(wm * WM + i * 16 + (lane & 15), kk + (lane >> 4) * 4));
#pragma unroll
            for (int j = 0; j < NT; j += 2) { // (n 0-7, k 0-3), (n 0-7, k 4-7), (n 8-15, k 0-3), (n 8-15, k 4-7)
                unsigned q[4];
                K_LDMATRIX_X4(q, tb + tf_off<BN>(wn * WN + j * 8 + (lane & 7) + (lane >> 4) * 8,
                                                 kk + ((lane >> 3) & 1) * 4));
                bf[j][0] = q[0], bf[j][1] = q[1], bf[j + 1][0] = q[2], bf[j + 1][1] = q[3];
            }
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < NT; j++) K_MMA_TF32(acc[i][j], af[i], bf[j]);
        }
    }
    tc_store<BM, BN>(acc, st, M, N, m0, n0, lane, wm, wn);
}
} // namespace

// The TF32 GEMM on sm_90a's wgmma (--matmul-precision high on an H100/H200:
// k_cuda_wgmma_on() and k_cuda_tf32_wgmma_on()), included by k_cuda_tc_gemm.cuh after
// k_cuda_tc_tf32.cuh, whose products it replaces at the 128 tile. wgg_gemm's shape: a
// 128x128 tile, two warpgroups of 64 rows (m64n128k8.tf32: 64 fp32 accumulators a
// thread), 2 stages, the next slice staged in registers (8 + 8 tf32 words a thread)
// while the tensor cores work on the current one, any loader functors (conv's im2col
// gathers included).
//
// Operands rounded to tf32 as tf_gemm rounds them (k_tf32: the same bits), k in 16-deep
// slices of 64-byte rows: tf_gemm's own tile layout (tf_off: chunk c of row r at
// c ^ ((r >> 1) & 3)), which is wgmma's K-major 64-byte swizzle on a 512-byte aligned
// tile. wgmma has no transposed tf32, so an M/N-contiguous loader's values are stored
// K-major too (as tf_load does). Why 16 k and not 32 (128-byte rows, the 128-byte
// swizzle): 2 stages x 2 operands x 128 x 16 fp32 are 32 KiB of static shared memory
// (32 k would be 64 KiB, past the 48 KiB static limit), and the stores are conflict-free
// as they are (wgtf_elem). Each slice is two k8 ops in ascending k from kbeg, as
// tf_gemm's two m16n8k8 per slice: each rounds c plus the 8 exact products once, so the
// sums (split-K's kchunk included) are bitwise tf_gemm's on the executor.
#pragma once

namespace {
// Element q (0 <= q < 2048) of a 128-row x 16-k slice, consecutive q on consecutive
// threads. k-contiguous loaders: row q / 16, k q % 16 (a warp: two whole 64-byte rows,
// 128 contiguous bytes, every bank once). M/N-contiguous: blocks of 32 as 8 rows x 4 k
// (a warp reads 4 runs of 8 consecutive rows: whole 32-byte sectors; its stores: r % 8
// picks the chunk's bank quad through the swizzle and the half row, k % 4 the word: 32
// banks). tf_load's row-per-thread order there would be 4-way conflicted.
template <bool KF> __device__ __forceinline__ void wgtf_elem(int q, int &r, int &k)
{
    if (KF) r = q >> 4, k = q & 15;
    else r = 8 * ((q >> 5) & 15) + (q & 7), k = 4 * (q >> 9) + ((q >> 3) & 3);
}

// Slice [k0, min(k0 + 16, kend)) of rows [r0, r0 + 128) into registers, as tf32 bits.
template <bool IS_B, class L>
__device__ __forceinline__ void wgtf_fetch(unsigned (&v)[8], const L &l, int rows, int r0, int kend, int k0)
{
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int r, k;
        wgtf_elem<L::k_fast>(threadIdx.x + 256 * i, r, k);
        int gr = r0 + r, gk = k0 + k;
        v[i] = k_tf32(gr < rows && gk < kend ? (IS_B ? l(gk, gr) : l(gr, gk)) : 0.0f);
    }
}

template <class L> __device__ __forceinline__ void wgtf_put(unsigned *tile, const unsigned (&v)[8])
{
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int r, k;
        wgtf_elem<L::k_fast>(threadIdx.x + 256 * i, r, k);
        tile[tf_off<WGG_T>(r, k)] = v[i];
    }
}

// One 16-deep slice on the warpgroup's 64 rows: k 8kk of the first row is 32 kk bytes into
// its 64-byte row (the hardware swizzles the address it forms), 8 rows 512 bytes on.
__device__ __forceinline__ void wgtf_slice(float (&acc)[64], const unsigned *ta, const unsigned *tb, int wg)
{
#pragma unroll
    for (int kk = 0; kk < TF_BK / 8; kk++) {
        unsigned long long da = k_wgmma_desc(ta + 64 * wg * TF_BK + 8 * kk, 16, 8 * TF_BK * 4, K_WGMMA_SW64);
        unsigned long long db = k_wgmma_desc(tb + 8 * kk, 16, 8 * TF_BK * 4, K_WGMMA_SW64);
        K_WGMMA_TF32_128(acc, da, db, 1);
    }
}

template <class LA, class LB, class ST>
__global__ void __launch_bounds__(256) wgtf_gemm(int M, int N, int K, int kchunk, LA la, LB lb, ST st)
{
    struct alignas(WGG_ALIGN) Smem {
        unsigned a[2][WGG_T * TF_BK], b[2][WGG_T * TF_BK];
    };
    __shared__ Smem sm;
    const int wg = threadIdx.x >> 7, m0 = blockIdx.y * WGG_T, n0 = blockIdx.x * WGG_T;
    const int kbeg = blockIdx.z * kchunk, kend = min(K, kbeg + kchunk);
    const int kt_n = kend > kbeg ? (kend - kbeg + TF_BK - 1) / TF_BK : 0;
    float acc[64];
#pragma unroll
    for (int e = 0; e < 64; e++) acc[e] = 0.0f;
    unsigned va[8], vb[8];
    if (kt_n > 0) {
        wgtf_fetch<false>(va, la, M, m0, kend, kbeg);
        wgtf_fetch<true>(vb, lb, N, n0, kend, kbeg);
    }
    for (int kt = 0; kt < kt_n; kt++) {
        // Stage kt & 1 was last read by slice kt - 2's wgmma, waited for by every
        // warpgroup before slice kt - 1's barrier.
        unsigned *ta = sm.a[kt & 1], *tb = sm.b[kt & 1];
        wgtf_put<LA>(ta, va);
        wgtf_put<LB>(tb, vb);
        K_FENCE_PROXY_ASYNC(); // the generic-proxy stores, for the async proxy wgmma reads through
        __syncthreads();
        K_WGMMA_FENCE(); // the accumulators were the threads' own since the last wait
        wgtf_slice(acc, ta, tb, wg);
        K_WGMMA_COMMIT();
        if (kt + 1 < kt_n) { // the next slice's loads overlap the tensor cores
            wgtf_fetch<false>(va, la, M, m0, kend, kbeg + (kt + 1) * TF_BK);
            wgtf_fetch<true>(vb, lb, N, n0, kend, kbeg + (kt + 1) * TF_BK);
        }
        K_WGMMA_WAIT(0);
    }
    wgg_store(acc, st, M, N, m0, n0, wg, blockIdx.z);
}
} // namespace

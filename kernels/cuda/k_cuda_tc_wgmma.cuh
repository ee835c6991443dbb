// The tensor-core GEMM on sm_90a's wgmma (H100/H200; k_cuda_wgmma_on()), included by
// k_cuda_tc_gemm.cuh. A 128x128 tile, two warpgroups of 64 rows (m64n128k16, 64 fp32
// accumulators a thread), k in 32-deep slices in wgmma's K-major 64-byte swizzle: a row's
// 32 k are its 64 bytes, 16-byte chunk c at c ^ ((row >> 1) & 3) - the mma.sync kernel's
// k-contiguous tile (tc_off), so the loaders are tc_load's. Eight threads' 16-byte stores
// then fill 128 contiguous bytes (no bank conflict; the no-swizzle layout's core matrices
// put a row's four chunks 2 KiB apart: 4-way conflicts on every store). Two kernels,
// adding the same products in the same order (wgg_slice):
//  - wgg_gemm, any loaders: 2 stages; each thread holds the next slice as 8 + 8 packed
//    pairs in registers while the tensor cores work on the current one; values rounded
//    as the mma.sync kernel rounds them (a 16-bit array's taken as they are); an
//    M/N-contiguous operand's pairs are two rows at one k, stored into the M/N-major tile;
//  - wg_gemm, two 16-bit arrays with 16-byte aligned rows (plain, or placed by a
//    geometry: conv's NHWC copies): 3 cp.async stages. An M/N-contiguous one (conv's
//    weight gradient, linear's dX / dW) goes into wgmma's M/N-major layout (wg_off_mn:
//    the 128-byte swizzle, a pattern 64 rows x 8 k; imm-trans 1): tc_load's M/N tiles
//    hold 32 k-rows of 128 rows, which no canonical M/N-major layout reads as they are.
#pragma once
#include <type_traits>

namespace {
#define WGG_T 128
// The tiles' alignment: the 64-byte swizzle's pattern (8 rows of 64 bytes), which the
// hardware applies to shared addresses; M/N-major tiles: the 128-byte swizzle's (1 KiB).
#define WGG_ALIGN 512
#define WG_ALIGN_MN 1024

// Pair q of the slice (0 <= q < 2048): k-contiguous operands, 128 rows x 16 pairs of k
// (row r, k 2kp and 2kp + 1); M/N-contiguous ones, 32 k x 64 pairs of rows (rows r and
// r + 1, k kp). Consecutive threads on consecutive addresses; a warp's 32 stores into the
// M/N-major tile fill one 128-byte row of a pattern (no bank conflict).
template <bool KF> __device__ __forceinline__ void wgg_pair(int q, int &r, int &kp)
{
    if (KF) r = q >> 4, kp = q & 15;
    else r = 2 * (q & 63), kp = q >> 6;
}

// A 16-bit array's pair as it is (its values were rounded as tc_pack rounds: the same bits).
template <int TY, bool IS_B, class L>
__device__ __forceinline__ void wgg_fetch(unsigned (&p)[8], const L &l, int rows, int r0, int kend, int k0)
{
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int r, kp;
        wgg_pair<L::k_fast>(threadIdx.x + 256 * i, r, kp);
        // the pair's second element: k + 1 (k-contiguous) or row + 1 (M/N-contiguous)
        constexpr bool KF = L::k_fast;
        int gr = r0 + r, k = k0 + (KF ? 2 * kp : kp), gr1 = KF ? gr : gr + 1, k1 = KF ? k + 1 : k;
        if constexpr (std::is_base_of<TcRaw, L>::value) {
            size_t at = KF ? (size_t)gr * l.ld + k : (size_t)k * l.ld + gr;
            unsigned lo = gr < rows && k < kend ? l.p[at] : 0u, hi = gr1 < rows && k1 < kend ? l.p[at + 1] : 0u;
            p[i] = lo | hi << 16;
        } else {
            float lo = 0.0f, hi = 0.0f;
            if (gr < rows && k < kend) lo = IS_B ? l(k, gr) : l(gr, k);
            if (gr1 < rows && k1 < kend) hi = IS_B ? l(k1, gr1) : l(gr1, k1);
            p[i] = tc_pack<TY>(lo, hi);
        }
    }
}

template <class L> __device__ __forceinline__ void wgg_put(unsigned short *tile, const unsigned (&p)[8])
{
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int r, kp;
        wgg_pair<L::k_fast>(threadIdx.x + 256 * i, r, kp);
        if (L::k_fast) *(unsigned *)(tile + tc_off<WGG_T, true>(r, kp >> 2) + 2 * (kp & 3)) = p[i];
        else *(unsigned *)(tile + wg_off_mn(kp, r >> 3) + (r & 7)) = p[i];
    }
}

// One 32-deep slice of a 128-row tile pair on the warpgroup's 64 rows (both wgmma kernels).
// K-major tiles (AK / BK): the first row's k 16kk (32 bytes into the 64-byte row: the
// hardware swizzles the address it forms), 8 rows 512 bytes on; LBO unused (16 k in one
// row). M/N-major tiles (wg_off_mn; PTX's canonical 128-byte-swizzle M/N-major layout,
// CUTLASS's ((8,n),(8,k)):((1,LBO),(8,SBO)) in 16-byte units): the pattern of k 16kk,
// the next 8 k SBO = 1 KiB on, the next 64 rows LBO = 4 KiB on; imm-trans 1.
template <int TY, bool AK, bool BK>
__device__ __forceinline__ void wgg_slice(float (&acc)[64], const unsigned short *ta, const unsigned short *tb, int wg)
{
#pragma unroll
    for (int kk = 0; kk < TC_BK / 16; kk++) {
        unsigned long long da = AK ? k_wgmma_desc(ta + 64 * wg * TC_BK + 16 * kk, 16, 8 * TC_BK * 2, K_WGMMA_SW64)
                                   : k_wgmma_desc(ta + wg_off_mn(16 * kk, 8 * wg), 4096, 1024, K_WGMMA_SW128);
        unsigned long long db = BK ? k_wgmma_desc(tb + 16 * kk, 16, 8 * TC_BK * 2, K_WGMMA_SW64)
                                   : k_wgmma_desc(tb + wg_off_mn(16 * kk, 0), 4096, 1024, K_WGMMA_SW128);
        if (TY == K_CUDA_MM_BF16) K_WGMMA_BF16_128T(acc, da, db, 1, !AK, !BK);
        else K_WGMMA_F16_128T(acc, da, db, 1, !AK, !BK);
    }
}

// The accumulators through st, in PTX's D layout (warp w: rows 16w.., n8 block e / 4).
template <class ST>
__device__ __forceinline__ void wgg_store(const float (&acc)[64], const ST &st, int M, int N, int m0, int n0, int wg,
                                          int split)
{
    const int j = threadIdx.x & 127, w = j >> 5, gid = (j & 31) >> 2, tig = j & 3;
#pragma unroll
    for (int e = 0; e < 64; e++) {
        int m = m0 + 64 * wg + 16 * w + gid + 8 * ((e >> 1) & 1), n = n0 + 8 * (e >> 2) + 2 * tig + (e & 1);
        if (m < M && n < N) st(split, m, n, acc[e]);
    }
}

template <int TY, class LA, class LB, class ST>
__global__ void __launch_bounds__(256) wgg_gemm(int M, int N, int K, int kchunk, LA la, LB lb, ST st)
{
    struct alignas(LA::k_fast && LB::k_fast ? WGG_ALIGN : WG_ALIGN_MN) Smem {
        unsigned short a[2][WGG_T * TC_BK], b[2][WGG_T * TC_BK];
    };
    __shared__ Smem sm;
    const int wg = threadIdx.x >> 7, m0 = blockIdx.y * WGG_T, n0 = blockIdx.x * WGG_T;
    const int kbeg = blockIdx.z * kchunk, kend = min(K, kbeg + kchunk);
    const int kt_n = kend > kbeg ? (kend - kbeg + TC_BK - 1) / TC_BK : 0;
    float acc[64];
#pragma unroll
    for (int e = 0; e < 64; e++) acc[e] = 0.0f;
    unsigned pa[8], pb[8];
    if (kt_n > 0) {
        wgg_fetch<TY, false>(pa, la, M, m0, kend, kbeg);
        wgg_fetch<TY, true>(pb, lb, N, n0, kend, kbeg);
    }
    for (int kt = 0; kt < kt_n; kt++) {
        // Stage kt & 1 was last read by slice kt - 2's wgmma, waited for by every
        // warpgroup before slice kt - 1's barrier.
        unsigned short *ta = sm.a[kt & 1], *tb = sm.b[kt & 1];
        wgg_put<LA>(ta, pa);
        wgg_put<LB>(tb, pb);
        K_FENCE_PROXY_ASYNC(); // the generic-proxy stores, for the async proxy wgmma reads through
        __syncthreads();
        K_WGMMA_FENCE(); // the accumulators were the threads' own since the last wait
        wgg_slice<TY, LA::k_fast, LB::k_fast>(acc, ta, tb, wg);
        K_WGMMA_COMMIT();
        if (kt + 1 < kt_n) { // the next slice's loads overlap the tensor cores
            wgg_fetch<TY, false>(pa, la, M, m0, kend, kbeg + (kt + 1) * TC_BK);
            wgg_fetch<TY, true>(pb, lb, N, n0, kend, kbeg + (kt + 1) * TC_BK);
        }
        K_WGMMA_WAIT(0);
    }
    wgg_store(acc, st, M, N, m0, n0, wg, blockIdx.z);
}

// ---- wg_gemm: the 16-bit arrays by cp.async (tc_load: 16 bytes a copy, 4 a row; an
// M/N-contiguous one into the M/N-major tile).
#define WG_STAGES 3
template <class LA, class LB>
__device__ __forceinline__ void wg_load(unsigned short *ta, unsigned short *tb, const LA &la, const LB &lb, int M,
                                        int N, int m0, int n0, int kend, int k0)
{
    tc_load<WGG_T, LA, !LA::k_fast>(ta, la, M, m0, kend, k0);
    tc_load<WGG_T, LB, !LB::k_fast>(tb, lb, N, n0, kend, k0);
}

template <int TY, class LA, class LB, class ST>
__global__ void __launch_bounds__(256) wg_gemm(int M, int N, int K, int kchunk, LA la, LB lb, ST st)
{
    struct alignas(LA::k_fast && LB::k_fast ? WGG_ALIGN : WG_ALIGN_MN) Smem {
        unsigned short a[WG_STAGES][WGG_T * TC_BK], b[WG_STAGES][WGG_T * TC_BK];
    };
    __shared__ Smem sm;
    const int wg = threadIdx.x >> 7, m0 = blockIdx.y * WGG_T, n0 = blockIdx.x * WGG_T;
    const int kbeg = blockIdx.z * kchunk, kend = min(K, kbeg + kchunk);
    const int kt_n = kend > kbeg ? (kend - kbeg + TC_BK - 1) / TC_BK : 0;
    float acc[64];
#pragma unroll
    for (int e = 0; e < 64; e++) acc[e] = 0.0f;
    for (int s = 0; s < WG_STAGES - 1; s++) {
        if (s < kt_n) wg_load(sm.a[s], sm.b[s], la, lb, M, N, m0, n0, kend, kbeg + s * TC_BK);
        K_CP_ASYNC_COMMIT();
    }
    for (int kt = 0; kt < kt_n; kt++) {
        K_CP_ASYNC_WAIT(WG_STAGES - 2);
        K_FENCE_PROXY_ASYNC(); // cp.async's writes, for the async proxy wgmma reads through
        __syncthreads();
        const unsigned short *ta = sm.a[kt % WG_STAGES], *tb = sm.b[kt % WG_STAGES];
        K_WGMMA_FENCE(); // (16-bit arrays) the accumulators were the threads' own since the last wait
        wgg_slice<TY, LA::k_fast, LB::k_fast>(acc, ta, tb, wg);
        K_WGMMA_COMMIT();
        int nx = kt + WG_STAGES - 1; // its stage was read by the wgmma waited for last iteration
        if (nx < kt_n)
            wg_load(sm.a[nx % WG_STAGES], sm.b[nx % WG_STAGES], la, lb, M, N, m0, n0, kend, kbeg + nx * TC_BK);
        K_CP_ASYNC_COMMIT();
        K_WGMMA_WAIT(0);
    }
    K_CP_ASYNC_WAIT(0);
    wgg_store(acc, st, M, N, m0, n0, wg, blockIdx.z);
}
} // namespace

// wt_gemm: the sm_90a GEMM fed by TMA (included by k_cuda_tc_gemm.cuh after wg_gemm).
// Two k-contiguous 16-bit arrays as tensor maps (k_tmap_encode_2d: K x rows, 64 k x
// 128 rows a box, the 128-byte swizzle); a 128x128 tile as wg_gemm's, in WT_STAGES stages
// of 64 k. One producer thread (warp 8) issues each stage's two boxes with
// cp.async.bulk.tensor, their bytes counted on the stage's full mbarrier; the two
// consumer warpgroups wait on it, run four m64n128k16 wgmma on their 64 rows, and keep
// one slice in flight (wgmma.wait_group 1): the slice before's stage is then free, and
// every consumer thread arrives on its empty mbarrier, which the producer waits on before
// reusing the stage. The k16 order is wg_gemm's: the same sums, bit for bit.
#pragma once
#include "kernels/cuda/k_cuda_tma.cuh"

namespace {
#define WT_BK 64        // k per stage: one 128-byte swizzle row of 16-bit values
#define WT_STAGES 4
#define WT_THREADS 288  // two consumer warpgroups, then the producer warp
#define WT_CONSUMERS 256
struct WtSmem {
    unsigned short a[WT_STAGES][WGG_T * WT_BK], b[WT_STAGES][WGG_T * WT_BK];
    unsigned long long full[WT_STAGES], empty[WT_STAGES];
};
// Dynamic shared memory: the tiles (128 KiB) and barriers, 1 KiB more to align the
// tiles to the 128-byte swizzle's pattern (8 rows of 128 bytes).
#define WT_SMEM_BYTES ((int)sizeof(WtSmem) + 1024)
#define WT_TX_BYTES (2 * WGG_T * WT_BK * 2) // both boxes of a stage

// One 64-deep slice on the warpgroup's 64 rows: four k16 steps, 32 bytes on in the
// 128-byte row each (the hardware swizzles the address it forms), 8 rows 1 KiB apart.
template <int TY>
__device__ __forceinline__ void wt_slice(float (&acc)[64], const unsigned short *ta, const unsigned short *tb, int wg)
{
#pragma unroll
    for (int kk = 0; kk < WT_BK / 16; kk++) {
        unsigned long long da = k_wgmma_desc(ta + 64 * wg * WT_BK + 16 * kk, 16, 8 * WT_BK * 2, K_WGMMA_SW128);
        unsigned long long db = k_wgmma_desc(tb + 16 * kk, 16, 8 * WT_BK * 2, K_WGMMA_SW128);
        if (TY == K_CUDA_MM_BF16) K_WGMMA_BF16_128(acc, da, db, 1);
        else K_WGMMA_F16_128(acc, da, db, 1);
    }
}

template <int TY, class ST>
__global__ void __launch_bounds__(WT_THREADS)
    wt_gemm(int M, int N, int K, const K_GRID_CONST k_tmap ma, const K_GRID_CONST k_tmap mb, ST st)
{
    K_DYN_SHARED(unsigned char, raw);
    WtSmem &sm = *(WtSmem *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
    const int m0 = blockIdx.y * WGG_T, n0 = blockIdx.x * WGG_T, kt_n = (K + WT_BK - 1) / WT_BK;
    if (threadIdx.x == WT_CONSUMERS) {
        for (int s = 0; s < WT_STAGES; s++) {
            K_MBAR_INIT(&sm.full[s], 1);
            K_MBAR_INIT(&sm.empty[s], WT_CONSUMERS);
        }
        K_FENCE_MBAR_INIT();
    }
    __syncthreads();
    if (threadIdx.x >= WT_CONSUMERS) { // the producer warp: one thread issues
        if (threadIdx.x != WT_CONSUMERS) return;
        for (int kt = 0; kt < kt_n; kt++) {
            int s = kt % WT_STAGES;
            // the stage's last slice (kt - WT_STAGES) released by every consumer thread
            if (kt >= WT_STAGES) K_MBAR_WAIT(&sm.empty[s], (kt / WT_STAGES - 1) & 1);
            K_MBAR_ARRIVE_TX(&sm.full[s], WT_TX_BYTES);
            K_TMA_LOAD_2D(sm.a[s], &ma, kt * WT_BK, m0, &sm.full[s]);
            K_TMA_LOAD_2D(sm.b[s], &mb, kt * WT_BK, n0, &sm.full[s]);
        }
        return;
    }
    const int wg = threadIdx.x >> 7;
    float acc[64];
#pragma unroll
    for (int e = 0; e < 64; e++) acc[e] = 0.0f;
    for (int kt = 0; kt < kt_n; kt++) {
        int s = kt % WT_STAGES;
        K_MBAR_WAIT(&sm.full[s], (kt / WT_STAGES) & 1);
        K_WGMMA_FENCE(); // the accumulators were the threads' own since the last wait
        wt_slice<TY>(acc, sm.a[s], sm.b[s], wg);
        K_WGMMA_COMMIT();
        K_WGMMA_WAIT(1); // slice kt - 1's wgmma is done: its stage may be refilled
        if (kt > 0) K_MBAR_ARRIVE(&sm.empty[(kt - 1) % WT_STAGES]);
    }
    K_WGMMA_WAIT(0);
    wgg_store(acc, st, M, N, m0, n0, wg, 0);
}

// The two arrays' tensor maps (rows x K, ld elements apart): 0, or -1 with why (TMA's
// constraints: 16-byte aligned, ld a multiple of 8 elements).
static inline int wt_maps(k_tmap *ma, k_tmap *mb, const void *a, int lda, const void *b, int ldb, int M, int N,
                          int K, const char **why)
{
    return k_tmap_encode_2d(ma, a, (unsigned long long)M, (unsigned long long)K, (unsigned long long)lda, WT_BK,
                            WGG_T, 128, why) ||
                   k_tmap_encode_2d(mb, b, (unsigned long long)N, (unsigned long long)K, (unsigned long long)ldb,
                                    WT_BK, WGG_T, 128, why)
               ? -1
               : 0;
}

// wt_gemm<TY, ST> on the stream: its dynamic shared memory limit raised once; 0, or -1
// (a launch error for k_cuda_check_launch, or the maps refused: why).
template <int TY, class ST>
static inline int wt_launch(int M, int N, int K, const void *a, int lda, const void *b, int ldb, const ST &st,
                            cudaStream_t s, const char **why)
{
    static int attr;
    k_tmap ma, mb;
    if (wt_maps(&ma, &mb, a, lda, b, ldb, M, N, K, why)) return -1;
    if (!attr) {
        if (cudaFuncSetAttribute(wt_gemm<TY, ST>, cudaFuncAttributeMaxDynamicSharedMemorySize, WT_SMEM_BYTES)) {
            *why = "cudaFuncSetAttribute refused the dynamic shared memory";
            return -1;
        }
        attr = 1;
    }
    dim3 grid((unsigned)((N + WGG_T - 1) / WGG_T), (unsigned)((M + WGG_T - 1) / WGG_T));
    K_LAUNCH((wt_gemm<TY, ST>), grid, WT_THREADS, WT_SMEM_BYTES, s)(M, N, K, ma, mb, st);
    *why = NULL;
    return 0;
}
} // namespace

// TMA and mbarriers (sm_90a): cp.async.bulk.tensor.2d copies a tile of a tensor map
// into shared memory in the map's swizzle, its bytes counted on an mbarrier
// (complete_tx); threads wait on the barrier's phase parity. Under nvcc the PTX
// instructions (sm_90a only: elsewhere the kernel traps, and the host never launches it
// there); built for the SIMT executor its emulation (test/simt/simt_tma.cc), which checks
// their use: an uninitialised barrier, a destination read before its phase was waited
// for, a misaligned destination, expect_tx bytes that never arrive (the scheduler names
// the barrier). Macros, so that a report names the kernel's line.
//
// The host encodes a map with k_tmap_encode_2d: the driver's cuTensorMapEncodeTiled
// through the runtime's entry point (no -lcuda), the executor's emulated encode here.
// A kernel takes it as `const K_GRID_CONST k_tmap map` and passes &map.
#pragma once
#include "kernels/cuda/k_cuda_tc.cuh"

#ifdef DDPRT_SIMT
typedef simt::tensormap k_tmap;
#define K_GRID_CONST
#define K_MBAR_INIT(bar, count) simt::mbar_init(__FILE__, __LINE__, bar, count)
#define K_MBAR_ARRIVE(bar) ((void)simt::mbar_arrive(__FILE__, __LINE__, bar, 1, 0))
#define K_MBAR_ARRIVE_TX(bar, bytes) ((void)simt::mbar_arrive(__FILE__, __LINE__, bar, 1, bytes))
#define K_MBAR_WAIT(bar, parity) simt::mbar_wait(__FILE__, __LINE__, bar, parity)
#define K_TMA_LOAD_2D(dst, map, c0, c1, bar) simt::tma_load_2d(__FILE__, __LINE__, dst, map, c0, c1, bar)
#define K_FENCE_MBAR_INIT() ((void)0)
#define K_DYN_SHARED(T, name) T *name = (T *)simt::dyn_shared()
// The driver's checks for a 2D map of 16-bit elements (rows x cols, ld elements apart),
// box_cols x box_rows, swizzle 0 / 32 / 64 / 128 bytes: 0, or -1 with why.
static inline int k_tmap_encode_2d(k_tmap *m, const void *g, unsigned long long rows, unsigned long long cols,
                                   unsigned long long ld, unsigned box_cols, unsigned box_rows, int swz,
                                   const char **why)
{
    unsigned long long dims[2] = {cols, rows}, strides[1] = {ld * 2};
    unsigned box[2] = {box_cols, box_rows}, es[2] = {1, 1};
    *why = simt::tensormap_encode(m, 2, 2, g, dims, strides, box, es, swz);
    return *why ? -1 : 0;
}
#else
#include <cudaTypedefs.h>
typedef CUtensorMap k_tmap;
#define K_GRID_CONST __grid_constant__
// Dynamic shared memory (extern __shared__; over 48 KiB once cudaFuncSetAttribute raised
// the kernel's limit).
#define K_DYN_SHARED(T, name)                                                                                    \
    extern __shared__ __align__(1024) unsigned char k_dyn_smem_[];                                               \
    T *name = (T *)k_dyn_smem_
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void k_mbar_init(void *bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(k_smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void k_mbar_arrive(void *bar)
{
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(k_smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void k_mbar_arrive_tx(void *bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(k_smem_addr(bar)),
                 "r"(bytes) : "memory");
}
__device__ __forceinline__ void k_mbar_wait(void *bar, unsigned parity)
{
    unsigned done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(k_smem_addr(bar)), "r"(parity) : "memory");
    } while (!done);
}
__device__ __forceinline__ void k_tma_load_2d(void *dst, const k_tmap *map, int c0, int c1, void *bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, "
                 "%4}], [%2];" ::"r"(k_smem_addr(dst)), "l"(map), "r"(k_smem_addr(bar)), "r"(c0), "r"(c1) : "memory");
}
// The barriers' init made visible to the async proxy (TMA's complete_tx) before use.
#define K_FENCE_MBAR_INIT() asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory")
#else
__device__ __forceinline__ void k_mbar_init(void *, unsigned) { __trap(); }
__device__ __forceinline__ void k_mbar_arrive(void *) { __trap(); }
__device__ __forceinline__ void k_mbar_arrive_tx(void *, unsigned) { __trap(); }
__device__ __forceinline__ void k_mbar_wait(void *, unsigned) { __trap(); }
__device__ __forceinline__ void k_tma_load_2d(void *, const k_tmap *, int, int, void *) { __trap(); }
#define K_FENCE_MBAR_INIT() ((void)0)
#endif
#define K_MBAR_INIT(bar, count) k_mbar_init(bar, count)
#define K_MBAR_ARRIVE(bar) k_mbar_arrive(bar)
#define K_MBAR_ARRIVE_TX(bar, bytes) k_mbar_arrive_tx(bar, bytes)
#define K_MBAR_WAIT(bar, parity) k_mbar_wait(bar, parity)
#define K_TMA_LOAD_2D(dst, map, c0, c1, bar) k_tma_load_2d(dst, map, c0, c1, bar)
// cuTensorMapEncodeTiled through the runtime's driver entry point (bf16 as the element
// type: TMA copies bytes, and f16 has the same size): 0, or -1 with why.
static inline int k_tmap_encode_2d(k_tmap *m, const void *g, unsigned long long rows, unsigned long long cols,
                                   unsigned long long ld, unsigned box_cols, unsigned box_rows, int swz,
                                   const char **why)
{
    static PFN_cuTensorMapEncodeTiled_v12000 enc;
    if (!enc) {
        cudaDriverEntryPointQueryResult q;
        void *f = NULL;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) ||
            q != cudaDriverEntryPointSuccess || !f) {
            *why = "the driver has no cuTensorMapEncodeTiled";
            return -1;
        }
        enc = (PFN_cuTensorMapEncodeTiled_v12000)f;
    }
    cuuint64_t dims[2] = {cols, rows}, strides[1] = {ld * 2};
    cuuint32_t box[2] = {box_cols, box_rows}, es[2] = {1, 1};
    CUtensorMapSwizzle s = swz == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : swz == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                           : swz == 32 ? CU_TENSOR_MAP_SWIZZLE_32B : CU_TENSOR_MAP_SWIZZLE_NONE;
    CUresult r = enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)g, dims, strides, box, es,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, s, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    *why = r ? "cuTensorMapEncodeTiled refused the map" : NULL;
    return r ? -1 : 0;
}
#endif

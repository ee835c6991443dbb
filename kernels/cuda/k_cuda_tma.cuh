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

// An im2col map of x [N][H][W][C] (16-bit, NHWC) for a conv of an R x S filter, stride st,
// zero padding pad: dims {C, W, H, N}; the bounding box of the start pixels [-pad, W - 1 +
// pad - (S - 1)] in w (h alike), walked st apart: output pixel (n, p, q)'s start is
// (q st - pad, p st - pad, n), Q of them a row, and the offsets {s, r} pick the tap.
// (Corner arrays w first, as CUTLASS's make_im2col_tma_copy passes them.) The _box form
// takes the corners lo / hi {w, h} as they are (the strided input grad's phases: their
// own padding a side and dimension, k_cuda_conv_phase.cuh).
#define I2C_DIMS(U64, U32, N, H, W, C, st)                                                                          \
    U64 dims[4] = {(U64)(C), (U64)(W), (U64)(H), (U64)(N)};                                                      \
    U64 strides[3] = {(U64)(C) * 2, (U64)(W) * (C) * 2, (U64)(H) * (W) * (C) * 2};                               \
    U32 es[4] = {1, (U32)(st), (U32)(st), 1}
#define I2C_CORNERS(R, S, pad) int lo[2] = {-(pad), -(pad)}, hi[2] = {(pad) - ((S) - 1), (pad) - ((R) - 1)}

#ifdef DDPRT_SIMT
typedef simt::tensormap k_tmap;
#define K_GRID_CONST
#define K_MBAR_INIT(bar, count) simt::mbar_init(__FILE__, __LINE__, bar, count)
#define K_MBAR_ARRIVE(bar) ((void)simt::mbar_arrive(__FILE__, __LINE__, bar, 1, 0))
#define K_MBAR_ARRIVE_TX(bar, bytes) ((void)simt::mbar_arrive(__FILE__, __LINE__, bar, 1, bytes))
#define K_MBAR_WAIT(bar, parity) simt::mbar_wait(__FILE__, __LINE__, bar, parity)
#define K_TMA_LOAD_2D(dst, map, c0, c1, bar) simt::tma_load_2d(__FILE__, __LINE__, dst, map, c0, c1, bar)
#define K_TMA_LOAD_IM2COL_4D(dst, map, c, w, h, n, offw, offh, bar)                                              \
    simt::tma_load_im2col_4d(__FILE__, __LINE__, dst, map, c, w, h, n, offw, offh, bar)
#define K_FENCE_MBAR_INIT() ((void)0)
#define K_DYN_SHARED(T, name) T *name = (T *)simt::dyn_shared()
#define K_SETMAXNREG_INC(n) simt::setmaxnreg(__FILE__, __LINE__, n, 1)
#define K_SETMAXNREG_DEC(n) simt::setmaxnreg(__FILE__, __LINE__, n, 0)
#define K_WGMMA_BF16_256T(d, da, db, scale_d, ta, tb)                                                              \
    simt::wgmma(__FILE__, __LINE__, simt::MMA_BF16, 256, d, da, db, scale_d, ta, tb)
#define K_WGMMA_F16_256T(d, da, db, scale_d, ta, tb)                                                               \
    simt::wgmma(__FILE__, __LINE__, simt::MMA_F16, 256, d, da, db, scale_d, ta, tb)
#define K_WGMMA_BF16_64T(d, da, db, scale_d, ta, tb)                                                               \
    simt::wgmma(__FILE__, __LINE__, simt::MMA_BF16, 64, d, da, db, scale_d, ta, tb)
#define K_WGMMA_F16_64T(d, da, db, scale_d, ta, tb)                                                                \
    simt::wgmma(__FILE__, __LINE__, simt::MMA_F16, 64, d, da, db, scale_d, ta, tb)
#define K_WGMMA_TF32_256(d, da, db, scale_d) simt::wgmma(__FILE__, __LINE__, simt::MMA_TF32, 256, d, da, db, scale_d)
#define K_WGMMA_TF32_64(d, da, db, scale_d) simt::wgmma(__FILE__, __LINE__, simt::MMA_TF32, 64, d, da, db, scale_d)
// The driver's checks for a 2D map of eb-byte elements (2: bf16 / f16, 4: fp32; rows x
// cols, ld elements apart), box_cols x box_rows, swizzle 0 / 32 / 64 / 128 bytes: 0, or
// -1 with why.
static inline int k_tmap_encode_2d_eb(k_tmap *m, const void *g, unsigned long long rows, unsigned long long cols,
                                      unsigned long long ld, unsigned box_cols, unsigned box_rows, int swz, int eb,
                                      const char **why)
{
    unsigned long long dims[2] = {cols, rows}, strides[1] = {ld * (unsigned long long)eb};
    unsigned box[2] = {box_cols, box_rows}, es[2] = {1, 1};
    *why = simt::tensormap_encode(m, eb, 2, g, dims, strides, box, es, swz);
    return *why ? -1 : 0;
}
// The driver's checks for an im2col map of NHWC x (I2C_DIMS below): 0, or -1 with why.
static inline int k_tmap_encode_im2col_box(k_tmap *m, const void *x, int N, int H, int W, int C, int st,
                                           const int (&lo)[2], const int (&hi)[2], unsigned cpp, unsigned ppc,
                                           int swz, const char **why)
{
    I2C_DIMS(unsigned long long, unsigned, N, H, W, C, st);
    *why = simt::tensormap_encode_im2col(m, 2, 4, x, dims, strides, lo, hi, cpp, ppc, es, swz);
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
// One filter tap (offsets {offw, offh}) of ppc output pixels from the start pixel {w, h, n},
// channels [c, c + cpp): the map's im2col box (k_tmap_encode_im2col).
__device__ __forceinline__ void k_tma_load_im2col_4d(void *dst, const k_tmap *map, int c, int w, int h, int n,
                                                     unsigned short offw, unsigned short offh, void *bar)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes [%0], [%1, {%3, "
                 "%4, %5, %6}], [%2], {%7, %8};" ::"r"(k_smem_addr(dst)), "l"(map), "r"(k_smem_addr(bar)), "r"(c),
                 "r"(w), "r"(h), "r"(n), "h"(offw), "h"(offh) : "memory");
}
// The barriers' init made visible to the async proxy (TMA's complete_tx) before use.
#define K_FENCE_MBAR_INIT() asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory")
// A warpgroup's per-thread register count moved to n (a multiple of 8 in [24, 256]): dec
// gives registers to the block's pool, inc takes them (waiting until it holds enough).
#define K_SETMAXNREG_INC(n) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(n))
#define K_SETMAXNREG_DEC(n) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(n))
#else
__device__ __forceinline__ void k_mbar_init(void *, unsigned) { __trap(); }
__device__ __forceinline__ void k_mbar_arrive(void *) { __trap(); }
__device__ __forceinline__ void k_mbar_arrive_tx(void *, unsigned) { __trap(); }
__device__ __forceinline__ void k_mbar_wait(void *, unsigned) { __trap(); }
__device__ __forceinline__ void k_tma_load_2d(void *, const k_tmap *, int, int, void *) { __trap(); }
__device__ __forceinline__ void k_tma_load_im2col_4d(void *, const k_tmap *, int, int, int, int, unsigned short,
                                                     unsigned short, void *)
{
    __trap();
}
#define K_FENCE_MBAR_INIT() ((void)0)
#define K_SETMAXNREG_INC(n) ((void)0)
#define K_SETMAXNREG_DEC(n) ((void)0)
#endif
#define K_MBAR_INIT(bar, count) k_mbar_init(bar, count)
#define K_MBAR_ARRIVE(bar) k_mbar_arrive(bar)
#define K_MBAR_ARRIVE_TX(bar, bytes) k_mbar_arrive_tx(bar, bytes)
#define K_MBAR_WAIT(bar, parity) k_mbar_wait(bar, parity)
#define K_TMA_LOAD_2D(dst, map, c0, c1, bar) k_tma_load_2d(dst, map, c0, c1, bar)
#define K_TMA_LOAD_IM2COL_4D(dst, map, c, w, h, n, offw, offh, bar)                                              \
    k_tma_load_im2col_4d(dst, map, c, w, h, n, offw, offh, bar)
// wgmma m64n256k16, 128 fp32 accumulators a thread in PTX's D layout (wt_gemm's 128x256
// tile, k_cuda_tc_tma.cuh); TA / TB the imm-trans-a / -b immediates (1: M / N-major).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define K_WGMMA_256_(ty) K_WGMMA_256X_("m64n256k16.f32." ty "." ty, ", %131, %132")
// inst: the shape and types; tail: the imm-trans operands (none for tf32: K-major only)
#define K_WGMMA_256X_(inst, tail)                                                                                  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" "wgmma.mma_async.sync.aligned." inst " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1" tail ";\n" "}\n" \
                 : "+f"(d[0]),"+f"(d[1]),"+f"(d[2]),"+f"(d[3]),"+f"(d[4]),"+f"(d[5]),"+f"(d[6]),"+f"(d[7]),"+f"(d[8]),"+f"(d[9]),"+f"(d[10]),"+f"(d[11]),"+f"(d[12]),"+f"(d[13]),"+f"(d[14]),"+f"(d[15]),"+f"(d[16]),"+f"(d[17]),"+f"(d[18]),"+f"(d[19]),"+f"(d[20]),"+f"(d[21]),"+f"(d[22]),"+f"(d[23]),"+f"(d[24]),"+f"(d[25]),"+f"(d[26]),"+f"(d[27]),"+f"(d[28]),"+f"(d[29]),"+f"(d[30]),"+f"(d[31]),"+f"(d[32]),"+f"(d[33]),"+f"(d[34]),"+f"(d[35]),"+f"(d[36]),"+f"(d[37]),"+f"(d[38]),"+f"(d[39]),"+f"(d[40]),"+f"(d[41]),"+f"(d[42]),"+f"(d[43]),"+f"(d[44]),"+f"(d[45]),"+f"(d[46]),"+f"(d[47]),"+f"(d[48]),"+f"(d[49]),"+f"(d[50]),"+f"(d[51]),"+f"(d[52]),"+f"(d[53]),"+f"(d[54]),"+f"(d[55]),"+f"(d[56]),"+f"(d[57]),"+f"(d[58]),"+f"(d[59]),"+f"(d[60]),"+f"(d[61]),"+f"(d[62]),"+f"(d[63]),"+f"(d[64]),"+f"(d[65]),"+f"(d[66]),"+f"(d[67]),"+f"(d[68]),"+f"(d[69]),"+f"(d[70]),"+f"(d[71]),"+f"(d[72]),"+f"(d[73]),"+f"(d[74]),"+f"(d[75]),"+f"(d[76]),"+f"(d[77]),"+f"(d[78]),"+f"(d[79]),"+f"(d[80]),"+f"(d[81]),"+f"(d[82]),"+f"(d[83]),"+f"(d[84]),"+f"(d[85]),"+f"(d[86]),"+f"(d[87]),"+f"(d[88]),"+f"(d[89]),"+f"(d[90]),"+f"(d[91]),"+f"(d[92]),"+f"(d[93]),"+f"(d[94]),"+f"(d[95]),"+f"(d[96]),"+f"(d[97]),"+f"(d[98]),"+f"(d[99]),"+f"(d[100]),"+f"(d[101]),"+f"(d[102]),"+f"(d[103]),"+f"(d[104]),"+f"(d[105]),"+f"(d[106]),"+f"(d[107]),"+f"(d[108]),"+f"(d[109]),"+f"(d[110]),"+f"(d[111]),"+f"(d[112]),"+f"(d[113]),"+f"(d[114]),"+f"(d[115]),"+f"(d[116]),"+f"(d[117]),"+f"(d[118]),"+f"(d[119]),"+f"(d[120]),"+f"(d[121]),"+f"(d[122]),"+f"(d[123]),"+f"(d[124]),"+f"(d[125]),"+f"(d[126]),"+f"(d[127])                                                                                          \
                 : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB))
template <int TA, int TB>
__device__ __forceinline__ void k_wgmma_bf16_256(float *d, unsigned long long da, unsigned long long db, int scale_d)
{
    K_WGMMA_256_("bf16");
}
template <int TA, int TB>
__device__ __forceinline__ void k_wgmma_f16_256(float *d, unsigned long long da, unsigned long long db, int scale_d)
{
    K_WGMMA_256_("f16");
}
// m64n64k16 (wt_gemm's 128 x 64 tile: N = 64, ResNet's first stage): 32 accumulators a thread.
#define K_WGMMA_64_(ty) K_WGMMA_64X_("m64n64k16.f32." ty "." ty, ", %35, %36")
#define K_WGMMA_64X_(inst, tail)                                                                                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" "wgmma.mma_async.sync.aligned." inst " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1" tail ";\n" "}\n" \
                 : "+f"(d[0]),"+f"(d[1]),"+f"(d[2]),"+f"(d[3]),"+f"(d[4]),"+f"(d[5]),"+f"(d[6]),"+f"(d[7]),"+f"(d[8]),"+f"(d[9]),"+f"(d[10]),"+f"(d[11]),"+f"(d[12]),"+f"(d[13]),"+f"(d[14]),"+f"(d[15]),"+f"(d[16]),"+f"(d[17]),"+f"(d[18]),"+f"(d[19]),"+f"(d[20]),"+f"(d[21]),"+f"(d[22]),"+f"(d[23]),"+f"(d[24]),"+f"(d[25]),"+f"(d[26]),"+f"(d[27]),"+f"(d[28]),"+f"(d[29]),"+f"(d[30]),"+f"(d[31]) \
                 : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB))
template <int TA, int TB>
__device__ __forceinline__ void k_wgmma_bf16_64(float *d, unsigned long long da, unsigned long long db, int scale_d)
{
    K_WGMMA_64_("bf16");
}
template <int TA, int TB>
__device__ __forceinline__ void k_wgmma_f16_64(float *d, unsigned long long da, unsigned long long db, int scale_d)
{
    K_WGMMA_64_("f16");
}
// tf32: k8, both operands K-major (TA / TB only fill the macro's unused operands)
__device__ __forceinline__ void k_wgmma_tf32_256(float *d, unsigned long long da, unsigned long long db, int scale_d)
{
    constexpr int TA = 0, TB = 0;
    K_WGMMA_256X_("m64n256k8.f32.tf32.tf32", "");
}
__device__ __forceinline__ void k_wgmma_tf32_64(float *d, unsigned long long da, unsigned long long db, int scale_d)
{
    constexpr int TA = 0, TB = 0;
    K_WGMMA_64X_("m64n64k8.f32.tf32.tf32", "");
}
#else
template <int TA, int TB>
__device__ __forceinline__ void k_wgmma_bf16_256(float *, unsigned long long, unsigned long long, int) { __trap(); }
template <int TA, int TB>
__device__ __forceinline__ void k_wgmma_f16_256(float *, unsigned long long, unsigned long long, int) { __trap(); }
template <int TA, int TB>
__device__ __forceinline__ void k_wgmma_bf16_64(float *, unsigned long long, unsigned long long, int) { __trap(); }
template <int TA, int TB>
__device__ __forceinline__ void k_wgmma_f16_64(float *, unsigned long long, unsigned long long, int) { __trap(); }
__device__ __forceinline__ void k_wgmma_tf32_256(float *, unsigned long long, unsigned long long, int) { __trap(); }
__device__ __forceinline__ void k_wgmma_tf32_64(float *, unsigned long long, unsigned long long, int) { __trap(); }
#endif
#define K_WGMMA_TF32_256(d, da, db, scale_d) k_wgmma_tf32_256(d, da, db, scale_d)
#define K_WGMMA_TF32_64(d, da, db, scale_d) k_wgmma_tf32_64(d, da, db, scale_d)
#define K_WGMMA_BF16_256T(d, da, db, scale_d, ta, tb) k_wgmma_bf16_256<ta, tb>(d, da, db, scale_d)
#define K_WGMMA_F16_256T(d, da, db, scale_d, ta, tb) k_wgmma_f16_256<ta, tb>(d, da, db, scale_d)
#define K_WGMMA_BF16_64T(d, da, db, scale_d, ta, tb) k_wgmma_bf16_64<ta, tb>(d, da, db, scale_d)
#define K_WGMMA_F16_64T(d, da, db, scale_d, ta, tb) k_wgmma_f16_64<ta, tb>(d, da, db, scale_d)
// cuTensorMapEncodeTiled through the runtime's driver entry point (bf16 as the 16-bit
// element type: TMA copies bytes, and f16 has the same size; fp32 for eb 4): 0, or -1
// with why.
static inline int k_tmap_encode_2d_eb(k_tmap *m, const void *g, unsigned long long rows, unsigned long long cols,
                                      unsigned long long ld, unsigned box_cols, unsigned box_rows, int swz, int eb,
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
    cuuint64_t dims[2] = {cols, rows}, strides[1] = {ld * (cuuint64_t)eb};
    cuuint32_t box[2] = {box_cols, box_rows}, es[2] = {1, 1};
    CUtensorMapSwizzle s = swz == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : swz == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                           : swz == 32 ? CU_TENSOR_MAP_SWIZZLE_32B : CU_TENSOR_MAP_SWIZZLE_NONE;
    CUresult r = enc(m, eb == 4 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)g,
                     dims, strides, box, es,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, s, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    *why = r ? "cuTensorMapEncodeTiled refused the map" : NULL;
    return r ? -1 : 0;
}
// cuTensorMapEncodeIm2col through the runtime's driver entry point, the map I2C_DIMS
// describes: 0, or -1 with why.
static inline int k_tmap_encode_im2col_box(k_tmap *m, const void *x, int N, int H, int W, int C, int st,
                                           const int (&lo)[2], const int (&hi)[2], unsigned cpp, unsigned ppc,
                                           int swz, const char **why)
{
    static PFN_cuTensorMapEncodeIm2col_v12000 enc;
    if (!enc) {
        cudaDriverEntryPointQueryResult q;
        void *f = NULL;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeIm2col", &f, 12000, cudaEnableDefault, &q) ||
            q != cudaDriverEntryPointSuccess || !f) {
            *why = "the driver has no cuTensorMapEncodeIm2col";
            return -1;
        }
        enc = (PFN_cuTensorMapEncodeIm2col_v12000)f;
    }
    I2C_DIMS(cuuint64_t, cuuint32_t, N, H, W, C, st);
    CUtensorMapSwizzle s = swz == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : swz == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                           : swz == 32 ? CU_TENSOR_MAP_SWIZZLE_32B : CU_TENSOR_MAP_SWIZZLE_NONE;
    CUresult r = enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, (void *)x, dims, strides, lo, hi, cpp, ppc, es,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, s, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    *why = r ? "cuTensorMapEncodeIm2col refused the map" : NULL;
    return r ? -1 : 0;
}
#endif
// A 2D map of 16-bit elements (k_tmap_encode_2d_eb's).
static inline int k_tmap_encode_2d(k_tmap *m, const void *g, unsigned long long rows, unsigned long long cols,
                                   unsigned long long ld, unsigned box_cols, unsigned box_rows, int swz,
                                   const char **why)
{
    return k_tmap_encode_2d_eb(m, g, rows, cols, ld, box_cols, box_rows, swz, 2, why);
}
// The conv's map (I2C_DIMS, I2C_CORNERS): its corners from R, S and one padding.
static inline int k_tmap_encode_im2col(k_tmap *m, const void *x, int N, int H, int W, int C, int R, int S, int st,
                                       int pad, unsigned cpp, unsigned ppc, int swz, const char **why)
{
    I2C_CORNERS(R, S, pad);
    return k_tmap_encode_im2col_box(m, x, N, H, W, C, st, lo, hi, cpp, ppc, swz, why);
}

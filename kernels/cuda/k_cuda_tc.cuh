// Tensor-core building blocks (sm_80 and newer): mma.sync, ldmatrix and cp.async.
// Under nvcc they are the PTX instructions (inline asm); built for the SIMT executor
// they are its emulation (test/simt/simt_tc.cc), which checks their use: partial warps,
// misaligned or non-shared addresses, a cp.async destination read before its
// wait_group or before the __syncthreads that follows it. Macros, so that a report
// names the kernel's line.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16 / m16n8k8"): a[4], b[2]
// 32-bit registers holding two 16-bit elements (bf16, f16) or one tf32 each; d[4]
// fp32 accumulators, rows lane/4 and lane/4 + 8, columns 2(lane%4) and +1.
#pragma once
#include "kernels/cuda/k_cuda_common.cuh"

// wgmma descriptors' layout type (bits 62-63): no swizzle, the 128 / 64 / 32-byte swizzles.
#define K_WGMMA_NOSWZ 0
#define K_WGMMA_SW128 1
#define K_WGMMA_SW64 2
#define K_WGMMA_SW32 3

#ifdef DDPRT_SIMT
#define K_MMA_BF16(d, a, b) simt::mma_sync(__FILE__, __LINE__, simt::MMA_BF16, d, a, b, d)
#define K_MMA_F16(d, a, b) simt::mma_sync(__FILE__, __LINE__, simt::MMA_F16, d, a, b, d)
#define K_MMA_TF32(d, a, b) simt::mma_sync(__FILE__, __LINE__, simt::MMA_TF32, d, a, b, d)
#define K_LDMATRIX_X4(r, p) simt::ldmatrix(__FILE__, __LINE__, r, p, 4, 0)
#define K_LDMATRIX_X4_T(r, p) simt::ldmatrix(__FILE__, __LINE__, r, p, 4, 1)
#define K_LDMATRIX_X2(r, p) simt::ldmatrix(__FILE__, __LINE__, r, p, 2, 0)
#define K_LDMATRIX_X2_T(r, p) simt::ldmatrix(__FILE__, __LINE__, r, p, 2, 1)
// 16 bytes from global to shared; only the first src_bytes read, the rest zero-filled.
#define K_CP_ASYNC16(dst, src, src_bytes) simt::cp_async(__FILE__, __LINE__, dst, src, 16, src_bytes)
#define K_CP_ASYNC_COMMIT() simt::cp_async_commit(__FILE__, __LINE__)
#define K_CP_ASYNC_WAIT(n) simt::cp_async_wait(__FILE__, __LINE__, n)
#define K_WGMMA_BF16_128(d, da, db, scale_d) simt::wgmma(__FILE__, __LINE__, simt::MMA_BF16, 128, d, da, db, scale_d)
#define K_WGMMA_F16_128(d, da, db, scale_d) simt::wgmma(__FILE__, __LINE__, simt::MMA_F16, 128, d, da, db, scale_d)
// ta / tb: imm-trans-a / -b (compile-time 0 or 1; 1: the operand is M / N-major)
#define K_WGMMA_BF16_128T(d, da, db, scale_d, ta, tb)                                                              \
    simt::wgmma(__FILE__, __LINE__, simt::MMA_BF16, 128, d, da, db, scale_d, ta, tb)
#define K_WGMMA_F16_128T(d, da, db, scale_d, ta, tb)                                                               \
    simt::wgmma(__FILE__, __LINE__, simt::MMA_F16, 128, d, da, db, scale_d, ta, tb)
// m64n128k8 tf32 (K-major operands only: PTX has no transpose for 32-bit types)
#define K_WGMMA_TF32_128(d, da, db, scale_d) simt::wgmma(__FILE__, __LINE__, simt::MMA_TF32, 128, d, da, db, scale_d)
#define K_WGMMA_FENCE() simt::wgmma_fence(__FILE__, __LINE__)
#define K_WGMMA_COMMIT() simt::wgmma_commit(__FILE__, __LINE__)
#define K_WGMMA_WAIT(n) simt::wgmma_wait(__FILE__, __LINE__, n)
// generic-proxy writes made visible to wgmma's async proxy (the executor checks wgmma's operands)
#define K_FENCE_PROXY_ASYNC() simt::fence_proxy_async(__FILE__, __LINE__)
#define K_PIN_X4(w) ((void)0)
static inline unsigned long long k_wgmma_desc(const void *p, int lbo, int sbo, int swz)
{
    return simt::smem_desc(p, lbo, sbo, swz);
}
#else
__device__ __forceinline__ unsigned k_smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

#define K_MMA_16816_(ty)                                                                                           \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." ty "." ty ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "          \
                 "{%8,%9}, {%0,%1,%2,%3};"                                                                         \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                                  \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))
__device__ __forceinline__ void k_mma_bf16(float d[4], const unsigned a[4], const unsigned b[2]) { K_MMA_16816_("bf16"); }
__device__ __forceinline__ void k_mma_f16(float d[4], const unsigned a[4], const unsigned b[2]) { K_MMA_16816_("f16"); }
__device__ __forceinline__ void k_mma_tf32(float d[4], const unsigned a[4], const unsigned b[2])
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#define K_LDMATRIX_(n, tr, ...)                                                                                    \
    asm volatile("ldmatrix.sync.aligned.m8n8.x" #n tr ".shared.b16 " __VA_ARGS__)
__device__ __forceinline__ void k_ldm_x4(unsigned r[4], const void *p)
{
    K_LDMATRIX_(4, "", "{%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(k_smem_addr(p)));
}
__device__ __forceinline__ void k_ldm_x4_t(unsigned r[4], const void *p)
{
    K_LDMATRIX_(4, ".trans", "{%0,%1,%2,%3}, [%4];"
                : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(k_smem_addr(p)));
}
__device__ __forceinline__ void k_ldm_x2(unsigned r[2], const void *p)
{
    K_LDMATRIX_(2, "", "{%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(k_smem_addr(p)));
}
__device__ __forceinline__ void k_ldm_x2_t(unsigned r[2], const void *p)
{
    K_LDMATRIX_(2, ".trans", "{%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(k_smem_addr(p)));
}
__device__ __forceinline__ void k_cp_async16(void *dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(k_smem_addr(dst)), "l"(src), "r"(src_bytes)
                 : "memory");
}
template <int N> __device__ __forceinline__ void k_cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
#define K_MMA_BF16(d, a, b) k_mma_bf16(d, a, b)
#define K_MMA_F16(d, a, b) k_mma_f16(d, a, b)
#define K_MMA_TF32(d, a, b) k_mma_tf32(d, a, b)
#define K_LDMATRIX_X4(r, p) k_ldm_x4(r, p)
#define K_LDMATRIX_X4_T(r, p) k_ldm_x4_t(r, p)
#define K_LDMATRIX_X2(r, p) k_ldm_x2(r, p)
#define K_LDMATRIX_X2_T(r, p) k_ldm_x2_t(r, p)
#define K_CP_ASYNC16(dst, src, src_bytes) k_cp_async16(dst, src, src_bytes)
#define K_CP_ASYNC_COMMIT() asm volatile("cp.async.commit_group;" ::: "memory")
#define K_CP_ASYNC_WAIT(n) k_cp_async_wait<n>()
// Four registers (a prefetched 16-byte chunk's packed words) computed here: an empty
// volatile asm that "rewrites" them keeps nvcc from sinking their rounding past the
// products that follow, where it would hold eight fp32 values in place of four words.
#define K_PIN_X4(w) asm volatile("" : "+r"((w)[0]), "+r"((w)[1]), "+r"((w)[2]), "+r"((w)[3]))
// wgmma (sm_90a only: the arch-specific features; elsewhere the kernel traps, and the
// host never launches it there). m64n128k16, fp32 accumulators d[64] in PTX's D layout,
// both operands from shared memory through descriptors; TA / TB the imm-trans-a / -b
// immediates (1: the operand is M / N-major, its descriptor that layout's).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define K_WGMMA_128_(ty)                                                                                           \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" "wgmma.mma_async.sync.aligned.m64n128k16.f32." ty "." ty " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, %67, %68;\n" "}\n"                                         \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                                                                                         \
                 : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB))
template <int TA, int TB>
__device__ __forceinline__ void k_wgmma_bf16_128t(float *d, unsigned long long da, unsigned long long db, int scale_d)
{
    K_WGMMA_128_("bf16");
}
template <int TA, int TB>
__device__ __forceinline__ void k_wgmma_f16_128t(float *d, unsigned long long da, unsigned long long db, int scale_d)
{
    K_WGMMA_128_("f16");
}
// tf32: k8, both operands K-major (no imm-trans operands in PTX's tf32 form)
__device__ __forceinline__ void k_wgmma_tf32_128(float *d, unsigned long long da, unsigned long long db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1;\n" "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(scale_d));
}
#define K_WGMMA_FENCE() asm volatile("wgmma.fence.sync.aligned;" ::: "memory")
#define K_WGMMA_COMMIT() asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory")
#define K_WGMMA_WAIT(n) asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(n) : "memory")
#define K_FENCE_PROXY_ASYNC() asm volatile("fence.proxy.async.shared::cta;" ::: "memory")
#else
template <int TA, int TB>
__device__ __forceinline__ void k_wgmma_bf16_128t(float *, unsigned long long, unsigned long long, int) { __trap(); }
template <int TA, int TB>
__device__ __forceinline__ void k_wgmma_f16_128t(float *, unsigned long long, unsigned long long, int) { __trap(); }
__device__ __forceinline__ void k_wgmma_tf32_128(float *, unsigned long long, unsigned long long, int) { __trap(); }
#define K_WGMMA_FENCE() ((void)0)
#define K_WGMMA_COMMIT() ((void)0)
#define K_WGMMA_WAIT(n) ((void)0)
#define K_FENCE_PROXY_ASYNC() ((void)0)
#endif
#define K_WGMMA_BF16_128(d, da, db, scale_d) k_wgmma_bf16_128t<0, 0>(d, da, db, scale_d)
#define K_WGMMA_F16_128(d, da, db, scale_d) k_wgmma_f16_128t<0, 0>(d, da, db, scale_d)
#define K_WGMMA_BF16_128T(d, da, db, scale_d, ta, tb) k_wgmma_bf16_128t<ta, tb>(d, da, db, scale_d)
#define K_WGMMA_F16_128T(d, da, db, scale_d, ta, tb) k_wgmma_f16_128t<ta, tb>(d, da, db, scale_d)
#define K_WGMMA_TF32_128(d, da, db, scale_d) k_wgmma_tf32_128(d, da, db, scale_d)
__device__ __forceinline__ unsigned long long k_wgmma_desc(const void *p, int lbo, int sbo, int swz)
{
    unsigned long long a = k_smem_addr(p);
    return ((a & 0x3ffff) >> 4) | (unsigned long long)((lbo & 0x3ffff) >> 4) << 16 |
           (unsigned long long)((sbo & 0x3ffff) >> 4) << 32 | (unsigned long long)swz << 62;
}
#endif

// Two fp32 values into one bf16x2 / f16x2 register (lo in the low half), rounded to
// nearest even: cvt.rn on the GPU, rt/half.h here; the same bits but for NaN payloads.
#ifdef DDPRT_SIMT
__device__ __forceinline__ unsigned k_pack_bf16x2(float lo, float hi)
{
    return (unsigned)rt_f32_to_bf16(lo) | (unsigned)rt_f32_to_bf16(hi) << 16;
}
__device__ __forceinline__ unsigned k_pack_f16x2(float lo, float hi)
{
    return (unsigned)rt_f32_to_f16(lo) | (unsigned)rt_f32_to_f16(hi) << 16;
}
#else
__device__ __forceinline__ unsigned k_pack_bf16x2(float lo, float hi)
{
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ unsigned k_pack_f16x2(float lo, float hi)
{
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
#endif

// fp32 -> tf32 as the tensor cores take it (round to nearest, ties away: cvt.rna),
// the same bits on both builds.
__device__ __forceinline__ unsigned k_tf32(float f)
{
    unsigned u = __float_as_uint(f);
    if ((u & 0x7f800000u) == 0x7f800000u) return u; // inf, NaN as they are
    return (u + 0x1000u) & 0xffffe000u;
}

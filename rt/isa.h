/* The CPU's SIMD level, detected once, and the one list of DDPRT_ISA names: the CPU
 * kernels (kernels/cpu) and the transport's reductions (transport/tp_reduce.c) both
 * dispatch on it, so a name one of them accepts the other accepts too. */
#ifndef RT_ISA_H
#define RT_ISA_H

/* Levels, each a superset of the one before:
 *   generic     the compiler's baseline (SSE2 on x86-64)
 *   avx2        AVX2 + FMA + F16C
 *   avx512      + AVX-512 F and BW
 *   avx512bf16  + AVX-512 VL, BF16 and VBMI2: vdpbf16ps for the bf16 (--amp) kernels
 *               (VBMI2 expands 16-bit lanes: every AVX512-BF16 CPU but Cooper Lake,
 *               which takes the avx512 level) */
enum { RT_ISA_GENERIC, RT_ISA_AVX2, RT_ISA_AVX512, RT_ISA_AVX512BF16, RT_NISA };
/* The names in level order: DDPRT_ISA's choices in rt/env.c's table. */
#define RT_ISA_CHOICES "generic|avx2|avx512|avx512bf16"

int rt_isa_best(void);              /* the highest level this CPU supports */
/* rt_isa_best(), lowered by DDPRT_ISA when set (never raised: a level the CPU lacks
 * is one warning and the best level). */
int rt_isa_env(void);
const char *rt_isa_name(int isa);   /* "generic" ... "avx512bf16"; "?" out of range */
int rt_isa_parse(const char *name); /* the level of a name; -1 when unknown */
#endif

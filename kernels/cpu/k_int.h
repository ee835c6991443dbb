/* Internal to kernels/cpu: the thread pool, the ISA switch and the SIMD-specialised
 * building blocks (GEMM, im2col, elementwise loops). Not part of the public API. */
#ifndef K_INT_H
#define K_INT_H
#include <stddef.h>
#include <stdint.h>

#include "rt/isa.h"

/* rt/isa.h's levels, under the kernels' names. */
enum { K_ISA_GENERIC = RT_ISA_GENERIC, K_ISA_AVX2 = RT_ISA_AVX2, K_ISA_AVX512 = RT_ISA_AVX512,
       K_ISA_AVX512BF16 = RT_ISA_AVX512BF16 };
/* The fp32 path in use (detected once, env may lower); never K_ISA_AVX512BF16, which
 * the fp32 kernels run as K_ISA_AVX512. */
int k_isa_level(void);
int k_isa_bf16(void);                   /* the bf16 kernels may use vdpbf16ps */
/* The settings in force (k_settings.c), each resolved from the environment on first
 * read when no program set it: the ISA level (bf16 included), the conv algorithm, the
 * bf16 GEMM form, fp32 matmul precision high (1) or highest (0). */
int k_isa_raw(void);
int k_conv_algo_now(void);
int k_bf16_gemm_now(void);
int k_matmul_high_now(void);

/* Runs fn(ctx, task) for task in [0, ntasks) on the pool (the caller takes part).
 * Tasks must be independent; which thread runs a task never changes a result. */
typedef void (*k_task_fn)(void *ctx, int task);
void k_parallel_for(int ntasks, k_task_fn fn, void *ctx);

/* Splits [0, n) into `parts` near-equal contiguous ranges; range i is [*lo, *hi). */
static inline void k_split(long n, int parts, int i, long *lo, long *hi)
{
    *lo = n * i / parts;
    *hi = n * (i + 1) / parts;
}

/* Below this many elements an elementwise kernel is not worth waking the pool for. */
#define K_PAR_MIN_ELEMS (1L << 16)
#endif

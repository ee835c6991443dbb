/* Instantiates the transformer row kernels (k_tfm_simd.h) per ISA level through
 * rt/isa_each.h (generic: SSE2 on x86-64, scalar code elsewhere; avx2; avx512), with
 * target attributes on the functions only, and picks the table at run time. */
#include "kernels/cpu/k_int.h"
#include "kernels/cpu/k_tfm_int.h"
#include <math.h>
#include <stdint.h>

#define RT_ISA_TEMPLATE "kernels/cpu/k_tfm_simd.h"
#include "rt/isa_each.h"

const k_tfm_vt *k_tfm_vt_cur(void)
{
#if defined(__x86_64__) || defined(__i386__)
    int level = k_isa_level();
    if (level >= RT_ISA_AVX512) return &k_tfm_vt_avx512;
    if (level >= RT_ISA_AVX2) return &k_tfm_vt_avx2;
#endif
    return &k_tfm_vt_generic;
}

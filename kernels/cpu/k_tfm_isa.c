/* Instantiates the transformer row kernels (k_tfm_simd.h) for AVX-512, AVX2 and a
 * generic path (SSE2 on x86-64, scalar code elsewhere), with target attributes on the
 * functions only: the file builds with the default flags and picks at run time. */
#include "kernels/cpu/k_int.h"
#include "kernels/cpu/k_tfm_int.h"
#include <math.h>
#include <stdint.h>

#define VB 16
#define SFX _generic
#define TGT
#include "kernels/cpu/k_tfm_simd.h"
#undef VB
#undef SFX
#undef TGT

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define K_TFM_X86 1
#define VB 32
#define SFX _avx2
#define TGT __attribute__((target("avx2")))
#include "kernels/cpu/k_tfm_simd.h"
#undef VB
#undef SFX
#undef TGT

#define VB 64
#define SFX _avx512
#define TGT __attribute__((target("avx512f")))
#include "kernels/cpu/k_tfm_simd.h"
#undef VB
#undef SFX
#undef TGT
#endif

const k_tfm_vt *k_tfm_vt_cur(void)
{
#ifdef K_TFM_X86
    switch (k_isa_level()) {
    case K_ISA_AVX512: return &k_tfm_vt_avx512;
    case K_ISA_AVX2: return &k_tfm_vt_avx2;
    default: break;
    }
#endif
    return &k_tfm_vt_generic;
}

/* The one way to get a SIMD kernel per ISA level (rt/isa.h): write it once, as a
 * template header (no include guard) on ISA_VB-byte GCC vectors, then
 *     #define RT_ISA_TEMPLATE "path/to/x_simd.h"
 *     #include "rt/isa_each.h"
 * which includes the template once per level with
 *   ISA_FN(name)  name_generic, name_avx2, name_avx512 (ISA_SFX: the suffix alone)
 *   ISA_TARGET    the level's function attribute: the features rt/isa.c checks
 *   ISA_VB        vector bytes: 16 (the baseline: SSE2 on x86-64), 32, 64
 *   ISA_X86       1 on x86 (generic: where SSE2 is the baseline), whose intrinsics of the level the template
 *                 may use for what vector extensions lack (square roots, lane masks, F16C)
 * and call the level's variant with RT_ISA_CALL(level, name, args...) (avx512bf16 runs
 * avx512's; off x86 every level runs generic's). The template keeps its own names
 * apart per level with ISA_FN and #undefs its private macros at its end. */
#ifndef RT_ISA_TEMPLATE
#error "define RT_ISA_TEMPLATE (the template's path) before including rt/isa_each.h"
#endif
#include "rt/isa.h"

#ifndef RT_ISA_EACH_ONCE
#define RT_ISA_EACH_ONCE
#define RT_ISA_CAT_(a, b) a##b
#define RT_ISA_CAT(a, b) RT_ISA_CAT_(a, b)
#define ISA_FN(name) RT_ISA_CAT(name, ISA_SFX)
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RT_ISA_CALL(level, name, ...)                                                             \
    ((level) >= RT_ISA_AVX512 ? name##_avx512(__VA_ARGS__)                                        \
     : (level) >= RT_ISA_AVX2 ? name##_avx2(__VA_ARGS__) : name##_generic(__VA_ARGS__))
#else
#define RT_ISA_CALL(level, name, ...) ((void)(level), name##_generic(__VA_ARGS__))
#endif
#endif

#define ISA_SFX _generic
#define ISA_TARGET
#define ISA_VB 16
#ifdef __SSE2__
#define ISA_X86 1 /* SSE2: the x86-64 baseline */
#else
#define ISA_X86 0
#endif
#include RT_ISA_TEMPLATE
#undef ISA_SFX
#undef ISA_TARGET
#undef ISA_VB
#undef ISA_X86

#if defined(__x86_64__) || defined(__i386__)
#define ISA_SFX _avx2
#define ISA_TARGET __attribute__((target("avx2,fma,f16c")))
#define ISA_VB 32
#define ISA_X86 1
#include RT_ISA_TEMPLATE
#undef ISA_SFX
#undef ISA_TARGET
#undef ISA_VB

#define ISA_SFX _avx512
#define ISA_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw")))
#define ISA_VB 64
#include RT_ISA_TEMPLATE
#undef ISA_SFX
#undef ISA_TARGET
#undef ISA_VB
#undef ISA_X86
#endif
#undef RT_ISA_TEMPLATE

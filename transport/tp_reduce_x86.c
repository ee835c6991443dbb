/* The x86 vector paths: the kernels of tp_reduce_simd.h compiled for AVX2 (+F16C) and
 * AVX-512 (F+BW) through target attributes, so the file builds without -march flags
 * and the binary still runs on SSE2-only CPUs (tp_reduce.c picks at run time). */
#if defined(__x86_64__) || defined(__i386__)
#include "transport/tp_reduce.h"
#include <immintrin.h>

#define VB 32
#define SFX _avx2
#define TGT __attribute__((target("avx2,f16c")))
#define F16_LANES 8
#define F16_LOAD(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define F16_STORE(p, v) \
    _mm_storeu_si128((__m128i *)(void *)(p), _mm256_cvtps_ph((__m256)(v), _MM_FROUND_TO_NEAREST_INT))
#include "transport/tp_reduce_simd.h"
#undef VB
#undef SFX
#undef TGT
#undef F16_LANES
#undef F16_LOAD
#undef F16_STORE

#define VB 64
#define SFX _avx512
#define TGT __attribute__((target("avx512f,avx512bw")))
#define F16_LANES 16
#define F16_LOAD(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define F16_STORE(p, v) \
    _mm256_storeu_si256((__m256i *)(void *)(p), _mm512_cvtps_ph((__m512)(v), _MM_FROUND_TO_NEAREST_INT))
#include "transport/tp_reduce_simd.h"
#else
typedef int tp_reduce_x86_unused; /* ISO C forbids an empty translation unit */
#endif

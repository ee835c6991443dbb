/* Elementwise reductions for the collectives, vectorised with runtime dispatch.
 * Paths: generic (the baseline ISA: SSE2 on x86-64), avx2 (+F16C), avx512 (F+BW):
 * rt/isa.h's levels (its avx512bf16 runs as avx512). The best path the CPU supports is
 * picked once; DDPRT_ISA forces a lower one. Every path gives bit-identical results (tests check), so ranks on
 * different CPUs still agree. */
#ifndef TP_REDUCE_H
#define TP_REDUCE_H
#include "rt/half.h"
#include "rt/isa.h"
#include "rt/tensor.h"
#include "transport/tp.h"
#include <stddef.h>
#include <stdint.h>

enum { TP_ISA_GENERIC = RT_ISA_GENERIC, TP_ISA_AVX2 = RT_ISA_AVX2, TP_ISA_AVX512 = RT_ISA_AVX512, TP_NISA };

/* dst[i] = a[i] op b[i] for n elements; dst may alias a or b. AVG reduces as SUM
 * (tp_avg_finish divides once at the end). */
void tp_reduce(void *dst, const void *a, const void *b, size_t n, rt_dtype dt, tp_op op);
/* Divides n elements by world (the AVG tail); see tp.h for the integer rule. */
void tp_avg_finish(void *buf, size_t n, rt_dtype dt, int world);

int tp_isa_best(void);      /* the best path this CPU supports */
int tp_isa_active(void);    /* the path tp_reduce uses (after DDPRT_ISA) */
/* Runs one specific path (must be <= tp_isa_best()); for tests and benchmarks. */
void tp_reduce_isa(int isa, void *dst, const void *a, const void *b, size_t n, rt_dtype dt, tp_op op);

/* n floats into dt (RT_F16 or RT_BF16) and back, vectorised, the same bits as the
 * scalar conversions of rt/half.h. */
void tp_f32_to_half(uint16_t *dst, const float *src, size_t n, rt_dtype dt);
void tp_half_to_f32(float *dst, const uint16_t *src, size_t n, rt_dtype dt);

/* The per-ISA entry points (tp_reduce.c, from tp_reduce_simd.h). */
typedef void (*tp_reduce_fn)(void *dst, const void *a, const void *b, size_t n, int dt, int op);
void tp_reduce_generic(void *dst, const void *a, const void *b, size_t n, int dt, int op);
void tp_reduce_avx2(void *dst, const void *a, const void *b, size_t n, int dt, int op);
void tp_reduce_avx512(void *dst, const void *a, const void *b, size_t n, int dt, int op);
typedef void (*tp_convert_fn)(void *dst, const void *src, size_t n, int dt, int to16);
typedef int (*tp_avg_fn)(void *buf, size_t n, int dt, int world);
int tp_avg_generic(void *buf, size_t n, int dt, int world);
int tp_avg_avx2(void *buf, size_t n, int dt, int world);
int tp_avg_avx512(void *buf, size_t n, int dt, int world);
void tp_convert_generic(void *dst, const void *src, size_t n, int dt, int to16);
void tp_convert_avx2(void *dst, const void *src, size_t n, int dt, int to16);
void tp_convert_avx512(void *dst, const void *src, size_t n, int dt, int to16);
#endif

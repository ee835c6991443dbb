/* Reductions: the generic path, ISA dispatch, the AVG tail. */
#include "transport/tp_reduce.h"
#include <stdlib.h>
#include <string.h>

const char *const tp_op_names[TP_NOPS] = {"sum", "prod", "min", "max", "avg"};

/* The paths: generic (16-byte vectors: SSE2 on x86-64, whatever the target has
 * elsewhere), avx2 and avx512, from one template. */
#define RT_ISA_TEMPLATE "transport/tp_reduce_simd.h"
#include "rt/isa_each.h"

#if !(defined(__x86_64__) || defined(__i386__))
/* Other CPUs: the x86 paths are never chosen; keep the symbols for the table. */
void tp_reduce_avx2(void *d, const void *a, const void *b, size_t n, int dt, int op)
{ tp_reduce_generic(d, a, b, n, dt, op); }
void tp_reduce_avx512(void *d, const void *a, const void *b, size_t n, int dt, int op)
{ tp_reduce_generic(d, a, b, n, dt, op); }
void tp_convert_avx2(void *d, const void *s, size_t n, int dt, int to16) { tp_convert_generic(d, s, n, dt, to16); }
void tp_convert_avx512(void *d, const void *s, size_t n, int dt, int to16) { tp_convert_generic(d, s, n, dt, to16); }
int tp_avg_avx2(void *b, size_t n, int dt, int world) { return tp_avg_generic(b, n, dt, world); }
int tp_avg_avx512(void *b, size_t n, int dt, int world) { return tp_avg_generic(b, n, dt, world); }
#endif

static const tp_reduce_fn paths[TP_NISA] = {tp_reduce_generic, tp_reduce_avx2, tp_reduce_avx512};
static const tp_convert_fn cvts[TP_NISA] = {tp_convert_generic, tp_convert_avx2, tp_convert_avx512};
static const tp_avg_fn avgs[TP_NISA] = {tp_avg_generic, tp_avg_avx2, tp_avg_avx512};
/* rt/isa.c's level; avx512bf16 adds nothing the reductions use. */
int tp_isa_best(void) { return rt_isa_best() < TP_ISA_AVX512 ? rt_isa_best() : TP_ISA_AVX512; }
int tp_isa_active(void) { return rt_isa_env() < TP_ISA_AVX512 ? rt_isa_env() : TP_ISA_AVX512; }

void tp_reduce(void *dst, const void *a, const void *b, size_t n, rt_dtype dt, tp_op op)
{
    paths[tp_isa_active()](dst, a, b, n, (int)dt, (int)op);
}

void tp_f32_to_half(uint16_t *dst, const float *src, size_t n, rt_dtype dt)
{
    cvts[tp_isa_active()](dst, src, n, (int)dt, 1);
}

void tp_half_to_f32(float *dst, const uint16_t *src, size_t n, rt_dtype dt)
{
    cvts[tp_isa_active()](dst, src, n, (int)dt, 0);
}

void tp_reduce_isa(int isa, void *dst, const void *a, const void *b, size_t n, rt_dtype dt, tp_op op)
{
    if (isa < 0 || isa > tp_isa_best()) isa = tp_isa_best();
    paths[isa](dst, a, b, n, (int)dt, (int)op);
}

/* Runs once per op on 1/world of the data (ring) or on a small vector (rd), so a
 * plain loop is enough. Float: true division; integers: C division (toward zero). */
void tp_avg_finish(void *buf, size_t n, rt_dtype dt, int world)
{
    if (world <= 1 || !avgs[tp_isa_active()](buf, n, (int)dt, world)) return; /* floating types, vectorised */
    switch (dt) {
    case RT_I32: { int32_t *p = buf; for (size_t i = 0; i < n; i++) p[i] /= world; } break;
    case RT_I64: { int64_t *p = buf; for (size_t i = 0; i < n; i++) p[i] /= world; } break;
    case RT_U8: { uint8_t *p = buf; for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(p[i] / world); } break;
    default: break;
    }
}

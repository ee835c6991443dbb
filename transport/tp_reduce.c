/* Reductions: scalar conversions, the generic path, ISA dispatch, the AVG tail. */
#include "transport/tp_reduce.h"
#include <stdlib.h>
#include <string.h>

const char *const tp_isa_names[TP_NISA] = {"generic", "avx2", "avx512"};
const char *const tp_op_names[TP_NOPS] = {"sum", "prod", "min", "max", "avg"};

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float tp_f16_to_f32(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f) return u2f(s | 0x7f800000u | (m << 13));   /* inf, NaN */
    if (e) return u2f(s | ((e + 112) << 23) | (m << 13));    /* normal: rebias 15 -> 127 */
    if (!m) return u2f(s);
    /* Subnormal m * 2^-24: shift the leading one up to the implicit bit. */
    e = 113;
    while (!(m & 0x400)) { m <<= 1; e--; }
    return u2f(s | (e << 23) | ((m & 0x3ff) << 13));
}

uint16_t tp_f32_to_f16(float f)
{
    uint32_t u = f2u(f), a = u & 0x7fffffffu;
    uint16_t s = (uint16_t)((u >> 16) & 0x8000);
    if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00 | ((a >> 13) & 0x3ff)); /* NaN, quiet */
    if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00); /* >= 65520 rounds to inf */
    if (a >= 0x38800000u) {                               /* normal half (>= 2^-14) */
        uint32_t r = a - 0x38000000u;                     /* rebias 127 -> 15 */
        r += 0xfffu + ((r >> 13) & 1);                    /* round to nearest even */
        return (uint16_t)(s | (r >> 13));
    }
    if (a <= 0x33000000u) return s; /* <= 2^-25: half an ulp or less, ties to 0 (even) */
    /* Subnormal half: value / 2^-24 = mant >> (126 - e), rounded to nearest even. */
    uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u, sh = 126 - e;
    uint32_t h = mant >> sh, rem = mant & ((1u << sh) - 1), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(s | h);
}

float tp_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t tp_f32_to_bf16(float f)
{
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* The generic path: 16-byte vectors (SSE2 on x86-64, whatever the target has elsewhere). */
#define VB 16
#define SFX _generic
#define TGT
#include "transport/tp_reduce_simd.h"
#undef VB
#undef SFX
#undef TGT

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
/* Chosen once; a racy first call from two threads computes the same values. */
static int isa_best = -1, isa_active = -1;

int tp_isa_best(void)
{
    int best = __atomic_load_n(&isa_best, __ATOMIC_RELAXED);
    if (best >= 0) return best;
    best = TP_ISA_GENERIC;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) best = TP_ISA_AVX2;
    if (best == TP_ISA_AVX2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
        best = TP_ISA_AVX512;
#endif
    __atomic_store_n(&isa_best, best, __ATOMIC_RELAXED);
    return best;
}

int tp_isa_active(void)
{
    int act = __atomic_load_n(&isa_active, __ATOMIC_RELAXED);
    if (act >= 0) return act;
    act = tp_isa_best();
    const char *e = getenv("DDPRT_ISA");
    for (int i = 0; e && i < TP_NISA; i++)
        if (!strcmp(e, tp_isa_names[i]) && i < act) act = i; /* only ever lower */
    __atomic_store_n(&isa_active, act, __ATOMIC_RELAXED);
    return act;
}

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

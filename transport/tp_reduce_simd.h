/* Reduction kernels, written once with GCC/Clang vector extensions and included once
 * per ISA level by rt/isa_each.h (tp_reduce.c): ISA_VB-byte vectors, ISA_FN names,
 * ISA_TARGET; the x86 levels convert f16 with F16C (8 or 16 lanes a step).
 * Vector and scalar tails compute the same IEEE operations in the same order, so
 * every ISA produces identical bits; min/max are written as the x86 minps/maxps
 * semantics (x < y ? x : y) everywhere. Integer SUM/PROD run on unsigned types so
 * overflow wraps without undefined behaviour. */
#include <string.h>

#define S(x) ISA_FN(x)
#define VB ISA_VB
#define TGT ISA_TARGET
#if ISA_X86 && ISA_VB == 32
#define F16_LANES 8
#define F16_LOAD(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define F16_STORE(p, v) \
    _mm_storeu_si128((__m128i *)(void *)(p), _mm256_cvtps_ph((__m256)(v), _MM_FROUND_TO_NEAREST_INT))
#elif ISA_X86 && ISA_VB == 64
#define F16_LANES 16
#define F16_LOAD(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define F16_STORE(p, v) \
    _mm256_storeu_si256((__m256i *)(void *)(p), _mm512_cvtps_ph((__m512)(v), _MM_FROUND_TO_NEAREST_INT))
#endif

typedef float S(vf) __attribute__((vector_size(VB)));
typedef double S(vd) __attribute__((vector_size(VB)));
typedef int32_t S(vi32) __attribute__((vector_size(VB)));
typedef uint32_t S(vu32) __attribute__((vector_size(VB)));
typedef int64_t S(vi64) __attribute__((vector_size(VB)));
typedef uint64_t S(vu64) __attribute__((vector_size(VB)));
typedef uint8_t S(vu8) __attribute__((vector_size(VB)));
typedef uint16_t S(vh) __attribute__((vector_size(VB / 2)));

/* Blend by a comparison mask (all-ones lanes pick p), in the integer type VI. */
#define SEL(VI, m, p, q) ((__typeof__(p))((((VI)(p)) & ((VI)(m))) | (((VI)(q)) & ~((VI)(m)))))

/* One elementwise loop: VEXPR on vectors x, y; SEXPR on scalars x, y. */
#define BIN_LOOP(T, VT, VEXPR, SEXPR)                                               \
    do {                                                                            \
        const T *pa = a, *pb = b;                                                   \
        T *pd = dst;                                                                \
        size_t i = 0;                                                               \
        for (; i + VB / sizeof(T) <= n; i += VB / sizeof(T)) {                      \
            VT x, y, z;                                                             \
            memcpy(&x, pa + i, VB);                                                 \
            memcpy(&y, pb + i, VB);                                                 \
            z = (VEXPR);                                                            \
            memcpy(pd + i, &z, VB);                                                 \
        }                                                                           \
        for (; i < n; i++) {                                                        \
            T x = pa[i], y = pb[i];                                                 \
            pd[i] = (T)(SEXPR);                                                     \
        }                                                                           \
    } while (0)

/* The four ops for one type: T/VT for the data, UT/VU for wrap-around arithmetic
 * (same as T/VT for floats), VI the mask type. */
#define ALL_OPS(T, VT, UT, VU, VI)                                                  \
    switch (op) {                                                                   \
    case TP_PROD: BIN_LOOP(UT, VU, x * y, x * y); break;                            \
    case TP_MIN: BIN_LOOP(T, VT, SEL(VI, x < y, x, y), x < y ? x : y); break;       \
    case TP_MAX: BIN_LOOP(T, VT, SEL(VI, x > y, x, y), x > y ? x : y); break;       \
    default: BIN_LOOP(UT, VU, x + y, x + y); break;                                 \
    }

static inline TGT S(vf) S(fop)(S(vf) x, S(vf) y, int op)
{
    switch (op) {
    case TP_PROD: return x * y;
    case TP_MIN: return SEL(S(vi32), x < y, x, y);
    case TP_MAX: return SEL(S(vi32), x > y, x, y);
    default: return x + y;
    }
}

static inline float S(fops)(float x, float y, int op)
{
    switch (op) {
    case TP_PROD: return x * y;
    case TP_MIN: return x < y ? x : y;
    case TP_MAX: return x > y ? x : y;
    default: return x + y;
    }
}

/* bf16 <-> f32 on vectors: widen by a shift; round to nearest even (NaN: quieted),
 * as rt_f32_to_bf16. */
static inline TGT S(vf) S(bf16_load)(const uint16_t *p)
{
    S(vh) h;
    memcpy(&h, p, VB / 2);
    return (S(vf))(__builtin_convertvector(h, S(vu32)) << 16);
}

static inline TGT void S(bf16_store)(uint16_t *p, S(vf) x)
{
    S(vu32) u = (S(vu32))x;
    S(vu32) r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    S(vu32) nan = (S(vu32))((u & 0x7fffffffu) > 0x7f800000u);
    r = (r & ~nan) | (((u >> 16) | 0x40u) & nan);
    S(vh) h = __builtin_convertvector(r, S(vh));
    memcpy(p, &h, VB / 2);
}

/* bf16: widen to f32, reduce, round back. */
static TGT void S(red_bf16)(uint16_t *pd, const uint16_t *pa, const uint16_t *pb, size_t n, int op)
{
    size_t i = 0;
    for (; i + VB / 4 <= n; i += VB / 4) S(bf16_store)(pd + i, S(fop)(S(bf16_load)(pa + i), S(bf16_load)(pb + i), op));
    for (; i < n; i++)
        pd[i] = rt_f32_to_bf16(S(fops)(rt_bf16_to_f32(pa[i]), rt_bf16_to_f32(pb[i]), op));
}

static TGT void S(red_f16)(uint16_t *pd, const uint16_t *pa, const uint16_t *pb, size_t n, int op)
{
    size_t i = 0;
#ifdef F16_LANES
    for (; i + F16_LANES <= n; i += F16_LANES) {
        S(vf) x = (S(vf))F16_LOAD(pa + i), y = (S(vf))F16_LOAD(pb + i);
        F16_STORE(pd + i, S(fop)(x, y, op));
    }
#endif
    for (; i < n; i++)
        pd[i] = rt_f32_to_f16(S(fops)(rt_f16_to_f32(pa[i]), rt_f16_to_f32(pb[i]), op));
}

/* f32 <-> f16 / bf16 for n elements (dt: the 16-bit type), the scalar functions'
 * rounding bit for bit. */
TGT void ISA_FN(tp_convert)(void *dst, const void *src, size_t n, int dt, int to16)
{
    size_t i = 0;
    if (to16) {
        const float *ps = src;
        uint16_t *pd = dst;
        if (dt == RT_BF16) {
            for (; i + VB / 4 <= n; i += VB / 4) {
                S(vf) x;
                memcpy(&x, ps + i, VB);
                S(bf16_store)(pd + i, x);
            }
            for (; i < n; i++) pd[i] = rt_f32_to_bf16(ps[i]);
            return;
        }
#ifdef F16_LANES
        for (; i + F16_LANES <= n; i += F16_LANES) {
            S(vf) x;
            memcpy(&x, ps + i, VB);
            F16_STORE(pd + i, x);
        }
#endif
        for (; i < n; i++) pd[i] = rt_f32_to_f16(ps[i]);
        return;
    }
    const uint16_t *ps = src;
    float *pd = dst;
    if (dt == RT_BF16) {
        for (; i + VB / 4 <= n; i += VB / 4) {
            S(vf) x = S(bf16_load)(ps + i);
            memcpy(pd + i, &x, VB);
        }
        for (; i < n; i++) pd[i] = rt_bf16_to_f32(ps[i]);
        return;
    }
#ifdef F16_LANES
    for (; i + F16_LANES <= n; i += F16_LANES) {
        S(vf) x = (S(vf))F16_LOAD(ps + i);
        memcpy(pd + i, &x, VB);
    }
#endif
    for (; i < n; i++) pd[i] = rt_f16_to_f32(ps[i]);
}

/* The AVG tail: n floating elements divided by world (true division, as the scalar
 * loop; halves through f32 and back, rounding as the scalar functions). 1 when dt is
 * an integer type (the caller's scalar loop). */
TGT int ISA_FN(tp_avg)(void *buf, size_t n, int dt, int world)
{
    size_t i = 0;
    float w = (float)world;
    S(vf) vw = (S(vf)){0} + w;
    switch (dt) {
    case RT_F32: {
        float *p = buf;
        for (; i + VB / 4 <= n; i += VB / 4) {
            S(vf) x;
            memcpy(&x, p + i, VB);
            x = x / vw;
            memcpy(p + i, &x, VB);
        }
        for (; i < n; i++) p[i] /= w;
        return 0;
    }
    case RT_F64: {
        double *p = buf;
        S(vd) vd = (S(vd)){0} + (double)world;
        for (; i + VB / 8 <= n; i += VB / 8) {
            S(vd) x;
            memcpy(&x, p + i, VB);
            x = x / vd;
            memcpy(p + i, &x, VB);
        }
        for (; i < n; i++) p[i] /= world;
        return 0;
    }
    case RT_F16: {
        uint16_t *p = buf;
#ifdef F16_LANES
        for (; i + F16_LANES <= n; i += F16_LANES) {
            S(vf) x = (S(vf))F16_LOAD(p + i);
            F16_STORE(p + i, x / vw);
        }
#endif
        for (; i < n; i++) p[i] = rt_f32_to_f16(rt_f16_to_f32(p[i]) / w);
        return 0;
    }
    case RT_BF16: {
        uint16_t *p = buf;
        for (; i + VB / 4 <= n; i += VB / 4) S(bf16_store)(p + i, S(bf16_load)(p + i) / vw);
        for (; i < n; i++) p[i] = rt_f32_to_bf16(rt_bf16_to_f32(p[i]) / w);
        return 0;
    }
    default: return 1;
    }
}

TGT void ISA_FN(tp_reduce)(void *dst, const void *a, const void *b, size_t n, int dt, int op)
{
    if (op == TP_AVG) op = TP_SUM;
    switch (dt) {
    case RT_F32: ALL_OPS(float, S(vf), float, S(vf), S(vi32)); break;
    case RT_F64: ALL_OPS(double, S(vd), double, S(vd), S(vi64)); break;
    case RT_I32: ALL_OPS(int32_t, S(vi32), uint32_t, S(vu32), S(vi32)); break;
    case RT_I64: ALL_OPS(int64_t, S(vi64), uint64_t, S(vu64), S(vi64)); break;
    case RT_U8: ALL_OPS(uint8_t, S(vu8), uint8_t, S(vu8), S(vu8)); break;
    case RT_BF16: S(red_bf16)(dst, a, b, n, op); break;
    case RT_F16: S(red_f16)(dst, a, b, n, op); break;
    default: break;
    }
}

#undef S
#undef VB
#undef TGT
#undef F16_LANES
#undef F16_LOAD
#undef F16_STORE
#undef SEL
#undef BIN_LOOP
#undef ALL_OPS

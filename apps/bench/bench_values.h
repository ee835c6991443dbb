/* The values ddprt-bench --check sends and expects, also those of the shared-memory
 * collectives test (test/progs/shm_coll.c): rank r's element i for an op, small integers
 * exact in every dtype (u8: non-negative), and their reduction over the ranks as the
 * dtype stores it. Header-only: the test program includes it without the app. */
#ifndef APPS_BENCH_VALUES_H
#define APPS_BENCH_VALUES_H
#include "rt/half.h"
#include "rt/tensor.h"
#include "transport/tp.h"
#include <stddef.h>
#include <stdint.h>

static inline int64_t bench_value(int op, rt_dtype dt, int r, size_t i)
{
    if (op == TP_PROD) {
        size_t k = (i + (size_t)r) % 7;
        return k == 3 ? 2 : (k == 5 && dt != RT_U8) ? -1 : 1;
    }
    if (op == TP_MIN || op == TP_MAX) return (int64_t)((i * 31 + (size_t)r * 17) % 101) - (dt == RT_U8 ? 0 : 50);
    return (int64_t)((i * 7 + (size_t)r * 13) % 17) - (dt == RT_U8 ? 0 : 8);
}

/* Element i of buf (dtype dt) set to / read as a double. */
static inline void bench_put(void *buf, size_t i, rt_dtype dt, double v)
{
    switch (dt) {
    case RT_F32: ((float *)buf)[i] = (float)v; break;
    case RT_F64: ((double *)buf)[i] = v; break;
    case RT_F16: ((uint16_t *)buf)[i] = rt_f32_to_f16((float)v); break;
    case RT_BF16: ((uint16_t *)buf)[i] = rt_f32_to_bf16((float)v); break;
    case RT_I32: ((int32_t *)buf)[i] = (int32_t)(int64_t)v; break;
    case RT_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    default: ((uint8_t *)buf)[i] = (uint8_t)(int64_t)v;
    }
}

static inline double bench_get(const void *buf, size_t i, rt_dtype dt)
{
    switch (dt) {
    case RT_F32: return ((const float *)buf)[i];
    case RT_F64: return ((const double *)buf)[i];
    case RT_F16: return rt_f16_to_f32(((const uint16_t *)buf)[i]);
    case RT_BF16: return rt_bf16_to_f32(((const uint16_t *)buf)[i]);
    case RT_I32: return ((const int32_t *)buf)[i];
    case RT_I64: return (double)((const int64_t *)buf)[i];
    default: return ((const uint8_t *)buf)[i];
    }
}

/* v as dtype dt stores it. */
static inline double bench_as(rt_dtype dt, double v)
{
    unsigned char t[8];
    bench_put(t, 0, dt, v);
    return bench_get(t, 0, dt);
}

/* Element i reduced with op over `world` ranks, as dt stores it. */
static inline double bench_reduced(int op, rt_dtype dt, int world, size_t i)
{
    int64_t a = bench_value(op, dt, 0, i);
    for (int q = 1; q < world; q++) {
        int64_t v = bench_value(op, dt, q, i);
        a = op == TP_PROD ? a * v : op == TP_MIN ? (v < a ? v : a) : op == TP_MAX ? (v > a ? v : a) : a + v;
    }
    double e = (double)a;
    if (op == TP_AVG) {
        int isfloat = dt == RT_F32 || dt == RT_F16 || dt == RT_BF16;
        e = dt == RT_F64 ? (double)a / world : isfloat ? (double)((float)a / (float)world) : (double)(a / world);
    }
    return bench_as(dt, e);
}
#endif

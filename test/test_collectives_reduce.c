/* Reduction kernels: every ISA path agrees bit for bit with the generic one, and the
 * vectorised f16/bf16 block conversions with rt/half.h (which test_half.c checks). */
#include "test/t.h"
#include "transport/tp_reduce.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* Random bits of dtype dt that are finite numbers (NaN payloads may differ between
 * F16C and software, and are not what we reduce). */
static void fill_random(rt_dtype dt, unsigned char *p, size_t n)
{
    size_t es = rt_dtype_size(dt);
    for (size_t i = 0; i < n; i++) {
        uint64_t v = next();
        if (dt == RT_F32) { uint32_t u = (uint32_t)v; if (((u >> 23) & 0xff) == 0xff) u &= ~(1u << 30); memcpy(p + 4 * i, &u, 4); }
        else if (dt == RT_F64) { if (((v >> 52) & 0x7ff) == 0x7ff) v &= ~(1ull << 62); memcpy(p + 8 * i, &v, 8); }
        else if (dt == RT_F16) { uint16_t h = (uint16_t)v; if (((h >> 10) & 0x1f) == 0x1f) h &= (uint16_t)~0x4000; memcpy(p + 2 * i, &h, 2); }
        else if (dt == RT_BF16) { uint16_t h = (uint16_t)v; if (((h >> 7) & 0xff) == 0xff) h &= (uint16_t)~0x4000; memcpy(p + 2 * i, &h, 2); }
        else memcpy(p + es * i, &v, es);
    }
}

TEST(tp_reduce_isa_paths_agree)
{
    enum { N = 1000 + 37 };
    static unsigned char a[N * 8 + 8], b[N * 8 + 8], want[N * 8 + 8], got[N * 8 + 8];
    int best = tp_isa_best();
    for (int dt = 0; dt < RT_NDTYPE; dt++) {
        size_t es = rt_dtype_size((rt_dtype)dt);
        fill_random((rt_dtype)dt, a, N + 1);
        fill_random((rt_dtype)dt, b, N + 1);
        for (int op = 0; op < TP_NOPS; op++)
            for (size_t off = 0; off < 2; off++) { /* off 1: unaligned vectors */
                size_t n = N - off * 5;
                tp_reduce_isa(TP_ISA_GENERIC, want, a + off * es, b + off * es, n, (rt_dtype)dt, (tp_op)op);
                for (int isa = 1; isa <= best; isa++) {
                    memset(got, 0, sizeof got);
                    tp_reduce_isa(isa, got, a + off * es, b + off * es, n, (rt_dtype)dt, (tp_op)op);
                    size_t bad = 0;
                    while (bad < n && !memcmp(got + bad * es, want + bad * es, es)) bad++;
                    CHECKF(bad == n, "%s %s %s: element %zu differs from generic", rt_isa_name(isa),
                           rt_dtype_names[dt], tp_op_names[op], bad);
                }
                /* In place (dst == a) gives the same bits. */
                memcpy(got, a + off * es, n * es);
                tp_reduce(got, got, b + off * es, n, (rt_dtype)dt, (tp_op)op);
                CHECKF(!memcmp(got, want, n * es), "%s %s in place", rt_dtype_names[dt], tp_op_names[op]);
            }
    }
}

TEST(tp_reduce_small_values_exact)
{
    float a[19], b[19], d[19];
    int32_t ia[19], ib[19], id[19];
    for (int i = 0; i < 19; i++) { a[i] = (float)i; b[i] = (float)(2 * i - 9); ia[i] = i; ib[i] = 2 * i - 9; }
    for (int isa = 0; isa <= tp_isa_best(); isa++) {
        tp_reduce_isa(isa, d, a, b, 19, RT_F32, TP_SUM);
        tp_reduce_isa(isa, id, ia, ib, 19, RT_I32, TP_MIN);
        for (int i = 0; i < 19; i++) {
            CHECKF(d[i] == (float)(3 * i - 9), "%s f32 sum [%d] = %g", rt_isa_name(isa), i, d[i]);
            CHECKF(id[i] == (i < 2 * i - 9 ? i : 2 * i - 9), "%s i32 min [%d]", rt_isa_name(isa), i);
        }
    }
    int32_t big[2] = {INT32_MAX, INT32_MIN}, one[2] = {1, -1}, r[2];
    tp_reduce(r, big, one, 2, RT_I32, TP_SUM); /* wraps, no UB */
    CHECK(r[0] == INT32_MIN && r[1] == INT32_MAX);
    int32_t av[3] = {-3, 7, 5};
    tp_avg_finish(av, 3, RT_I32, 2);
    CHECK(av[0] == -1 && av[1] == 3 && av[2] == 2);
}

/* The vectorised block conversions (--grad-compress packing, the f16/bf16 AVG) give the
 * scalar functions' bits on every ISA path, NaNs included: all 65536 half values up,
 * and down random floats around the half range, random bit patterns and the edges. */
TEST(tp_half_block_conversions_match_scalar_on_every_isa)
{
    enum { N = 70001 }; /* odd: every path's scalar tail runs too */
    static float f[N], back[N];
    static uint16_t h[N], hv[N];
    static const tp_convert_fn path[TP_NISA] = {tp_convert_generic, tp_convert_avx2, tp_convert_avx512};
    static const float edge[] = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f, 1e30f, -1e30f, 0x1p-24f,
                                 0x1p-25f, 0x1.8p-25f, 0x1.ffcp-15f, 1.0f + 0x1p-11f, 1.0f + 0x1p-8f};
    for (int i = 0; i < N; i++) {
        uint32_t u = (uint32_t)next();
        u = (u & 0x807fffffu) | ((100 + (u >> 23) % 52) << 23);
        if (i % 5 == 0) u = (uint32_t)next(); /* any class: NaNs, infinities, subnormals */
        f[i] = i < (int)(sizeof edge / sizeof *edge) ? edge[i] : i == 20 ? u2f(0x7f800000u) : i == 21 ? u2f(0x7fc00001u) : u2f(u);
    }
    int bad = 0;
    for (int isa = 0; isa <= tp_isa_best(); isa++)
        for (int k = 0; k < 2; k++) {
            rt_dtype dt = k ? RT_BF16 : RT_F16;
            path[isa](hv, f, N, dt, 1);
            for (int i = 0; i < N; i++) bad += hv[i] != (k ? rt_f32_to_bf16(f[i]) : rt_f32_to_f16(f[i]));
            for (int i = 0; i < N; i++) h[i] = (uint16_t)(i * 7);
            path[isa](back, h, N, dt, 0);
            for (int i = 0; i < N; i++) bad += f2u(back[i]) != f2u(k ? rt_bf16_to_f32(h[i]) : rt_f16_to_f32(h[i]));
        }
    CHECK_EQ(bad, 0);
}

/* The AVG tail on every ISA path: true division by world (3: not a power of two) in
 * each floating type, the halves through f32 and back, the scalar loop's bits. */
TEST(tp_avg_paths_match_scalar_division)
{
    enum { N = 1003 };
    static const tp_avg_fn path[TP_NISA] = {tp_avg_generic, tp_avg_avx2, tp_avg_avx512};
    static float f[N];
    static double d[N];
    static uint16_t h[N], b[N];
    int bad = 0;
    for (int isa = 0; isa <= tp_isa_best(); isa++) {
        for (int i = 0; i < N; i++) {
            f[i] = (float)((int)(next() % 20001) - 10000) * 0.37f;
            d[i] = (double)f[i] * 1.0001;
            h[i] = (uint16_t)(i * 61), b[i] = (uint16_t)(i * 67);
            if (((h[i] >> 10) & 0x1f) == 0x1f) h[i] = 0x3c00; /* NaN payloads aside */
            if (((b[i] >> 7) & 0xff) == 0xff) b[i] = 0x3f80;
        }
        float f0[N];
        double d0[N];
        uint16_t h0[N], b0[N];
        memcpy(f0, f, sizeof f), memcpy(d0, d, sizeof d), memcpy(h0, h, sizeof h), memcpy(b0, b, sizeof b);
        CHECK(!path[isa](f, N, RT_F32, 3) && !path[isa](d, N, RT_F64, 3) && !path[isa](h, N, RT_F16, 3) &&
              !path[isa](b, N, RT_BF16, 3) && path[isa](f, N, RT_I32, 3) == 1);
        for (int i = 0; i < N; i++) {
            bad += f2u(f[i]) != f2u(f0[i] / 3.0f);
            bad += d[i] != d0[i] / 3;
            bad += h[i] != rt_f32_to_f16(rt_f16_to_f32(h0[i]) / 3.0f);
            bad += b[i] != rt_f32_to_bf16(rt_bf16_to_f32(b0[i]) / 3.0f);
        }
    }
    CHECK_EQ(bad, 0);
}

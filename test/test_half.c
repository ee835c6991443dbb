/* rt/half.h, the one f16/bf16 conversion: every 16-bit value both ways, every rounding
 * boundary (the midpoint between each pair of neighbours and the floats either side of
 * it), every class of f32 (zeros, subnormals, normals, the f16 range's edges, infinities,
 * quiet and signalling NaNs of both signs), against the rule written out independently
 * here and against the x86 conversion instructions where the CPU has them. */
#include "test/t.h"
#include "rt/half.h"
#include "rt/isa.h"
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint64_t rs = 0x2545F4914F6CDD1DULL;
static uint32_t rnd32(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (uint32_t)(rs >> 16); }

/* The value of a finite f16 from its fields, in double (exact): (m + implicit) * 2^(e-25). */
static double f16_value(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = ldexp(e ? m + 1024 : m, (e ? e : 1) - 25);
    return h & 0x8000 ? -v : v;
}

static int is_nan32(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

/* The rule for a NaN narrowed to f16 / bf16: sign and top payload bits, quiet bit set. */
static uint16_t nan16(uint32_t u) { return (uint16_t)((u >> 16 & 0x8000) | 0x7e00 | (u >> 13 & 0x3ff)); }
static uint16_t nanbf(uint32_t u) { return (uint16_t)(u >> 16 | 0x40); }

TEST(half_f16_every_value_both_ways)
{
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        uint32_t s = (h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
        uint32_t got = f2u(rt_f16_to_f32((uint16_t)h)), want;
        if (e == 0x1f) want = s | 0x7f800000u | (m ? 0x400000u | m << 13 : 0); /* inf; NaN quieted */
        else want = f2u((float)f16_value((uint16_t)h));                        /* exact in f32 */
        uint16_t back = rt_f32_to_f16(u2f(got)), wback = e == 0x1f && m ? (uint16_t)(h | 0x200) : (uint16_t)h;
        if (got != want || back != wback) {
            if (bad++ < 5) CHECKF(0, "f16 0x%04x -> 0x%08x (want 0x%08x) -> 0x%04x (want 0x%04x)", h, got, want,
                                  back, wback);
        }
    }
    CHECK_EQ(bad, 0);
}

/* Between each finite f16 and its upper neighbour (0x7c00 counts as 65536 there: values
 * from its midpoint 65520 up round to inf): the midpoint goes to the even one, the
 * floats just below and above it to the nearer one. Both signs. */
TEST(half_f16_every_rounding_boundary)
{
    int bad = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double lo = f16_value((uint16_t)h), hi = h == 0x7bff ? 65536.0 : f16_value((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2); /* exact: one bit past f16's 11 */
        CHECK((double)mid == (lo + hi) / 2);
        float below = nextafterf(mid, 0), above = nextafterf(mid, INFINITY);
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        for (int neg = 0; neg < 2; neg++) {
            float sg = neg ? -1.0f : 1.0f;
            uint16_t sb = neg ? 0x8000 : 0;
            if (rt_f32_to_f16(sg * mid) != (even | sb) || rt_f32_to_f16(sg * below) != (h | sb) ||
                rt_f32_to_f16(sg * above) != ((h + 1) | sb) || rt_f32_to_f16(sg * (float)lo) != (h | sb))
                if (bad++ < 5) CHECKF(0, "f16 boundary above 0x%04x (sign %d)", h, neg);
        }
    }
    CHECK_EQ(bad, 0);
}

/* Every bf16 value widens to its 16-bit shift; for each, the f32s with that top half and
 * low halves 0, 1, 0x7fff, 0x8000 (the tie), 0x8001, 0xffff round as the rule says. */
TEST(half_bf16_every_value_and_boundary)
{
    static const uint32_t lows[] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xffff};
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if (f2u(rt_bf16_to_f32((uint16_t)h)) != h << 16 && bad++ < 5) CHECKF(0, "bf16 0x%04x widens wrong", h);
        for (size_t k = 0; k < sizeof lows / sizeof *lows; k++) {
            uint32_t u = h << 16 | lows[k], want;
            if (is_nan32(u)) want = nanbf(u);
            else if ((u & 0x7fffffffu) == 0x7f800000u) want = h;          /* inf */
            else if (lows[k] < 0x8000) want = h;                          /* down (toward 0) */
            else if (lows[k] > 0x8000) want = h + 1;                      /* up: may carry into inf */
            else want = h & 1 ? h + 1 : h;                                /* tie: even */
            uint16_t got = rt_f32_to_bf16(u2f(u));
            if (got != want && bad++ < 5) CHECKF(0, "bf16(0x%08x) = 0x%04x, want 0x%04x", u, got, want);
        }
    }
    CHECK_EQ(bad, 0);
}

/* One of each kind of f32, with the f16 and bf16 each must give. */
static const struct { uint32_t u; uint16_t f16, bf16; } classes[] = {
    {0x00000000u, 0x0000, 0x0000}, {0x80000000u, 0x8000, 0x8000},   /* zeros */
    {0x00000001u, 0x0000, 0x0000}, {0x807fffffu, 0x8000, 0x8080},   /* f32 subnormals */
    {0x00008000u, 0x0000, 0x0000}, {0x00018000u, 0x0000, 0x0002},   /* bf16 subnormal ties */
    {0x00800000u, 0x0000, 0x0080},                                  /* FLT_MIN */
    {0x33000000u, 0x0000, 0x3300}, {0x33000001u, 0x0001, 0x3300},   /* 2^-25: f16's first tie */
    {0x33800000u, 0x0001, 0x3380}, {0x387fe000u, 0x0400, 0x3880},   /* 2^-24; a tie up into the normals */
    {0x38800000u, 0x0400, 0x3880}, {0x3f800000u, 0x3c00, 0x3f80},   /* 2^-14; 1 */
    {0x3f801000u, 0x3c00, 0x3f80}, {0x3f803000u, 0x3c02, 0x3f80},   /* f16 ties to even */
    {0x477fe000u, 0x7bff, 0x4780}, {0x477fefffu, 0x7bff, 0x4780},   /* 65504; just under 65520 */
    {0x477ff000u, 0x7c00, 0x4780}, {0xc77ff000u, 0xfc00, 0xc780},   /* 65520: inf */
    {0x7f7fffffu, 0x7c00, 0x7f80}, {0xff7fffffu, 0xfc00, 0xff80},   /* FLT_MAX */
    {0x7f800000u, 0x7c00, 0x7f80}, {0xff800000u, 0xfc00, 0xff80},   /* infinities */
    {0x7fc00000u, 0x7e00, 0x7fc0}, {0xffc00000u, 0xfe00, 0xffc0},   /* quiet NaNs */
    {0x7f800001u, 0x7e00, 0x7fc0}, {0xff800001u, 0xfe00, 0xffc0},   /* signalling, payload below both */
    {0x7fa5a5a5u, 0x7f2d, 0x7fe5}, {0xffbfffffu, 0xffff, 0xffff},   /* payloads kept (top bits), quieted */
    {0x7f802000u, 0x7e01, 0x7fc0},
};

TEST(half_every_f32_class)
{
    for (size_t i = 0; i < sizeof classes / sizeof *classes; i++) {
        float f = u2f(classes[i].u);
        CHECKF(rt_f32_to_f16(f) == classes[i].f16, "f16(0x%08x) = 0x%04x, want 0x%04x", classes[i].u,
               rt_f32_to_f16(f), classes[i].f16);
        CHECKF(rt_f32_to_bf16(f) == classes[i].bf16, "bf16(0x%08x) = 0x%04x, want 0x%04x", classes[i].u,
               rt_f32_to_bf16(f), classes[i].bf16);
        if (is_nan32(classes[i].u))
            CHECK(classes[i].f16 == nan16(classes[i].u) && classes[i].bf16 == nanbf(classes[i].u));
    }
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f)
{
    return (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0);
}
__attribute__((target("f16c"))) static float hw_f16_to_f32(uint16_t h)
{
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}
__attribute__((target("avx512f,avx512bf16"))) static uint16_t hw_f32_to_bf16(float f)
{
    __m256bh v = _mm512_cvtneps_pbh(_mm512_set1_ps(f));
    uint16_t o[16];
    memcpy(o, &v, sizeof o);
    return o[0];
}
#endif

/* The instructions the vector paths use give the same bits: every f16 widened, the
 * class list and 2^21 random bit patterns (all classes) narrowed. vcvtneps2bf16 flushes
 * subnormal inputs to zero (documented in kernels/cpu/k_bf16.c): those are compared as
 * that. */
TEST(half_matches_x86_conversion_instructions)
{
#if defined(__x86_64__) || defined(__i386__)
    int f16c = rt_isa_best() >= RT_ISA_AVX2, bf16 = rt_isa_best() >= RT_ISA_AVX512BF16, bad = 0;
    if (!f16c) {
        t_note("no F16C here: hardware comparison skipped");
        return;
    }
    for (uint32_t h = 0; h < 0x10000; h++)
        if (f2u(hw_f16_to_f32((uint16_t)h)) != f2u(rt_f16_to_f32((uint16_t)h)) && bad++ < 5)
            CHECKF(0, "f16 0x%04x: vcvtph2ps 0x%08x, rt 0x%08x", h, f2u(hw_f16_to_f32((uint16_t)h)),
                   f2u(rt_f16_to_f32((uint16_t)h)));
    size_t nc = sizeof classes / sizeof *classes;
    for (size_t i = 0; i < nc + (1u << 21); i++) {
        uint32_t u = i < nc ? classes[i].u : rnd32();
        if (i >= nc && (i & 1)) u = (u & 0x807fffffu) | ((100 + (u >> 23) % 52) << 23); /* near f16's range */
        float f = u2f(u);
        if (hw_f32_to_f16(f) != rt_f32_to_f16(f) && bad++ < 5)
            CHECKF(0, "f16(0x%08x): vcvtps2ph 0x%04x, rt 0x%04x", u, hw_f32_to_f16(f), rt_f32_to_f16(f));
        if (!bf16) continue;
        int sub = (u & 0x7f800000u) == 0 && (u & 0x7fffffu);
        uint16_t want = sub ? (uint16_t)(u >> 16 & 0x8000) : rt_f32_to_bf16(f);
        if (hw_f32_to_bf16(f) != want && bad++ < 5)
            CHECKF(0, "bf16(0x%08x): vcvtneps2bf16 0x%04x, rt 0x%04x", u, hw_f32_to_bf16(f), want);
    }
    CHECK_EQ(bad, 0);
    if (!bf16) t_note("no AVX512-BF16 here: vcvtneps2bf16 comparison skipped");
#endif
}

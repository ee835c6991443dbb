/* f16 (IEEE binary16) and bf16 <-> f32, bit for bit: the one copy that the transport's
 * reductions, the CPU kernels and the CUDA kernels share, so a gradient rounded on a GPU,
 * in a CPU kernel or inside an allreduce gets the same 16 bits. Header only: it compiles
 * as C11, as C++ and as CUDA (host and device).
 *
 * Rounding: to nearest, ties to even; subnormals kept; overflow becomes inf.
 * NaN rule: a NaN stays a NaN with its sign and payload (the top bits of it when
 * narrowing) and the quiet bit set. That is what x86's vcvtps2ph, vcvtph2ps (F16C) and
 * vcvtneps2bf16 (AVX512-BF16) do, so this code, the vector paths built on those
 * instructions and the GPU agree on every input, NaNs included (test/test_half.c checks
 * every 16-bit value and every f32 class against the rule and the instructions).
 * bf16 -> f32 is the exact 16-bit shift: no instruction does otherwise. */
#ifndef RT_HALF_H
#define RT_HALF_H
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define RT_HALF_FN static __host__ __device__ __forceinline__
#else
#define RT_HALF_FN static inline
#endif

/* memcpy: one register move on the host and on the device alike. */
RT_HALF_FN uint32_t rt_f32_bits(float f) { uint32_t u; memcpy(&u, &f, sizeof u); return u; }
RT_HALF_FN float rt_bits_f32(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }

RT_HALF_FN float rt_f16_to_f32(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f) return rt_bits_f32(s | 0x7f800000u | (m ? 0x400000u | (m << 13) : 0)); /* inf, NaN quieted */
    if (e) return rt_bits_f32(s | ((e + 112) << 23) | (m << 13));   /* normal: rebias 15 -> 127 */
    if (!m) return rt_bits_f32(s);
    /* Subnormal m * 2^-24: shift the leading one up to the implicit bit. */
    e = 113;
    while (!(m & 0x400)) { m <<= 1; e--; }
    return rt_bits_f32(s | (e << 23) | ((m & 0x3ff) << 13));
}

RT_HALF_FN uint16_t rt_f32_to_f16(float f)
{
    uint32_t u = rt_f32_bits(f), a = u & 0x7fffffffu;
    uint16_t s = (uint16_t)((u >> 16) & 0x8000);
    if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00 | ((a >> 13) & 0x3ff)); /* NaN, quieted */
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

RT_HALF_FN float rt_bf16_to_f32(uint16_t h) { return rt_bits_f32((uint32_t)h << 16); }

RT_HALF_FN uint16_t rt_f32_to_bf16(float f)
{
    uint32_t u = rt_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN, quieted */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16); /* ties to even; inf stays inf */
}

#undef RT_HALF_FN
#endif

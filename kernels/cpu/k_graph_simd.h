/* k_graph.c's vector kernels, one template per ISA level (rt/isa_each.h). */

#include "kernels/cpu/k_kv.h"

/* Lane k of a comparison's result as bit k: the instruction where the level has one. */
ISA_TARGET static inline unsigned ISA_FN(kg_bits)(kvi m)
{
#if ISA_X86 && ISA_VB == 64
    return _mm512_test_epi32_mask((__m512i)m, (__m512i)m);
#elif ISA_X86 && ISA_VB == 32
    return (unsigned)_mm256_movemask_ps((__m256)m);
#elif ISA_X86
    return (unsigned)_mm_movemask_ps((__m128)m);
#else
    unsigned b = 0;
    for (int k = 0; k < KVF_W; k++) b |= (unsigned)(m[k] != 0) << k;
    return b;
#endif
}

/* a > b ? a : b, lane-wise: maxps, or its definition. */
ISA_TARGET static inline kvf ISA_FN(kg_max)(kvf a, kvf b)
{
#if ISA_X86 && ISA_VB == 64
    return (kvf)_mm512_max_ps((__m512)a, (__m512)b);
#elif ISA_X86 && ISA_VB == 32
    return (kvf)_mm256_max_ps((__m256)a, (__m256)b);
#elif ISA_X86
    return (kvf)_mm_max_ps((__m128)a, (__m128)b);
#else
    kvi gt = a > b;
    return (kvf)(((kvi)a & gt) | ((kvi)b & ~gt));
#endif
}

/* Max over time, rows of n >= KVF_W: all-finite rows get the max by vectors (the last
 * one overlapping: max is idempotent), then the first index equal to it; y = x there,
 * so -0 and +0 resolve as the scalar scan does. Exact comparisons only: the scalar
 * bits. A row with a NaN or infinity gets idx -1 and goes the scalar way. */
ISA_TARGET static void ISA_FN(max_rows)(long rows, int n, const float *x0, float *y, int32_t *idx)
{
    typedef kvf vf;
    typedef kvi vi;
    vi lane;
    for (int k = 0; k < KVF_W; k++) lane[k] = k;
    for (long r = 0; r < rows; r++) {
        const float *x = x0 + r * n;
        vf m, v, bad;
        memcpy(&m, x, ISA_VB);
        bad = m * 0.0f;
        for (int i = KVF_W; i < n; i += KVF_W) {
            memcpy(&v, i + KVF_W <= n ? x + i : x + n - KVF_W, ISA_VB);
            m = ISA_FN(kg_max)(m, v);
            bad += v * 0.0f; /* NaN once a NaN or infinity was seen */
        }
        if (ISA_FN(kg_bits)(bad != bad)) {
            idx[r] = -1;
            continue;
        }
        /* Every lane the row's max: the halves folded into each other. */
#pragma GCC unroll 4
        for (int s = KVF_W / 2; s; s /= 2) m = ISA_FN(kg_max)(m, __builtin_shuffle(m, lane ^ s));
        for (int i = 0;; i += KVF_W) {
            int base = i + KVF_W <= n ? i : n - KVF_W;
            memcpy(&v, x + base, ISA_VB);
            unsigned eq = ISA_FN(kg_bits)(v == m);
            if (eq) {
                int a = base + __builtin_ctz(eq);
                y[r] = x[a];
                idx[r] = a;
                break;
            }
        }
    }
}

#include "kernels/cpu/k_kv_undef.h"

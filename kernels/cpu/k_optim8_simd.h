/* k_optim8.c's vector kernels (one template per ISA level, rt/isa_each.h): the 8-bit
 * state's codes for a block of at most K_Q8_BLOCK floats, lane for lane the scalar
 * reference's integer operations (q8_enc1 / q8_dec1), so every path gives its bits. */

#define Q8_SEL(m, a, b) (((a) & (m)) | ((b) & ~(m))) /* lanes of a where the mask m is set, else b */

/* Codes to lanes and back: the widening / narrowing instruction where the level has one
 * (GCC's vector conversions of bytes came out one byte at a time). */
ISA_TARGET static inline kvu ISA_FN(q8_ld8)(const uint8_t *c)
{
#if ISA_X86 && ISA_VB == 64
    return (kvu)_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)c));
#elif ISA_X86 && ISA_VB == 32
    return (kvu)_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)c));
#elif ISA_X86
    int32_t w;
    memcpy(&w, c, 4);
    __m128i z = _mm_setzero_si128();
    return (kvu)_mm_unpacklo_epi16(_mm_unpacklo_epi8(_mm_cvtsi32_si128(w), z), z);
#else
    kvu u;
    for (int k = 0; k < ISA_VB / 4; k++) u[k] = c[k];
    return u;
#endif
}

ISA_TARGET static inline void ISA_FN(q8_st8)(uint8_t *c, kvu u)
{
#if ISA_X86 && ISA_VB == 64
    _mm_storeu_si128((__m128i *)c, _mm512_cvtepi32_epi8((__m512i)u));
#elif ISA_X86 && ISA_VB == 32
    __m128i w = _mm_packus_epi32(_mm256_castsi256_si128((__m256i)u), _mm256_extracti128_si256((__m256i)u, 1));
    _mm_storel_epi64((__m128i *)c, _mm_packus_epi16(w, w));
#elif ISA_X86
    __m128i w = _mm_packs_epi32((__m128i)u, (__m128i)u); /* codes < 256: no saturation */
    int32_t b = _mm_cvtsi128_si32(_mm_packus_epi16(w, w));
    memcpy(c, &b, 4);
#else
    for (int k = 0; k < ISA_VB / 4; k++) c[k] = (uint8_t)u[k];
#endif
}

ISA_TARGET static inline kvu ISA_FN(q8_hashv)(kvu i, uint32_t tk)
{
    kvu x = (i * 0x9E3779B1u) ^ tk;
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    return x ^ (x >> 16);
}

/* x[0..n) -> codes and the block's scale; sq: x is v (its square root is coded). */
ISA_TARGET static void ISA_FN(q8_enc_blk)(size_t n, const float *x, uint8_t *c, int8_t *s, int sq, uint32_t idx0,
                                          uint32_t tk)
{
    typedef kvf vf;
    typedef kvu vu;
    typedef kvi vi;
    float amax = 0.0f;
    size_t i = 0;
    {
        vu am = {0};
        for (; i + KVF_W <= n; i += KVF_W) {
            vu u;
            memcpy(&u, x + i, ISA_VB);
            u &= 0x7FFFFFFFu;
            vu gt = (vu)((vi)u > (vi)am); /* non-negative floats order as their bits */
            am = Q8_SEL(gt, u, am);
        }
        uint32_t a = 0;
        for (int k = 0; k < KVF_W; k++) a = am[k] > a ? am[k] : a;
        for (; i < n; i++) {
            uint32_t u;
            memcpy(&u, x + i, 4);
            u &= 0x7FFFFFFFu;
            a = u > a ? u : a;
        }
        memcpy(&amax, &a, 4);
    }
    int em = q8_scale_exp(amax, sq);
    *s = (int8_t)em;
    if (em == Q8_ZERO) {
        memset(c, 0, n);
        return;
    }
    float mul = q8_pow2(15 - em);
    const int mb = sq ? 4 : 3;
    const uint32_t low = (1u << (23 - mb)) - 1, mmax = (1u << mb) - 1;
    vu iota;
    for (int k = 0; k < KVF_W; k++) iota[k] = (uint32_t)k;
    i = 0;
    for (; i + KVF_W <= n; i += KVF_W) {
        vf xv, y;
        memcpy(&xv, x + i, ISA_VB);
        vu sign = ((vu)xv) >> 31;
        y = (vf)((vu)xv & 0x7FFFFFFFu);
        if (sq) y = ISA_FN(ko_sqrt)(y);
        y = y * mul;
        vu u = (((vu)y) + (ISA_FN(q8_hashv)(iota + (idx0 + (uint32_t)i), tk) & low)) & ~low;
        vi e = (vi)(u >> 23) - 127;
        vu mant = (u >> (23 - mb)) & mmax;
        vu big = (vu)(e > 15), small = (vu)(e < 1);
        vu ec = Q8_SEL(big, (vu){0} + 15u, (vu)e);
        mant = Q8_SEL(big, (vu){0} + mmax, mant);
        vu code = sq ? (ec << 4) | mant : (sign << 7) | (ec << 3) | mant;
        /* v rounds up to the smallest code, never to 0 (a zero v would blow m / v up) */
        vu least = sq ? (vu)((vi)((vu)y) > 0) & (1u << 4) : (vu){0};
        code = Q8_SEL(small, least, code);
        ISA_FN(q8_st8)(c + i, code);
    }
    for (; i < n; i++) c[i] = q8_enc1(x[i], mul, sq, q8_hash(idx0 + (uint32_t)i, tk));
}

ISA_TARGET static void ISA_FN(q8_dec_blk)(size_t n, const uint8_t *c, int8_t s, int sq, float *x)
{
    typedef kvf vf;
    typedef kvu vu;
    typedef kvi vi;
    if (s == Q8_ZERO) {
        memset(x, 0, n * sizeof(float));
        return;
    }
    float scl = q8_pow2(s - 15);
    const int mb = sq ? 4 : 3;
    size_t i = 0;
    for (; i + KVF_W <= n; i += KVF_W) {
        vu cu = ISA_FN(q8_ld8)(c + i);
        vu e = sq ? cu >> 4 : (cu >> 3) & 15u, mant = cu & ((1u << mb) - 1);
        vf y = (vf)(((e + 127u) << 23) | (mant << (23 - mb)));
        y = y * scl;
        if (sq) y = y * y;
        else y = (vf)((vu)y | ((cu >> 7) << 31));
        y = (vf)((vu)y & (vu)((vi)e != 0));
        memcpy(x + i, &y, ISA_VB);
    }
    for (; i < n; i++) x[i] = q8_dec1(c[i], scl, sq);
}

#undef Q8_SEL

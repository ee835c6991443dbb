/* k_optim8.c's vector kernels (one template per ISA level, rt/isa_each.h): the 8-bit
 * state's codes for a block of at most K_Q8_BLOCK floats, lane for lane the scalar
 * reference's integer operations (q8_enc1 / q8_dec1), so every path gives its bits. */

typedef float ISA_FN(q8_vf) __attribute__((vector_size(ISA_VB)));
typedef uint32_t ISA_FN(q8_vu) __attribute__((vector_size(ISA_VB)));
typedef int32_t ISA_FN(q8_vi) __attribute__((vector_size(ISA_VB)));
typedef uint8_t ISA_FN(q8_vb) __attribute__((vector_size(ISA_VB / 4)));

#define Q8_L (ISA_VB / 4)
#define Q8_SEL(m, a, b) (((a) & (m)) | ((b) & ~(m))) /* lanes of a where the mask m is set, else b */

ISA_TARGET static inline ISA_FN(q8_vu) ISA_FN(q8_hashv)(ISA_FN(q8_vu) i, uint32_t tk)
{
    ISA_FN(q8_vu) x = (i * 0x9E3779B1u) ^ tk;
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
    typedef ISA_FN(q8_vf) vf;
    typedef ISA_FN(q8_vu) vu;
    typedef ISA_FN(q8_vi) vi;
    float amax = 0.0f;
    size_t i = 0;
    {
        vu am = {0};
        for (; i + Q8_L <= n; i += Q8_L) {
            vu u;
            memcpy(&u, x + i, ISA_VB);
            u &= 0x7FFFFFFFu;
            vu gt = (vu)((vi)u > (vi)am); /* non-negative floats order as their bits */
            am = Q8_SEL(gt, u, am);
        }
        uint32_t a = 0;
        for (int k = 0; k < Q8_L; k++) a = am[k] > a ? am[k] : a;
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
    for (int k = 0; k < Q8_L; k++) iota[k] = (uint32_t)k;
    i = 0;
    for (; i + Q8_L <= n; i += Q8_L) {
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
        for (int k = 0; k < Q8_L; k++) c[i + (size_t)k] = (uint8_t)code[k];
    }
    for (; i < n; i++) c[i] = q8_enc1(x[i], mul, sq, q8_hash(idx0 + (uint32_t)i, tk));
}

ISA_TARGET static void ISA_FN(q8_dec_blk)(size_t n, const uint8_t *c, int8_t s, int sq, float *x)
{
    typedef ISA_FN(q8_vf) vf;
    typedef ISA_FN(q8_vu) vu;
    typedef ISA_FN(q8_vi) vi;
    typedef ISA_FN(q8_vb) vb;
    if (s == Q8_ZERO) {
        memset(x, 0, n * sizeof(float));
        return;
    }
    float scl = q8_pow2(s - 15);
    const int mb = sq ? 4 : 3;
    size_t i = 0;
    for (; i + Q8_L <= n; i += Q8_L) {
        vb b;
        memcpy(&b, c + i, Q8_L);
        vu cu = __builtin_convertvector(b, vu);
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

#undef Q8_L
#undef Q8_SEL

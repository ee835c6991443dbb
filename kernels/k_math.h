/* The scalar math of the elementwise ops, one text for the CPU and the device (ggml's
 * way): exp (Cephes' expf), sigmoid, GELU (tanh form) and SiLU, each written with
 * K_ADD/K_SUB/K_MUL/K_DIV, which are the plain operators in C (C11 mode keeps GCC from
 * fusing them into FMAs) and __fadd_rn & co. in device code (nvcc cannot contract them;
 * the SIMT executor compiles the same names), so an op's CPU and device results are
 * the same bits by construction. The K_*_ steps are expressions on any float type T
 * with the C operators: a float, or a GCC vector of floats in an ISA template
 * (k_tfm_simd.h), which runs the same steps lane by lane. Include from C and .cu alike;
 * no CUDA header here (kernels/cuda includes its own first). */
#ifndef K_MATH_H
#define K_MATH_H
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define K_HD static __host__ __device__ __forceinline__
#else
#define K_HD static inline
#endif

/* Device code (nvcc's device pass, or g++ compiling a kernel for the SIMT executor):
 * each operation rounded on its own. Host code: the operators. */
#if defined(__CUDA_ARCH__) || (defined(DDPRT_SIMT) && defined(__cplusplus))
#define K_ADD(a, b) __fadd_rn(a, b)
#define K_SUB(a, b) __fsub_rn(a, b)
#define K_MUL(a, b) __fmul_rn(a, b)
#define K_DIV(a, b) __fdiv_rn(a, b)
#define k_f2i(x) __float_as_int(x)
#define k_i2f(x) __int_as_float(x)
#else
#define K_ADD(a, b) ((a) + (b))
#define K_SUB(a, b) ((a) - (b))
#define K_MUL(a, b) ((a) * (b))
#define K_DIV(a, b) ((a) / (b))
K_HD int32_t k_f2i(float x)
{
    int32_t i;
    memcpy(&i, &x, 4);
    return i;
}
K_HD float k_i2f(int32_t i)
{
    float x;
    memcpy(&x, &i, 4);
    return x;
}
#endif

/* ---- exp as Cephes' expf: x = n ln2 + r, |r| <= ln2/2, a degree-6 polynomial in r,
 * times 2^n built in the exponent bits. Below -87 the result is 0 (exp(-87) ~ FLT_MIN;
 * the softmax shifts by its max first, so only negligible terms are flushed); above 88
 * it saturates at exp(88). NaN stays NaN. About 1 ulp.
 * K_EXP_LO/HI clamp; on the clamped xc, K_EXP_T(xc) is t = n + 1.5 * 2^23 (n in its low
 * mantissa bits) and K_EXP_P(xc, t) the polynomial; the result is
 * K_EXP_P * 2^n, with 2^n's bits ((bits(t) - K_EXP_MAGIC) + 127) << 23. */
#define K_EXP_LO -87.0f
#define K_EXP_HI 88.0f
#define K_EXP_MAGIC 0x4B400000
#define K_EXP_T(xc) K_ADD(K_MUL(xc, 1.44269504088896341f), 12582912.0f)
#define K_EXP_R_(xc, nf) K_SUB(K_SUB(xc, K_MUL(nf, 0.693359375f)), K_MUL(nf, -2.12194440e-4f))
#define K_EXP_P1_(r) K_ADD(K_MUL(K_ADD(K_MUL(1.9875691500e-4f, r), 1.3981999507e-3f), r), 8.3334519073e-3f)
#define K_EXP_P2_(p, r) K_ADD(K_MUL(K_ADD(K_MUL(p, r), 4.1665795894e-2f), r), 1.6666665459e-1f)
#define K_EXP_P3_(p, r) K_ADD(K_ADD(K_MUL(K_MUL(K_ADD(K_MUL(p, r), 5.0000001201e-1f), r), r), r), 1.0f)
#define K_EXP_POLY(r) K_EXP_P3_(K_EXP_P2_(K_EXP_P1_(r), r), r)

K_HD float k_exp(float x)
{
    int under = x < K_EXP_LO;
    float xc = x > K_EXP_HI ? K_EXP_HI : under ? K_EXP_LO : x;
    float t = K_EXP_T(xc), nf = K_SUB(t, 12582912.0f), r = K_EXP_R_(xc, nf);
    float p = K_EXP_POLY(r);
    float e = k_i2f(((k_f2i(t) - K_EXP_MAGIC) + 127) * (1 << 23));
    return under ? 0.0f : K_MUL(p, e);
}

/* ---- GELU (tanh form), as x sigmoid(2u): 0.5 (1 + tanh u) = 1 / (1 + exp(-2u)), which
 * keeps its relative accuracy in the negative tail where 1 + tanh u cancels. With
 * e = exp(-2u), s = 1 / (1 + e): y = x s, and since 1 - tanh^2 u = 4 s (1 - s) and
 * 1 - s = e s, dy/dx = s (1 + 2 x e s u'), u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2); e s <= 1
 * is formed first (exp saturates at exp(88): far in the negative tail y and dy/dx are
 * below 1e-30 instead of 0). The forward and backward form u in their own orders (kept
 * from the first kernels: checkpoints stay the same bits). */
#define K_GELU_K0 0.7978845608028654f /* sqrt(2/pi) */
#define K_GELU_K1 0.044715f
/* exp's argument -2u: forward from x, backward from x and x2 = x x */
#define K_GELU_ARG(v) K_MUL(K_ADD(v, K_MUL(K_MUL(K_MUL(K_GELU_K1, v), v), v)), -2.0f * K_GELU_K0)
#define K_GELU_ARG2(v, v2) K_MUL(K_ADD(v, K_MUL(K_MUL(K_GELU_K1, v2), v)), -2.0f * K_GELU_K0)
/* y from x and e = exp(-2u); dy/dx from x, x2, e and s = 1 / (1 + e) */
#define K_GELU_Y(v, e) K_DIV(v, K_ADD(1.0f, e))
#define K_GELU_DYDX(v, v2, e, s)                                                                                  \
    K_MUL(s, K_ADD(1.0f, K_MUL(K_MUL(e, s),                                                                   \
                               K_MUL(K_MUL(2.0f, v), K_MUL(K_GELU_K0, K_ADD(1.0f, K_MUL(3.0f * K_GELU_K1, v2)))))))
#define K_RECIP1P(e) K_DIV(1.0f, K_ADD(1.0f, e)) /* 1 / (1 + e): the sigmoid from e = exp(-x) */

K_HD float k_gelu(float x) { return K_GELU_Y(x, k_exp(K_GELU_ARG(x))); }
K_HD float k_gelu_grad(float x, float dy)
{
    float v2 = K_MUL(x, x), e = k_exp(K_GELU_ARG2(x, v2));
    return K_MUL(dy, K_GELU_DYDX(x, v2, e, K_RECIP1P(e)));
}

/* ---- sigmoid and SiLU (x sigmoid(x), PyTorch's nn.SiLU): with e = exp(-x) and
 * s = 1 / (1 + e), y = x / (1 + e) (one rounding, as GELU's) and, since 1 - s = e s,
 * dy/dx = s (1 + x e s). Far in the negative tail e saturates at exp(88): y and dy/dx
 * are tiny instead of 0. */
#define K_SILU_Y(v, e) K_DIV(v, K_ADD(1.0f, e))
#define K_SILU_DYDX(v, e, s) K_MUL(s, K_ADD(1.0f, K_MUL(v, K_MUL(e, s))))

K_HD float k_sigmoid(float x) { return K_RECIP1P(k_exp(-x)); }
K_HD float k_silu(float x) { return K_SILU_Y(x, k_exp(-x)); }
K_HD float k_silu_grad(float x, float dy)
{
    float e = k_exp(-x);
    return K_MUL(dy, K_SILU_DYDX(x, e, K_RECIP1P(e)));
}
#endif

/* Row kernels of the transformer ops, written once with GCC/Clang vector extensions:
 * a template of rt/isa_each.h (k_tfm_isa.c instantiates it per ISA level: ISA_VB
 * vector bytes, ISA_FN names, ISA_TARGET attributes).
 * Elementwise results (exp, GELU, LayerNorm's normalisation) do not depend on ISA_VB:
 * the vector and scalar code do the same IEEE operations in the same order (C11 mode
 * keeps the compiler from fusing them into FMAs, whatever the target allows), so every
 * ISA gives the same bits. Sums (dot, max/exp-sum) run in ISA_VB/4 lanes and differ
 * across ISAs by rounding only. No header guard: included once per level. */
#include "kernels/cpu/k_kv.h"
#include "kernels/k_math.h"
#include <string.h>

#define F(x) ISA_FN(x)

static inline ISA_TARGET float F(hsum)(kvf v)
{
    float s = v[0];
    for (int i = 1; i < KVF_W; i++) s += v[i];
    return s;
}

/* exp as k_exp (kernels/k_math.h, the device's too): the same steps lane by lane. */
static inline ISA_TARGET kvf F(vexp)(kvf x)
{
    kvi big = x > K_EXP_HI, under = x < K_EXP_LO;
    kvf xc = kvf_sel(big, kvf_set1(K_EXP_HI), kvf_sel(under, kvf_set1(K_EXP_LO), x));
    kvf t = K_EXP_T(xc), nf = K_SUB(t, 12582912.0f);
    kvf p = K_EXP_POLY(K_EXP_R_(xc, nf));
    kvi e = (((kvi)t - K_EXP_MAGIC) + 127) << 23;
    return (kvf)((kvi)K_MUL(p, (kvf)e) & ~under);
}

/* ---- GELU and SiLU: k_math.h's steps (the scalar tail is k_math.h's own function) */
/* The loops below run ~50 instructions a vector: too few of their loads are in flight for
 * inputs coming from memory (GPT's MLP activations are megabytes); fetch 2 KiB ahead, a
 * line per 16 floats. */
#define KF_PF(p) __builtin_prefetch((const char *)(p) + 2048, 0, 3)

static ISA_TARGET void F(gelu_fwd)(size_t n, const float *x, float *y)
{
    size_t i = 0;
    for (; i + KVF_W <= n; i += KVF_W) {
        KF_PF(x + i);
        kvf v = kvf_ld(x + i);
        kvf_st(y + i, K_GELU_Y(v, F(vexp)(K_GELU_ARG(v))));
    }
    for (; i < n; i++) y[i] = k_gelu(x[i]);
}

static ISA_TARGET void F(gelu_bwd)(size_t n, const float *x, const float *dy, float *dx)
{
    size_t i = 0;
    for (; i + KVF_W <= n; i += KVF_W) {
        KF_PF(x + i);
        KF_PF(dy + i);
        kvf v = kvf_ld(x + i), v2 = K_MUL(v, v);
        kvf e = F(vexp)(K_GELU_ARG2(v, v2));
        kvf_st(dx + i, K_MUL(kvf_ld(dy + i), K_GELU_DYDX(v, v2, e, K_RECIP1P(e))));
    }
    for (; i < n; i++) dx[i] = k_gelu_grad(x[i], dy[i]);
}

static ISA_TARGET void F(silu_fwd)(size_t n, const float *x, float *y)
{
    size_t i = 0;
    for (; i + KVF_W <= n; i += KVF_W) {
        KF_PF(x + i);
        kvf v = kvf_ld(x + i);
        kvf_st(y + i, K_SILU_Y(v, F(vexp)(-v)));
    }
    for (; i < n; i++) y[i] = k_silu(x[i]);
}

static ISA_TARGET void F(silu_bwd)(size_t n, const float *x, const float *dy, float *dx)
{
    size_t i = 0;
    for (; i + KVF_W <= n; i += KVF_W) {
        KF_PF(x + i);
        KF_PF(dy + i);
        kvf v = kvf_ld(x + i), e = F(vexp)(-v);
        kvf_st(dx + i, K_MUL(kvf_ld(dy + i), K_SILU_DYDX(v, e, K_RECIP1P(e))));
    }
    for (; i < n; i++) dx[i] = k_silu_grad(x[i], dy[i]);
}

/* ---- reductions over a row (two accumulators for throughput) */
static ISA_TARGET float F(sum)(int n, const float *x)
{
    kvf s0 = kvf_set1(0.0f), s1 = s0;
    int i = 0;
    for (; i + 2 * KVF_W <= n; i += 2 * KVF_W) {
        s0 += kvf_ld(x + i);
        s1 += kvf_ld(x + i + KVF_W);
    }
    for (; i + KVF_W <= n; i += KVF_W) s0 += kvf_ld(x + i);
    float s = F(hsum)(s0 + s1);
    for (; i < n; i++) s += x[i];
    return s;
}

static ISA_TARGET float F(dot)(int n, const float *a, const float *b)
{
    kvf s0 = kvf_set1(0.0f), s1 = s0;
    int i = 0;
    for (; i + 2 * KVF_W <= n; i += 2 * KVF_W) {
        s0 += kvf_ld(a + i) * kvf_ld(b + i);
        s1 += kvf_ld(a + i + KVF_W) * kvf_ld(b + i + KVF_W);
    }
    for (; i + KVF_W <= n; i += KVF_W) s0 += kvf_ld(a + i) * kvf_ld(b + i);
    float s = F(hsum)(s0 + s1);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* sum (x - m)^2 */
static ISA_TARGET float F(sqdev)(int n, const float *x, float m)
{
    kvf s0 = kvf_set1(0.0f), s1 = s0;
    int i = 0;
    for (; i + 2 * KVF_W <= n; i += 2 * KVF_W) {
        kvf d0 = kvf_ld(x + i) - m, d1 = kvf_ld(x + i + KVF_W) - m;
        s0 += d0 * d0;
        s1 += d1 * d1;
    }
    for (; i + KVF_W <= n; i += KVF_W) {
        kvf d = kvf_ld(x + i) - m;
        s0 += d * d;
    }
    float s = F(hsum)(s0 + s1);
    for (; i < n; i++) s += (x[i] - m) * (x[i] - m);
    return s;
}

/* max of x[0..n), n >= 1; NaN is not looked for (the scores are finite) */
static ISA_TARGET float F(max)(int n, const float *x)
{
    float m = x[0];
    int i = 0;
    if (n >= KVF_W) {
        kvf v = kvf_ld(x);
        for (i = KVF_W; i + KVF_W <= n; i += KVF_W) {
            kvf w = kvf_ld(x + i);
            v = kvf_sel(w > v, w, v);
        }
        m = v[0];
        for (int l = 1; l < KVF_W; l++) m = v[l] > m ? v[l] : m;
    }
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* ---- LayerNorm rows */
static ISA_TARGET void F(ln_fwd_row)(int c, const float *x, const float *w, const float *b, float eps,
                              float *y, float *mean, float *rstd)
{
    float m = F(sum)(c, x) / (float)c;
    float rs = 1.0f / sqrtf(F(sqdev)(c, x, m) / (float)c + eps);
    int i = 0;
    for (; i + KVF_W <= c; i += KVF_W) {
        kvf v = (kvf_ld(x + i) - m) * rs * kvf_ld(w + i);
        kvf_st(y + i, b ? v + kvf_ld(b + i) : v);
    }
    for (; i < c; i++) {
        float v = (x[i] - m) * rs * w[i];
        y[i] = b ? v + b[i] : v;
    }
    *mean = m;
    *rstd = rs;
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w, xhat = (x - mean) rstd.
 * dx may be dy. */
static ISA_TARGET void F(ln_bwd_row)(int c, const float *x, const float *w, float m, float rs,
                              const float *dy, float *dx)
{
    kvf s0 = kvf_set1(0.0f), s1 = s0;
    int i = 0;
    for (; i + KVF_W <= c; i += KVF_W) {
        kvf g = kvf_ld(dy + i) * kvf_ld(w + i), xh = (kvf_ld(x + i) - m) * rs;
        s0 += g;
        s1 += g * xh;
    }
    float sg = F(hsum)(s0), sgx = F(hsum)(s1);
    for (; i < c; i++) {
        float g = dy[i] * w[i], xh = (x[i] - m) * rs;
        sg += g;
        sgx += g * xh;
    }
    float mg = sg / (float)c, mgx = sgx / (float)c;
    for (i = 0; i + KVF_W <= c; i += KVF_W) {
        kvf g = kvf_ld(dy + i) * kvf_ld(w + i), xh = (kvf_ld(x + i) - m) * rs;
        kvf_st(dx + i, (g - mg - xh * mgx) * rs);
    }
    for (; i < c; i++) {
        float g = dy[i] * w[i], xh = (x[i] - m) * rs;
        dx[i] = (g - mg - xh * mgx) * rs;
    }
}

/* dw[0..c) += dy xhat, db += dy for one row (a column block of it) */
static ISA_TARGET void F(ln_wb_acc)(int c, const float *x, const float *dy, float m, float rs, float *dw,
                             float *db)
{
    int i = 0;
    for (; i + KVF_W <= c; i += KVF_W) {
        kvf d = kvf_ld(dy + i);
        if (dw) kvf_st(dw + i, kvf_ld(dw + i) + d * ((kvf_ld(x + i) - m) * rs));
        if (db) kvf_st(db + i, kvf_ld(db + i) + d);
    }
    for (; i < c; i++) {
        if (dw) dw[i] += dy[i] * ((x[i] - m) * rs);
        if (db) db[i] += dy[i];
    }
}

/* ---- softmax pieces */
/* x = exp(scale x - shift) for n entries, 0 for the next nz; returns the sum (lanes). */
static ISA_TARGET float F(exp_shift)(int n, int nz, float *x, float scale, float shift)
{
    kvf s = kvf_set1(0.0f);
    int i = 0;
    for (; i + KVF_W <= n; i += KVF_W) {
        kvf e = F(vexp)(kvf_ld(x + i) * scale - shift);
        s += e;
        kvf_st(x + i, e);
    }
    float t = F(hsum)(s);
    if (i < n) { /* the tail as one vector (the same bits as k_exp, summed in the same order):
                  * most rows of the attention's diagonal tiles have one (3-5 % of its time
                  * lane by lane) */
        float tmp[KVF_W];
        memset(tmp, 0, sizeof tmp);
        memcpy(tmp, x + i, sizeof(float) * (size_t)(n - i));
        kvf e = F(vexp)(kvf_ld(tmp) * scale - shift);
        for (int l = 0; l < n - i; l++) {
            x[i + l] = e[l];
            t += e[l];
        }
    }
    memset(x + n, 0, sizeof(float) * (size_t)(nz > 0 ? nz : 0));
    return t;
}

/* x = exp(x - shift); the sum in double over blocks of 256 (a long vocabulary row
 * would lose digits in float lanes). */
static ISA_TARGET double F(exp_sumd)(int n, float *x, float shift)
{
    double t = 0.0;
    for (int b = 0; b < n; b += 256) t += F(exp_shift)(n - b < 256 ? n - b : 256, 0, x + b, 1.0f, shift);
    return t;
}

/* dp = p (dp - d) scale: the softmax backward of one attention row */
static ISA_TARGET void F(ds_row)(int n, const float *p, float *dp, float d, float scale)
{
    int i = 0;
    for (; i + KVF_W <= n; i += KVF_W) kvf_st(dp + i, kvf_ld(p + i) * (kvf_ld(dp + i) - d) * scale);
    for (; i < n; i++) dp[i] = p[i] * (dp[i] - d) * scale;
}

/* x *= s */
static ISA_TARGET void F(scale)(int n, float s, float *x)
{
    int i = 0;
    for (; i + KVF_W <= n; i += KVF_W) kvf_st(x + i, kvf_ld(x + i) * s);
    for (; i < n; i++) x[i] *= s;
}

/* y = a + b (y may be a or b) */
static ISA_TARGET void F(add)(int n, const float *a, const float *b, float *y)
{
    int i = 0;
    for (; i + KVF_W <= n; i += KVF_W) kvf_st(y + i, kvf_ld(a + i) + kvf_ld(b + i));
    for (; i < n; i++) y[i] = a[i] + b[i];
}

static const k_tfm_vt F(k_tfm_vt) = {
    F(gelu_fwd), F(gelu_bwd), F(silu_fwd), F(silu_bwd), F(ln_fwd_row), F(ln_bwd_row), F(ln_wb_acc), F(max),
    F(exp_shift), F(exp_sumd), F(ds_row), F(dot), F(scale), F(add),
};

#undef F
#undef KF_PF
#include "kernels/cpu/k_kv_undef.h"

/* Adam / AdamW steps and the gradient-norm helpers (kernels/k_optim.h). The vector
 * paths use separate multiplies and adds (no FMA) in the scalar reference's order,
 * so every path gives the reference's bits. */
#include "kernels/k_optim.h"
#include "kernels/k.h"
#include "kernels/cpu/k_int.h"
#include <math.h>
#include <string.h>

static inline void adam_one(const k_adam_cfg *c, float *p, const float *g, float *m, float *v)
{
    float gi = *g, pi = *p;
    if (c->decoupled) pi = pi * c->decay_mul;
    else if (c->weight_decay != 0.0f) gi = gi + c->weight_decay * pi;
    float mi = *m + (1.0f - c->beta1) * (gi - *m);
    float vi = *v * c->beta2 + ((1.0f - c->beta2) * gi) * gi;
    float den = sqrtf(vi) / c->bc2_sqrt + c->eps;
    *m = mi;
    *v = vi;
    *p = pi + -c->step_size * (mi / den);
}

static void adam_generic(size_t n, const k_adam_cfg *c, float *p, const float *g, float *m, float *v)
{
    for (size_t i = 0; i < n; i++) adam_one(c, p + i, g + i, m + i, v + i);
}

void k_adam_step_ref(size_t n, const k_adam_cfg *c, float *p, const float *g, float *m, float *v)
{
    adam_generic(n, c, p, g, m, v);
}

/* ---- 8-bit state (k_optim.h): the scalar reference of the codes; the template
 * (k_optim8_simd.h) does the same integer operations lane for lane. */
#define Q8_ZERO (-128) /* a block's scale: every value 0 */

static inline uint32_t q8_hash(uint32_t i, uint32_t tk)
{
    uint32_t x = (i * 0x9E3779B1u) ^ tk;
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    return x ^ (x >> 16);
}

static inline float q8_pow2(int k)
{
    uint32_t u = (uint32_t)(k + 127) << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The block's scale exponent: that of its largest magnitude (sq: of the square root of
 * the largest v); Q8_ZERO when too small to matter. */
static inline int q8_scale_exp(float amax, int sq)
{
    if (sq) amax = sqrtf(amax);
    uint32_t u;
    memcpy(&u, &amax, 4);
    int e = (int)(u >> 23) - 127;
    if (e < (sq ? -50 : -100)) return Q8_ZERO;
    return e > 127 ? 127 : e;
}

/* |x| (sq: sqrt |x|) times mul = 2^(15 - scale) in [0, 2^16): its exponent 1..15 and top
 * mantissa bits (3, or 4 for sq), rounded up with probability the dropped bits' share
 * (r: random bits). Below 2^1: m's code is 0, v's the smallest. */
static inline uint8_t q8_enc1(float x, float mul, int sq, uint32_t r)
{
    uint32_t xb, yb;
    memcpy(&xb, &x, 4);
    uint32_t sign = xb >> 31, ab = xb & 0x7FFFFFFFu;
    float y;
    memcpy(&y, &ab, 4);
    if (sq) y = sqrtf(y);
    y = y * mul;
    const int mb = sq ? 4 : 3;
    const uint32_t low = (1u << (23 - mb)) - 1, mmax = (1u << mb) - 1;
    memcpy(&yb, &y, 4);
    uint32_t u = (yb + (r & low)) & ~low, mant = (u >> (23 - mb)) & mmax;
    int e = (int)(u >> 23) - 127;
    if (e < 1) return sq && (int32_t)yb > 0 ? 1u << 4 : 0;
    if (e > 15) e = 15, mant = mmax;
    return (uint8_t)(sq ? (uint32_t)e << 4 | mant : sign << 7 | (uint32_t)e << 3 | mant);
}

static inline float q8_dec1(uint8_t c, float scl, int sq)
{
    const int mb = sq ? 4 : 3;
    uint32_t e = sq ? (uint32_t)c >> 4 : ((uint32_t)c >> 3) & 15u, mant = c & ((1u << mb) - 1);
    if (!e) return 0.0f;
    uint32_t u = (e + 127u) << 23 | mant << (23 - mb);
    float y;
    memcpy(&y, &u, 4);
    y = y * scl;
    if (sq) return y * y;
    memcpy(&u, &y, 4);
    u |= (uint32_t)(c >> 7) << 31;
    memcpy(&y, &u, 4);
    return y;
}

static inline uint32_t q8_stream(uint32_t t, int sq) { return t * 0x85EBCA77u ^ (sq ? 0x5BD1E995u : 0u); }

void k_q8_encode_ref(size_t n, const float *x, uint8_t *c, int8_t *s, int sq, uint32_t idx0, uint32_t t)
{
    for (size_t b = 0; b < n; b += K_Q8_BLOCK) {
        size_t bn = n - b < K_Q8_BLOCK ? n - b : K_Q8_BLOCK;
        float amax = 0.0f;
        for (size_t i = 0; i < bn; i++) amax = fabsf(x[b + i]) > amax ? fabsf(x[b + i]) : amax;
        int em = q8_scale_exp(amax, sq);
        s[b / K_Q8_BLOCK] = (int8_t)em;
        float mul = em == Q8_ZERO ? 0.0f : q8_pow2(15 - em);
        for (size_t i = 0; i < bn; i++)
            c[b + i] = em == Q8_ZERO ? 0 : q8_enc1(x[b + i], mul, sq, q8_hash(idx0 + (uint32_t)(b + i), q8_stream(t, sq)));
    }
}

void k_q8_decode_ref(size_t n, const uint8_t *c, const int8_t *s, int sq, float *x)
{
    for (size_t i = 0; i < n; i++) {
        int8_t e = s[i / K_Q8_BLOCK];
        x[i] = e == Q8_ZERO ? 0.0f : q8_dec1(c[i], q8_pow2(e - 15), sq);
    }
}

#define RT_ISA_TEMPLATE "kernels/cpu/k_optim_simd.h"
#include "rt/isa_each.h"

static void adam_span(size_t n, const k_adam_cfg *c, float *p, const float *g, float *m, float *v)
{
    RT_ISA_CALL(k_isa_level(), adam_vec, n, c, p, g, m, v);
}

typedef struct adam_job { size_t n; int parts; const k_adam_cfg *c; float *p, *m, *v; const float *g; } adam_job;

static void adam_task(void *ctx, int task)
{
    const adam_job *j = ctx;
    long lo, hi;
    k_split((long)j->n, j->parts, task, &lo, &hi);
    if (hi > lo) adam_span((size_t)(hi - lo), j->c, j->p + lo, j->g + lo, j->m + lo, j->v + lo);
}

void k_adam_step(size_t n, const k_adam_cfg *c, float *p, const float *g, float *m, float *v)
{
    adam_job j = {n, 1, c, p, m, v, g};
    int t = k_threads();
    j.parts = (t > 1 && n >= (size_t)K_PAR_MIN_ELEMS) ? t : 1;
    if (j.parts == 1) adam_span(n, c, p, g, m, v);
    else k_parallel_for(j.parts, adam_task, &j);
}

double k_sumsq(size_t n, const float *x)
{
    /* Fixed 4096-element chunks: the same order on every rank and thread count. */
    double total = 0;
    for (size_t lo = 0; lo < n; lo += 4096) {
        size_t hi = lo + 4096 < n ? lo + 4096 : n;
        double s = 0;
        for (size_t i = lo; i < hi; i++) s += (double)x[i] * x[i];
        total += s;
    }
    return total;
}

void k_scale_inplace(size_t n, float s, float *x)
{
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void k_q8_encode(size_t n, const float *x, uint8_t *c, int8_t *s, int sq, uint32_t idx0, uint32_t t)
{
    for (size_t b = 0; b < n; b += K_Q8_BLOCK)
        RT_ISA_CALL(k_isa_level(), q8_enc_blk, n - b < K_Q8_BLOCK ? n - b : K_Q8_BLOCK, x + b, c + b, s + b / K_Q8_BLOCK,
                    sq, idx0 + (uint32_t)b, q8_stream(t, sq));
}

void k_q8_decode(size_t n, const uint8_t *c, const int8_t *s, int sq, float *x)
{
    for (size_t b = 0; b < n; b += K_Q8_BLOCK)
        RT_ISA_CALL(k_isa_level(), q8_dec_blk, n - b < K_Q8_BLOCK ? n - b : K_Q8_BLOCK, c + b, s[b / K_Q8_BLOCK], sq, x + b);
}

/* Whole blocks per thread: each block's codes depend on its own values only. */
typedef struct adam8_job {
    size_t n;
    int parts;
    const k_adam_cfg *c;
    float *p;
    const float *g;
    uint8_t *m, *v;
    int8_t *sm, *sv;
    uint32_t idx0, t;
} adam8_job;

static void adam8_task(void *ctx, int task)
{
    const adam8_job *j = ctx;
    long nb = (long)((j->n + K_Q8_BLOCK - 1) / K_Q8_BLOCK), lo, hi;
    k_split(nb, j->parts, task, &lo, &hi);
    float tm[K_Q8_BLOCK], tv[K_Q8_BLOCK];
    for (long b = lo; b < hi; b++) {
        size_t o = (size_t)b * K_Q8_BLOCK, bn = j->n - o < K_Q8_BLOCK ? j->n - o : K_Q8_BLOCK;
        k_q8_decode(bn, j->m + o, j->sm + b, 0, tm);
        k_q8_decode(bn, j->v + o, j->sv + b, 1, tv);
        adam_span(bn, j->c, j->p + o, j->g + o, tm, tv);
        k_q8_encode(bn, tm, j->m + o, j->sm + b, 0, j->idx0 + (uint32_t)o, j->t);
        k_q8_encode(bn, tv, j->v + o, j->sv + b, 1, j->idx0 + (uint32_t)o, j->t);
    }
}

void k_adam8_step(size_t n, const k_adam_cfg *c, float *p, const float *g, uint8_t *m, uint8_t *v, int8_t *sm,
                  int8_t *sv, uint32_t idx0, uint32_t t)
{
    adam8_job j = {n, 1, c, p, g, m, v, sm, sv, idx0, t};
    int th = k_threads();
    j.parts = (th > 1 && n >= (size_t)K_PAR_MIN_ELEMS) ? th : 1;
    if (j.parts == 1) adam8_task(&j, 0);
    else k_parallel_for(j.parts, adam8_task, &j);
}

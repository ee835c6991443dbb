/* Adam / AdamW steps and the gradient-norm helpers (kernels/k_optim.h). The vector
 * paths use separate multiplies and adds (no FMA) in the scalar reference's order,
 * so every path gives the reference's bits. */
#include "kernels/k_optim.h"
#include "kernels/k.h"
#include "kernels/cpu/k_int.h"
#include <math.h>
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define K_OPT_X86 1
#endif

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

#ifdef K_OPT_X86
#define ADAM_BODY(V, SET1, LD, ST, ADD, SUB, MUL, DIV, SQRT, W)                                   \
    V b1c = SET1(1.0f - c->beta1), b2 = SET1(c->beta2), b2c = SET1(1.0f - c->beta2);              \
    V wd = SET1(c->weight_decay), dm = SET1(c->decay_mul), bc2 = SET1(c->bc2_sqrt);               \
    V eps = SET1(c->eps), nss = SET1(-c->step_size);                                             \
    int dec = c->decoupled, l2 = !dec && c->weight_decay != 0.0f;                                  \
    size_t i = 0;                                                                                \
    for (; i + W <= n; i += W) {                                                                 \
        V gi = LD(g + i), pi = LD(p + i), mi = LD(m + i), vi = LD(v + i);                        \
        if (dec) pi = MUL(pi, dm);                                                               \
        else if (l2) gi = ADD(gi, MUL(wd, pi));                                                  \
        mi = ADD(mi, MUL(b1c, SUB(gi, mi)));                                                     \
        vi = ADD(MUL(vi, b2), MUL(MUL(b2c, gi), gi));                                            \
        V den = ADD(DIV(SQRT(vi), bc2), eps);                                                    \
        ST(m + i, mi);                                                                           \
        ST(v + i, vi);                                                                           \
        ST(p + i, ADD(pi, MUL(nss, DIV(mi, den))));                                              \
    }                                                                                            \
    adam_generic(n - i, c, p + i, g + i, m + i, v + i);

__attribute__((target("avx512f"))) static void adam_avx512(size_t n, const k_adam_cfg *c, float *p,
                                                           const float *g, float *m, float *v)
{
    ADAM_BODY(__m512, _mm512_set1_ps, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_add_ps, _mm512_sub_ps,
              _mm512_mul_ps, _mm512_div_ps, _mm512_sqrt_ps, 16)
}

__attribute__((target("avx2"))) static void adam_avx2(size_t n, const k_adam_cfg *c, float *p, const float *g,
                                                      float *m, float *v)
{
    ADAM_BODY(__m256, _mm256_set1_ps, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_add_ps, _mm256_sub_ps,
              _mm256_mul_ps, _mm256_div_ps, _mm256_sqrt_ps, 8)
}
#endif

static void adam_span(size_t n, const k_adam_cfg *c, float *p, const float *g, float *m, float *v)
{
#ifdef K_OPT_X86
    switch (k_isa_level()) {
    case K_ISA_AVX512: adam_avx512(n, c, p, g, m, v); return;
    case K_ISA_AVX2: adam_avx2(n, c, p, g, m, v); return;
    default: break;
    }
#endif
    adam_generic(n, c, p, g, m, v);
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

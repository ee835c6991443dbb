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

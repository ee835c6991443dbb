/* Elementwise kernels: relu, leaky relu, the counter-based RNG, dropout, dropout2d, SGD, init.
 * Large arrays are cut into fixed chunks across the pool; elementwise work gives the
 * same bits whatever the split. */
#include "kernels/k.h"
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"
#include <math.h>

/* ---- splitting an elementwise loop over the pool */
typedef struct span_job {
    size_t n;
    int parts;
    void (*fn)(const struct span_job *j, size_t lo, size_t hi);
    const float *a, *b;
    float *out, *out2;
    const uint8_t *mask;
    uint8_t *mask_out;
    float f;
    uint64_t key, offset;
    const k_sgd_cfg *cfg;
    int first;
} span_job;

static void span_task(void *ctx, int task)
{
    const span_job *j = ctx;
    long lo, hi;
    k_split((long)j->n, j->parts, task, &lo, &hi);
    if (hi > lo) j->fn(j, (size_t)lo, (size_t)hi);
}

static void span_run(span_job *j)
{
    int t = k_threads();
    j->parts = (t > 1 && j->n >= (size_t)K_PAR_MIN_ELEMS) ? t : 1;
    if (j->parts == 1) j->fn(j, 0, j->n);
    else k_parallel_for(j->parts, span_task, j);
}

/* ---- relu */
static void relu_fwd_part(const span_job *j, size_t lo, size_t hi)
{
    k_relu_span(hi - lo, j->a + lo, j->out + lo);
}

void k_relu_fwd(size_t n, const float *x, float *y)
{
    span_job j = {.n = n, .fn = relu_fwd_part, .a = x, .out = y};
    span_run(&j);
}

static void relu_bwd_part(const span_job *j, size_t lo, size_t hi)
{
    k_relu_bwd_span(hi - lo, j->a + lo, j->b + lo, j->out + lo);
}

void k_relu_bwd(size_t n, const float *y, const float *dy, float *dx)
{
    span_job j = {.n = n, .fn = relu_bwd_part, .a = y, .b = dy, .out = dx};
    span_run(&j);
}

static void relu_bwd_add_part(const span_job *j, size_t lo, size_t hi)
{
    k_relu_bwd_add_span(hi - lo, j->a + lo, j->b + lo, j->out2 + lo, j->out + lo);
}

void k_relu_bwd_add(size_t n, const float *y, const float *dy, const float *a, float *dx)
{
    span_job j = {.n = n, .fn = relu_bwd_add_part, .a = y, .b = dy, .out2 = (float *)a, .out = dx};
    span_run(&j);
}

/* ---- leaky relu (the comparison and product PyTorch's CPU kernel does) */
static void leaky_fwd_part(const span_job *j, size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i++) j->out[i] = j->a[i] > 0.0f ? j->a[i] : j->a[i] * j->f;
}

void k_leaky_relu_fwd(size_t n, float slope, const float *x, float *y)
{
    span_job j = {.n = n, .fn = leaky_fwd_part, .a = x, .out = y, .f = slope};
    span_run(&j);
}

static void leaky_bwd_part(const span_job *j, size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i++) j->out[i] = j->a[i] > 0.0f ? j->b[i] : j->b[i] * j->f;
}

void k_leaky_relu_bwd(size_t n, float slope, const float *x, const float *dy, float *dx)
{
    span_job j = {.n = n, .fn = leaky_bwd_part, .a = x, .b = dy, .out = dx, .f = slope};
    span_run(&j);
}

/* ---- RNG: splitmix64. The key is splitmix64's output for the seed; element `counter`
 * is the (counter+1)-th splitmix64 output from that state. Top 24 bits -> [0,1).
 * The CUDA twin does the same integer arithmetic, so the streams match bit for bit. */
static inline uint64_t k_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline uint64_t k_rng_key(uint64_t seed) { return k_mix64(seed ^ 0x6A09E667F3BCC909ULL); }

static inline float k_rng_at(uint64_t key, uint64_t counter)
{
    uint64_t z = k_mix64(key + (counter + 1) * 0x9E3779B97F4A7C15ULL);
    return (float)(z >> 40) * 0x1p-24f;
}

float k_rand_uniform(uint64_t seed, uint64_t counter) { return k_rng_at(k_rng_key(seed), counter); }

/* ---- dropout: keep when u >= p, so P(keep) = 1 - p. */
static float dropout_scale(float p) { return p >= 1.0f ? 0.0f : (float)(1.0 / (1.0 - (double)p)); }

static void dropout_fwd_part(const span_job *j, size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i++) j->mask_out[i] = k_rng_at(j->key, j->offset + i) >= j->f;
    k_scale_mask_span(hi - lo, dropout_scale(j->f), j->mask_out + lo, j->a + lo, j->out + lo);
}

void k_dropout_fwd(size_t n, float p, uint64_t seed, uint64_t offset, const float *x,
                   float *y, uint8_t *mask)
{
    span_job j = {.n = n, .fn = dropout_fwd_part, .a = x, .out = y, .mask_out = mask,
                  .f = p, .key = k_rng_key(seed), .offset = offset};
    span_run(&j);
}

static void mask_scale_part(const span_job *j, size_t lo, size_t hi)
{
    k_scale_mask_span(hi - lo, j->f, j->mask + lo, j->a + lo, j->out + lo);
}

void k_dropout_bwd(size_t n, float p, const uint8_t *mask, const float *dy, float *dx)
{
    span_job j = {.n = n, .fn = mask_scale_part, .a = dy, .out = dx, .mask = mask,
                  .f = dropout_scale(p)};
    span_run(&j);
}

void k_dropout2d_fwd(int n, int c, int hw, float p, uint64_t seed, uint64_t offset,
                     const float *x, float *y, uint8_t *mask)
{
    uint64_t key = k_rng_key(seed);
    float sc = dropout_scale(p);
    for (long pl = 0; pl < (long)n * c; pl++) {
        mask[pl] = k_rng_at(key, offset + (uint64_t)pl) >= p;
        k_scale_span((size_t)hw, mask[pl] ? sc : 0.0f, x + pl * hw, y + pl * hw);
    }
}

void k_dropout2d_bwd(int n, int c, int hw, float p, const uint8_t *mask, const float *dy,
                     float *dx)
{
    float sc = dropout_scale(p);
    for (long pl = 0; pl < (long)n * c; pl++)
        k_scale_span((size_t)hw, mask[pl] ? sc : 0.0f, dy + pl * hw, dx + pl * hw);
}

/* ---- SGD (torch.optim.SGD, including its order of operations). */
static void sgd_part(const span_job *j, size_t lo, size_t hi)
{
    const k_sgd_cfg *c = j->cfg;
    k_sgd_span(hi - lo, c->lr, c->momentum, c->dampening, c->weight_decay, c->nesterov, j->first,
               j->out + lo, j->a + lo, j->out2 ? j->out2 + lo : NULL);
}

void k_sgd_step(size_t n, const k_sgd_cfg *cfg, int first_step, float *p, const float *g, float *v)
{
    span_job j = {.n = n, .fn = sgd_part, .a = g, .out = p, .out2 = v, .cfg = cfg,
                  .first = first_step};
    span_run(&j);
}

/* ---- init: U(-bound, bound) */
void k_init_uniform(size_t n, float bound, uint64_t seed, uint64_t offset, float *out)
{
    uint64_t key = k_rng_key(seed);
    for (size_t i = 0; i < n; i++) out[i] = (2.0f * k_rng_at(key, offset + i) - 1.0f) * bound;
}

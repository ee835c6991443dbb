/* Small layer-graph ops: global average pool, residual add, embedding (channels-first
 * for conv1d), max over time. Each output element is written by exactly one task in
 * a fixed order, so results do not depend on the thread count. */
#include "kernels/k.h"
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"
#include "kernels/cpu/k_tr8.h"
#include <math.h>
#include <string.h>

typedef struct g_job {
    long units;
    int parts, c, hw, len, dim, vocab, relu, keep; /* keep: embedding bwd adds onto the table */
    const float *a, *b;
    float *y;
    const int32_t *ids;
    const int32_t *idx_in;
    int32_t *idx;
    size_t n;
} g_job;

static int g_parts(long units, long elems)
{
    int t = k_threads();
    if (t <= 1 || elems < K_PAR_MIN_ELEMS) return 1;
    return units < t ? (int)(units > 0 ? units : 1) : t;
}

/* ---- global average pool: sum / hw as PyTorch's mean (sum in the fixed-order
 * vector sum of k_sum_span). */
static void gap_fwd_task(void *ctx, int task)
{
    const g_job *j = ctx;
    long lo, hi;
    k_split(j->units, j->parts, task, &lo, &hi);
    for (long pl = lo; pl < hi; pl++) j->y[pl] = k_sum_span((size_t)j->hw, j->a + pl * j->hw) / (float)j->hw;
}

void k_global_avgpool_fwd(int n, int c, int hw, const float *x, float *y)
{
    g_job j = {.units = (long)n * c, .hw = hw, .a = x, .y = y};
    j.parts = g_parts(j.units, j.units * hw);
    k_parallel_for(j.parts, gap_fwd_task, &j);
}

static void gap_bwd_task(void *ctx, int task)
{
    const g_job *j = ctx;
    long lo, hi;
    k_split(j->units, j->parts, task, &lo, &hi);
    for (long pl = lo; pl < hi; pl++) k_fill_span((size_t)j->hw, j->a[pl] / (float)j->hw, j->y + pl * j->hw);
}

void k_global_avgpool_bwd(int n, int c, int hw, const float *dy, float *dx)
{
    g_job j = {.units = (long)n * c, .hw = hw, .a = dy, .y = dx};
    j.parts = g_parts(j.units, j.units * hw);
    k_parallel_for(j.parts, gap_bwd_task, &j);
}

/* ---- residual add, and add -> ReLU in one pass (y may alias a or b: elementwise, same
 * index read then written) */
static void add_task(void *ctx, int task)
{
    const g_job *j = ctx;
    long lo, hi;
    k_split((long)j->n, j->parts, task, &lo, &hi);
    (j->relu ? k_add_relu_span : k_add_span)((size_t)(hi - lo), j->a + lo, j->b + lo, j->y + lo);
}

static void add_run(size_t n, const float *a, const float *b, float *y, int relu)
{
    g_job j = {.n = n, .a = a, .b = b, .y = y, .relu = relu};
    j.parts = g_parts((long)n, (long)n);
    k_parallel_for(j.parts, add_task, &j);
}

void k_add(size_t n, const float *a, const float *b, float *y) { add_run(n, a, b, y, 0); }

void k_add_relu(size_t n, const float *a, const float *b, float *y) { add_run(n, a, b, y, 1); }

/* ---- embedding. Forward is a gather plus a transpose ([len, dim] rows -> [dim, len]):
 * blocks of 16 tokens keep the written lines in cache while the rows are read. */
#define EMB_TB 16
#ifdef K_TR8
/* 8 tokens x 8 dimensions per register transpose; returns the tokens done (a
 * multiple of 8; the rest go the scalar way). */
__attribute__((target("avx2"))) static int emb_fwd_avx2(int len, int dim, const int32_t *id, const float *table,
                                                        float *yi)
{
    int t8 = len & ~7, d8 = dim & ~7;
    for (int t0 = 0; t0 < t8; t0 += 8) {
        const float *rows[8];
        for (int t = 0; t < 8; t++) rows[t] = table + (long)id[t0 + t] * dim;
        for (int d = 0; d < d8; d += 8) {
            __m256 v[8];
            #pragma GCC unroll 8
            for (int t = 0; t < 8; t++) v[t] = _mm256_loadu_ps(rows[t] + d);
            k_tr8(v);
            #pragma GCC unroll 8
            for (int k = 0; k < 8; k++) _mm256_storeu_ps(yi + (long)(d + k) * len + t0, v[k]);
        }
        for (int d = d8; d < dim; d++)
            for (int t = 0; t < 8; t++) yi[(long)d * len + t0 + t] = rows[t][d];
    }
    return t8;
}
#endif

static void emb_fwd_task(void *ctx, int task)
{
    const g_job *j = ctx;
    long lo, hi;
    k_split(j->units, j->parts, task, &lo, &hi);
    for (long i = lo; i < hi; i++) {
        float *yi = j->y + i * (long)j->dim * j->len;
        const int32_t *id = j->ids + i * j->len;
        int done = 0;
#ifdef K_TR8
        if (k_isa_level() >= K_ISA_AVX2) done = emb_fwd_avx2(j->len, j->dim, id, j->a, yi);
#endif
        for (int t0 = done; t0 < j->len; t0 += EMB_TB) {
            int tn = j->len - t0 < EMB_TB ? j->len - t0 : EMB_TB;
            const float *rows[EMB_TB];
            for (int t = 0; t < tn; t++) rows[t] = j->a + (long)id[t0 + t] * j->dim;
            for (int d = 0; d < j->dim; d++) {
                float *o = yi + (long)d * j->len + t0;
                for (int t = 0; t < tn; t++) o[t] = rows[t][d];
            }
        }
    }
}

void k_embedding_fwd(int n, int len, int dim, const int32_t *ids, const float *table, float *y)
{
    g_job j = {.units = n, .len = len, .dim = dim, .ids = ids, .a = table, .y = y};
    j.parts = g_parts(n, (long)n * len * dim);
    k_parallel_for(j.parts, emb_fwd_task, &j);
}

/* Backward: each task owns a range of embedding columns d (for every row of the
 * table), zeroes them and adds every token's gradient in token order: the same sums
 * in the same order whatever the split. */
#ifdef K_TR8
/* One sample's tokens, columns [d0, d1): 8 tokens x 8 columns per register transpose,
 * each row still gets its tokens' gradients added in token order (the scalar loop's
 * bits: plain adds). */
__attribute__((target("avx2"))) static void emb_bwd_avx2(int len, int dim, int d0, int d1, const int32_t *id,
                                                         const float *g, float *table)
{
    int t8 = len & ~7, d8 = d0 + ((d1 - d0) & ~7);
    for (int t0 = 0; t0 < t8; t0 += 8) {
        float *rows[8];
        for (int t = 0; t < 8; t++) rows[t] = table + (long)id[t0 + t] * dim;
        for (int d = d0; d < d8; d += 8) {
            __m256 v[8];
            #pragma GCC unroll 8
            for (int k = 0; k < 8; k++) v[k] = _mm256_loadu_ps(g + (long)(d + k) * len + t0);
            k_tr8(v); /* v[t] = token t0+t's columns d..d+8 */
            #pragma GCC unroll 8
            for (int t = 0; t < 8; t++) _mm256_storeu_ps(rows[t] + d, _mm256_add_ps(_mm256_loadu_ps(rows[t] + d), v[t]));
        }
        for (int t = 0; t < 8; t++)
            for (int d = d8; d < d1; d++) rows[t][d] += g[(long)d * len + t0 + t];
    }
    for (int t = t8; t < len; t++) {
        float *row = table + (long)id[t] * dim;
        for (int d = d0; d < d1; d++) row[d] += g[(long)d * len + t];
    }
}
#endif

static void emb_bwd_task(void *ctx, int task)
{
    const g_job *j = ctx;
    long d0, d1;
    k_split(j->dim, j->parts, task, &d0, &d1);
    if (d1 <= d0) return;
    size_t w = (size_t)(d1 - d0);
    if (j->keep) {
    } else if (d0 == 0 && d1 == j->dim) memset(j->y, 0, sizeof(float) * (size_t)j->vocab * j->dim);
    else for (long v = 0; v < j->vocab; v++) memset(j->y + v * j->dim + d0, 0, sizeof(float) * w);
#ifdef K_TR8
    if (k_isa_level() >= K_ISA_AVX2) {
        for (long i = 0; i < j->units; i++)
            emb_bwd_avx2(j->len, j->dim, (int)d0, (int)d1, j->ids + i * j->len, j->a + i * (long)j->dim * j->len, j->y);
        return;
    }
#endif
    long tokens = j->units * j->len;
    for (long tk = 0; tk < tokens; tk++) {
        long i = tk / j->len, t = tk % j->len;
        float *row = j->y + (long)j->ids[tk] * j->dim;
        const float *g = j->a + i * (long)j->dim * j->len + t;
        for (long d = d0; d < d1; d++) row[d] += g[d * j->len];
    }
}

void k_embedding_bwd(int n, int len, int dim, int vocab, const int32_t *ids, const float *dy,
                     float *dtable)
{
    g_job j = {.units = n, .len = len, .dim = dim, .vocab = vocab, .ids = ids, .a = dy, .y = dtable};
    j.parts = g_parts(dim, (long)vocab * dim + (long)n * len * dim);
    k_parallel_for(j.parts, emb_bwd_task, &j);
}

void k_embedding_bwd_add(int n, int len, int dim, int vocab, const int32_t *ids, const float *dy,
                         float *dtable)
{
    g_job j = {.units = n, .len = len, .dim = dim, .vocab = vocab, .ids = ids, .a = dy, .y = dtable, .keep = 1};
    j.parts = g_parts(dim, (long)n * len * dim);
    k_parallel_for(j.parts, emb_bwd_task, &j);
}

/* ---- max over time: the first maximum wins ties; a NaN wins over numbers and the
 * first NaN is kept (so NaN propagates, as torch.max). */
#define RT_ISA_TEMPLATE "kernels/cpu/k_graph_simd.h"
#include "rt/isa_each.h"

static void mt_fwd_task(void *ctx, int task)
{
    const g_job *j = ctx;
    long lo, hi;
    k_split(j->units, j->parts, task, &lo, &hi);
    /* The widest level whose vector (4 << level floats) fits in a row. */
    int lvl = k_isa_level();
    while (lvl > 0 && j->len < 4 << lvl) lvl--;
    int vec = j->len >= 4 << lvl;
    if (vec) RT_ISA_CALL(lvl, max_rows, hi - lo, j->len, j->a + lo * j->len, j->y + lo, j->idx + lo);
    for (long r = lo; r < hi; r++) {
        if (vec && j->idx[r] >= 0) continue; /* all finite: done */
        const float *x = j->a + r * j->len;
        float m = x[0];
        int32_t a = 0;
        for (int t = 1; t < j->len && !isnan(m); t++)
            if (x[t] > m || isnan(x[t])) { m = x[t]; a = t; }
        j->y[r] = m;
        j->idx[r] = a;
    }
    /* relu(max) with max_time's semantics over relu(x) (x < 0 ? 0 : x: NaN and -0
     * kept): a NaN or positive max stays with its index; otherwise every relu(x) is a
     * zero, all tie, and the first one wins. */
    for (long r = lo; j->relu && r < hi; r++)
        if (!(j->y[r] > 0.0f) && !isnan(j->y[r])) {
            float x0 = j->a[r * j->len];
            j->y[r] = x0 < 0.0f ? 0.0f : x0;
            j->idx[r] = 0;
        }
}

void k_max_time_fwd(int n, int c, int len, const float *x, float *y, int32_t *idx)
{
    g_job j = {.units = (long)n * c, .len = len, .a = x, .y = y, .idx = idx};
    j.parts = g_parts(j.units, j.units * len);
    k_parallel_for(j.parts, mt_fwd_task, &j);
}

void k_max_time_relu_fwd(int n, int c, int len, const float *x, float *y, int32_t *idx)
{
    g_job j = {.units = (long)n * c, .len = len, .a = x, .y = y, .idx = idx, .relu = 1};
    j.parts = g_parts(j.units, j.units * len);
    k_parallel_for(j.parts, mt_fwd_task, &j);
}

static void mt_bwd_task(void *ctx, int task)
{
    const g_job *j = ctx;
    long lo, hi;
    k_split(j->units, j->parts, task, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        float *dx = j->y + r * j->len;
        memset(dx, 0, sizeof(float) * (size_t)j->len);
        dx[j->idx_in[r]] = j->a[r];
    }
}

void k_max_time_bwd(int n, int c, int len, const float *dy, const int32_t *idx, float *dx)
{
    g_job j = {.units = (long)n * c, .len = len, .a = dy, .idx_in = idx, .y = dx};
    j.parts = g_parts(j.units, j.units * len);
    k_parallel_for(j.parts, mt_bwd_task, &j);
}

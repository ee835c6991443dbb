/* LayerNorm, GELU, SiLU and the token + position embedding (kernels/k_tfm.h). Rows are split
 * across threads for the per-row work; sums over rows (LayerNorm's dw and db, the
 * embeddings' gradients) are split by column blocks instead, each block summing every
 * row in order: no partial sums, and the same bits for any thread count. */
#include "kernels/k_tfm.h"
#include "kernels/k.h"
#include "kernels/cpu/k_int.h"
#include "kernels/cpu/k_tfm_int.h"
#include <string.h>

#define COLS 64 /* column block of the sums over rows */

typedef struct el_job {
    const k_tfm_vt *vt;
    long n;
    int c, parts, len, vocab, acc, ld, silu;
    float eps;
    const float *x, *w, *b, *dy, *mean, *rstd, *wpe;
    const int32_t *ids;
    float *y, *dx, *dw, *db, *mean_out, *rstd_out, *dwpe;
} el_job;

static int el_parts(long units, long elems)
{
    int t = k_threads();
    if (t <= 1 || elems < K_PAR_MIN_ELEMS) return 1;
    return units < 4L * t ? (int)(units > 0 ? units : 1) : 4 * t;
}

static int col_blocks(int c) { return (c + COLS - 1) / COLS; }

/* ---- LayerNorm */
static void ln_fwd_task(void *ctx, int task)
{
    const el_job *j = ctx;
    long lo, hi;
    k_split(j->n, j->parts, task, &lo, &hi);
    for (long r = lo; r < hi; r++)
        j->vt->ln_fwd_row(j->c, j->x + r * j->c, j->w, j->b, j->eps, j->y + r * j->c, j->mean_out + r,
                          j->rstd_out + r);
}

void k_layernorm_fwd(int n, int c, const float *x, const float *w, const float *b, float eps,
                     float *y, float *mean, float *rstd)
{
    el_job j = {.vt = k_tfm_vt_cur(), .n = n, .c = c, .eps = eps, .x = x, .w = w, .b = b, .y = y,
                .mean_out = mean, .rstd_out = rstd};
    j.parts = el_parts(n, (long)n * c);
    k_parallel_for(j.parts, ln_fwd_task, &j);
}

static void ln_wb_task(void *ctx, int task)
{
    const el_job *j = ctx;
    int c0 = task * COLS, nc = j->c - c0 < COLS ? j->c - c0 : COLS;
    float *dw = j->dw ? j->dw + c0 : NULL, *db = j->db ? j->db + c0 : NULL;
    if (dw) memset(dw, 0, sizeof(float) * (size_t)nc);
    if (db) memset(db, 0, sizeof(float) * (size_t)nc);
    for (long r = 0; r < j->n; r++)
        j->vt->ln_wb_acc(nc, j->x + r * j->c + c0, j->dy + r * j->c + c0, j->mean[r], j->rstd[r], dw, db);
}

static void ln_dx_task(void *ctx, int task)
{
    const el_job *j = ctx;
    long lo, hi;
    k_split(j->n, j->parts, task, &lo, &hi);
    for (long r = lo; r < hi; r++)
        j->vt->ln_bwd_row(j->c, j->x + r * j->c, j->w, j->mean[r], j->rstd[r], j->dy + r * j->c,
                          j->dx + r * j->c);
}

void k_layernorm_bwd(int n, int c, const float *x, const float *w, const float *mean,
                     const float *rstd, const float *dy, float *dx, float *dw, float *db)
{
    el_job j = {.vt = k_tfm_vt_cur(), .n = n, .c = c, .x = x, .w = w, .dy = dy, .mean = mean,
                .rstd = rstd, .dx = dx, .dw = dw, .db = db};
    /* dw and db first: dx may overwrite dy. */
    if (dw || db) k_parallel_for(col_blocks(c), ln_wb_task, &j);
    if (dx) {
        j.parts = el_parts(n, (long)n * c);
        k_parallel_for(j.parts, ln_dx_task, &j);
    }
}

/* ---- GELU and SiLU */
static void act_task(void *ctx, int task)
{
    const el_job *j = ctx;
    long lo, hi;
    k_split(j->n, j->parts, task, &lo, &hi);
    size_t m = (size_t)(hi - lo);
    if (j->dy) (j->silu ? j->vt->silu_bwd : j->vt->gelu_bwd)(m, j->x + lo, j->dy + lo, j->dx + lo);
    else (j->silu ? j->vt->silu_fwd : j->vt->gelu_fwd)(m, j->x + lo, j->y + lo);
}

/* Any split gives the same bits: vector and scalar code compute them identically. */
static void act_run(int silu, size_t n, const float *x, const float *dy, float *out)
{
    el_job j = {.vt = k_tfm_vt_cur(), .n = (long)n, .silu = silu, .x = x, .dy = dy, .y = out, .dx = out};
    j.parts = el_parts((long)n, (long)n);
    k_parallel_for(j.parts, act_task, &j);
}

void k_gelu_fwd(size_t n, const float *x, float *y) { act_run(0, n, x, NULL, y); }
void k_gelu_bwd(size_t n, const float *x, const float *dy, float *dx) { act_run(0, n, x, dy, dx); }
void k_silu_fwd(size_t n, const float *x, float *y) { act_run(1, n, x, NULL, y); }
void k_silu_bwd(size_t n, const float *x, const float *dy, float *dx) { act_run(1, n, x, dy, dx); }

/* ---- token + position embedding */
static void emb_fwd_task(void *ctx, int task)
{
    const el_job *j = ctx;
    long lo, hi;
    k_split(j->n, j->parts, task, &lo, &hi);
    for (long r = lo; r < hi; r++)
        j->vt->add(j->c, j->w + (long)j->ids[r / j->len * j->ld + r % j->len] * j->c, j->wpe + (r % j->len) * j->c,
                    j->y + r * j->c);
}

void k_tok_pos_embed_fwd(int b, int len, int c, const int32_t *ids, int ld, const float *wte,
                         const float *wpe, float *y)
{
    el_job j = {.vt = k_tfm_vt_cur(), .n = (long)b * len, .c = c, .len = len, .ld = ld, .ids = ids, .w = wte,
                .wpe = wpe, .y = y};
    j.parts = el_parts(j.n, j.n * c);
    k_parallel_for(j.parts, emb_fwd_task, &j);
}

/* One column block of both tables: the rows of dwte in token order, dwpe[t] as the
 * sum over the batch in batch order. */
static void emb_bwd_task(void *ctx, int task)
{
    const el_job *j = ctx;
    int c0 = task * COLS, nc = j->c - c0 < COLS ? j->c - c0 : COLS;
    size_t row = sizeof(float) * (size_t)nc;
    if (!j->acc)
        for (long v = 0; v < j->vocab; v++) memset(j->dw + v * j->c + c0, 0, row);
    long bt = j->n / j->len;
    for (long t = 0; t < j->len; t++) {
        float *p = j->dwpe + t * j->c + c0;
        memcpy(p, j->dy + t * j->c + c0, row);
        for (long bi = 1; bi < bt; bi++) j->vt->add(nc, p, j->dy + (bi * j->len + t) * j->c + c0, p);
    }
    for (long r = 0; r < j->n; r++) {
        float *p = j->dw + (long)j->ids[r / j->len * j->ld + r % j->len] * j->c + c0;
        j->vt->add(nc, p, j->dy + r * j->c + c0, p);
    }
}

void k_tok_pos_embed_bwd(int b, int len, int c, int vocab, const int32_t *ids, int ld, const float *dy,
                         float *dwte, float *dwpe, int acc)
{
    el_job j = {.vt = k_tfm_vt_cur(), .n = (long)b * len, .c = c, .len = len, .ld = ld, .vocab = vocab,
                .acc = acc, .ids = ids, .dy = dy, .dw = dwte, .dwpe = dwpe};
    int blocks = col_blocks(c);
    k_parallel_for(blocks, emb_bwd_task, &j);
}
